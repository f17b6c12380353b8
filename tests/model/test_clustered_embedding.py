import json

import numpy as np
import pytest

from tflm_mcubert.model.clustered_embedding import (
    ClusteredLowRankEmbedding,
    permutation_from_assignment,
    write_permuted_tokenizer,
)
from tflm_mcubert.errors import UserError
from tflm_mcubert.model.bert import BertModel


def truncation(matrix, rank):
    u, s, vt = np.linalg.svd(matrix.astype(np.float64), full_matrices=False)
    return (u[:, :rank] * s[:rank]) @ vt[:rank]


def embed_original(layer, ids):
    """Embeddings of ORIGINAL ids through a layer that takes permuted ones."""
    return layer(layer.remap(np.asarray(ids))[None]).numpy()[0]


def test_every_token_lands_in_one_contiguous_cluster():
    assignment = np.random.default_rng(0).integers(0, 4, size=50)
    permutation, cutoffs = permutation_from_assignment(assignment, 4)
    assert sorted(permutation) == list(range(50))
    bounds = [0, *cutoffs, 50]
    for i in range(4):
        new_ids = sorted(permutation[assignment == i])
        assert new_ids == list(range(bounds[i], bounds[i + 1]))
        # ties keep the original order
        assert np.all(np.diff(np.flatnonzero(assignment == i)[np.argsort(new_ids)]) > 0)


def test_cluster_zero_is_exact_and_the_others_are_their_rank_r_truncation(random_table):
    table = random_table(50, 8)
    assignment = np.random.default_rng(1).integers(0, 3, size=50)
    layer = ClusteredLowRankEmbedding.from_assignment(table, assignment, ranks=[3, 1])
    out = embed_original(layer, np.arange(50))
    np.testing.assert_array_equal(out[assignment == 0], table[assignment == 0])
    for cluster, rank in ((1, 3), (2, 1)):
        rows = assignment == cluster
        np.testing.assert_allclose(out[rows], truncation(table[rows], rank), atol=1e-5)


def test_rank_zero_and_empty_clusters(random_table):
    table = random_table(30, 8)
    layer = ClusteredLowRankEmbedding.from_dense(table, cutoffs=[10, 10, 20], ranks=[4, 0, 2])
    assert layer.cluster_sizes == [10, 0, 10, 10]
    assert layer.ranks == (0, 0, 2)  # an empty cluster stores nothing
    out = layer(np.arange(30)[None]).numpy()[0]
    np.testing.assert_array_equal(out[10:20], 0.0)
    assert layer.stored_params() == 10 * 8 + 0 + 0 + 2 * (10 + 8)


def test_stored_params_count_every_weight_and_bytes_add_scales(random_table):
    layer = ClusteredLowRankEmbedding.from_dense(random_table(40, 8), cutoffs=[5, 15, 25], ranks=[8, 3, 0])
    assert layer.stored_params() == sum(int(np.prod(w.shape)) for w in layer.weights)
    assert layer.stored_params() == 5 * 8 + 8 * (10 + 8) + 3 * (10 + 8)
    # per exported cluster: its (end, rank) row and d (multiplier, shift) pairs, all int32; rows int8;
    # Vᵀ pair4-packed (ranks padded to 4); the rank-0 cluster is stored at rank 1 (a zero column)
    overhead = 4 * (8 + 8 * 8)
    rows = 5 * 8 + 10 * 8 + 10 * 3 + 15 * 1
    projections = 8 * 8 + 8 * 4 + 8 * 4
    assert layer.stored_bytes() == overhead + rows + projections
    with pytest.raises(UserError, match="2 bits is not exported"):
        layer.stored_bytes(2)


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize(
    "cutoffs, ranks",
    [([5, 15, 25], [8, 3, 0]), ([0, 12, 12], [5, 2, 1]), ([7, 7, 30], [3, 6, 2]), ([0, 1, 39], [4, 1, 1])],
)
def test_stored_bytes_are_what_the_export_stores(random_table, cutoffs, ranks, bits):
    """The word-embedding tables of the op the exporter builds (`EmbeddingParams`), byte for byte."""
    from tflm_mcubert.ops.embedding import EmbeddingFloat, EmbeddingParams
    from tflm_mcubert.ops.quantization import TensorQuant
    from tflm_mcubert.quantize.float_model import embedding_clusters

    layer = ClusteredLowRankEmbedding.from_dense(random_table(40, 8), cutoffs=cutoffs, ranks=ranks)
    rng = np.random.default_rng(1)
    float_op = EmbeddingFloat(
        embedding_clusters(layer), rng.normal(size=(4, 8)), rng.normal(size=(2, 8)), np.ones(8), np.zeros(8)
    )
    op = EmbeddingParams.quantize(float_op, TensorQuant.symmetric(4.0), word_bits=bits)
    tables = (op.clusters, op.word_rows, op.word_projections, op.word_requant)
    assert layer.stored_bytes(bits) == sum(table.nbytes for table in tables)


def test_ranks_above_a_cluster_size_are_lowered_and_bad_shapes_refused():
    layer = ClusteredLowRankEmbedding(20, 8, cutoffs=[10, 17], ranks=[8, 5])
    assert layer.ranks == (7, 3)
    rng = np.random.default_rng(5)
    factors = [(rng.normal(size=(7, 8)), rng.normal(size=(8, 8))), (rng.normal(size=(3, 5)), rng.normal(size=(5, 8)))]
    from_factors = ClusteredLowRankEmbedding.from_factors(np.zeros((10, 8)), factors, cutoffs=[10, 17])
    assert from_factors.ranks == (7, 3)  # lowered, and still the same products
    out = from_factors(np.arange(20)[None]).numpy()[0]
    np.testing.assert_allclose(out[10:], np.concatenate([u @ vt for u, vt in factors]), atol=1e-4)
    with pytest.raises(UserError, match="ranks"):
        ClusteredLowRankEmbedding(20, 8, cutoffs=[10], ranks=[9])
    with pytest.raises(UserError, match="need 1 ranks"):
        ClusteredLowRankEmbedding(20, 8, cutoffs=[10], ranks=[2, 2])
    with pytest.raises(UserError, match="non-decreasing"):
        ClusteredLowRankEmbedding(20, 8, cutoffs=[10, 5], ranks=[2, 2])


def test_arrays_round_trip_and_json_description(random_table):
    rng = np.random.default_rng(2)
    layer = ClusteredLowRankEmbedding.from_dense(
        random_table(40, 8), cutoffs=[5, 15, 25], ranks=[8, 3, 0], permutation=rng.permutation(40)
    )
    arrays = layer.to_arrays()
    assert set(arrays) == {
        "dim",
        "boundaries",
        "ranks",
        "table_0",
        "u_1",
        "vt_1",
        "u_2",
        "vt_2",
        "u_3",
        "vt_3",
        "permutation",
    }
    twin = ClusteredLowRankEmbedding.from_arrays(arrays)
    ids = rng.integers(0, 40, size=(2, 7))
    np.testing.assert_array_equal(twin(ids).numpy(), layer(ids).numpy())
    described = json.loads(json.dumps(layer.describe()))
    assert [c["ids"] for c in described["clusters"]] == [[0, 5], [5, 15], [15, 25], [25, 40]]
    assert [c["rank"] for c in described["clusters"]] == [8, 8, 3, 0]
    assert described["params"] == layer.stored_params() == sum(c["params"] for c in described["clusters"])


def test_permuted_tokenizer_and_full_rank_clustered_model_reproduce_the_dense_model(
    minilm_tokenizer, tmp_path, small_config
):
    tokenizer = minilm_tokenizer
    config = small_config(vocab_size=len(tokenizer), hidden_size=16)
    dense = BertModel(config)
    table = dense.embeddings.word_embeddings.numpy()
    # a random clustering; full rank everywhere, so only the permutation can break equality
    assignment = np.random.default_rng(3).integers(0, 4, size=config.vocab_size)
    layer = ClusteredLowRankEmbedding.from_assignment(table, assignment, ranks=[16, 16, 16])
    compressed = dense.with_word_lookup(layer)
    permuted = write_permuted_tokenizer(tokenizer, layer.permutation, tmp_path / "tok")

    pair = ("The movie was surprisingly moving, unbelievable!", "A pair sentence.")
    before, after = tokenizer(*pair, return_tensors="np"), permuted(*pair, return_tensors="np")
    np.testing.assert_array_equal(after["input_ids"], layer.remap(before["input_ids"]))
    assert not np.array_equal(after["input_ids"], before["input_ids"])
    assert permuted.cls_token_id == layer.permutation[tokenizer.cls_token_id]
    np.testing.assert_array_equal(after["token_type_ids"], before["token_type_ids"])

    def hidden(model, enc):
        return model({k: enc[k].astype(np.int32) for k in ("input_ids", "attention_mask", "token_type_ids")})[
            "last_hidden_state"
        ].numpy()

    np.testing.assert_allclose(hidden(compressed, after), hidden(dense, before), atol=1e-4)
    # the export twin copies the clustered lookup too
    np.testing.assert_allclose(hidden(compressed.with_options(), after), hidden(compressed, after), atol=1e-6)
    # and the saved directory loads back as a tokenizer producing the same ids
    from transformers import AutoTokenizer

    reloaded = AutoTokenizer.from_pretrained(str(tmp_path / "tok"))
    np.testing.assert_array_equal(reloaded(*pair, return_tensors="np")["input_ids"], after["input_ids"])
    assert (tmp_path / "tok" / "vocab.txt").read_text().splitlines()[layer.permutation[101]] == "[CLS]"


def test_permuting_a_tokenizer_of_another_size_is_refused(minilm_tokenizer, tmp_path):
    with pytest.raises(UserError, match="30522 tokens"):
        write_permuted_tokenizer(minilm_tokenizer, np.arange(100), tmp_path)
