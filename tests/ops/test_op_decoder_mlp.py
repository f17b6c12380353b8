"""MCUBERT_DECODER_MLP (SPEC 4.7): the integer pre-LayerNorm MLP tracks GPT-2's float one, rows are independent,
and its parameters round-trip and are validated naming the field."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tflm_mcubert.ops import decoder_mlp, testing
from tflm_mcubert.ops.causal_attention import stream_quant
from tflm_mcubert.ops.decoder_mlp import DecoderMlpParams
from tflm_mcubert.ops.validation import OpSpecError


def test_the_integer_mlp_tracks_the_float_mlp():
    params, fw, in_quant, x = testing.quantized_decoder_mlp(d=64, ffn=256, seed=1)
    xq = in_quant.quantize(x)
    got = decoder_mlp.run(params, xq.copy())
    z_scale = float(np.asarray(in_quant.scale)[0] / 2 ** int(params.residual[0, 1]))
    real = stream_quant(params.output_residual, z_scale).dequantize(got)
    expected = fw.forward(in_quant.dequantize(xq))
    cosine = np.sum(real * expected, axis=1) / (np.linalg.norm(real, axis=1) * np.linalg.norm(expected, axis=1))
    assert cosine.min() > 0.99, cosine.min()


def test_one_row_at_a_time_equals_all_rows():
    params, _, in_quant, x = testing.quantized_decoder_mlp(seed=2)
    xq = in_quant.quantize(x)
    rows = np.stack([decoder_mlp.run(params, row.copy()) for row in xq])
    assert np.array_equal(rows, decoder_mlp.run(params, xq.copy()))


def test_round_trip_and_validation():
    params, *_ = testing.quantized_decoder_mlp(seed=3)
    again = DecoderMlpParams.from_serialized(params.options(), params.tensors())
    assert again.options() == params.options()
    with pytest.raises(OpSpecError, match="fc1_output_zero_point: 128 is outside"):
        dataclasses.replace(params, fc1_output_zero_point=128).validate()
    bad = params.output_residual.copy()
    bad[3, 1] = 8
    with pytest.raises(OpSpecError, match=r"output_residual: channel 3: shift 8 is outside \[0, 7\]"):
        dataclasses.replace(params, output_residual=bad).validate()
