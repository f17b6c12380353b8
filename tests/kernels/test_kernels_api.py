"""The C API around the kernels: validate error paths and messages (the header, struct layouts and buffer
sizes: test_kernels_layout.py).

Every error path of mcubert_<op>_validate and of the kernels' own run-time checks is triggered
here (through the ASan host driver, both build variants). Option errors must read exactly like
the Python options codec's (ops/options.py), so a user sees the same text from either side.
"""

from __future__ import annotations

import ctypes
import dataclasses
import re

import numpy as np
import pytest

from kernel_cases import (
    HEADER_SPEC_HASH,
    attention_case,
    embedding_case,
    mlp_case,
)
from kernel_host import TensorSpec, tensor_specs
from tflm_mcubert.ops import contract, contract_versions, options as options_codec
from tflm_mcubert.ops import kernel_abi
from tflm_mcubert.ops.validation import OpSpecError

ATTN, MLP, EMB = contract.ATTENTION, contract.MLP, contract.EMBEDDING


@pytest.fixture(scope="module")
def cases():
    return {
        ATTN: attention_case(9, 12, 3, 4, seed=1),
        MLP: mlp_case(9, 12, 20, 4, seed=1),
        EMB: embedding_case(9, 12, seed=1),
    }


def _python_option_error(op: str, values: dict[str, int]) -> str:
    """The Python codec's message for these option values (version/hash taken as valid)."""
    fields = {f.name for f in contract.CONTRACTS[op].options}
    with pytest.raises(options_codec.OptionsError) as err:
        options_codec.encode_options(op, {k: v for k, v in values.items() if k in fields})
    return str(err.value)


# ---- option errors ------------------------------------------------------------------------------


def _option_cases():
    """(op, field, bad value) for every range end an int32 field can express, plus cross rules."""
    for op, spec in contract.CONTRACTS.items():
        if op not in (ATTN, MLP, EMB):  # the head's: test_kernels_classifier_head.py
            continue
        for f in spec.options:
            c_type = dict(kernel_abi.PARAMS_STRUCTS[op]._fields_)[f.name]
            limit = (1 << 63) - 1 if c_type is ctypes.c_int64 else (1 << 31) - 1
            if f.lo - 1 >= -limit - 1:
                yield op, f.name, f.lo - 1
            if f.hi + 1 <= limit:
                yield op, f.name, f.hi + 1


@pytest.mark.parametrize("op,field,value", list(_option_cases()))
def test_every_option_range_is_checked_with_the_python_wording(runner, cases, op, field, value):
    call = cases[op].call
    values = {**call.options, field: value}
    params = kernel_abi.make_params(op, values, HEADER_SPEC_HASH)
    result = runner.validate(op, params, [])
    assert result.status == kernel_abi.ERROR_OPTION
    assert result.message == _python_option_error(op, values)


@pytest.mark.parametrize(
    "op,changes,field",
    [
        (ATTN, {"heads": 5}, "heads"),
        (ATTN, {"tile": 10}, "tile"),
        (ATTN, {"score_multiplier": (1 << 30) - 1}, "score_multiplier"),
        (ATTN, {"context_multiplier": 1}, "context_multiplier"),
        (MLP, {"tile": 10}, "tile"),
        (EMB, {"cluster_count": 3, "vocab_size": 2}, "cluster_count"),
    ],
)
def test_cross_field_rules_with_the_python_wording(runner, cases, op, changes, field):
    values = {**cases[op].call.options, **changes}
    result = runner.validate(op, kernel_abi.make_params(op, values, HEADER_SPEC_HASH), [])
    assert result.status == kernel_abi.ERROR_OPTION
    assert result.message.startswith(f"{op}: {field}: ")
    assert result.message == _python_option_error(op, values)


@pytest.mark.parametrize("op", [ATTN, MLP, EMB])
def test_spec_version_and_hash_are_checked_first(runner, cases, op):
    values = dict(cases[op].call.options)
    versions = contract_versions.op_versions(op)  # attention and MLP: 1, 2 and 3 (int4 weights)
    newer = versions[-1] + 1
    bad_version = kernel_abi.make_params(op, {**values, "spec_version": newer, "seq_len": 0}, HEADER_SPEC_HASH)
    result = runner.validate(op, bad_version, [])
    assert result.status == kernel_abi.ERROR_SPEC
    implemented = " and ".join(map(str, versions))
    assert result.message == f"{op}: spec_version: unsupported version {newer} (this build implements {implemented})"
    bad_hash = kernel_abi.make_params(op, values, 0x12345678)
    result = runner.validate(op, bad_hash, [])
    assert result.status == kernel_abi.ERROR_SPEC
    assert result.message == (
        f"{op}: spec_hash: 0x12345678 does not match this build's contract 0x{HEADER_SPEC_HASH:08x}"
    )


@pytest.mark.parametrize("op", [ATTN, MLP, EMB])
def test_kernels_check_their_options_even_without_validate(runner, cases, op):
    call = cases[op].call
    bad = dataclasses.replace(call, params=kernel_abi.make_params(op, {**call.options, "seq_len": 0}, HEADER_SPEC_HASH))
    result = runner.run(bad, validate=False, scratch_size=4096)
    assert result.status == kernel_abi.ERROR_OPTION
    assert result.message == f"{op}: seq_len: 0 is outside [1, 1024]"


# ---- tensor errors ------------------------------------------------------------------------------


def _validate(runner, call, specs):
    return runner.validate(call.op, call.params, specs)


@pytest.mark.parametrize("op", [ATTN, MLP, EMB])
def test_valid_tensors_pass_with_and_without_data(runner, cases, op):
    call = cases[op].call
    assert _validate(runner, call, tensor_specs(call)).ok
    everything_null = tensor_specs(call, null_views=kernel_abi.TENSOR_NAMES[op])
    assert _validate(runner, call, everything_null).ok


@pytest.mark.parametrize("op", [ATTN, MLP, EMB])
def test_tensor_count_dtype_size_and_alignment_of_every_tensor(runner, cases, op):
    call = cases[op].call
    good = tensor_specs(call)
    result = _validate(runner, call, good[:-1])
    assert result.status == kernel_abi.ERROR_TENSOR and f"{op}: tensors: expected {len(good)}" in result.message
    for i, name in enumerate(kernel_abi.TENSOR_NAMES[op]):
        field = name
        specs = [dataclasses.replace(s) for s in good]
        wrong = kernel_abi.DTYPE_INT16 if specs[i].dtype != kernel_abi.DTYPE_INT16 else kernel_abi.DTYPE_INT8
        specs[i].dtype = wrong
        result = _validate(runner, call, specs)
        assert result.status == kernel_abi.ERROR_TENSOR, name
        assert result.message.startswith(f"{op}: {field}: expected dtype "), result.message
        specs = [dataclasses.replace(s) for s in good]
        specs[i].elements += 1
        result = _validate(runner, call, specs)
        assert result.status == kernel_abi.ERROR_TENSOR, name
        assert result.message == f"{op}: {field}: expected {good[i].elements} elements, got {good[i].elements + 1}"
        if good[i].dtype != kernel_abi.DTYPE_INT8 and good[i].data:
            specs = [dataclasses.replace(s) for s in good]
            specs[i].misalign = 2 if good[i].dtype == kernel_abi.DTYPE_INT32 else 1
            result = _validate(runner, call, specs)
            size = 4 if good[i].dtype == kernel_abi.DTYPE_INT32 else 2
            assert result.message == f"{op}: {field}: data is not {size}-byte aligned", name


def test_unknown_dtype_is_named_by_number(runner, cases):
    call = cases[MLP].call
    specs = tensor_specs(call)
    specs[0].dtype = 1  # kTfLiteFloat32
    result = _validate(runner, call, specs)
    assert result.message == f"{MLP}: hidden: expected dtype int8, got type 1"


def _with(call, name: str, array: np.ndarray):
    specs = tensor_specs(call)
    i = kernel_abi.TENSOR_NAMES[call.op].index(name)
    specs[i] = TensorSpec(kernel_abi.DTYPE_CODES[array.dtype], array.size, array.tobytes())
    return specs


@pytest.mark.parametrize("weights", ["query_weights", "key_weights", "value_weights", "output_weights"])
def test_attention_weights_must_be_symmetric_int8(runner, cases, weights):
    call = cases[ATTN].call  # d = 12: no padding lanes, so -128 is the only content error
    packed = call.tensors[weights].copy()
    packed[3] = -128
    result = _validate(runner, call, _with(call, weights, packed))
    assert result.status == kernel_abi.ERROR_TENSOR
    assert result.message == f"{ATTN}: {weights}: weights must be in [-127, 127] (symmetric int8)"


def test_pair4_padding_must_be_zero(runner):
    case = mlp_case(5, 7, 13, 2)  # K = 7 (one padded lane per group row), N = 13 (a padded channel)
    call = case.call
    for name, (n, k) in (("fc1_weights", (13, 7)), ("fc2_weights", (7, 13))):
        packed = call.tensors[name].copy()
        grouped = packed.reshape(-(-n // 2), -(-k // 4), 2, 4)
        grouped[0, -1, 0, 3] = 5  # a padded K lane of the first pair
        result = _validate(runner, call, _with(call, name, grouped.reshape(-1)))
        assert result.message == f"{MLP}: {name}: padding bytes of the pair4 layout must be zero"
        packed = call.tensors[name].copy()
        grouped = packed.reshape(-(-n // 2), -(-k // 4), 2, 4)
        if n % 2:
            grouped[-1, 0, 1, 0] = 1  # the missing channel of the last pair
            result = _validate(runner, call, _with(call, name, grouped.reshape(-1)))
            assert result.message == f"{MLP}: {name}: padding bytes of the pair4 layout must be zero"


@pytest.mark.parametrize(
    "op,name", [(ATTN, "query_channels"), (ATTN, "output_channels"), (MLP, "fc1_channels"), (MLP, "fc2_channels")]
)
def test_channel_rows(runner, cases, op, name):
    call = cases[op].call
    base = call.tensors[name].reshape(-1, 3)
    for column, value, problem in (
        (0, (1 << 30) + 1, "bias exceeds +-2^30 (accumulator bound)"),
        (0, -(1 << 30) - 1, "bias exceeds +-2^30 (accumulator bound)"),
        (1, 12345, "multiplier 12345 is neither 0 nor in [2^30, 2^31)"),
        (1, -5, "multiplier -5 is neither 0 nor in [2^30, 2^31)"),
        (2, 31, "shift 31 is outside [-31, 30]"),
        (2, -32, "shift -32 is outside [-31, 30]"),
    ):
        rows = base.copy()
        rows[-1, column] = value
        result = _validate(runner, call, _with(call, name, rows.reshape(-1)))
        assert result.status == kernel_abi.ERROR_TENSOR
        assert result.message == f"{op}: {name}: {problem}"


@pytest.mark.parametrize("op", [ATTN, MLP])
def test_residual_rows_are_checked_with_the_python_wording(runner, cases, op):
    from tflm_mcubert.ops.layernorm import check_residual
    from tflm_mcubert.ops.validation import OpSpecError

    call = cases[op].call
    base = call.tensors["residual"].reshape(-1, 2)
    assert _validate(runner, call, _with(call, "residual", base.reshape(-1))).ok
    for row, column, value in ((0, 0, -129), (-1, 0, 128), (1, 1, -1), (-1, 1, 8), (2, 1, 1 << 30)):
        rows = base.copy()
        rows[row, column] = value
        with pytest.raises(OpSpecError) as python:
            check_residual(op, "residual", rows, rows.shape[0])
        result = _validate(runner, call, _with(call, "residual", rows.reshape(-1)))
        assert result.status == kernel_abi.ERROR_TENSOR
        assert result.message == str(python.value)


def test_exp_lut_contents(runner, cases):
    call = cases[ATTN].call
    lut = call.tensors["exp_lut"].copy()
    lut[9] = -1
    assert (
        _validate(runner, call, _with(call, "exp_lut", lut)).message
        == f"{ATTN}: exp_lut: entry 9 is outside [0, 16384]"
    )
    lut = call.tensors["exp_lut"].copy()
    lut[200] = 16385
    assert (
        _validate(runner, call, _with(call, "exp_lut", lut)).message
        == f"{ATTN}: exp_lut: entry 200 is outside [0, 16384]"
    )
    lut = call.tensors["exp_lut"].copy()
    lut[0] = 100
    assert _validate(runner, call, _with(call, "exp_lut", lut)).message == (
        f"{ATTN}: exp_lut: entry 0 must be EXP_ONE = 16384 (the row max contributes exactly one), got 100"
    )


def test_embedding_cluster_table_and_the_sizes_it_implies(runner, cases):
    call = cases[EMB].call  # clusters (3, 4, 5) -> ends 3, 7, 12; ranks d=12, 2, 5
    clusters = call.tensors["clusters"].reshape(-1, 2)
    ends_message = f"{EMB}: clusters: cluster ends must increase strictly and the last must equal vocab_size 12"
    rank_message = f"{EMB}: clusters: rank of cluster 0 must be d=12; others in [1, d]"
    for edit, message in (
        ((1, 0, 3), ends_message),
        ((0, 0, 0), ends_message),
        ((2, 0, 11), ends_message),
        ((0, 1, 11), rank_message),
        ((1, 1, 0), rank_message),
        ((2, 1, 13), rank_message),
    ):
        table = clusters.copy()
        table[edit[0], edit[1]] = edit[2]
        result = _validate(runner, call, _with(call, "clusters", table.reshape(-1)))
        assert result.status == kernel_abi.ERROR_TENSOR and result.message == message, edit
    for name in ("word_rows", "word_projections"):
        longer = np.concatenate([call.tensors[name], np.zeros(1, np.int8)])
        result = _validate(runner, call, _with(call, name, longer))
        assert result.message == (f"{EMB}: {name}: expected {call.tensors[name].size} elements, got {longer.size}")
    projections = call.tensors["word_projections"].copy()
    projections[2] = 1  # V_1 has rank 2: K lanes 2, 3 of every group are padding
    result = _validate(runner, call, _with(call, "word_projections", projections))
    assert result.message == f"{EMB}: word_projections: padding bytes of the pair4 layout must be zero"
    for name in ("word_requant", "position_requant", "token_type_requant"):
        table = call.tensors[name].reshape(-1, 2).copy()
        table[-1, 0] = 7
        result = _validate(runner, call, _with(call, name, table.reshape(-1)))
        assert result.message == f"{EMB}: {name}: multiplier 7 is neither 0 nor in [2^30, 2^31)"


def test_corrupt_int4_embeddings_are_refused_with_the_python_message(runner):
    """word_bits of no storage width or of the wrong version, int4 sizes (an int4 table read as
    int8 included) and non-zero padding nibbles: the C message is the reference's."""
    from tflm_mcubert.ops.embedding import EmbeddingParams
    from tflm_mcubert.ops.validation import OpSpecError

    call = embedding_case(9, 13, seed=3, word_bits=4, ranks=(None, 2, 5)).call  # odd d and rank 5: padding
    good = _validate(runner, call, tensor_specs(call))
    assert good.ok, good.message
    for overrides, message in (
        ({"word_bits": 5}, f"{EMB}: word_bits: 5 is not a storage width (4: packed int4, 8: int8)"),
        ({"word_bits": 0}, f"{EMB}: word_bits: 0 is not a storage width (4: packed int4, 8: int8)"),
        ({"spec_version": 1, "spec_hash": HEADER_SPEC_HASH}, f"{EMB}: word_bits: 4 (int4 tables) needs spec_version 2"),
    ):
        params = kernel_abi.make_params(EMB, {**call.options, **overrides})
        result = runner.validate(EMB, params, [])
        assert (result.status, result.message) == (kernel_abi.ERROR_OPTION, message), overrides
    rows = call.tensors["word_rows"]
    shorter = _validate(runner, call, _with(call, "word_rows", rows[:-1]))
    assert shorter.message == f"{EMB}: word_rows: expected {rows.size} elements, got {rows.size - 1}"
    as_int8 = kernel_abi.make_params(EMB, {**call.options, "word_bits": 8})
    result = runner.validate(EMB, as_int8, tensor_specs(call))
    assert result.status == kernel_abi.ERROR_TENSOR and result.message.startswith(f"{EMB}: word_rows: expected ")
    for offset, cluster, row in ((2 + 6, 0, 0), (3 * 9 + 4 * 1 + 2 * 3 + 2, 2, 2)):
        padded = rows.copy()
        padded[offset] |= np.int8(0x50)  # the high nibble of an odd row's last byte
        result = _validate(runner, call, _with(call, "word_rows", padded))
        assert result.status == kernel_abi.ERROR_TENSOR
        tail = "must be 0, got 5"
        assert result.message.startswith(f"{EMB}: word_rows: cluster {cluster} row {row}: ") and tail in result.message
        tensors = {**_embedding_tensors(call), "word_rows": padded}
        with pytest.raises(OpSpecError, match=re.escape(result.message)):
            EmbeddingParams.from_serialized(dict(call.options), tensors)


def _embedding_tensors(call):
    """The constant tensors of an embedding call, shaped as the reference reads them from a .tflite."""
    p = call.params
    shapes = {
        "clusters": (p.cluster_count, 2),
        "word_requant": (p.cluster_count, p.hidden, 2),
        "position_table": (p.seq_len, p.hidden),
        "token_type_table": (p.type_vocab_size, p.hidden),
        "position_requant": (p.hidden, 2),
        "token_type_requant": (p.hidden, 2),
        "layer_norm": (p.hidden, 2),
    }
    return {name: call.tensors[name].reshape(shapes.get(name, (-1,))) for name in kernel_abi.weight_fields(EMB)}


# ---- run-time errors ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "field,value,position,limit",
    [("input_ids", -1, 3, 12), ("input_ids", 12, 8, 12), ("token_type_ids", 2, 0, 2), ("token_type_ids", -7, 5, 2)],
)
def test_embedding_ids_out_of_range_write_nothing(runner, cases, field, value, position, limit):
    call = cases[EMB].call
    ids = call.tensors[field].copy()
    ids[position] = value
    sentinel = np.full(call.tensors["output"].shape, 77, np.int8)
    bad = dataclasses.replace(call, tensors={**call.tensors, field: ids, "output": sentinel})
    result = runner.run(bad)
    assert result.status == kernel_abi.ERROR_INPUT
    assert result.message == f"{EMB}: {field}: id {value} at position {position} is outside [0, {limit})"
    assert np.all(result.output == 77)


@pytest.mark.parametrize("length", [-1, 10, 1 << 30])
def test_attention_valid_length_out_of_range_writes_nothing(runner, length):
    case = attention_case(9, 12, 3, 4, mask_mode=1, seed=2)
    call = case.call
    bad = dataclasses.replace(call, tensors={**call.tensors, "mask": np.array([length], np.int32)})
    result = runner.run(bad)
    assert result.status == kernel_abi.ERROR_INPUT
    assert result.message == f"{ATTN}: mask: valid length {length} is outside [0, 9]"
    assert np.array_equal(result.output, call.tensors["hidden"])


@pytest.mark.parametrize("op", [ATTN, MLP, EMB])
def test_null_pointers_and_bad_scratch_are_argument_errors(runner, cases, op):
    call = cases[op].call
    need = runner.buffer_size(op, call.dims())
    for name in kernel_abi.TENSOR_NAMES[op][:-1]:
        if op == EMB and name == "word_projections":
            continue  # may be NULL when there is a single cluster
        result = runner.run(call, validate=False, null_data=(name,))
        assert result.status == kernel_abi.ERROR_ARGUMENT, name
        assert result.message.endswith("NULL pointer"), result.message
    result = runner.run(call, null_scratch=True)
    assert (result.status, result.message) == (kernel_abi.ERROR_ARGUMENT, f"{op}: scratch: no scratch buffer")
    result = runner.run(call, scratch_misalign=2)
    assert (result.status, result.message) == (
        kernel_abi.ERROR_ARGUMENT,
        f"{op}: scratch: buffer is not 4-byte aligned",
    )
    result = runner.run(call, scratch_size=need - 16)
    assert result.message == f"{op}: scratch: {need - 16} bytes given, {need} needed"
    assert runner.run(call, scratch_misalign=4).ok  # any 4-byte aligned buffer works


def test_status_names(host_library):
    lib = ctypes.CDLL(str(host_library))
    lib.mcubert_status_name.restype = ctypes.c_char_p
    count = len(kernel_abi.STATUS_NAMES)
    names = [lib.mcubert_status_name(i).decode() for i in range(count + 1)]
    assert names == [kernel_abi.STATUS_NAMES[i] for i in range(count)] + ["unknown"]


# ---- int4 weights of attention and MLP (version 3, SPEC 3.1.1) ----------------------------------


def _python_tensor_problem(call, name: str, array: np.ndarray) -> str:
    """The reference's problem text (after "OP: field: ") for the call's tensors with `name` replaced."""
    from tflm_mcubert.ops.registry import OPS

    values = {k: v for k, v in call.options.items() if k not in ("spec_version", "spec_hash", "reserved")}
    op = OPS[call.op]
    tensors = {k: v for k, v in call.tensors.items() if k not in op.runtime_inputs and k != "output"}
    d = values["hidden"]
    for k in list(tensors):
        if k.endswith("_channels"):
            tensors[k] = tensors[k].reshape(-1, 3)
    tensors["layer_norm"] = tensors["layer_norm"].reshape(d, 2)
    tensors["residual"] = tensors["residual"].reshape(d, 2)
    tensors[name] = array
    with pytest.raises(OpSpecError) as caught:
        op.params_type.from_serialized(values, tensors)
    return caught.value.problem


@pytest.mark.parametrize(
    "make,weights,k",
    [
        (lambda: attention_case(9, 12, 3, 4, seed=1, weight_bits=4), "value_weights", 12),
        (lambda: mlp_case(9, 12, 21, 4, seed=1, weight_bits=4), "fc2_weights", 21),
    ],
    ids=["attention", "mlp"],
)
def test_corrupt_int4_weights_are_refused_with_the_python_message(runner, make, weights, k):
    call = make().call
    op = call.op
    assert call.params.spec_version == 3 and call.params.weight_bits == 4
    assert _validate(runner, call, tensor_specs(call)).ok
    good = call.tensors[weights]
    row = 4 * -(-k // 8)
    shorter = _validate(runner, call, _with(call, weights, good[:-1]))
    assert shorter.message == f"{op}: {weights}: expected {good.size} elements, got {good.size - 1}"
    padded = good.view(np.uint8).copy()
    padded[2 * row - 1] |= 0x30  # channel 1's last nibble: padding (K % 8 != 0)
    minus8 = good.view(np.uint8).copy()
    minus8[row + 1] &= 0xF0  # channel 1, K value 2: nibble 0, the value -8
    for corrupt in (padded, minus8):
        result = _validate(runner, call, _with(call, weights, corrupt.view(np.int8)))
        assert result.status == kernel_abi.ERROR_TENSOR
        problem = _python_tensor_problem(call, weights, corrupt.view(np.int8))
        assert result.message == f"{op}: {weights}: {problem}"
    assert "padding nibble" in _python_tensor_problem(call, weights, padded.view(np.int8))
    # int4 tensors under an int8 header (version 1, pair4 sizes): refused by size
    header = ("weight_bits", "spec_version", "spec_hash")
    int8_params = kernel_abi.make_params(op, {k_: v for k_, v in call.options.items() if k_ not in header})
    assert int8_params.spec_version == 1
    result = runner.validate(op, int8_params, tensor_specs(call))
    assert result.status == kernel_abi.ERROR_TENSOR and "_weights: expected " in result.message


@pytest.mark.parametrize("op", [ATTN, MLP])
def test_weight_bits_option_is_checked_with_the_python_message(runner, cases, op):
    values = {k: v for k, v in cases[op].call.options.items() if k not in ("spec_version", "spec_hash")}
    checks = [
        ({"weight_bits": 5}, f"{op}: weight_bits: 5 is not a weight width (4: packed int4, 8: int8)"),
        (
            {"weight_bits": 0, "spec_version": 3},
            f"{op}: weight_bits: 0 is not a weight width (4: packed int4, 8: int8)",
        ),
        (
            {"weight_bits": 4, "spec_version": 1, "spec_hash": HEADER_SPEC_HASH},
            f"{op}: weight_bits: 4 (int4 weights) needs spec_version 3",
        ),
    ]
    for overrides, message in checks:
        params = kernel_abi.make_params(op, {**values, **overrides})
        if "spec_version" in overrides:
            hashes = {1: HEADER_SPEC_HASH, 3: kernel_abi.OP_SPEC_HASHES[op][3]}
            params.spec_version, params.spec_hash = overrides["spec_version"], hashes[overrides["spec_version"]]
        result = runner.validate(op, params, [])
        assert (result.status, result.message) == (kernel_abi.ERROR_OPTION, message), overrides
    fields = {f.name for f in contract_versions.option_fields(op, 3)} - {"spec_version", "spec_hash"}
    with pytest.raises(options_codec.OptionsError) as python:
        options_codec.encode_options(op, {k: v for k, v in values.items() if k in fields} | {"weight_bits": 5})
    assert str(python.value) == checks[0][1]
    eight = kernel_abi.make_params(op, {**values, "weight_bits": 8})  # 8 in version 3: accepted
    assert eight.spec_version == 3 and runner.validate(op, eight, []).ok


@pytest.mark.parametrize("op", [ATTN, MLP])
def test_int4_layers_option_is_checked_with_the_python_message(runner, cases, op):
    """Version 8 (SPEC 3.1.2): int4_layers within the op's layers and weight_bits then 8, refused in C with
    the Python codec's message."""
    top = (1 << len(contract.ATTENTION_LINEAR_LAYERS if op == ATTN else contract.MLP_LINEAR_LAYERS)) - 1
    header = ("spec_version", "spec_hash", "reserved")
    values = {k: v for k, v in cases[op].call.options.items() if k not in header}
    mixed = {**values, "weight_bits": 8, "int4_layers": 1}
    good = kernel_abi.make_params(op, mixed)
    assert good.spec_version == 8 and runner.validate(op, good, []).ok
    for overrides in ({"int4_layers": top + 1}, {"int4_layers": -1}, {"weight_bits": 4}):
        with pytest.raises(options_codec.OptionsError) as python:
            options_codec.encode_options(op, {**mixed, **overrides})
        params = kernel_abi.make_params(op, mixed)
        for field, value in overrides.items():
            setattr(params, field, value)
        result = runner.validate(op, params, [])
        assert (result.status, result.message) == (kernel_abi.ERROR_OPTION, str(python.value)), overrides
