"""MCUBERT_DECODER_MLP (SPEC 4.7): the C kernel against ops/decoder_mlp.py, byte for byte, on the host (ASan/UBSan,
plain C and DSP) and on unicorn Cortex-M7, M4 and M7 plain, with int8 and int4 weights (version 9's
`int4_layers`, SPEC 3.1.2); validate names the field."""

from __future__ import annotations

import re

import numpy as np
import pytest

from kernel_cases import HEADER
from tflm_mcubert.ops import contract, decoder_mlp, kernel_abi, testing
from tflm_mcubert.ops.decoder_mlp import DecoderMlpParams
from tflm_mcubert.ops.fixed_point import INT32_MAX, MULTIPLIER_MIN
from tflm_mcubert.ops.layernorm import LayerNormParams
from tflm_mcubert.ops.linear import BIAS_LIMIT, Linear, pack_weights, pack_weights_int4

OP = contract.DECODER_MLP
STACK_BOUND = int(re.search(r"#define MCUBERT_STACK_BOUND_BYTES (\d+)", HEADER.read_text()).group(1))


def _linear(rng, n, k, shifts, bits=8):
    """bits 4: int4 weights in [-7, 7] (w4row), shifts 4 higher for the ~16x smaller accumulators."""
    top, shifts = (127, shifts) if bits == 8 else (7, (shifts[0] + 4, shifts[1] + 4))
    bias = np.where(rng.random(n) < 0.9, rng.integers(-(1 << 16), 1 << 16, n), rng.integers(-BIAS_LIMIT, BIAS_LIMIT, n))
    channels = np.stack([bias, rng.integers(MULTIPLIER_MIN, INT32_MAX, n, endpoint=True), rng.integers(*shifts, n)], 1)
    w = rng.integers(-top, top + 1, (n, k)).astype(np.int8)
    packed = pack_weights(w) if bits == 8 else pack_weights_int4(w).view(np.int8)
    return Linear(k, n, packed, channels.astype(np.int32), bits)


def extreme(d, f, seed=0, widths=(8, 8)):
    rng = np.random.default_rng(seed)
    table = np.stack([rng.integers(-(1 << 20), 1 << 20, d), rng.integers(-(1 << 22), 1 << 22, d)], axis=1)
    stream = lambda: np.stack([rng.integers(-128, 128, d), rng.integers(0, 8, d)], axis=1).astype(np.int32)  # noqa: E731
    params = DecoderMlpParams(
        hidden=d,
        ffn=f,
        fc1_output_zero_point=int(rng.integers(-128, 128)),
        layer_norm=LayerNormParams(table.astype(np.int32), int(rng.integers(0, 1 << 40))),
        fc1=_linear(rng, f, d, (-16, -6), widths[0]),
        activation_lut=rng.integers(-128, 128, 256).astype(np.int8),
        fc2=_linear(rng, d, f, (-16, -4), widths[1]),
        residual=stream(),
        output_residual=stream(),
    ).validate()
    return params, rng.integers(-128, 128, (6, d)).astype(np.int8)


def calibrated(d=32, f=128, seed=0, weight_bits=8):
    params, _, in_quant, x = testing.quantized_decoder_mlp(d, f, seed=seed, weight_bits=weight_bits)
    return params, in_quant.quantize(x[:6])


CASES = {
    "calibrated": calibrated(),
    "calibrated-d64": calibrated(64, 256, seed=1),
    "extreme": extreme(24, 96),
    "odd": extreme(5, 13, seed=2),
    "calibrated-int4": calibrated(64, 256, seed=1, weight_bits=4),
    "extreme-int4-fc1": extreme(24, 96, seed=3, widths=(4, 8)),
    "odd-int4": extreme(5, 13, seed=4, widths=(4, 4)),
}


def test_int4_layers_are_written_only_where_a_layer_is_int4():
    assert "int4_layers" not in CASES["calibrated"][0].options()
    assert CASES["calibrated-int4"][0].options()["int4_layers"] == 0b11
    assert CASES["extreme-int4-fc1"][0].options()["int4_layers"] == 0b01
    for name in ("calibrated", "calibrated-int4", "extreme-int4-fc1"):
        params = CASES[name][0]
        again = DecoderMlpParams.from_serialized(params.options(), params.tensors())
        assert (again.fc1.weight_bits, again.fc2.weight_bits) == (params.fc1.weight_bits, params.fc2.weight_bits)


@pytest.mark.parametrize("name", list(CASES))
def test_bit_exact_on_host(runner, name):
    params, rows = CASES[name]
    for x in rows:
        expected = decoder_mlp.run(params, x.copy())
        result = runner.run(kernel_abi.decoder_mlp_call(params, x))
        assert result.ok, result.message
        assert np.array_equal(result.output, expected), name


def test_buffer_size_and_option_errors(runner):
    for d, f in ((1, 1), (5, 13), (128, 512), (1024, 4096)):
        assert runner.buffer_size(OP, (d, f)) == decoder_mlp.scratch_bytes(d, f)
    assert runner.buffer_size(OP, (8, 4097)) == -1
    params, rows = CASES["odd"]
    call = kernel_abi.decoder_mlp_call(params, rows[0])
    bad = kernel_abi.make_params(OP, {**call.options, "ffn": 0})
    result = runner.validate(OP, bad, None)
    assert (result.status, result.message) == (kernel_abi.ERROR_OPTION, f"{OP}: ffn: 0 is outside [1, 4096]")


@pytest.mark.parametrize("name", ["calibrated-d64", "odd", "calibrated-int4", "odd-int4"])
def test_bit_exact_on_the_core(emulator, name):
    from tflm_mcubert.measure.arm_emulator import run_kernel

    params, rows = CASES[name]
    for x in rows[:2]:
        run = run_kernel(emulator, kernel_abi.decoder_mlp_call(params, x), misalign={"hidden": 1, "fc1_weights": 3})
        assert run.status == kernel_abi.OK, run.message
        assert np.array_equal(run.output, decoder_mlp.run(params, x.copy())), name
        assert run.stack_bytes <= STACK_BOUND
