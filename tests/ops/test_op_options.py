"""Custom options: round trips, and corrupt or incompatible buffers rejected naming op and field."""

import random

import numpy as np
import pytest
from flatbuffers import flexbuffers

from tflm_mcubert.ops import attention, contract, embedding, mlp, testing
from tflm_mcubert.ops.attention import AttentionParams
from tflm_mcubert.ops.embedding import EmbeddingParams
from tflm_mcubert.ops.mlp import MLPParams
from tflm_mcubert.ops.options import OptionsError, decode_options, encode_options
from tflm_mcubert.ops.registry import SPEC_HASH, SPEC_VERSION

A, M, E = contract.ATTENTION, contract.MLP, contract.EMBEDDING


@pytest.fixture(scope="module")
def params():
    rng = np.random.default_rng(0)
    return {
        A: testing.extreme_attention(rng, 9, 8, 2, 4),
        M: testing.extreme_mlp(rng, 9, 8, 16, 4),
        E: testing.extreme_embedding(rng, 9, 8),
    }


def header(**values):
    return {"spec_version": SPEC_VERSION, "spec_hash": SPEC_HASH, **values}


@pytest.mark.parametrize("op", [A, M, E])
def test_round_trip_matches_the_standard_reader(op, params):
    values = params[op].options()
    buf = encode_options(op, values)
    assert decode_options(op, buf) == values
    assert flexbuffers.Loads(buf) == header(**values)


def test_serialized_ops_compute_the_same_bytes(params):
    rng = np.random.default_rng(1)
    x = rng.integers(-128, 128, (9, 8)).astype(np.int8)
    mask = np.ones(9, np.int8)
    for op, cls, run in (
        (A, AttentionParams, lambda p: attention.run(p, x.copy(), mask)),
        (M, MLPParams, lambda p: mlp.run(p, x.copy())),
    ):
        p = params[op]
        again = cls.from_serialized(decode_options(op, encode_options(op, p.options())), p.tensors())
        assert np.array_equal(run(again), run(p))
    p = params[E]
    again = EmbeddingParams.from_serialized(decode_options(E, encode_options(E, p.options())), p.tensors())
    ids, types = np.arange(9, dtype=np.int32) % p.vocab_size, np.zeros(9, np.int32)
    assert np.array_equal(
        embedding.run(again, ids, types, np.zeros((9, 8), np.int8)),
        embedding.run(p, ids, types, np.zeros((9, 8), np.int8)),
    )


@pytest.mark.parametrize("op", [A, M, E])
def test_every_truncation_is_rejected(op, params):
    buf = encode_options(op, params[op].options())
    for n in range(len(buf)):
        with pytest.raises(OptionsError, match=f"^{op}: "):
            decode_options(op, buf[:n])


def _with(op, params, **changes):
    values = header(**params[op].options())
    values.update(changes)
    return bytes(flexbuffers.Dumps({k: v for k, v in values.items() if v is not None}))


@pytest.mark.parametrize("value,kind", [(4.0, "float"), ("4", "string"), ([4], "vector"), (True, "bool")])
def test_wrong_value_type_names_the_field(params, value, kind):
    expected = f"^MCUBERT_ATTENTION: tile: expected an inline integer, got {kind}"
    with pytest.raises(OptionsError, match=expected):
        decode_options(A, _with(A, params, tile=value))


def test_version_hash_and_key_set_are_checked(params):
    with pytest.raises(OptionsError, match="MCUBERT_MLP: spec_version: unsupported version 4"):
        decode_options(M, _with(M, params, spec_version=4))
    with pytest.raises(OptionsError, match="MCUBERT_EMBEDDING: spec_version: unsupported version 3"):
        decode_options(E, _with(E, params, spec_version=3))  # version 3 is attention's and the MLP's only
    with pytest.raises(OptionsError, match="MCUBERT_MLP: spec_version: missing"):
        decode_options(M, _with(M, params, spec_version=None))
    with pytest.raises(OptionsError, match="MCUBERT_MLP: spec_hash: 0x00000001 does not match"):
        decode_options(M, _with(M, params, spec_hash=1))
    with pytest.raises(OptionsError, match="MCUBERT_MLP: ffn: missing"):
        decode_options(M, _with(M, params, ffn=None))
    with pytest.raises(OptionsError, match="MCUBERT_MLP: heads: unknown option"):
        decode_options(M, _with(M, params, heads=2))


def test_ranges_and_cross_field_rules_name_the_field(params):
    with pytest.raises(OptionsError, match=r"MCUBERT_ATTENTION: mask_mode: 2 is outside \[0, 1\]"):
        decode_options(A, _with(A, params, mask_mode=2))
    with pytest.raises(OptionsError, match="MCUBERT_ATTENTION: residual_shift: unknown option"):
        decode_options(A, _with(A, params, residual_shift=0))  # per channel now: the residual tensor
    with pytest.raises(OptionsError, match="MCUBERT_ATTENTION: tile: tile 10 exceeds seq_len 9"):
        decode_options(A, _with(A, params, tile=10))
    with pytest.raises(OptionsError, match="MCUBERT_ATTENTION: heads: hidden 8 is not a multiple of heads 3"):
        decode_options(A, _with(A, params, heads=3))
    with pytest.raises(OptionsError, match="MCUBERT_ATTENTION: score_multiplier: multiplier 7"):
        decode_options(A, _with(A, params, score_multiplier=7))
    with pytest.raises(OptionsError, match="MCUBERT_EMBEDDING: ln_eps: -1 is outside"):
        decode_options(E, _with(E, params, ln_eps=-1))
    with pytest.raises(OptionsError, match="MCUBERT_ATTENTION: tile: 0 is outside"):
        encode_options(A, {**params[A].options(), "tile": 0})


def test_container_corruption_is_reported_as_options(params):
    with pytest.raises(OptionsError, match="MCUBERT_MLP: options: root is a vector, not a map"):
        decode_options(M, bytes(flexbuffers.Dumps([1, 2, 3])))
    with pytest.raises(OptionsError, match="MCUBERT_MLP2: op: unknown custom op"):
        decode_options("MCUBERT_MLP2", b"")
    buf = bytearray(encode_options(M, params[M].options()))
    # The map's entry count sits just before the values: make it absurd.
    root_width, packed = buf[-1], buf[-2]
    width = 1 << (packed & 3)
    start = len(buf) - 2 - root_width - int.from_bytes(buf[-2 - root_width : -2], "little")
    buf[start - width : start] = (0xFFFF).to_bytes(width, "little")
    with pytest.raises(OptionsError, match="MCUBERT_MLP: options: map of 65535 entries overruns"):
        decode_options(M, bytes(buf))


def test_unsorted_keys_are_rejected(params):
    buf = bytearray(encode_options(M, params[M].options()))
    root_width, packed = buf[-1], buf[-2]
    width = 1 << (packed & 3)
    start = len(buf) - 2 - root_width - int.from_bytes(buf[-2 - root_width : -2], "little")
    keys_field = start - 3 * width
    keys = keys_field - int.from_bytes(buf[keys_field : keys_field + width], "little")
    key_width = int.from_bytes(buf[start - 2 * width : start - width], "little")
    # Point key slot 1 at key 0's string: a duplicate.
    target = keys - int.from_bytes(buf[keys : keys + key_width], "little")
    slot1 = keys + key_width
    buf[slot1 : slot1 + key_width] = (slot1 - target).to_bytes(key_width, "little")
    with pytest.raises(OptionsError, match="MCUBERT_MLP: options: keys are not strictly sorted"):
        decode_options(M, bytes(buf))


@pytest.mark.parametrize("op", [A, M, E])
def test_random_corruption_only_ever_raises_options_errors(op, params):
    buf = encode_options(op, params[op].options())
    rnd = random.Random(op)
    accepted = 0
    for _ in range(1500):
        bad = bytearray(buf)
        for _ in range(rnd.randint(1, 4)):
            bad[rnd.randrange(len(bad))] = rnd.randrange(256)
        try:
            values = decode_options(op, bytes(bad))
        except OptionsError as exc:
            assert str(exc).startswith(f"{op}: ")
        else:
            accepted += 1  # a flip inside a value that stays in range: still a valid buffer
            assert set(values) == set(params[op].options())
    assert accepted < 1500
