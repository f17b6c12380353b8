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


# ---- int4 storage (spec version 2, SPEC 4.1.1) ------------------------------------------------


def quantized_int4(s, d, seed=0):
    params, fe, out_q, ids, types = quantized(s, d, seed)
    return EmbeddingParams.quantize(fe, out_q, word_bits=4), params, fe, out_q, ids, types


@pytest.mark.parametrize("s,d,ranks", [(1, 8, (None, 2, 5)), (9, 7, (None, 3, 7)), (6, 12, (None, 1, 12))])
def test_int4_extreme_parameters_match_the_spec_oracle(s, d, ranks):
    """Every nibble (-8 included), row scales 0 and 65535, odd ranks and an odd d (padding nibbles)."""
    rng = np.random.default_rng(500 + s)
    for _ in range(3):
        params = testing.extreme_embedding(rng, s, d, ranks=ranks, word_bits=4)
        ids = rng.integers(0, params.vocab_size, s).astype(np.int32)
        ids[0] = 0  # cluster 0's first row carries the largest row scale
        types = rng.integers(0, 2, s).astype(np.int32)
        got = embedding.run(params, ids, types, np.zeros((s, d), np.int8))
        assert got.tolist() == oracle.embedding(params, ids.tolist(), types.tolist())


def test_int4_tables_are_half_the_bytes_and_close_to_float():
    s, d = 77, 64
    int4, int8, fe, out_q, ids, types = quantized_int4(s, d)
    geometry = [(v.end - v.start, v.rank) for v in int8.cluster_views]
    assert int8.storage_bytes == embedding.embedding_storage_bytes(geometry, d, 8)
    assert int4.storage_bytes == embedding.embedding_storage_bytes(geometry, d, 4)
    rows_only = sum(n * r for n, r in geometry)
    assert int4.word_rows.size == (rows_only + int4.hidden % 2 * 40) // 2 + 2 * 40  # cluster 0 has 40 rows
    want = fe.forward(ids, types) / out_q.scale + out_q.zero_point
    errors = {}
    for bits, params in ((4, int4), (8, int8)):
        got = embedding.run(params, ids, types, np.zeros((s, d), np.int8))
        errors[bits] = np.abs(got - want).mean()
    # 4 bits lose precision (random tables are int4's worst case), but stay a close embedding.
    assert errors[8] < errors[4] < 16 * errors[8] and errors[4] < 6.0, errors


def test_int4_options_are_version_2_and_int8_stay_version_1():
    from flatbuffers import flexbuffers

    from tflm_mcubert.ops import registry
    from tflm_mcubert.ops.options import decode_options, encode_options

    int4, int8 = quantized_int4(10, 16)[:2]
    op = embedding.OP
    raw8 = flexbuffers.Loads(encode_options(op, int8.options()))
    raw4 = flexbuffers.Loads(encode_options(op, int4.options()))
    assert (raw8["spec_version"], raw8["spec_hash"]) == (1, registry.SPEC_HASH) and "word_bits" not in raw8
    assert (raw4["spec_version"], raw4["spec_hash"]) == (2, registry.SPEC_HASH_V2) and raw4["word_bits"] == 4
    back = EmbeddingParams.from_serialized(decode_options(op, encode_options(op, int4.options())), int4.tensors())
    assert back.word_bits == 4 and np.array_equal(back.word_rows, int4.word_rows)


def test_corrupt_int4_tables_are_refused_with_a_message():
    int4 = quantized_int4(10, 17)[0]  # odd d: cluster 0 rows end in a padding nibble

    def broken(**changes):
        return dataclasses.replace(int4, **changes).validate

    with pytest.raises(OpSpecError, match="MCUBERT_EMBEDDING: word_bits: 5 is not a storage width"):
        broken(word_bits=5)()
    with pytest.raises(OpSpecError, match=r"word_rows: int4 storage of these clusters is \d+ bytes .* got shape"):
        broken(word_rows=int4.word_rows[:-1])()
    with pytest.raises(OpSpecError, match="word_rows: expected shape"):  # int4 bytes read as int8
        broken(word_bits=8)()
    rows = int4.word_rows.copy()
    rows[2 + 8] |= np.int8(0x30)  # row 0 of cluster 0: the high nibble of its last byte
    with pytest.raises(OpSpecError, match="word_rows: cluster 0 row 0: the padding nibble .* must be 0, got 3"):
        broken(word_rows=rows)()
    with pytest.raises(OpSpecError, match="word_bits: 3 is not a storage width"):
        EmbeddingParams.quantize(quantized(10, 17)[1], quantized(10, 17)[2], word_bits=3)


@pytest.mark.parametrize(
    "change,field,problem",
    [
        ({"word_bits": 6}, "word_bits", "6 is not a storage width"),
        ({"word_bits": 16}, "word_bits", r"16 is outside \[4, 8\]"),
        ({"spec_version": 1}, "word_bits", "unknown option"),  # int4 needs version 2
        ({"word_bits": None}, "word_bits", "missing"),  # version 2 names its storage
        ({"spec_hash": "v1"}, "spec_hash", "0x89fbd93f does not match this build's contract"),
    ],
)
def test_corrupt_int4_options_are_refused_with_a_message(change, field, problem):
    from flatbuffers import flexbuffers

    from tflm_mcubert.ops import registry
    from tflm_mcubert.ops.options import OptionsError, decode_options

    values = {"spec_version": 2, "spec_hash": registry.SPEC_HASH_V2, **quantized_int4(10, 16)[0].options()}
    for key, value in change.items():
        if value is None:
            del values[key]
        elif value == "v1":
            values[key] = registry.SPEC_HASH
        else:
            values[key] = value
    if values["spec_version"] == 1:
        values["spec_hash"] = registry.SPEC_HASH
    with pytest.raises(OptionsError, match=f"MCUBERT_EMBEDDING: {field}: {problem}"):
        decode_options(embedding.OP, bytes(flexbuffers.Dumps(values)))
