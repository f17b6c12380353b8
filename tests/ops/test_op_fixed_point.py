"""fixed_point: rounding, requantization, multipliers, isqrt and the lookup tables."""

import math
from fractions import Fraction

import numpy as np
import pytest

from tflm_mcubert.ops import fixed_point as fp
from tflm_mcubert.ops.quantization import TensorQuant


def exact_requant(acc: int, mult: int, shift: int) -> int:
    """floor(acc * mult / 2^(31 - shift) + 1/2) with rationals: the rule, not the implementation."""
    return math.floor(Fraction(acc * mult, 1 << (31 - shift)) + Fraction(1, 2))


def test_round_shift_right_is_half_up_including_negatives():
    x = np.array([3, -3, 5, -5, 1, -1, 2, -2, 0])
    assert fp.round_shift_right(x, 1).tolist() == [2, -1, 3, -2, 1, 0, 1, -1, 0]
    assert fp.round_shift_right(np.array([7, -7]), 0).tolist() == [7, -7]


def test_requantize_matches_the_exact_rule_at_every_extreme():
    rng = np.random.default_rng(0)
    accs = [0, 1, -1, (1 << 31), -(1 << 31), (1 << 31) - 1, 12345, -12345]
    accs += rng.integers(-(1 << 31), 1 << 31, 200).tolist()
    mults = [0, fp.MULTIPLIER_MIN, fp.INT32_MAX] + rng.integers(fp.MULTIPLIER_MIN, fp.INT32_MAX, 20).tolist()
    shifts = [fp.SHIFT_MIN, -1, 0, 1, fp.SHIFT_MAX] + rng.integers(fp.SHIFT_MIN, fp.SHIFT_MAX, 5).tolist()
    for m in mults:
        for sh in shifts:
            got = fp.requantize(np.array(accs), m, sh).tolist()
            assert got == [exact_requant(a, m, sh) for a in accs], (m, sh)


def test_requantize_rounds_ties_up():
    # multiplier 2^30 with shift 0 is exactly x / 2.
    assert fp.requantize(np.array([1, -1, 3, -3]), 1 << 30, 0).tolist() == [1, 0, 2, -1]


def test_requantize_refuses_accumulators_outside_the_contract():
    with pytest.raises(OverflowError):
        fp.requantize(np.array([(1 << 31) + 1]), fp.MULTIPLIER_MIN, 0)


@pytest.mark.parametrize("scale", [1.0, 0.5, 0.75, 1e-3, 3.3e-7, 2.0**-31, 1000.0, 0.9999999999])
def test_quantize_multiplier_represents_the_scale(scale):
    m, sh = fp.quantize_multiplier(scale)
    assert fp.check_multipliers(m, sh) is None
    assert abs(int(m) * 2.0 ** (int(sh) - 31) - scale) <= scale * 2.0**-30


def test_quantize_multiplier_edges():
    assert [int(v) for v in fp.quantize_multiplier(0.0)] == [0, 0]
    assert [int(v) for v in fp.quantize_multiplier(2.0**-40)] == [0, 0]  # rounds to 0 anyway
    m, sh = fp.quantize_multiplier(1.0 - 2.0**-40)  # mantissa rounds up to 2^31: carry
    assert (int(m), int(sh)) == (1 << 30, 1)
    with pytest.raises(ValueError):
        fp.quantize_multiplier(2.0**31)
    with pytest.raises(ValueError):
        fp.quantize_multiplier(-1.0)


def test_isqrt_is_exact():
    rng = np.random.default_rng(1)
    xs = [0, 1, 2, 3, 4, (1 << 62), (1 << 62) - 1, (1 << 60), (1 << 31) ** 2 - 1]
    for r in rng.integers(1, 1 << 31, 50).tolist():
        xs += [r * r - 1, r * r, r * r + 1]
    xs += rng.integers(0, 1 << 62, 500).tolist()
    xs = [x for x in xs if 0 <= x <= (1 << 62)]
    assert fp.isqrt(np.array(xs, dtype=np.int64)).tolist() == [math.isqrt(x) for x in xs]


def test_bit_length_matches_python():
    rng = np.random.default_rng(2)
    xs = [0, 1, 2, 3, (1 << 62), (1 << 63) - 1] + rng.integers(0, 1 << 62, 200).tolist()
    assert fp.bit_length(np.array(xs, np.int64)).tolist() == [x.bit_length() for x in xs]


def test_exp_lut_starts_at_one_and_follows_exp():
    scale = 0.0625
    lut = fp.build_exp_lut(scale)
    assert lut.dtype == np.int16 and lut[0] == fp.EXP_ONE
    assert np.all(np.diff(lut.astype(int)) <= 0)
    expected = fp.EXP_ONE * np.exp(-np.arange(256) * scale)
    assert np.abs(lut - expected).max() <= 0.5


@pytest.mark.parametrize("name", sorted(fp.ACTIVATIONS))
def test_activation_lut_is_the_float_function_rounded(name):
    fn = fp.ACTIVATIONS[name]
    inq = TensorQuant.asymmetric(-6.0, 5.0)
    real_in = inq.dequantize(np.arange(-128, 128))
    outq = TensorQuant.observe(fn(real_in), symmetric=False)
    lut = fp.build_activation_lut(fn, inq.scale, inq.zero_point, outq.scale, outq.zero_point)
    ideal = fn(real_in) / outq.scale + outq.zero_point
    assert np.abs(lut - ideal).max() <= 0.5 + 1e-9  # never saturates: range was observed
    assert np.abs(outq.dequantize(lut) - fn(real_in)).max() <= outq.scale / 2 + 1e-12


def test_gelu_matches_known_values():
    assert fp.gelu_erf(np.array([0.0, 1.0, -1.0])) == pytest.approx([0.0, 0.8413447, -0.1586553], abs=1e-6)
    assert fp.gelu_tanh(np.array([1.0])) == pytest.approx([0.8411920], abs=1e-6)


def test_inverse_sqrt_has_thirty_significant_bits():
    rng = np.random.default_rng(3)
    xs = [1, 2, 3, (1 << 51), (1 << 62) - 1] + rng.integers(1, 1 << 62, 300).tolist()
    inv, e = fp.inverse_sqrt(np.array(xs, np.int64))
    for x, i, k in zip(xs, inv.tolist(), e.tolist()):
        r = math.isqrt(x << (2 * k))
        assert (1 << 60) <= x << (2 * k) < (1 << 62) and i == (1 << 60) // r
        assert abs(i * 2.0 ** (k - 60) * math.sqrt(x) - 1) < 2.0**-28
