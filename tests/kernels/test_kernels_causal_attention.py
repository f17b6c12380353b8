"""MCUBERT_CAUSAL_ATTENTION (SPEC 4.6): the C kernel against ops/causal_attention.py, byte for byte, with int8
and int4 projections (version 9's `int4_layers`, SPEC 3.1.2; mixed widths widen the token's row again).

* host, ASan/UBSan, plain C and DSP (emulated intrinsics): every step of a generation, the kernel given
  the reference's cache (rows after p left stale), residual streams of a calibrated block and of
  "extreme" parameters; validate and run-time errors naming the field;
* unicorn Cortex-M7, M4 (DSP) and M7 plain: a 256-token generation with the cache living in the
  core's memory between calls, the hidden state of every step and the whole cache at the end equal to
  the reference's, within the stack bound.
"""

from __future__ import annotations

import re
import struct

import numpy as np
import pytest

from kernel_cases import HEADER
from tflm_mcubert.ops import causal_attention, contract, kernel_abi, testing
from tflm_mcubert.ops.causal_attention import CausalAttentionParams
from tflm_mcubert.ops.fixed_point import INT32_MAX, MULTIPLIER_MIN
from tflm_mcubert.ops.layernorm import LayerNormParams
from tflm_mcubert.ops.linear import BIAS_LIMIT, Linear, pack_weights, pack_weights_int4

OP = contract.CAUSAL_ATTENTION
STACK_BOUND = int(re.search(r"#define MCUBERT_STACK_BOUND_BYTES (\d+)", HEADER.read_text()).group(1))


def calibrated(d=32, h=4, context=64, seed=0, weight_bits=8):
    params, _, in_quant, x = testing.quantized_causal_attention(
        d=d, h=h, context=context, seed=seed, weight_bits=weight_bits
    )
    return params, in_quant.quantize(x)


def _linear(rng, d, shifts, bits=8):
    """bits 4: int4 weights in [-7, 7] (w4row), shifts 4 higher for the ~16x smaller accumulators."""
    top, shifts = (127, shifts) if bits == 8 else (7, (shifts[0] + 4, shifts[1] + 4))
    w = rng.integers(-top, top + 1, (d, d)).astype(np.int8)
    bias = np.where(rng.random(d) < 0.9, rng.integers(-(1 << 16), 1 << 16, d), rng.integers(-BIAS_LIMIT, BIAS_LIMIT, d))
    mult = rng.integers(MULTIPLIER_MIN, INT32_MAX, d, endpoint=True)
    shift = rng.integers(*shifts, d)
    packed = pack_weights(w) if bits == 8 else pack_weights_int4(w).view(np.int8)
    return Linear(d, d, packed, np.stack([bias, mult, shift], axis=1).astype(np.int32), bits)


def extreme(d=24, h=3, context=40, seed=0, window=0, widths=(8, 8, 8, 8)):
    """Every integer anywhere in the contract's range: the outputs mean nothing but must match."""
    rng = np.random.default_rng(seed)
    table = np.stack([rng.integers(-(1 << 20), 1 << 20, d), rng.integers(-(1 << 22), 1 << 22, d)], axis=1)
    residual = np.stack([rng.integers(-128, 128, d), rng.integers(0, 8, d)], axis=1).astype(np.int32)
    out_residual = np.stack([rng.integers(-128, 128, d), rng.integers(0, 8, d)], axis=1).astype(np.int32)
    params = CausalAttentionParams(
        context=context,
        hidden=d,
        heads=h,
        window=window,
        score_multiplier=int(rng.integers(MULTIPLIER_MIN, INT32_MAX)),
        score_shift=-8,
        context_multiplier=int(rng.integers(MULTIPLIER_MIN, INT32_MAX)),
        context_shift=-10,
        layer_norm=LayerNormParams(table.astype(np.int32), int(rng.integers(0, 1 << 40))),
        query=_linear(rng, d, (-16, -8), widths[0]),
        key=_linear(rng, d, (-16, -8), widths[1]),
        value=_linear(rng, d, (-16, -8), widths[2]),
        output=_linear(rng, d, (-12, -2), widths[3]),
        exp_lut=np.sort(rng.integers(0, 1 << 14, 256))[::-1].astype(np.int16),
        residual=residual,
        output_residual=out_residual,
    ).validate()
    return params, rng.integers(-128, 128, (context, d)).astype(np.int8)


CASES = {
    "calibrated": calibrated(),
    "extreme": extreme(),
    "odd": extreme(d=6, h=2, context=9, seed=3),
    "local-window": extreme(d=16, h=2, context=30, seed=4, window=7),
    "calibrated-int4": calibrated(seed=5, weight_bits=4),
    "extreme-mixed": extreme(seed=6, widths=(8, 4, 8, 4)),  # every projection widens the row again
    "odd-int4": extreme(d=6, h=2, context=9, seed=7, widths=(4, 4, 4, 4)),
}


def test_int4_layers_are_written_only_where_a_projection_is_int4():
    assert "int4_layers" not in CASES["calibrated"][0].options()
    assert CASES["calibrated-int4"][0].options()["int4_layers"] == 0b1111
    assert CASES["extreme-mixed"][0].options()["int4_layers"] == 0b1010
    params = CASES["extreme-mixed"][0]
    again = CausalAttentionParams.from_serialized(params.options(), params.tensors())
    assert [again.query.weight_bits, again.key.weight_bits, again.value.weight_bits, again.output.weight_bits] == [
        8,
        4,
        8,
        4,
    ]


def _call(params, hidden, p, cache):
    return kernel_abi.causal_attention_call(params, hidden, np.array([p], np.int32), cache)


@pytest.mark.parametrize("name", list(CASES))
def test_every_step_is_bit_exact_on_host(runner, name):
    params, xs = CASES[name]
    cache = np.full((2, params.context, params.hidden), 77, np.int8)
    for p, x in enumerate(xs):
        call = _call(params, x, p, cache.copy())  # the kernel sees the reference's cache before this step
        expected = causal_attention.run(params, x.copy(), np.array([p], np.int32), cache)
        result = runner.run(call)
        assert result.ok, result.message
        assert np.array_equal(result.output, expected), f"{name}: step {p} differs"


def test_position_outside_the_cache_is_an_input_error(runner):
    params, xs = CASES["odd"]
    cache = np.zeros((2, params.context, params.hidden), np.int8)
    for p in (-1, params.context):
        result = runner.run(_call(params, xs[0], p, cache))
        assert result.status == kernel_abi.ERROR_INPUT
        assert result.message == f"{OP}: position: {p} is outside [0, {params.context})"


def test_options_and_tensors_are_checked(runner):
    params, xs = CASES["odd"]
    call = _call(params, xs[0], 0, np.zeros((2, params.context, params.hidden), np.int8))
    bad = kernel_abi.make_params(OP, {**call.options, "heads": 4})
    result = runner.validate(OP, bad, None)
    assert (result.status, result.message) == (
        kernel_abi.ERROR_OPTION,
        f"{OP}: heads: hidden 6 is not a multiple of heads 4",
    )
    short = kernel_abi.causal_attention_call(params, xs[0], np.array([0], np.int32), np.zeros((2, 3, 6), np.int8))
    result = runner.run(short)
    assert result.status == kernel_abi.ERROR_TENSOR
    assert result.message == f"{OP}: cache: expected {2 * params.context * 6} elements, got 36"


def test_buffer_size_equals_the_reference_scratch(runner):
    for n, d, h in ((1, 1, 1), (9, 6, 2), (256, 128, 2), (1024, 256, 4)):
        assert runner.buffer_size(OP, (n, d, h)) == causal_attention.scratch_bytes(n, d)
    assert runner.buffer_size(OP, (8, 6, 4)) == -1


# ---- Cortex-M (unicorn) -------------------------------------------------------------------------------


@pytest.mark.parametrize("weight_bits", [8, (4, 8, 4, 4)], ids=["int8", "int4-mixed"])
def test_a_256_token_generation_is_bit_exact_on_the_core(emulator, weight_bits):
    """The cache stays in the core's memory: every step's hidden state, then the whole cache, as the reference's."""
    params, xs = calibrated(d=32, h=4, context=256, seed=2, weight_bits=weight_bits)
    cache = np.zeros((2, params.context, params.hidden), np.int8)
    call = _call(params, xs[0], 0, cache)
    mark = emulator.heap_mark()
    try:
        address = {name: emulator.put(array, 16) for name, array in call.tensor_list if name != "output"}
        fields = kernel_abi.weight_fields(OP)
        weights = emulator.put(struct.pack(f"<{len(fields)}I", *(address[n] for n in fields)), 8)
        param_address = emulator.put(bytes(call.params), 8)
        message = emulator.put(bytes(kernel_abi.MESSAGE_CAPACITY), 4)
        size = emulator.call("mcubert_causal_attention_get_buffer_size", *call.dims()).value
        context = emulator.put(struct.pack("<Ii", emulator.put(bytes([0x5A]) * size, 16), size), 8)
        worst = 0
        for p, x in enumerate(xs):
            causal_attention.run(params, expected := x.copy(), np.array([p], np.int32), cache)
            emulator.uc.mem_write(address["hidden"], x.tobytes())
            emulator.uc.mem_write(address["position"], struct.pack("<i", p))
            result = emulator.call(
                "mcubert_causal_attention_s8",
                param_address,
                weights,
                address["hidden"],
                address["position"],
                address["cache"],
                context,
                message,
            )
            assert result.value == kernel_abi.OK
            got = np.frombuffer(emulator.read(address["hidden"], params.hidden), np.int8)
            assert np.array_equal(got, expected), f"step {p} differs"
            worst = max(worst, result.stack_bytes)
        on_core = np.frombuffer(emulator.read(address["cache"], cache.size), np.int8).reshape(cache.shape)
        assert np.array_equal(on_core, cache)
        assert worst <= STACK_BOUND, f"{worst} bytes of stack"
    finally:
        emulator.release(mark)
