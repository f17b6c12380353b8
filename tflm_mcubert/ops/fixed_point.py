"""Integer arithmetic shared by every MCUBERT op — the single definition the C kernels reproduce.

Rounding rule (everywhere a result is shifted right): round half up, i.e. floor(x / 2^n + 1/2),
computed as (x + 2^(n-1)) >> n with an arithmetic (flooring) shift. It is the rule of TFLite's and
CMSIS-NN's single-rounding requantization (TFLITE_SINGLE_ROUNDING / CMSIS_NN_USE_SINGLE_ROUNDING), costs
one add, and has no sign-dependent branch. Every function here is exact integer math on int64; bounds
in the docstrings say why nothing overflows. Floats appear only in the offline builders at the bottom
(`quantize_multiplier`, the LUT builders), whose integer outputs are what the ops consume.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

INT8_MIN, INT8_MAX = -128, 127
INT16_MIN, INT16_MAX = -32768, 32767
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1

# Requantization multipliers are Q31 in [0.5, 1): [2^30, 2^31). Zero encodes a zero scale.
MULTIPLIER_MIN = 1 << 30
SHIFT_MIN, SHIFT_MAX = -31, 30

# exp LUT: entry k holds EXP_ONE * exp(-k * score_scale); EXP_ONE = 2^14 keeps sum(e * v) over up to
# 1024 keys inside int32 (2^14 * 128 * 1024 = 2^31, and v >= -128 makes the bound reachable only at -2^31).
EXP_ONE = 1 << 14
LUT_SIZE = 256


def round_shift_right(x, n):
    """floor(x / 2^n + 1/2) for n >= 1, and x for n == 0. x: int64 array; n: int or int array >= 0."""
    x = np.asarray(x, dtype=np.int64)
    n = np.asarray(n, dtype=np.int64)
    if np.any(n < 0) or np.any(n > 62):
        raise ValueError("round_shift_right: shift must be in [0, 62]")
    half = np.where(n > 0, np.left_shift(np.int64(1), np.maximum(n - 1, 0)), 0)
    return np.right_shift(x + half, n)


def int_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Exact integer a @ b as int64, through float64 BLAS.

    Exact because every operand and every partial sum is an integer below 2^53 in magnitude (our
    largest: 1024 * 2^14 * 128 = 2^31), and float64 adds integers that small without rounding, in any
    order. numpy's own integer matmul is not BLAS-backed and is ~50x slower.
    """
    return (np.asarray(a, dtype=np.float64) @ np.asarray(b, dtype=np.float64)).astype(np.int64)


def requantize(acc, multiplier, shift):
    """round(acc * multiplier * 2^(shift - 31)) with a single half-up rounding, as an exact int64.

        total = 31 - shift            (1 <= total <= 62 because shift is in [-31, 30])
        result = (acc * multiplier + 2^(total - 1)) >> total

    Preconditions (checked): |acc| <= 2^31, multiplier in {0} U [2^30, 2^31). Then |acc * multiplier|
    < 2^62 and the rounding term <= 2^61, so the int64 sum cannot overflow. The result is NOT clamped:
    each caller clamps to its output type (a C kernel may saturate it to int32 first — every clamp
    range we use lies inside int32, so the final value is the same).
    """
    acc = np.asarray(acc, dtype=np.int64)
    multiplier = np.asarray(multiplier, dtype=np.int64)
    shift = np.asarray(shift, dtype=np.int64)
    if acc.size and int(np.abs(acc).max()) > (1 << 31):
        raise OverflowError("requantize: accumulator outside int32 — a bound in ops/SPEC.md was violated")
    total = 31 - shift
    return np.right_shift(acc * multiplier + np.left_shift(np.int64(1), total - 1), total)


WIDE_ACC_BITS = 47  # |acc| < 2^47 in requantize_wide
WIDE_SHIFT_MAX = 14


def requantize_wide(acc, multiplier, shift):
    """round(acc * multiplier * 2^(shift - 31)) for a 48-bit accumulator, with the multiplier's top 16 bits:

        m16    = (multiplier + 2^15) >> 16       in [2^14, 2^15] (0 for a zero multiplier)
        total  = 15 - shift                      (1 <= total <= 46 because shift is in [-31, 14])
        result = (acc * m16 + 2^(total - 1)) >> total

    Preconditions (checked): |acc| < 2^47, shift <= 14. Then |acc * m16| < 2^62 and the rounding term
    <= 2^45, so the int64 sum cannot overflow. 15 bits of multiplier are what a 64-bit product leaves
    (TFLite's 16x8 ops requantize int64 accumulators the same way). Not clamped, as requantize.
    """
    acc = np.asarray(acc, dtype=np.int64)
    shift = np.asarray(shift, dtype=np.int64)
    if acc.size and int(np.abs(acc).max()) >= (1 << WIDE_ACC_BITS):
        raise OverflowError("requantize_wide: accumulator outside 48 bits — a bound in ops/SPEC.md was violated")
    if shift.size and int(shift.max()) > WIDE_SHIFT_MAX:
        raise ValueError(f"requantize_wide: shift must be <= {WIDE_SHIFT_MAX}")
    m16 = np.right_shift(np.asarray(multiplier, dtype=np.int64) + (1 << 15), 16)
    total = 15 - shift
    return np.right_shift(acc * m16 + np.left_shift(np.int64(1), total - 1), total)


def saturate(x, lo: int, hi: int, dtype) -> np.ndarray:
    return np.clip(x, lo, hi).astype(dtype)


def bit_length(x) -> np.ndarray:
    """Number of bits of each non-negative int64 (0 -> 0), like int.bit_length(); exact (no float)."""
    v = np.asarray(x, dtype=np.int64).copy()
    if v.size and int(v.min()) < 0:
        raise ValueError("bit_length: negative input")
    bits = np.zeros(v.shape, dtype=np.int64)
    for step in (32, 16, 8, 4, 2, 1):
        big = v >= (np.int64(1) << step)
        v = np.where(big, v >> step, v)
        bits += np.where(big, step, 0)
    return bits + (v > 0)


def isqrt(x) -> np.ndarray:
    """floor(sqrt(x)) for int64 x in [0, 2^62], exactly.

    The contract is the mathematical function, so any exact method in C (digit-by-digit, Newton with a
    final correction) matches byte for byte. Here: a float64 estimate, then integer corrections (the
    estimate is within 2 of the answer, and r <= 2^31 keeps (r + 1)^2 inside int64).
    """
    x = np.asarray(x, dtype=np.int64)
    if x.size and (int(x.min()) < 0 or int(x.max()) > (1 << 62)):
        raise ValueError("isqrt: input outside [0, 2^62]")
    r = np.floor(np.sqrt(x.astype(np.float64))).astype(np.int64)
    r = np.minimum(r, np.int64(1) << 31)
    for _ in range(4):
        r = np.where(r * r > x, r - 1, r)
        r = np.where((r + 1) * (r + 1) <= x, r + 1, r)
    if np.any(r * r > x) or np.any((r + 1) * (r + 1) <= x):  # pragma: no cover - would be a numpy bug
        raise ArithmeticError("isqrt: correction did not converge")
    return r


INV_SQRT_BITS = 60


def inverse_sqrt(x):
    """(inv, e) with inv * 2^e / 2^60 ~= 1 / sqrt(x), for int64 x in [1, 2^62); exact integer steps:

        e   = (62 - bit_length(x)) >> 1        so x << 2e lies in [2^60, 2^62)
        r   = isqrt(x << 2e)                   in [2^30, 2^31)
        inv = floor(2^60 / r)                  in (2^29, 2^30]

    Normalizing first gives 30 significant bits whatever the magnitude of x. For x == 0 the
    result is (2^30, 0) — callers define what a zero variance means (LayerNorm: output beta).
    """
    x = np.asarray(x, dtype=np.int64)
    if x.size and (int(x.min()) < 0 or int(x.max()) >= (1 << 62)):
        raise ValueError("inverse_sqrt: input outside [0, 2^62)")
    e = np.where(x > 0, (62 - bit_length(x)) >> 1, 0)
    r = isqrt(np.where(x > 0, x << (2 * e), 1 << 60))
    return (np.int64(1) << INV_SQRT_BITS) // r, e


# ---------------------------------------------------------------------------------------------
# Offline builders (float in, integers out). Their outputs are op parameters, so the kernels never
# depend on how these floats were rounded — only on the integers stored in the model.
# ---------------------------------------------------------------------------------------------


def round_half_up(x) -> np.ndarray:
    """Deterministic float rounding for the offline builders (numpy's np.round is half-to-even)."""
    return np.floor(np.asarray(x, dtype=np.float64) + 0.5)


def quantize_multiplier(real_scale):
    """Real scale(s) >= 0 -> (multiplier int32, shift int32) with scale ~= multiplier * 2^(shift - 31).

    Scales below 2^-32 become (0, 0): requantize then yields 0, which is what any |acc| <= 2^31 times
    such a scale rounds to anyway. Scales >= 2^30 are refused (no layer of ours needs them).
    """
    real = np.asarray(real_scale, dtype=np.float64)
    if np.any(~np.isfinite(real)) or np.any(real < 0):
        raise ValueError("quantize_multiplier: scales must be finite and >= 0")
    frac, exp = np.frexp(real)  # real = frac * 2^exp, frac in [0.5, 1)
    mult = round_half_up(frac * 2.0**31).astype(np.int64)
    carry = mult == (1 << 31)
    mult = np.where(carry, 1 << 30, mult)
    exp = np.where(carry, exp + 1, exp).astype(np.int64)
    if np.any((exp > SHIFT_MAX) & (real > 0)):
        raise ValueError("quantize_multiplier: scale >= 2^30 is not representable")
    tiny = (real == 0) | (exp < SHIFT_MIN)
    mult = np.where(tiny, 0, mult).astype(np.int32)
    shift = np.where(tiny, 0, exp).astype(np.int32)
    return mult, shift


def check_multipliers(multiplier: np.ndarray, shift: np.ndarray) -> str | None:
    """None when every (multiplier, shift) pair is valid, else a description of the first bad one."""
    m = np.asarray(multiplier, dtype=np.int64)
    s = np.asarray(shift, dtype=np.int64)
    bad_m = (m != 0) & ((m < MULTIPLIER_MIN) | (m > INT32_MAX))
    if np.any(bad_m):
        return f"multiplier {int(m[bad_m].flat[0])} is neither 0 nor in [2^30, 2^31)"
    bad_s = (s < SHIFT_MIN) | (s > SHIFT_MAX)
    if np.any(bad_s):
        return f"shift {int(s[bad_s].flat[0])} is outside [{SHIFT_MIN}, {SHIFT_MAX}]"
    return None


def build_exp_lut(score_scale: float) -> np.ndarray:
    """int16[256]: entry k = round(EXP_ONE * exp(-k * score_scale)), k = rowmax - score in int8 units."""
    if not (math.isfinite(score_scale) and score_scale > 0):
        raise ValueError(f"build_exp_lut: score scale must be > 0, got {score_scale!r}")
    k = np.arange(LUT_SIZE, dtype=np.float64)
    return round_half_up(EXP_ONE * np.exp(-k * score_scale)).astype(np.int16)


def build_activation_lut(
    fn: Callable[[np.ndarray], np.ndarray], in_scale: float, in_zero_point: int, out_scale: float, out_zero_point: int
) -> np.ndarray:
    """int8[256] mapping every int8 input q (entry q + 128) to the requantized fn(real(q)).

    The table *is* the specification of the activation: kernels index it, nothing else.
    """
    q = np.arange(INT8_MIN, INT8_MAX + 1, dtype=np.float64)
    y = fn(in_scale * (q - in_zero_point))
    return saturate(round_half_up(y / out_scale) + out_zero_point, INT8_MIN, INT8_MAX, np.int8)


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def gelu_erf(x):
    x = np.asarray(x, dtype=np.float64)
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def gelu_tanh(x):
    x = np.asarray(x, dtype=np.float64)
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def relu(x):
    return np.maximum(np.asarray(x, dtype=np.float64), 0.0)


# Hugging Face `hidden_act` names -> float activation (offline only: it becomes a LUT).
ACTIVATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "gelu": gelu_erf,
    "gelu_new": gelu_tanh,
    "gelu_pytorch_tanh": gelu_tanh,
    "relu": relu,
}
