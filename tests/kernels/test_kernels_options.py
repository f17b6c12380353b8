"""mcubert_<op>_parse_options (custom_ops/src/mcubert_options.c) against the Python codec.

The C decoder reads options from a .tflite it did not write: it must take every buffer the
Python encoder writes, with the same values, and reject exactly the buffers whose container or
key set the reference rejects (value ranges are *_validate's, tested with the kernels).
"""

import ctypes
import random

import numpy as np
import pytest
from flatbuffers import flexbuffers

from tflm_mcubert.ops import contract, contract_versions, testing
from tflm_mcubert.ops.options import OptionsError, _parse_map, encode_options
from tflm_mcubert.ops.registry import OP_SPEC_HASHES, SPEC_HASHES
from tflm_mcubert.ops import kernel_abi

A, M, E, H = contract.ATTENTION, contract.MLP, contract.EMBEDDING, contract.CLASSIFIER_HEAD
E4 = E + "-int4"  # the embedding's version-2 options (int4 tables, word_bits)
A4, M4 = A + "-int4", M + "-int4"  # attention's and the MLP's version-3 options (int4 weights, weight_bits)
A8, M8 = A + "-layers", M + "-layers"  # their version-8 options (a width per linear layer, SPEC 3.1.2)
LATER_FIELDS = ("word_bits", "weight_bits", "int4_layers")  # options of versions after 1
OPS = (E, E4, A, M, A4, M4, A8, M8, H)
STRUCTS = kernel_abi.PARAMS_STRUCTS
PARSERS = {
    E: "mcubert_embedding_parse_options",
    A: "mcubert_attention_parse_options",
    M: "mcubert_mlp_parse_options",
    H: "mcubert_classifier_head_parse_options",
}
INT64_FIELDS, UINT32_FIELDS = {"ln_eps"}, {"spec_hash"}


@pytest.fixture(scope="module")
def parse(host_library):
    library = ctypes.CDLL(str(host_library))

    def call(op: str, buffer: bytes):
        op = op.split("-")[0]
        struct = STRUCTS[op]()
        message = ctypes.create_string_buffer(kernel_abi.MESSAGE_CAPACITY)
        data = (ctypes.c_uint8 * max(len(buffer), 1)).from_buffer_copy(buffer or b"\0")
        status = getattr(library, PARSERS[op])(data, ctypes.c_int32(len(buffer)), ctypes.byref(struct), message)
        values = {name: getattr(struct, name) for name, _ in struct._fields_ if name != "reserved"}
        for later in LATER_FIELDS:
            if values.get(later) == 0:  # version 1 has no such option; the parser leaves it 0
                del values[later]
        return status, message.value.decode(), values

    return call


@pytest.fixture(scope="module")
def options():
    rng = np.random.default_rng(0)
    return {
        A: testing.extreme_attention(rng, 9, 8, 2, 4).options(),
        M: testing.extreme_mlp(rng, 9, 8, 16, 4).options(),
        E: testing.extreme_embedding(rng, 9, 8).options(),
        E4: testing.extreme_embedding(rng, 9, 8, word_bits=4).options(),
        A4: testing.extreme_attention(rng, 9, 8, 2, 4, weight_bits=4).options(),
        M4: testing.extreme_mlp(rng, 9, 8, 16, 4, weight_bits=4).options(),
        A8: testing.extreme_attention(rng, 9, 8, 2, 4, weight_bits=(8, 4, 4, 8)).options(),
        M8: testing.extreme_mlp(rng, 9, 8, 16, 4, weight_bits=(4, 8)).options(),
        H: {"seq_len": 9, "hidden": 8, "labels": 3, "pooler_zero_point": -5, "logits_zero_point": 7},
    }


def _op(name: str) -> str:
    return name.split("-")[0]


def header(op: str, **values):
    """The options the encoder writes for `op`: its lowest version with every field, and that hash."""
    version = contract_versions.options_version(_op(op), values)
    return {"spec_version": version, "spec_hash": OP_SPEC_HASHES[_op(op)][version], **values}


def reference_accepts(op: str, buffer: bytes) -> dict | None:
    """The values the C decoder must produce, or None where it must refuse: the Python container walk
    and key set, spec version and hash, and each value representable in its C field."""
    op = op.split("-")[0]
    try:
        entries = _parse_map(op, buffer)
    except OptionsError:
        return None
    values = {key: value for key, (_, value) in entries.items()}
    version, hashes = values.get("spec_version"), OP_SPEC_HASHES[op]
    if version not in hashes or values.get("spec_hash") != hashes[version]:
        return None
    if set(values) != {f.name for f in contract_versions.option_fields(op, version)}:
        return None
    for key, value in values.items():
        bits, signed = (64, True) if key in INT64_FIELDS else (32, key not in UINT32_FIELDS)
        lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
        if not lo <= value <= hi:
            return None
    return values


@pytest.mark.parametrize("op", OPS)
def test_parses_what_the_exporter_writes(parse, options, op):
    status, message, values = parse(op, encode_options(_op(op), options[op]))
    assert (status, message) == (kernel_abi.OK, "")
    assert values == header(op, **options[op])


@pytest.mark.parametrize("op", OPS)
def test_every_truncation_is_rejected_naming_the_op(parse, options, op):
    buffer = encode_options(_op(op), options[op])
    for n in range(len(buffer)):
        status, message, values = parse(op, buffer[:n])
        assert status != kernel_abi.OK and message.startswith(f"{_op(op)}: "), (n, message)
        assert not any(values.values()), "a failed parse must leave params zeroed"


@pytest.mark.parametrize("op", OPS)
def test_random_corruption_matches_the_reference_walk(parse, options, op):
    buffer = encode_options(_op(op), options[op])
    rnd = random.Random(op)
    outcomes = {"accepted": 0, "rejected": 0}
    for _ in range(3000):
        bad = bytearray(buffer)
        for _ in range(rnd.randint(1, 4)):
            bad[rnd.randrange(len(bad))] = rnd.randrange(256)
        expected = reference_accepts(op, bytes(bad))
        status, message, values = parse(op, bytes(bad))
        if expected is None:
            assert status in (kernel_abi.ERROR_OPTION, kernel_abi.ERROR_SPEC) and message.startswith(f"{_op(op)}: "), (
                bytes(bad).hex(),
                status,
                message,
            )
            outcomes["rejected"] += 1
        else:
            assert (status, values) == (kernel_abi.OK, expected), (bytes(bad).hex(), message)
            outcomes["accepted"] += 1
    assert min(outcomes.values()) > 0, outcomes


def _with(op, options, **changes):
    values = header(op, **options[op])
    values.update(changes)
    return bytes(flexbuffers.Dumps({k: v for k, v in values.items() if v is not None}))


def test_key_set_and_contract_errors_name_the_field(parse, options):
    cases = [
        (_with(M, options, ffn=None), "MCUBERT_MLP: ffn: missing"),
        (_with(M, options, gelu=1), "MCUBERT_MLP: gelu: unknown option"),
        (_with(M, options, spec_version=4, new_field=3), "MCUBERT_MLP: spec_version: unsupported version 4"),
        (_with(M, options, spec_version=2), "MCUBERT_MLP: spec_hash: "),  # version 2 has its own hash
        (_with(M, options, spec_hash=0x1234), "MCUBERT_MLP: spec_hash: "),
        (_with(M, options, spec_hash=None), "MCUBERT_MLP: spec_hash: missing"),
        (_with(M, options, tile=4.0), "MCUBERT_MLP: tile: expected an inline integer"),
        (_with(M, options, tile="4"), "MCUBERT_MLP: tile: expected an inline integer"),
        (_with(M, options, tile=1 << 40), "MCUBERT_MLP: tile: 1099511627776 does not fit"),
        (bytes(flexbuffers.Dumps([1, 2, 3])), "MCUBERT_MLP: options: root is not a map"),
        (b"", "MCUBERT_MLP: options: missing"),
    ]
    for buffer, expected in cases:
        status, message, _ = parse(M, buffer)
        assert status != kernel_abi.OK and message.startswith(expected), (expected, message)


def test_int4_key_set_errors_name_the_field(parse, options):
    """word_bits belongs to version 2: unknown to a version-1 embedding, required in a version-2 one."""
    v1 = {"spec_version": 1, "spec_hash": SPEC_HASHES[1]}
    cases = [
        (_with(E4, options, **v1), "MCUBERT_EMBEDDING: word_bits: unknown option"),
        (_with(E4, options, word_bits=None), "MCUBERT_EMBEDDING: word_bits: missing"),
        (_with(E4, options, word_bits=4.0), "MCUBERT_EMBEDDING: word_bits: expected an inline integer"),
    ]
    for buffer, expected in cases:
        status, message, _ = parse(E, buffer)
        assert status == kernel_abi.ERROR_OPTION and message == expected, (expected, message)
        with pytest.raises(OptionsError, match=expected):
            from tflm_mcubert.ops.options import decode_options

            decode_options(E, buffer)


@pytest.mark.parametrize("op", [A4, M4])
def test_weight_bits_key_set_errors_name_the_field(parse, options, op):
    """weight_bits belongs to version 3 of attention and MLP: unknown to version 1, required in version 3;
    the C parser and the Python codec give the same message."""
    from tflm_mcubert.ops.options import decode_options

    code = _op(op)
    v1 = {"spec_version": 1, "spec_hash": SPEC_HASHES[1]}
    cases = [
        (_with(op, options, **v1), f"{code}: weight_bits: unknown option"),
        (_with(op, options, weight_bits=None), f"{code}: weight_bits: missing"),
        (_with(op, options, weight_bits=4.0), f"{code}: weight_bits: expected an inline integer"),
    ]
    for buffer, expected in cases:
        status, message, _ = parse(code, buffer)
        assert status == kernel_abi.ERROR_OPTION and message == expected, (expected, message)
        with pytest.raises(OptionsError, match=expected):
            decode_options(code, buffer)
    status, _, values = parse(code, _with(op, options, weight_bits=5))  # a range left to validate
    assert status == kernel_abi.OK and values["weight_bits"] == 5 and values["spec_version"] == 3


def test_values_out_of_contract_range_are_left_to_validate(parse, options):
    status, _, values = parse(A, _with(A, options, tile=0, heads=999))
    assert status == kernel_abi.OK and (values["tile"], values["heads"]) == (0, 999)
