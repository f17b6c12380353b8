"""The tied LM head through the clustered table (model/clustered_lm_head.py, issue 26): the logits are the
dense head's over the same table, top-k found cluster by cluster is the dense top-k, and its cost in
multiply-adds is a fraction of the dense head's at the default compression."""

import numpy as np
import pytest

from tflm_mcubert.compress.baselines import adaptive_embedding
from tflm_mcubert.model.clustered_lm_head import clustered_logits, dense_head_macs, head_macs, top_k


@pytest.fixture(scope="module")
def layer():
    rng = np.random.default_rng(0)
    table = rng.normal(size=(12_000, 64)).astype(np.float32)
    return adaptive_embedding(table, rng.random(12_000))


def _dense(layer) -> np.ndarray:
    """The table the layer stands for, in its ids (its lookup of every id)."""
    return np.asarray(layer(np.arange(layer.vocab_size)[None]))[0].astype(np.float64)


def test_the_logits_are_the_dense_head_s_over_the_same_table(layer):
    arrays = layer.to_arrays()
    h = np.random.default_rng(1).normal(size=(3, 64))
    dense = h @ _dense(layer).T  # the layer's lookup is float32: agreement to its precision
    np.testing.assert_allclose(clustered_logits(arrays, h), dense, rtol=0, atol=1e-5 * np.abs(dense).max())


@pytest.mark.parametrize("k", [1, 5, 40])
def test_top_k_cluster_by_cluster_is_the_dense_top_k(layer, k):
    arrays = layer.to_arrays()
    h = np.random.default_rng(k).normal(size=64)
    exact = clustered_logits(arrays, h)  # float64 throughout: ties and order exactly as top_k sees them
    want = np.lexsort((np.arange(exact.size), -exact))[:k]
    ids, scores = top_k(arrays, h, k)
    assert ids.tolist() == want.tolist()
    np.testing.assert_array_equal(scores, exact[want])
    dense = h @ _dense(layer).T
    assert set(ids.tolist()) == set(np.argsort(-dense)[:k].tolist())  # the dense head's top k
    with pytest.raises(ValueError, match="k must be at least 1"):
        top_k(arrays, h, 0)


def test_the_head_costs_a_fraction_of_the_dense_one(layer):
    arrays = layer.to_arrays()
    assert head_macs(arrays) <= 0.25 * dense_head_macs(arrays), (head_macs(arrays), dense_head_macs(arrays))
