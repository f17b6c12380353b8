"""MCUBERT_CAUSAL_ATTENTION (SPEC 4.6): stepping with the int8 KV cache equals recomputing the prefix, the
integer block tracks GPT-2's float block, and bad inputs are refused naming the field."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tflm_mcubert.ops import causal_attention, testing
from tflm_mcubert.ops.causal_attention import CausalAttentionParams, stream_quant
from tflm_mcubert.ops.validation import OpSpecError


def quantized_block(d: int = 32, h: int = 4, context: int = 256, seed: int = 0):
    return testing.quantized_causal_attention(d, h, context, seed)


def step_all(params: CausalAttentionParams, xq: np.ndarray) -> np.ndarray:
    cache = np.full((2, params.context, params.hidden), 77, np.int8)  # stale rows must not matter
    out = np.empty_like(xq)
    for p, row in enumerate(xq):
        hidden = row.copy()
        causal_attention.run(params, hidden, np.array([p], np.int32), cache)
        out[p] = hidden
    return out


def test_stepping_with_the_cache_equals_recomputing_the_prefix_for_256_tokens():
    params, _, in_quant, x = quantized_block(context=256)
    xq = in_quant.quantize(x)
    assert np.array_equal(step_all(params, xq), causal_attention.prefill(params, xq))


def test_a_local_window_steps_as_it_recomputes_and_as_gpt_neo_masks():
    params, fw, in_quant, x = quantized_block(d=32, h=4, context=48, seed=3)
    local = dataclasses.replace(params, window=5).validate()
    xq = in_quant.quantize(x)
    assert np.array_equal(step_all(local, xq), causal_attention.prefill(local, xq))
    assert not np.array_equal(causal_attention.prefill(local, xq), causal_attention.prefill(params, xq))
    # the first `window` tokens see all their keys: local equals global there
    assert np.array_equal(causal_attention.prefill(local, xq)[:5], causal_attention.prefill(params, xq)[:5])
    windowed = dataclasses.replace(fw, window=5)
    assert np.allclose(windowed.forward(x)[:5], fw.forward(x)[:5]) and not np.allclose(
        windowed.forward(x), fw.forward(x)
    )


def test_the_integer_block_tracks_the_float_block():
    params, fw, in_quant, x = quantized_block(d=64, h=4, context=64, seed=1)
    xq = in_quant.quantize(x)
    got = causal_attention.prefill(params, xq)
    # s_z as the op was built with it: an input channel's scale over its shift
    z_scale = float(np.asarray(in_quant.scale)[0] / 2 ** int(params.residual[0, 1]))
    out = stream_quant(params.output_residual, z_scale)
    expected = fw.forward(in_quant.dequantize(xq))
    real = out.dequantize(got)
    cosine = np.sum(real * expected, axis=1) / (np.linalg.norm(real, axis=1) * np.linalg.norm(expected, axis=1))
    assert cosine.min() > 0.99, cosine.min()


def test_position_and_cache_errors_name_the_field():
    params, _, in_quant, x = quantized_block(context=8)
    hidden = in_quant.quantize(x[:1])[0]
    cache = np.zeros((2, 8, params.hidden), np.int8)
    with pytest.raises(OpSpecError, match=r"position: 8 is outside \[0, 8\)"):
        causal_attention.run(params, hidden.copy(), np.array([8], np.int32), cache)
    with pytest.raises(OpSpecError, match="position"):
        causal_attention.run(params, hidden.copy(), np.array([0], np.int64), cache)
    with pytest.raises(OpSpecError, match="cache"):
        causal_attention.run(params, hidden.copy(), np.array([0], np.int32), cache[:, :4])
    with pytest.raises(OpSpecError, match="heads: hidden 32 is not a multiple of heads 5"):
        dataclasses.replace(params, heads=5).validate()


def test_options_and_tensors_round_trip():
    params, *_ = quantized_block(context=16)
    again = CausalAttentionParams.from_serialized(params.options(), params.tensors())
    assert again.options() == params.options()
    assert all(np.array_equal(a, params.tensors()[k]) for k, a in again.tensors().items())


def test_a_stream_channel_centres_its_calibrated_range_in_the_int8_codes():
    """The power-of-two step leaves codes spare; centred, a value a little past either end of the calibrated
    range is still represented (below the range it was clipped when lo sat at code -128)."""
    z_scale, lo, hi = 0.01, np.array([-0.3, -1.0, 0.0, -3.0]), np.array([0.9, 0.2, 1.5, 0.0])
    channels = causal_attention.stream_channels(lo, hi, z_scale)
    quant = stream_quant(channels, z_scale)
    assert list(channels[:, 1]) == [0, 0, 0, 1]  # 120, 120, 150, 300 steps of s_z: R as before
    margin = 0.25 * (hi - lo)
    for beyond in (lo - margin, hi + margin):
        back = (quant.quantize(beyond).astype(np.float64) - quant.zero_point) * quant.scale
        assert np.all(np.abs(back - beyond) <= quant.scale / 2 + 1e-12), (beyond, back)
    spare_low = channels[:, 0] + 128 + lo / quant.scale
    spare_high = 127 - channels[:, 0] - hi / quant.scale
    assert np.all(np.abs(spare_low - spare_high) <= 1)
    before = causal_attention.stream_channels(lo, hi, z_scale, centred=False)
    assert np.array_equal(before[:, 1], channels[:, 1]) and np.allclose(before[:, 0] + lo / quant.scale, -128, atol=0.5)
