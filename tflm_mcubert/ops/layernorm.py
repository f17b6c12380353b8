"""Integer LayerNorm, shared by all three ops (each ends in one).

Input: rows z[d] of int16, d <= 1024 (the pre-norm sum, in any scale: LayerNorm is scale invariant
except for eps, which is given in the same integer units). Parameters: int32[d, 2] rows
(gamma_q, beta_q) in Q16 output units, i.e. gamma_q = round(gamma / s_out * 2^16) and
beta_q = round((beta / s_out + zp_out) * 2^16); and eps_q = round(eps * d^2 / s_z^2).

Per row, exactly (no mean is rounded: the sums are exact and the mean never materialises):

    S1 = sum z                          |S1| <= 2^25                     int32
    S2 = sum z^2                        S2 <= 2^40                       int64 (SMLALD)
    D  = d*S2 - S1^2 + eps_q            0 <= D <= 2^51  (= d^2 * (var + eps))   int64
    if D == 0: n_q[c] = 0 for all c     (constant row, eps_q = 0: every d*z - S1 is 0 anyway)
    else:
      (inv, e) = inverse_sqrt(D)        fixed_point.py: e = (62 - bit_length(D)) >> 1 in [5, 30],
                                        r = isqrt(D << 2e) in [2^30, 2^31), inv = floor(2^60 / r)
                                        in (2^29, 2^30]   (one 64/32 division per row)
      num = d*z[c] - S1                 |num| <= 2^26
      n_q = (num*inv + 2^(33-e)) >> (34-e)      normalized value in Q26; |n_q| < 2^31
    out[c] = clamp_int8((n_q*gamma_q[c] + (beta_q[c] << 26) + 2^41) >> 42)

Products: num*inv < 2^56, n_q*gamma_q < 2^62, beta_q << 26 < 2^57: all int64-safe, and each is a
32x32->64 multiply (SMULL) on Cortex-M. |n_q| < 2^31 because |normalized| <= sqrt(d - 1) < 32.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tflm_mcubert.ops.fixed_point import (
    INT8_MAX,
    INT8_MIN,
    INT16_MAX,
    INT16_MIN,
    INT32_MAX,
    INT32_MIN,
    INV_SQRT_BITS,
    inverse_sqrt,
    round_half_up,
    round_shift_right,
    saturate,
)
from tflm_mcubert.ops.quantization import TensorQuant
from tflm_mcubert.ops.validation import OpSpecError, check_array, check_int

MAX_DIM = 1024
NORM_FRAC_BITS = 26  # n_q: normalized value in Q26
PARAM_FRAC_BITS = 16  # gamma_q, beta_q: Q16 output LSBs
OUTPUT_SHIFT = NORM_FRAC_BITS + PARAM_FRAC_BITS  # 42
EPS_MAX = 1 << 50


@dataclasses.dataclass(frozen=True, eq=False)
class LayerNormParams:
    table: np.ndarray  # int32[d, 2]: gamma_q, beta_q (Q16 output units, zero point folded into beta)
    eps: int  # eps_q = round(eps * d^2 / s_z^2), in [0, 2^50]

    @property
    def dim(self) -> int:
        return int(self.table.shape[0])

    def validate(self, op: str, field: str, dim: int) -> "LayerNormParams":
        check_array(op, f"{field}.table", self.table, np.int32, (dim, 2))
        check_int(op, f"{field}.eps", self.eps, 0, EPS_MAX)
        return self

    @classmethod
    def from_float(
        cls, gamma: np.ndarray, beta: np.ndarray, eps: float, input_scale: float, output: TensorQuant
    ) -> "LayerNormParams":
        gamma = np.asarray(gamma, dtype=np.float64)
        beta = np.asarray(beta, dtype=np.float64)
        d = gamma.shape[0]
        one = float(1 << PARAM_FRAC_BITS)
        gamma_q = round_half_up(gamma / output.scale * one)
        beta_q = round_half_up((beta / output.scale + output.zero_point) * one)
        if np.any(np.abs(gamma_q) > INT32_MAX) or np.any(np.abs(beta_q) > INT32_MAX):
            raise ValueError("LayerNormParams.from_float: |gamma| or |beta| / output scale >= 2^15")
        eps_q = int(min(round_half_up(eps * d * d / input_scale**2), EPS_MAX))
        return cls(np.stack([gamma_q, beta_q], axis=1).astype(np.int32), eps_q)


def layer_norm(z: np.ndarray, params: LayerNormParams) -> np.ndarray:
    """int16[n, d] -> int8[n, d], the exact integer algorithm of the module docstring."""
    if z.dtype != np.int16 or z.ndim != 2 or z.shape[1] != params.dim:
        raise ValueError("layer_norm: expected int16[n, d] matching the parameters")
    d = z.shape[1]
    z64 = z.astype(np.int64)
    s1 = z64.sum(axis=1)
    s2 = (z64 * z64).sum(axis=1)
    big_d = d * s2 - s1 * s1 + params.eps
    nonzero = big_d > 0
    inv, e = inverse_sqrt(big_d)
    num = d * z64 - s1[:, None]
    n_q = round_shift_right(num * inv[:, None], (INV_SQRT_BITS - NORM_FRAC_BITS - e)[:, None])
    n_q = np.where(nonzero[:, None], n_q, 0)
    assert n_q.size == 0 or (INT32_MIN < int(n_q.min()) and int(n_q.max()) < INT32_MAX)
    gamma = params.table[:, 0].astype(np.int64)
    beta = params.table[:, 1].astype(np.int64)
    out = round_shift_right(n_q * gamma + (beta << NORM_FRAC_BITS), OUTPUT_SHIFT)
    return saturate(out, INT8_MIN, INT8_MAX, np.int8)


def residual_sum(projected: np.ndarray, residual: np.ndarray, channels: np.ndarray) -> np.ndarray:
    """z = clamp_int16(projected + ((x[c] - zp[c]) << R[c])): the pre-norm sum of attention and MLP.

    `channels`: int32[d, 2] rows (zp[c], R[c]) of the incoming hidden state, whose channel c has
    scale s_z * 2^R[c]. `projected` is the unclamped requantized output (int64) already in z units.
    Clamping the int64 sum equals clamping after saturating `projected` to int32 first (|residual
    term| <= 255 * 2^7 < 2^15), so a kernel may keep `projected` in int32.
    """
    zero_point = channels[:, 0].astype(np.int64)
    shift = channels[:, 1].astype(np.int64)
    shifted = (residual.astype(np.int64) - zero_point) << shift
    return saturate(projected + shifted, INT16_MIN, INT16_MAX, np.int16)


def residual_out(z: np.ndarray, channels: np.ndarray) -> np.ndarray:
    """A decoder's residual stream back to int8 (SPEC 4.6): x'[c] = clamp_int8(rsh(z[c], R'[c]) + zp'[c]),
    rounding half up, with `channels` int32[d, 2] rows (zp'[c], R'[c]): the value's scale is s_z * 2^R'."""
    shifted = round_shift_right(z.astype(np.int64), channels[:, 1].astype(np.int64))
    return saturate(shifted + channels[:, 0], INT8_MIN, INT8_MAX, np.int8)


def check_residual(op: str, field: str, channels: np.ndarray, d: int) -> np.ndarray:
    check_array(op, field, channels, np.int32, (d, 2))
    for column, name, lo, hi in ((0, "zero point", INT8_MIN, INT8_MAX), (1, "shift", 0, MAX_RESIDUAL_SHIFT)):
        values = channels[:, column]
        bad = np.flatnonzero((values < lo) | (values > hi))
        if bad.size:
            raise OpSpecError(op, field, f"channel {int(bad[0])}: {name} {int(values[bad[0]])} is outside [{lo}, {hi}]")
    return channels


def check_dim(op: str, field: str, d: int) -> int:
    if not 1 <= d <= MAX_DIM:
        raise OpSpecError(op, field, f"LayerNorm dimension {d} is outside [1, {MAX_DIM}]")
    return d


def float_layer_norm(z: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    """The float LayerNorm the integer one approximates (offline calibration and tests)."""
    z = np.asarray(z, dtype=np.float64)
    mean = z.mean(axis=-1, keepdims=True)
    var = ((z - mean) ** 2).mean(axis=-1, keepdims=True)
    return (z - mean) / np.sqrt(var + eps) * gamma + beta


# The pre-norm sum is sized so that the calibrated maximum lands here, leaving headroom below 32767.
Z_HEADROOM_TARGET = 24000
MAX_RESIDUAL_SHIFT = 7  # (x - zp) << 7 <= 255 * 128 still fits int16


def choose_residual_shift(input_scale: float, z_max_abs: float, max_shift: int = MAX_RESIDUAL_SHIFT) -> int:
    """Largest R in [0, max_shift] with z_max / (s_x / 2^R) <= Z_HEADROOM_TARGET (more R = finer z)."""
    for shift in range(max_shift, 0, -1):
        if z_max_abs * (1 << shift) / input_scale <= Z_HEADROOM_TARGET:
            return shift
    return 0


def residual_channels(input_quant: TensorQuant, z_max_abs: float, d: int) -> tuple[np.ndarray, float]:
    """(int32[d, 2] rows (zp[c], R[c]), s_z) of the pre-norm sum for a hidden state `input_quant`.

    Channel scales must be power-of-two multiples of the smallest one, base * 2^k[c] (per tensor:
    k = 0). s_z = base / 2^R0 with R0 the largest in [0, 7 - max k] keeping the calibrated z peak
    under Z_HEADROOM_TARGET; R[c] = R0 + k[c].
    """
    scale = np.broadcast_to(np.asarray(input_quant.scale, np.float64), (d,))
    zero_point = np.broadcast_to(np.asarray(input_quant.zero_point, np.int64), (d,))
    base = float(scale.min())
    k = np.rint(np.log2(scale / base)).astype(np.int64)
    if np.any(scale != base * np.exp2(k)) or int(k.max()) > MAX_RESIDUAL_SHIFT:
        raise ValueError("residual_channels: hidden-state channel scales must be base * 2^k, k in [0, 7]")
    r0 = choose_residual_shift(base, z_max_abs, MAX_RESIDUAL_SHIFT - int(k.max()))
    channels = np.stack([zero_point, k + r0], axis=1).astype(np.int32)
    return channels, base / (1 << r0)


def hidden_quant(lo: np.ndarray, hi: np.ndarray, z_max_abs: float | None) -> TensorQuant:
    """Per-channel asymmetric int8 quantization of a hidden state (channel ranges [lo, hi]).

    With `z_max_abs` (the consuming attention/MLP's calibrated pre-norm peak) the channel scales are
    s_z * 2^k[c], k[c] in [0, 7], s_z = max(z peak / Z_HEADROOM_TARGET, widest channel step / 2^7):
    the smallest power-of-two multiple covering each channel's range, so the residual is an exact
    per-channel shift (residual_channels). Without (the model's last hidden state), free scales.
    """
    lo = np.minimum(np.asarray(lo, np.float64), 0.0)
    hi = np.maximum(np.asarray(hi, np.float64), 0.0)
    desired = np.where(hi > lo, hi - lo, 1.0) / (INT8_MAX - INT8_MIN)
    if z_max_abs is not None:
        base = max(z_max_abs / Z_HEADROOM_TARGET, float(desired.max()) / (1 << MAX_RESIDUAL_SHIFT))
        k = np.clip(np.ceil(np.log2(desired / base) - 1e-12), 0, MAX_RESIDUAL_SHIFT)
        desired = base * np.exp2(k)
    zero_point = np.clip(round_half_up(INT8_MIN - lo / desired), INT8_MIN, INT8_MAX).astype(np.int64)
    return TensorQuant(desired, zero_point)
