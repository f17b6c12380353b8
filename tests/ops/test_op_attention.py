"""MCUBERT_ATTENTION reference: float agreement, tiling invariance, masks, bounds, the spec oracle."""

import dataclasses

import numpy as np
import pytest

import spec_oracle as oracle
from tflm_mcubert.ops import attention, contract, testing
from tflm_mcubert.ops.attention import AttentionParams
from tflm_mcubert.ops.fixed_point import EXP_ONE, requantize
from tflm_mcubert.ops.layernorm import layer_norm, residual_sum
from tflm_mcubert.ops.quantization import TensorQuant
from tflm_mcubert.ops.validation import OpSpecError


def quantized_layer(s, d, h, t, valid, seed=0, mask_mode=0, sharpness=2.0):
    rng = np.random.default_rng(seed)
    fa = testing.float_attention(rng, d, h, sharpness=sharpness)
    x = rng.normal(size=(s, d))
    inq = TensorQuant.observe(x, symmetric=False)
    xq = inq.quantize(x)
    quant = fa.calibrate(inq.dequantize(xq), valid, inq)
    params = AttentionParams.quantize(fa, quant, seq_len=s, tile=t, mask_mode=mask_mode)
    return params, fa, quant, xq


@pytest.mark.parametrize(
    "s,d,h,t,sharpness,max_lsb,mean_lsb",
    [
        (128, 128, 2, 8, 1.0, 1.5, 0.35),  # broad attention
        (128, 128, 2, 8, 2.0, 8.0, 0.6),  # peaked like a trained BERT head: int8 Q/K dominate
        (77, 64, 4, 5, 2.0, 8.0, 0.6),
        (300, 32, 2, 16, 2.0, 8.0, 0.6),
    ],
)
def test_matches_float_attention_within_a_few_lsb(s, d, h, t, sharpness, max_lsb, mean_lsb):
    valid = np.arange(s) < s - s // 5  # padded tail
    params, fa, quant, xq = quantized_layer(s, d, h, t, valid, sharpness=sharpness)
    got = attention.run(params, xq.copy(), valid.astype(np.int8))
    want = fa.forward(quant.input.dequantize(xq), valid) / quant.output.scale + quant.output.zero_point
    err = np.abs(got - np.clip(want, -128, 127))
    assert err.max() <= max_lsb and err.mean() <= mean_lsb, (err.max(), err.mean())


@pytest.mark.parametrize("s", [1, 77, 300])
def test_output_bytes_do_not_depend_on_the_tile(s):
    valid = np.ones(s, bool)
    valid[s // 3] = False
    params, _, _, xq = quantized_layer(s, 32, 2, 1, valid, seed=s)
    outs = [
        attention.run(dataclasses.replace(params, tile=t), xq.copy(), valid.astype(np.int8))
        for t in sorted({1, min(7, s), s})
    ]
    for out in outs[1:]:
        assert np.array_equal(out, outs[0])


@pytest.mark.parametrize("s,d,h,t", [(1, 8, 1, 1), (9, 8, 2, 4), (11, 12, 3, 2), (17, 16, 4, 16)])
def test_extreme_parameters_match_the_spec_oracle(s, d, h, t):
    rng = np.random.default_rng(100 + s)
    for trial in range(2):
        params = testing.extreme_attention(rng, s, d, h, t)
        x = rng.integers(-128, 128, (s, d)).astype(np.int8)
        x[0] = 127 if trial else -128  # saturated rows
        valid = rng.random(s) < 0.7
        valid[-1] = True
        got = attention.run(params, x.copy(), valid.astype(np.int8))
        assert got.tolist() == oracle.attention(params, x.tolist(), valid.tolist())


def test_quantized_layer_matches_the_spec_oracle():
    s = 23
    valid = np.arange(s) < 19
    params, _, _, xq = quantized_layer(s, 16, 2, 5, valid, seed=7)
    got = attention.run(params, xq.copy(), valid.astype(np.int8))
    assert got.tolist() == oracle.attention(params, xq.tolist(), valid.tolist())


def test_all_masked_keys_give_a_zero_context():
    s, d = 20, 16
    params, _, _, xq = quantized_layer(s, d, 2, 6, np.ones(s, bool))
    got = attention.run(params, xq.copy(), np.zeros(s, np.int8))
    zero_context = params.output.requantized(np.zeros((s, d), np.int8))  # = requantized bias
    want = layer_norm(residual_sum(zero_context, xq, params.residual), params.layer_norm)
    assert np.array_equal(got, want)
    length_mode = dataclasses.replace(params, mask_mode=contract.MASK_MODE_VALID_LENGTH)
    assert np.array_equal(attention.run(length_mode, xq.copy(), np.array([0], np.int32)), want)


def test_valid_length_mode_equals_a_prefix_mask():
    s = 33
    params, _, _, xq = quantized_layer(s, 16, 2, 4, np.ones(s, bool))
    length_mode = dataclasses.replace(params, mask_mode=contract.MASK_MODE_VALID_LENGTH)
    for length in (1, 20, s):
        by_mask = attention.run(params, xq.copy(), (np.arange(s) < length).astype(np.int8))
        by_length = attention.run(length_mode, xq.copy(), np.array([length], np.int32))
        assert np.array_equal(by_mask, by_length)


def test_any_nonzero_mask_byte_attends():
    s = 12
    params, _, _, xq = quantized_layer(s, 16, 2, 4, np.ones(s, bool))
    mask = np.array([1, 0, -1, 5, 0, 127, -128, 1, 1, 0, 2, 3], np.int8)
    assert np.array_equal(
        attention.run(params, xq.copy(), mask), attention.run(params, xq.copy(), (mask != 0).astype(np.int8))
    )


def test_mask_errors_name_the_field():
    s = 8
    params, _, _, xq = quantized_layer(s, 16, 2, 4, np.ones(s, bool))
    length_mode = dataclasses.replace(params, mask_mode=contract.MASK_MODE_VALID_LENGTH)
    with pytest.raises(OpSpecError, match="MCUBERT_ATTENTION: mask: valid length 9"):
        attention.run(length_mode, xq.copy(), np.array([9], np.int32))
    with pytest.raises(OpSpecError, match="MCUBERT_ATTENTION: mask: expected dtype int8"):
        attention.run(params, xq.copy(), np.ones(s, np.int32))


def test_softmax_weights_sum_to_one_and_follow_float_softmax():
    rng = np.random.default_rng(4)
    s, scale = 512, attention.choose_score_scale(0.0)
    params = dataclasses.replace(
        quantized_layer(8, 16, 2, 4, np.ones(8, bool))[0], exp_lut=attention.build_exp_lut(scale), seq_len=s
    )
    scores = rng.integers(-300, 300, (6, s)).astype(np.int16)
    scores[1] = 5  # flat row: 1/512 each
    scores[2, 7] = 32767  # one dominant key: a one-hot row
    valid = rng.random(s) < 0.8
    probs = attention.effective_probabilities(params, scores, valid)
    assert np.all(probs[:, ~valid] == 0)
    assert np.allclose(probs.sum(axis=1), 1.0, atol=2.0**-20, rtol=0)
    logits = np.where(valid, scores * scale, -np.inf)
    ideal = np.exp(logits - logits.max(axis=1, keepdims=True))
    ideal /= ideal.sum(axis=1, keepdims=True)
    # Each exp is rounded to 1/2^15 of the row max, and keys beyond the LUT range count as exp(-12).
    assert np.abs(probs - ideal).max() <= 2e-4
    assert np.allclose(probs[1, valid], 1 / valid.sum(), rtol=1e-5)


def test_longest_sequence_reaches_the_accumulator_bound_exactly():
    """s = 1024 keys, all scores equal, every value -128: acc = -2^31, the largest magnitude."""
    s = contract.MAX_SEQ_LEN
    params = dataclasses.replace(quantized_layer(8, 16, 2, 4, np.ones(8, bool))[0], seq_len=s)
    scores = np.zeros((2, s), np.int16)
    value_t = np.full((4, s), -128, np.int8)
    row_max, recip = np.zeros(2, np.int32), np.zeros(2, np.int32)
    ctx = attention.attend(params, scores, np.ones(s, bool), value_t, row_max, recip)
    assert recip.tolist() == [1 << 20] * 2  # 2^44 / (1024 * 2^14)
    mean = np.int64(-128) << 16  # exact mean of the values
    want = np.clip(requantize(mean, params.context_multiplier, params.context_shift), -128, 127)
    assert np.all(ctx == want)
    assert EXP_ONE * s * 128 == 1 << 31


def test_max_length_bert_sequence_runs_and_matches_float():
    s = 512
    valid = np.ones(s, bool)
    params, fa, quant, xq = quantized_layer(s, 32, 2, 64, valid, seed=3)
    got = attention.run(params, xq.copy(), valid.astype(np.int8))
    want = fa.forward(quant.input.dequantize(xq), valid) / quant.output.scale + quant.output.zero_point
    err = np.abs(got - np.clip(want, -128, 127))
    assert err.max() <= 8.0 and err.mean() <= 0.6


def test_scratch_buffer_contract():
    s, d, h, t = 16, 16, 2, 4
    params, _, _, xq = quantized_layer(s, d, h, t, np.ones(s, bool))
    need = attention.scratch_bytes(s, d, h, t)
    mask = np.ones(s, np.int8)
    want = attention.run(params, xq.copy(), mask)
    big = np.full(need + 64, 0x5A, np.uint8)
    assert np.array_equal(attention.run(params, xq.copy(), mask, big), want)
    assert np.all(big[need:] == 0x5A)  # nothing past the layout
    with pytest.raises(OpSpecError, match="MCUBERT_ATTENTION: scratch: .* needed"):
        attention.run(params, xq.copy(), mask, np.zeros(need - 1, np.uint8))


def test_validation_names_op_and_field():
    params = quantized_layer(8, 16, 2, 4, np.ones(8, bool))[0]
    with pytest.raises(OpSpecError, match="MCUBERT_ATTENTION: tile: 9 is outside"):
        dataclasses.replace(params, tile=9).validate()
    with pytest.raises(OpSpecError, match="MCUBERT_ATTENTION: heads: hidden 16 is not a multiple"):
        dataclasses.replace(params, heads=3).validate()
    bad_lut = params.exp_lut.copy()
    bad_lut[0] = 100
    with pytest.raises(OpSpecError, match="MCUBERT_ATTENTION: exp_lut: entry 0"):
        dataclasses.replace(params, exp_lut=bad_lut).validate()
    with pytest.raises(OpSpecError, match="MCUBERT_ATTENTION: hidden: expected dtype int8"):
        attention.run(params, np.zeros((8, 16), np.int16), np.ones(8, np.int8))
    with pytest.raises(OpSpecError, match="MCUBERT_ATTENTION: hidden: must be C-contiguous"):
        attention.run(params, np.zeros((16, 8), np.int8).T, np.ones(8, np.int8))
