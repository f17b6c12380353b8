"""MCUBERT_EMBEDDING reference: float agreement, id checks, cluster geometry, the spec oracle."""

import dataclasses

import numpy as np
import pytest

import spec_oracle as oracle
from tflm_mcubert.ops import embedding, testing
from tflm_mcubert.ops.embedding import EmbeddingParams
from tflm_mcubert.ops.quantization import TensorQuant
from tflm_mcubert.ops.validation import OpSpecError


def quantized(s, d, seed=0):
    rng = np.random.default_rng(seed)
    fe = testing.float_embedding(rng, d, s)
    vocab = sum(u.shape[0] for u, _ in fe.clusters)
    ids = rng.integers(0, vocab, s).astype(np.int32)
    ids[:3] = [0, vocab - 1, 40]  # both ends and a cluster boundary
    types = rng.integers(0, 2, s).astype(np.int32)
    out_q = TensorQuant.observe(fe.forward(ids, types), symmetric=False)
    return EmbeddingParams.quantize(fe, out_q), fe, out_q, ids, types


@pytest.mark.parametrize("s,d", [(77, 64), (128, 128), (3, 16)])
def test_matches_float_embedding_within_a_few_lsb(s, d):
    params, fe, out_q, ids, types = quantized(s, d)
    got = embedding.run(params, ids, types, np.zeros((s, d), np.int8))
    want = fe.forward(ids, types) / out_q.scale + out_q.zero_point
    err = np.abs(got - want)
    assert err.max() <= 3.0 and err.mean() <= 0.5, (err.max(), err.mean())  # int8 tables, LN gain


def test_every_cluster_kind_is_exercised():
    params, _, _, ids, _ = quantized(77, 64)
    views = params.cluster_views
    assert views[0].projection is None and all(v.projection is not None for v in views[1:])
    for v in views:
        assert np.any((ids >= v.start) & (ids < v.end))


@pytest.mark.parametrize("s,d", [(1, 8), (9, 8), (6, 12)])
def test_extreme_parameters_match_the_spec_oracle(s, d):
    rng = np.random.default_rng(300 + s)
    for _ in range(3):
        params = testing.extreme_embedding(rng, s, d)
        ids = rng.integers(0, params.vocab_size, s).astype(np.int32)
        types = rng.integers(0, 2, s).astype(np.int32)
        got = embedding.run(params, ids, types, np.zeros((s, d), np.int8))
        assert got.tolist() == oracle.embedding(params, ids.tolist(), types.tolist())


def test_out_of_range_ids_are_errors_naming_field_and_position():
    params, _, _, ids, types = quantized(10, 16)
    out = np.zeros((10, 16), np.int8)
    for bad in (-1, params.vocab_size):
        wrong = ids.copy()
        wrong[4] = bad
        with pytest.raises(OpSpecError, match=f"MCUBERT_EMBEDDING: input_ids: id {bad} at position 4"):
            embedding.run(params, wrong, types, out)
    wrong = types.copy()
    wrong[2] = 2
    with pytest.raises(OpSpecError, match="MCUBERT_EMBEDDING: token_type_ids: id 2 at position 2"):
        embedding.run(params, ids, wrong, out)
    with pytest.raises(OpSpecError, match="input_ids: expected dtype int32"):
        embedding.run(params, ids.astype(np.int64), types, out)


def test_cluster_geometry_is_validated():
    params = quantized(10, 16)[0]

    def broken(**changes):
        return dataclasses.replace(params, **changes).validate

    clusters = params.clusters.copy()
    clusters[1, 0] = clusters[0, 0]  # empty cluster
    with pytest.raises(OpSpecError, match="MCUBERT_EMBEDDING: clusters: cluster ends"):
        broken(clusters=clusters)()
    with pytest.raises(OpSpecError, match="clusters: cluster ends .* vocab_size"):
        broken(vocab_size=params.vocab_size + 1)()
    clusters = params.clusters.copy()
    clusters[0, 1] = 8  # cluster 0 must be full width
    with pytest.raises(OpSpecError, match="clusters: rank of cluster 0"):
        broken(clusters=clusters)()
    with pytest.raises(OpSpecError, match="MCUBERT_EMBEDDING: word_rows: expected shape"):
        broken(word_rows=params.word_rows[:-1])()
    with pytest.raises(OpSpecError, match="MCUBERT_EMBEDDING: position_table: expected shape"):
        broken(position_table=params.position_table[:-1])()


def test_writes_only_its_scratch_and_output():
    s, d = 11, 16
    params, _, _, ids, types = quantized(s, d)
    need = embedding.scratch_bytes(s, d)
    buf = np.full(need + 16, 0x33, np.uint8)
    want = embedding.run(params, ids, types, np.zeros((s, d), np.int8))
    assert np.array_equal(embedding.run(params, ids, types, np.zeros((s, d), np.int8), buf), want)
    assert np.all(buf[need:] == 0x33)
