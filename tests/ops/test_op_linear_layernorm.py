"""linear (pair4 packing, quantization) and the integer LayerNorm."""

import numpy as np
import pytest

import spec_oracle as oracle
from tflm_mcubert.ops import layernorm as ln
from tflm_mcubert.ops.linear import Linear, int_matmul, pack_weights, packed_size, unpack_weights
from tflm_mcubert.ops.quantization import TensorQuant
from tflm_mcubert.ops.validation import OpSpecError


def test_pair4_layout_by_example():
    w = np.arange(1, 16, dtype=np.int8).reshape(3, 5)  # rows 1..5, 6..10, 11..15
    packed = pack_weights(w)
    assert packed_size(3, 5) == packed.size == 2 * 2 * 8
    assert packed.tolist() == [
        1,
        2,
        3,
        4,
        6,
        7,
        8,
        9,  # pair 0, K 0..3: channel 0 then channel 1
        5,
        0,
        0,
        0,
        10,
        0,
        0,
        0,  # pair 0, K 4..7 (zero padded)
        11,
        12,
        13,
        14,
        0,
        0,
        0,
        0,  # pair 1 = channel 2 and a zero channel
        15,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
    ]


@pytest.mark.parametrize("n,k", [(1, 1), (2, 4), (3, 5), (7, 13), (128, 128), (9, 1024)])
def test_pack_unpack_round_trip(n, k):
    w = np.random.default_rng(n * k).integers(-127, 128, (n, k)).astype(np.int8)
    assert np.array_equal(unpack_weights(pack_weights(w), n, k), w)


def test_unpack_rejects_nonzero_padding_and_wrong_size():
    packed = pack_weights(np.ones((3, 5), np.int8))
    packed[9] = 1  # channel 0, K = 5: padding (K is 5)
    with pytest.raises(OpSpecError, match="padding"):
        unpack_weights(packed, 3, 5, op="MCUBERT_MLP", field="fc1.weights")
    with pytest.raises(OpSpecError, match="MCUBERT_MLP: fc1.weights"):
        unpack_weights(np.zeros(8, np.int8), 3, 5, op="MCUBERT_MLP", field="fc1.weights")


def test_int_matmul_is_exact_at_the_largest_sums():
    a = np.full((2, 1024), 1 << 14, np.int64)
    b = np.full((1024, 3), -128, np.int64)
    assert np.all(int_matmul(a, b) == -(1 << 31))


def test_linear_from_float_folds_the_input_zero_point():
    rng = np.random.default_rng(3)
    w, b = rng.normal(size=(6, 10)), rng.normal(size=6)
    inq = TensorQuant(0.05, -17)
    lin = Linear.from_float(w, b, inq, 0.01).validate("TEST", "lin")
    x = rng.integers(-128, 128, (4, 10)).astype(np.int8)
    acc = lin.accumulate(x)
    # bias' + sum x w == round(b / acc_scale) + sum (x - zp) w, exactly.
    w_q = lin.weight.astype(np.int64)
    w_scale = np.abs(w).max(axis=1) / 127
    direct = (x.astype(np.int64) - inq.zero_point) @ w_q.T + np.floor(b / (inq.scale * w_scale) + 0.5)
    assert np.array_equal(acc, direct.astype(np.int64))
    # Against float: weight rounding (half a step per weight), bias and output rounding.
    real = lin.requantized(x) * 0.01
    x_real = inq.dequantize(x)
    bound = np.abs(x_real) @ (0.5 * np.broadcast_to(w_scale, (10, 6))) + 0.5 * inq.scale * w_scale + 0.005
    assert np.all(np.abs(real - (x_real @ w.T + b)) <= bound + 1e-12)


def test_linear_validation_names_op_and_field():
    lin = Linear.from_float(np.ones((2, 4)), np.zeros(2), TensorQuant(1.0), 1.0)
    bad = Linear(4, 2, lin.packed_weights, lin.channels.copy())
    bad.channels[1, 1] = 5  # neither 0 nor >= 2^30
    with pytest.raises(OpSpecError, match="MCUBERT_ATTENTION: query.channels: multiplier 5"):
        bad.validate("MCUBERT_ATTENTION", "query")
    w = pack_weights(np.full((2, 4), -128, np.int8))
    with pytest.raises(OpSpecError, match="query.weights"):
        Linear(4, 2, w, lin.channels).validate("MCUBERT_ATTENTION", "query")


def _float_params(d, rng, out=TensorQuant(0.02, 3)):
    gamma, beta = 1 + 0.2 * rng.normal(size=d), 0.3 * rng.normal(size=d)
    return gamma, beta, out, ln.LayerNormParams.from_float(gamma, beta, 1e-12, 0.01, out)


@pytest.mark.parametrize("d", [1, 2, 64, 128, 1024])
def test_layer_norm_matches_float_within_one_lsb(d):
    rng = np.random.default_rng(d)
    gamma, beta, out, params = _float_params(d, rng)
    z = rng.normal(0, rng.uniform(3, 8000, (16, 1)), (16, d)).clip(-32768, 32767).astype(np.int16)
    got = ln.layer_norm(z, params)
    ideal = ln.float_layer_norm(z * 0.01, gamma, beta, 1e-12) / out.scale + out.zero_point
    inside = np.abs(ideal) < 127
    assert np.abs(got - ideal)[inside].max() <= 0.5 + 2**-10
    assert np.all(got[~inside] == np.clip(np.round(ideal[~inside]), -128, 127))


def test_layer_norm_constant_rows_give_beta_and_extremes_do_not_overflow():
    d = 1024
    rng = np.random.default_rng(5)
    table = np.stack([rng.integers(-(1 << 31), 1 << 31, d), rng.integers(-(1 << 31), 1 << 31, d)], 1)
    params = ln.LayerNormParams(table.astype(np.int32), 0)
    rows = np.stack(
        [
            np.full(d, 32767),
            np.full(d, -32768),
            np.where(np.arange(d) % 2, 32767, -32768),  # max variance
            np.where(np.arange(d) == 0, 32767, -32768),  # max |normalized|
            rng.integers(-32768, 32768, d),
        ]
    ).astype(np.int16)
    got = ln.layer_norm(rows, params)
    beta_only = np.clip(np.floor(table[:, 1] / 2**16 + 0.5), -128, 127)
    assert np.array_equal(got[0], beta_only) and np.array_equal(got[1], beta_only)
    for eps in (0, 1, ln.EPS_MAX):
        p = ln.LayerNormParams(table.astype(np.int32), eps)
        want = [oracle.layer_norm_row(r, table.tolist(), eps) for r in rows.tolist()]
        assert ln.layer_norm(rows, p).tolist() == want


def test_residual_shift_choice_keeps_the_sum_inside_int16():
    assert ln.choose_residual_shift(0.05, 3.0) == 7
    assert ln.choose_residual_shift(0.05, 200.0) == 2
    assert ln.choose_residual_shift(0.01, 1e6) == 0
    assert ln.choose_residual_shift(0.05, 3.0, max_shift=4) == 4


def test_per_tensor_input_gives_one_residual_row_for_every_channel():
    channels, z_scale = ln.residual_channels(TensorQuant(0.05, -7), 200.0, 5)
    assert channels.tolist() == [[-7, 2]] * 5 and z_scale == 0.05 / 4


def test_hidden_quant_scales_are_power_of_two_multiples_of_the_pre_norm_scale():
    lo = np.array([-1.0, -2.0, -30.0, 0.0, -0.01])
    hi = np.array([1.0, 2.5, 4.0, 0.0, 0.01])
    q = ln.hidden_quant(lo, hi, z_max_abs=40.0)
    channels, z_scale = ln.residual_channels(q, 40.0, 5)
    assert np.array_equal(q.scale, z_scale * 2.0 ** channels[:, 1])  # s_x[c] = s_z 2^R_c
    assert z_scale == max(40.0 / ln.Z_HEADROOM_TARGET, 34.0 / 255 / 128)
    assert channels[:, 1].tolist() == [3, 4, 7, 2, 0]  # outlier: 7; all-zero channel: range 1 (fallback)
    assert np.all(q.scale >= (np.maximum(hi, 0) - np.minimum(lo, 0)) / 255)  # no channel clips
    assert np.array_equal(channels[:, 0], q.zero_point)
    assert np.abs(q.dequantize(q.quantize(np.stack([lo, hi]))) - np.stack([lo, hi])).max() <= q.scale.max() / 2
    free = ln.hidden_quant(lo, hi, None)  # last hidden state
    assert np.allclose(free.scale[:3], (hi - lo)[:3] / 255)
    with pytest.raises(ValueError, match="base \\* 2\\^k"):
        ln.residual_channels(TensorQuant(np.array([0.1, 0.3]), np.zeros(2)), 1.0, 2)


def test_linear_from_float_folds_per_channel_input_scales_and_zero_points():
    rng = np.random.default_rng(4)
    w, b = rng.normal(size=(6, 10)), rng.normal(size=6)
    inq = TensorQuant(0.01 * 2.0 ** rng.integers(0, 8, 10), rng.integers(-128, 128, 10))
    lin = Linear.from_float(w, b, inq, 0.01).validate("TEST", "lin")
    x = rng.integers(-128, 128, (50, 10)).astype(np.int8)
    real = lin.requantized(x) * 0.01
    want = inq.dequantize(x) @ w.T + b
    # Per-output-channel weight steps of the folded weights W[c, k] s_x[k]: half a step per term.
    w_step = np.abs(w * inq.scale).max(axis=1) / 127
    bound = 0.5 * np.abs(x.astype(np.float64) - inq.zero_point).sum(axis=1, keepdims=True) * w_step
    assert np.all(np.abs(real - want) <= bound + 0.5 * w_step + 0.005 + 1e-12)
