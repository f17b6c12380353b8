"""MCUBERT_CLASSIFIER_HEAD (SPEC 4.4): the C kernel against ops/classifier_head.py, byte for byte.

* host, ASan/UBSan, plain C path and DSP path (emulated intrinsics): shapes d in {1, 32, 128, 256,
  384} x labels in {1, 2, 3, 5}, "extreme" parameters (every integer anywhere in the contract's
  range), saturation extremes, a realistic layer quantized from float, misaligned int8 tensors;
* validate: every option range end with the Python reference's wording, spec version/hash, and
  each tensor error; run-time argument errors (NULL pointers, scratch too small / misaligned);
* get_buffer_size equals the reference's scratch bytes (and -1 outside the contract);
* unicorn Cortex-M7 and Cortex-M4 (DSP path, as built for each core) and the M7 plain path:
  bit-exact, with the stack use within MCUBERT_STACK_BOUND_BYTES; the same bound statically.

The op is kept out of kernel_abi's per-op tables (the other kernel tests iterate them with
encoder-op cases), so this module has its own call encoding (kernel_abi.ClassifierHeadCall).
"""

from __future__ import annotations

import dataclasses
import re
import struct

import numpy as np
import pytest

from kernel_cases import HEADER, HEADER_SPEC_HASH
from kernel_host import CMD_BUFFER_SIZE, CMD_RUN, CMD_VALIDATE, MAGIC, Result, TensorSpec
from tflm_mcubert.ops import classifier_head, contract
from tflm_mcubert.ops.classifier_head import (
    ClassifierHeadFloat,
    ClassifierHeadParams,
    ClassifierHeadQuant,
    tanh_output_quant,
)
from tflm_mcubert.ops.fixed_point import INT32_MAX, MULTIPLIER_MIN
from tflm_mcubert.ops.linear import BIAS_LIMIT, Linear, pack_weights
from tflm_mcubert.ops.quantization import TensorQuant
from tflm_mcubert.ops.validation import OpSpecError
from tflm_mcubert.ops import kernel_abi
from tflm_mcubert.ops.kernel_abi import ClassifierHeadCall, classifier_head_call

OP = contract.CLASSIFIER_HEAD
OP_ID = kernel_abi.CLASSIFIER_HEAD_OP_ID
NAMES = kernel_abi.CLASSIFIER_HEAD_TENSOR_NAMES
STACK_BOUND = int(re.search(r"#define MCUBERT_STACK_BOUND_BYTES (\d+)", HEADER.read_text()).group(1))


# ---- cases ------------------------------------------------------------------------------------


@dataclasses.dataclass
class Case:
    name: str
    params: ClassifierHeadParams
    hidden: np.ndarray
    expected: np.ndarray

    @property
    def call(self) -> ClassifierHeadCall:
        return classifier_head_call(self.params, self.hidden, HEADER_SPEC_HASH)


def _random_linear(rng, n: int, k: int, shifts=(-24, -8)) -> Linear:
    w = rng.choice(np.array([-127, 127, -1, 0, 1, 5, -5], np.int8), size=(n, k))
    mult = rng.integers(MULTIPLIER_MIN, INT32_MAX, n, endpoint=True)
    mult[rng.random(n) < 0.05] = 0
    shift = np.where(rng.random(n) < 0.8, rng.integers(*shifts, n), rng.integers(-31, 31, n))
    shift[mult == 0] = 0
    small = rng.integers(-(1 << 16), 1 << 16, n, endpoint=True)
    large = rng.integers(-BIAS_LIMIT, BIAS_LIMIT, n, endpoint=True)
    bias = np.where(rng.random(n) < 0.8, small, large)
    channels = np.stack([bias, mult, shift], axis=1).astype(np.int32)
    return Linear(k, n, pack_weights(w.astype(np.int8)), channels)


def _finish(name: str, params: ClassifierHeadParams, hidden: np.ndarray) -> Case:
    params = params.validate()
    expected = classifier_head.run(params, hidden, np.zeros(params.labels, np.int8))
    return Case(name, params, hidden, expected.copy())


def extreme_case(s: int, d: int, n: int, seed: int = 0) -> Case:
    rng = np.random.default_rng(seed * 7919 + s * 31 + d * 7 + n)
    # Shifts around -7 - log2(d)/2 put most outputs (table indices, logits) inside int8 rather than
    # at 0 or saturated; a fifth of the channels take any shift (see _random_linear).
    params = ClassifierHeadParams(
        seq_len=s,
        hidden=d,
        labels=n,
        pooler_zero_point=int(rng.integers(-128, 128)),
        logits_zero_point=int(rng.integers(-128, 128)),
        pooler=_random_linear(rng, d, d, (-14, -6)),
        tanh_lut=rng.integers(-128, 128, 256).astype(np.int8),
        classifier=_random_linear(rng, n, d, (-14, -6)),
    )
    hidden = rng.integers(-128, 128, (s, d)).astype(np.int8)
    return _finish(f"extreme-s{s}-d{d}-n{n}-seed{seed}", params, hidden)


def saturation_case(d: int, n: int, kind: str) -> Case:
    """Every requantization at an extreme: int32-saturating products (shift 30, the largest
    multiplier and bias), zero multipliers, the most negative shift; hidden all -128 or 127."""
    rng = np.random.default_rng(d * 13 + n)
    value = {"low": -128, "high": 127, "mixed": None}[kind]
    hidden = (
        np.full((2, d), value, np.int8) if value is not None else rng.choice(np.array([-128, 127], np.int8), (2, d))
    )

    def layer(n_out: int, sign: int) -> Linear:
        w = np.full((n_out, d), 127 * sign, np.int8)
        w[1::2] = -127 * sign
        channels = np.empty((n_out, 3), np.int32)
        channels[:, 0] = np.where(np.arange(n_out) % 3 == 0, BIAS_LIMIT, -BIAS_LIMIT)
        channels[:, 1] = INT32_MAX
        channels[:, 2] = 30
        channels[2::5, 1] = 0  # zero scale
        channels[2::5, 2] = 0
        channels[3::5, 2] = -31  # smallest scale: the output is the offset
        channels[4::5, 1] = MULTIPLIER_MIN
        return Linear(d, n_out, pack_weights(w), channels)

    params = ClassifierHeadParams(
        seq_len=2,
        hidden=d,
        labels=n,
        pooler_zero_point=127 if kind != "low" else -128,
        logits_zero_point=-128 if kind != "high" else 127,
        pooler=layer(d, 1),
        tanh_lut=np.arange(-128, 128, dtype=np.int16)[::-1].astype(np.int8),
        classifier=layer(n, -1),
    )
    return _finish(f"saturation-{kind}-d{d}-n{n}", params, hidden)


def realistic_case(s: int, d: int, n: int, seed: int = 0) -> Case:
    """A float head quantized through the offline path (ClassifierHeadParams.quantize)."""
    rng = np.random.default_rng(seed + 1000 * d + n)
    fw = ClassifierHeadFloat(
        wp=rng.normal(0, 1 / np.sqrt(d), (d, d)),
        bp=rng.normal(0, 0.1, d),
        wc=rng.normal(0, 1 / np.sqrt(d), (n, d)),
        bc=rng.normal(0, 0.1, n),
    )
    x = rng.normal(size=(64, d))
    observed: dict = {}
    fw.forward(x, observed)
    quant = ClassifierHeadQuant(
        input=TensorQuant.observe(x, symmetric=False),
        pre_activation=TensorQuant.observe(observed["pre_activation"], symmetric=False),
        pooled=tanh_output_quant(),
        logits=TensorQuant.observe(observed["logits"], symmetric=False),
    )
    params = ClassifierHeadParams.quantize(fw, quant, seq_len=s)
    hidden = quant.input.quantize(x[:s])
    return _finish(f"realistic-s{s}-d{d}-n{n}", params, hidden)


SHAPES = [(d, n) for d in (1, 32, 128, 256, 384) for n in (1, 2, 3, 5)]
ODD_SHAPES = [(2, 1), (3, 2), (5, 3), (6, 4), (7, 5), (13, 7), (30, 2), (33, 9)]  # every K % 4


# ---- host driver encoding (host_runner.c, op OP_CLASSIFIER_HEAD) -------------------------------


def _specs(call: ClassifierHeadCall, *, misalign: dict[str, int] | None = None, null_data=()) -> list[TensorSpec]:
    misalign = misalign or {}
    return [
        TensorSpec(
            kernel_abi.DTYPE_CODES[array.dtype],
            array.size,
            array.tobytes(),
            misalign=misalign.get(name, 0),
            null_data=name in null_data,
        )
        for name, array in call.tensor_list
    ]


def _encode(command: int, params, specs: list[TensorSpec]) -> bytes:
    raw = bytes(params)
    parts = [
        struct.pack("<III", MAGIC, command, OP_ID),
        struct.pack("<I", len(raw)),
        raw,
        struct.pack("<I", len(specs)),
    ]
    for spec in specs:
        flags = 1 | (2 if spec.null_view else 0) | (4 if spec.null_data else 0)
        parts.append(struct.pack("<iiIII", spec.dtype, spec.elements, flags, spec.misalign, len(spec.data)))
        parts.append(spec.data)
    return b"".join(parts)


def host_buffer_size(runner, dims) -> int:
    dims = list(dims) + [0] * (4 - len(dims))
    return runner._exchange(struct.pack("<III", MAGIC, CMD_BUFFER_SIZE, OP_ID) + struct.pack("<4i", *dims))[3]


def host_run(
    runner,
    call: ClassifierHeadCall,
    *,
    params=None,
    specs=None,
    scratch_size=None,
    scratch_misalign: int = 0,
    scratch_fill: int = 0xA5,
    misalign=None,
    null_data=(),
) -> Result:
    if scratch_size is None:
        scratch_size = host_buffer_size(runner, call.dims())
    specs = specs if specs is not None else _specs(call, misalign=misalign, null_data=null_data)
    request = _encode(CMD_RUN, params if params is not None else call.params, specs)
    request += struct.pack("<IiI", scratch_fill, scratch_size, scratch_misalign)
    status, message, output, _ = runner._exchange(request)
    return Result(status, message, np.frombuffer(output, np.int8).copy() if output else None)


def host_validate(runner, params, specs) -> Result:
    status, message, _, _ = runner._exchange(_encode(CMD_VALIDATE, params, specs or []))
    return Result(status, message)


def _assert_exact(result: Result, case: Case):
    assert result.ok, result.message
    mismatches = np.flatnonzero(result.output != case.expected)
    assert mismatches.size == 0, f"{case.name}: {mismatches.size} of {case.expected.size} logits differ"


# ---- host: bit-exact --------------------------------------------------------------------------


@pytest.mark.parametrize("d,n", SHAPES, ids=[f"d{d}-n{n}" for d, n in SHAPES])
def test_bit_exact_on_host(runner, d, n):
    for s, seed in ((1, 0), (7, 1)):
        case = extreme_case(s, d, n, seed)
        _assert_exact(host_run(runner, case.call), case)


@pytest.mark.parametrize("d,n", ODD_SHAPES, ids=[f"d{d}-n{n}" for d, n in ODD_SHAPES])
def test_bit_exact_on_host_every_k_tail(runner, d, n):
    case = extreme_case(3, d, n, seed=d)
    _assert_exact(host_run(runner, case.call), case)


@pytest.mark.parametrize("kind", ["low", "high", "mixed"])
@pytest.mark.parametrize("d,n", [(1, 1), (32, 5), (384, 3)])
def test_saturation_extremes_on_host(runner, kind, d, n):
    case = saturation_case(d, n, kind)
    assert {-128, 127} & set(case.expected.tolist()), "the case should saturate some logits"
    _assert_exact(host_run(runner, case.call), case)


@pytest.mark.parametrize("d,n", [(32, 2), (128, 3), (256, 5)])
def test_realistic_head_on_host(runner, d, n):
    case = realistic_case(4, d, n)
    assert len(set(case.expected.tolist())) > 1 or n == 1
    _assert_exact(host_run(runner, case.call), case)


def test_only_row_zero_is_read_and_scratch_contents_do_not_matter(runner):
    case = extreme_case(5, 36, 5, seed=3)
    other = case.hidden.copy()
    other[1:] = np.random.default_rng(9).integers(-128, 128, other[1:].shape)
    changed = dataclasses.replace(case, hidden=other)
    for fill in (0x00, 0xFF, 0x5A):
        _assert_exact(host_run(runner, changed.call, scratch_fill=fill), case)


def test_misaligned_int8_tensors_and_larger_scratch(runner):
    case = extreme_case(3, 45, 5, seed=5)
    misalign = {"hidden": 1, "pooler_weights": 3, "tanh_lut": 2, "classifier_weights": 1, "output": 3}
    _assert_exact(host_run(runner, case.call, misalign=misalign), case)
    size = host_buffer_size(runner, case.call.dims())
    _assert_exact(host_run(runner, case.call, scratch_size=size + 64, scratch_misalign=4), case)


# ---- buffer size --------------------------------------------------------------------------------


@pytest.mark.parametrize("d", [1, 2, 15, 16, 17, 32, 100, 128, 256, 384, 768, 1024])
def test_buffer_size_equals_the_reference_scratch(runner, d):
    for s, n in ((1, 1), (128, 2), (1024, 1024)):
        assert host_buffer_size(runner, (s, d, n)) == classifier_head.scratch_bytes(d)


@pytest.mark.parametrize("dims", [(0, 8, 2), (1025, 8, 2), (8, 0, 2), (8, 1025, 2), (8, 8, 0), (8, 8, 1025)])
def test_buffer_size_of_invalid_dims_is_minus_one(runner, dims):
    assert host_buffer_size(runner, dims) == -1


# ---- validate: options ----------------------------------------------------------------------------

BASE = extreme_case(4, 12, 3, seed=11)


def _option_cases():
    for f in contract.CONTRACTS[OP].options:
        yield f.name, f.lo - 1
        yield f.name, f.hi + 1


def _python_error(field: str, value: int) -> str:
    p = BASE.params
    with pytest.raises(OpSpecError) as info:
        dataclasses.replace(p, **{field: value}).validate()
    return str(info.value)


@pytest.mark.parametrize("field,value", list(_option_cases()))
def test_every_option_range_is_checked_with_the_python_wording(runner, field, value):
    params = kernel_abi.make_classifier_head_params({**BASE.call.options, field: value}, HEADER_SPEC_HASH)
    result = host_validate(runner, params, None)
    assert result.status == kernel_abi.ERROR_OPTION
    assert result.message == _python_error(field, value)
    # the kernel checks its options too (nothing is written)
    run = host_run(runner, BASE.call, params=params, scratch_size=4096)
    assert run.status == kernel_abi.ERROR_OPTION and run.message == result.message


def test_spec_version_and_hash(runner):
    call = BASE.call
    bad_version = kernel_abi.make_classifier_head_params(call.options, HEADER_SPEC_HASH, spec_version=3)
    result = host_validate(runner, bad_version, _specs(call))
    assert result.status == kernel_abi.ERROR_SPEC
    assert result.message.startswith(f"{OP}: spec_version: unsupported version 3")
    # version 2 (the int4 embedding's) is known, with its own contract hash: version 1's hash mismatches it
    other_contract = kernel_abi.make_classifier_head_params(call.options, HEADER_SPEC_HASH, spec_version=2)
    result = host_validate(runner, other_contract, _specs(call))
    assert result.status == kernel_abi.ERROR_SPEC
    assert result.message.startswith(f"{OP}: spec_hash: 0x{HEADER_SPEC_HASH:08x} does not match")
    bad_hash = kernel_abi.make_classifier_head_params(call.options, HEADER_SPEC_HASH ^ 1)
    result = host_validate(runner, bad_hash, _specs(call))
    assert result.status == kernel_abi.ERROR_SPEC
    assert result.message.startswith(f"{OP}: spec_hash: 0x{HEADER_SPEC_HASH ^ 1:08x} does not match")


def test_valid_call_validates(runner):
    assert host_validate(runner, BASE.call.params, _specs(BASE.call)).ok
    assert host_validate(runner, BASE.call.params, None).ok  # options only


# ---- validate: tensors ------------------------------------------------------------------------------


def _tensor_error(runner, call, specs) -> Result:
    result = host_validate(runner, call.params, specs)
    assert result.status == kernel_abi.ERROR_TENSOR, result.message
    return result


def test_tensor_count(runner):
    call = BASE.call
    result = _tensor_error(runner, call, _specs(call)[:-1])
    assert result.message == f"{OP}: tensors: expected 7 (6 inputs, 1 output), got 6"


@pytest.mark.parametrize("index", range(len(NAMES)), ids=NAMES)
def test_every_tensor_dtype_and_element_count(runner, index):
    call = BASE.call
    name = "output" if NAMES[index] == "output" else NAMES[index]
    specs = _specs(call)
    wrong = kernel_abi.DTYPE_INT16
    specs[index] = dataclasses.replace(specs[index], dtype=wrong)
    result = _tensor_error(runner, call, specs)
    assert result.message.startswith(f"{OP}: {name}: expected dtype ")
    assert result.message.endswith(", got int16")
    specs = _specs(call)
    specs[index] = dataclasses.replace(specs[index], elements=specs[index].elements + 1)
    result = _tensor_error(runner, call, specs)
    assert result.message == (
        f"{OP}: {name}: expected {specs[index].elements - 1} elements, got {specs[index].elements}"
    )


def _with_tensor(call, name: str, array: np.ndarray) -> list[TensorSpec]:
    specs = _specs(call)
    i = NAMES.index(name)
    specs[i] = dataclasses.replace(specs[i], data=np.ascontiguousarray(array).tobytes())
    return specs


@pytest.mark.parametrize("layer", ["pooler", "classifier"])
def test_weight_and_channel_contents(runner, layer):
    call = BASE.call
    weights = call.tensors[f"{layer}_weights"].copy()
    bad = weights.copy()
    bad[np.flatnonzero(weights)[0]] = -128
    assert _tensor_error(runner, call, _with_tensor(call, f"{layer}_weights", bad)).message == (
        f"{OP}: {layer}_weights: weights must be in [-127, 127] (symmetric int8)"
    )
    # padding: d = 12 has no K padding; labels = 3 pads the second pair's channel 3
    if layer == "classifier":
        padded = weights.copy()
        padded[-1] = 1
        assert _tensor_error(runner, call, _with_tensor(call, f"{layer}_weights", padded)).message == (
            f"{OP}: {layer}_weights: padding bytes of the pair4 layout must be zero"
        )
    channels = call.tensors[f"{layer}_channels"].reshape(-1, 3)
    for column, value, problem in (
        (0, BIAS_LIMIT + 1, "bias exceeds +-2^30 (accumulator bound)"),
        (0, -BIAS_LIMIT - 1, "bias exceeds +-2^30 (accumulator bound)"),
        (1, MULTIPLIER_MIN - 1, f"multiplier {MULTIPLIER_MIN - 1} is neither 0 nor in [2^30, 2^31)"),
        (2, 31, "shift 31 is outside [-31, 30]"),
        (2, -32, "shift -32 is outside [-31, 30]"),
    ):
        bad = channels.copy()
        bad[-1, column] = value
        if column == 2:
            bad[-1, 1] = MULTIPLIER_MIN
        result = _tensor_error(runner, call, _with_tensor(call, f"{layer}_channels", bad))
        assert result.message == f"{OP}: {layer}_channels: {problem}"


def test_misaligned_int32_tensor(runner):
    call = BASE.call
    specs = _specs(call, misalign={"pooler_channels": 2})
    assert _tensor_error(runner, call, specs).message == f"{OP}: pooler_channels: data is not 4-byte aligned"


# ---- run-time argument errors ------------------------------------------------------------------------


@pytest.mark.parametrize("name", [n for n in NAMES])
def test_null_tensor_is_an_argument_error(runner, name):
    call = BASE.call
    request = _encode(CMD_RUN, call.params, _specs(call, null_data=(name,)))
    # validate runs first on the views (which keep their data), then the kernel sees NULL
    request += struct.pack("<IiI", 0xA5, host_buffer_size(runner, call.dims()), 0)
    status, message, _, _ = runner._exchange(request)
    assert status == kernel_abi.ERROR_ARGUMENT
    field = {"hidden": "hidden", "output": "logits"}.get(name, "weights")
    assert message == f"{OP}: {field}: NULL pointer"


def test_scratch_errors(runner):
    call = BASE.call
    need = host_buffer_size(runner, call.dims())
    result = host_run(runner, call, scratch_size=need - 1)
    assert result.status == kernel_abi.ERROR_ARGUMENT
    assert result.message == f"{OP}: scratch: {need - 1} bytes given, {need} needed"
    result = host_run(runner, call, scratch_misalign=2)
    assert result.status == kernel_abi.ERROR_ARGUMENT
    assert result.message == f"{OP}: scratch: buffer is not 4-byte aligned"
    result = host_run(runner, call, scratch_misalign=0xFFFFFFFF)
    assert result.status == kernel_abi.ERROR_ARGUMENT
    assert result.message == f"{OP}: scratch: no scratch buffer"


# ---- Cortex-M (unicorn) -------------------------------------------------------------------------------


def run_on_core(emu, call: ClassifierHeadCall, misalign: dict[str, int] | None = None):
    """Validate (tensor views), get_buffer_size, run; returns (status, message, logits, stack)."""
    misalign = misalign or {}
    mark = emu.heap_mark()
    try:
        addresses = {name: emu.put(array, 16, misalign.get(name, 0)) for name, array in call.tensor_list}
        params = emu.put(bytes(call.params), 8)
        weights = emu.put(
            struct.pack(
                f"<{len(kernel_abi.CLASSIFIER_HEAD_WEIGHT_FIELDS)}I",
                *(addresses[n] for n in kernel_abi.CLASSIFIER_HEAD_WEIGHT_FIELDS),
            ),
            8,
        )
        message = emu.put(bytes(kernel_abi.MESSAGE_CAPACITY), 4)
        views = emu.put(
            b"".join(
                struct.pack("<Iii", addresses[name], kernel_abi.DTYPE_CODES[array.dtype], array.size)
                for name, array in call.tensor_list
            ),
            8,
        )
        symbols = kernel_abi.CLASSIFIER_HEAD_SYMBOLS

        def text() -> str:
            return emu.read(message, kernel_abi.MESSAGE_CAPACITY).split(b"\0", 1)[0].decode()

        validated = emu.call(symbols["validate"], params, views, len(NAMES), message)
        if validated.value != kernel_abi.OK:
            return validated.value, text(), None, validated.stack_bytes
        size = emu.call(symbols["get_buffer_size"], *call.dims()).value
        scratch = emu.put(bytes([0x5A]) * size, 16)
        context = emu.put(struct.pack("<Ii", scratch, size), 8)
        result = emu.call(symbols["s8"], params, weights, addresses["hidden"], addresses["output"], context, message)
        logits = np.frombuffer(emu.read(addresses["output"], call.params.labels), np.int8).copy()
        return result.value, text(), logits, max(result.stack_bytes, validated.stack_bytes)
    finally:
        emu.release(mark)


CORE_CASES = [(extreme_case(3, d, n, seed=2), {}) for d, n in ((1, 1), (32, 2), (128, 5), (384, 3))] + [
    (
        extreme_case(2, 45, 5, seed=7),
        {"hidden": 1, "pooler_weights": 3, "tanh_lut": 2, "classifier_weights": 1, "output": 3},
    ),
    (extreme_case(2, 6, 3, seed=8), {"hidden": 2}),
    (saturation_case(32, 5, "mixed"), {}),
    (realistic_case(4, 128, 2), {"hidden": 3}),
]


@pytest.mark.parametrize("index", range(len(CORE_CASES)), ids=[c.name for c, _ in CORE_CASES])
def test_bit_exact_on_the_core(emulator, index):
    case, misalign = CORE_CASES[index]
    status, message, logits, stack = run_on_core(emulator, case.call, misalign)
    assert status == kernel_abi.OK, message
    assert np.array_equal(logits, case.expected), case.name
    assert stack <= STACK_BOUND, f"{case.name}: {stack} bytes of stack"


def test_buffer_size_on_the_core(emulator):
    symbol = kernel_abi.CLASSIFIER_HEAD_SYMBOLS["get_buffer_size"]
    for d in (1, 17, 128, 1024):
        assert emulator.call(symbol, 8, d, 2).value == classifier_head.scratch_bytes(d)
    assert emulator.call(symbol, 8, 1025, 2).value == -1


def test_stack_bound_holds_statically(build_dir):
    """GCC's call graph from every new entry point (the existing static test covers the others)."""
    from kernel_build import build, need_arm_toolchain
    from test_kernels_static import asm_frames, call_graph, worst_path

    need_arm_toolchain()
    for cpu, path in (("cortex-m7", "dsp"), ("cortex-m4", "dsp"), ("cortex-m7", "plain")):
        obj = build(build_dir, cpu, "mcubert", path=path).object_dir
        graph = call_graph(obj)
        graph.update({name: (size, []) for name, size in asm_frames(obj).items()})
        for entry in kernel_abi.CLASSIFIER_HEAD_SYMBOLS.values():
            key = next(k for k in graph if k.endswith(":" + entry))
            depth, path = worst_path(graph, key)
            assert depth <= STACK_BOUND, f"{cpu} {path} {entry}: {depth} bytes via {' -> '.join(path)}"


# ---- ABI mirror -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("compiler", ["gcc", "arm-none-eabi-gcc"])
def test_structs_match_the_python_mirror(tmp_path, compiler):
    import ctypes
    import shutil
    import subprocess

    if shutil.which(compiler) is None:
        pytest.skip(f"{compiler} not found")
    struct_c = kernel_abi.PARAMS_STRUCTS[OP]
    lines = [
        "#include <stddef.h>",
        '#include "mcubert/mcubert_ops.h"',
        f'_Static_assert(sizeof(mcubert_classifier_head_params) == {ctypes.sizeof(struct_c)}, "size");',
    ]
    for field, _ in struct_c._fields_:
        lines.append(
            f"_Static_assert(offsetof(mcubert_classifier_head_params, {field}) == "
            f'{getattr(struct_c, field).offset}, "{field}");'
        )
    fields = kernel_abi.CLASSIFIER_HEAD_WEIGHT_FIELDS
    lines.append(f'_Static_assert(sizeof(mcubert_classifier_head_weights) == {len(fields)} * sizeof(void *), "w");')
    for i, field in enumerate(fields):
        lines.append(
            f'_Static_assert(offsetof(mcubert_classifier_head_weights, {field}) == {i} * sizeof(void *), "{field}");'
        )
    for i, name in enumerate(NAMES):
        lines.append(f'_Static_assert(MCUBERT_CLASSIFIER_HEAD_{name.upper()} == {i}, "{name}");')
    lines.append(f'_Static_assert(MCUBERT_CLASSIFIER_HEAD_NUM_TENSORS == {len(NAMES)}, "count");')
    lines.append(f'_Static_assert(MCUBERT_MAX_LABELS == {contract.MAX_LABELS}, "labels");')
    source = tmp_path / "layout.c"
    source.write_text("\n".join(lines) + "\n")
    include = HEADER.parents[1]
    flags = ["-mcpu=cortex-m4", "-mthumb"] if compiler.startswith("arm") else []
    proc = subprocess.run(
        [compiler, "-std=c11", *flags, f"-I{include}", "-c", str(source), "-o", str(tmp_path / "layout.o")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
