"""Quantized linear layers: the packed weight layout, per-channel parameters, and exact int matmul.

Packed weight layout ("pair4"), for a weight W[N out, K in] of int8:

    packed[p, b, c, k] = W[2p + c, 4b + k]      p < ceil(N/2), b < ceil(K/4), c < 2, k < 4

flattened row-major, zero where 2p + c >= N or 4b + k >= K. So each 8-byte group holds four
consecutive K values of output channel 2p followed by the same four of channel 2p + 1: exactly the
operands of one step of the 4x2x4 SMLAD micro-kernel (2 output channels x 4 K), read through a single
advancing pointer (two word loads, or one LDRD). The activations, not the weights, are reordered for
SXTB16, so the weight bytes stay in natural K order. Padding bytes must be zero (checked on unpack):
the kernel may run the padded K tail through the same SMLADs.

Per-channel parameters of a linear layer: int32[N, 3] rows (bias, multiplier, shift), bias with the
input zero point already folded in (bias - zp_in * sum_k W[c, k]), so every kernel computes

    acc[c] = bias[c] + sum_k x[k] * W[c, k]        (int32: see ACC bounds below)
    out[c] = requantize(acc[c], multiplier[c], shift[c])   then clamp / add as the op defines.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from tflm_mcubert.ops.fixed_point import (
    INT32_MAX,
    check_multipliers,
    quantize_multiplier,
    requantize,
    round_half_up,
)
from tflm_mcubert.ops.quantization import TensorQuant
from tflm_mcubert.ops.validation import OpSpecError, check_array

PACK_CHANNELS = 2  # output channels per group (the micro-kernel's N)
PACK_DEPTH = 4  # K values per channel per group (one SMLAD pair of pairs)
WEIGHT_MAX = 127  # symmetric int8 weights: [-127, 127], as TFLite's int8 per-channel spec
MAX_IN_FEATURES = 4096
# |bias| <= 2^30 and |sum x*w| <= 4096 * 128 * 127 < 2^26 keep every accumulator inside int32.
BIAS_LIMIT = 1 << 30


def packed_size(out_features: int, in_features: int) -> int:
    pairs = -(-out_features // PACK_CHANNELS)
    blocks = -(-in_features // PACK_DEPTH)
    return pairs * blocks * PACK_CHANNELS * PACK_DEPTH


def pack_weights(weight: np.ndarray) -> np.ndarray:
    """int8[N, K] -> int8[packed_size(N, K)] in the pair4 layout."""
    if weight.dtype != np.int8 or weight.ndim != 2:
        raise ValueError("pack_weights: expected an int8 [N, K] matrix")
    n, k = weight.shape
    pairs, blocks = -(-n // PACK_CHANNELS), -(-k // PACK_DEPTH)
    padded = np.zeros((pairs * PACK_CHANNELS, blocks * PACK_DEPTH), dtype=np.int8)
    padded[:n, :k] = weight
    grouped = padded.reshape(pairs, PACK_CHANNELS, blocks, PACK_DEPTH).transpose(0, 2, 1, 3)
    return np.ascontiguousarray(grouped).reshape(-1)


def unpack_weights(
    packed: np.ndarray, out_features: int, in_features: int, *, op: str = "pack", field: str = "weights"
) -> np.ndarray:
    """Inverse of pack_weights; refuses a wrong size or non-zero padding."""
    check_array(op, field, packed, np.int8, (packed_size(out_features, in_features),))
    pairs, blocks = -(-out_features // PACK_CHANNELS), -(-in_features // PACK_DEPTH)
    grouped = packed.reshape(pairs, blocks, PACK_CHANNELS, PACK_DEPTH).transpose(0, 2, 1, 3)
    padded = grouped.reshape(pairs * PACK_CHANNELS, blocks * PACK_DEPTH)
    if np.any(padded[out_features:]) or np.any(padded[:, in_features:]):
        raise OpSpecError(op, field, "padding bytes of the pair4 layout must be zero")
    return np.ascontiguousarray(padded[:out_features, :in_features])


def int_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Exact integer a @ b as int64, through float64 BLAS.

    Exact because every operand and every partial sum is an integer below 2^53 in magnitude (our
    largest: 1024 * 2^14 * 128 = 2^31), and float64 adds integers that small without rounding, in any
    order. numpy's own integer matmul is not BLAS-backed and is ~50x slower.
    """
    return (np.asarray(a, dtype=np.float64) @ np.asarray(b, dtype=np.float64)).astype(np.int64)


@dataclasses.dataclass(frozen=True, eq=False)
class Linear:
    """One quantized linear layer as serialized: pair4-packed weights + int32[N, 3] channel rows."""

    in_features: int
    out_features: int
    packed_weights: np.ndarray  # int8[packed_size(N, K)]
    channels: np.ndarray  # int32[N, 3]: bias, multiplier, shift

    def validate(self, op: str, field: str) -> "Linear":
        if not 1 <= self.in_features <= MAX_IN_FEATURES:
            raise OpSpecError(op, f"{field}.in_features", f"{self.in_features} is outside [1, {MAX_IN_FEATURES}]")
        check_array(op, f"{field}.channels", self.channels, np.int32, (self.out_features, 3))
        bias = self.channels[:, 0].astype(np.int64)
        if np.any(np.abs(bias) > BIAS_LIMIT):
            raise OpSpecError(op, f"{field}.channels", "bias exceeds +-2^30 (accumulator bound)")
        problem = check_multipliers(self.channels[:, 1], self.channels[:, 2])
        if problem:
            raise OpSpecError(op, f"{field}.channels", problem)
        weight = unpack_weights(
            self.packed_weights, self.out_features, self.in_features, op=op, field=f"{field}.weights"
        )
        if weight.size and int(weight.min()) < -WEIGHT_MAX:
            raise OpSpecError(op, f"{field}.weights", "weights must be in [-127, 127] (symmetric int8)")
        return self

    @functools.cached_property
    def weight(self) -> np.ndarray:
        """int8[N, K], unpacked (the reference computes from this; the model stores the packed form)."""
        return unpack_weights(self.packed_weights, self.out_features, self.in_features)

    @functools.cached_property
    def _weight_t(self) -> np.ndarray:
        return np.ascontiguousarray(self.weight.T, dtype=np.float64)

    def accumulate(self, x: np.ndarray, columns: slice = slice(None)) -> np.ndarray:
        """int64[n, |columns|]: bias + x @ W[columns].T for int8 x[n, K] (all int32-bounded)."""
        acc = int_matmul(x, self._weight_t[:, columns])
        return acc + self.channels[columns, 0]

    def requantized(self, x: np.ndarray, columns: slice = slice(None)) -> np.ndarray:
        """The unclamped requantized outputs of the given output channels (int64)."""
        ch = self.channels[columns]
        return requantize(self.accumulate(x, columns), ch[:, 1], ch[:, 2])

    @classmethod
    def from_float(
        cls, weight: np.ndarray, bias: np.ndarray, input_quant: TensorQuant, output_scale: float
    ) -> "Linear":
        """Quantize a float layer y = x W^T + b: per-channel symmetric weights, bias in acc units.

        A per-channel input quantization folds into the weights (column k scaled by s_in[k], input
        scale 1) before they are quantized per output channel, and its zero points into the bias."""
        weight = np.asarray(weight, dtype=np.float64)
        bias = np.asarray(bias, dtype=np.float64)
        n, k = weight.shape
        in_scale, in_zero = input_quant.scale, input_quant.zero_point
        if input_quant.per_channel:
            weight, in_scale = weight * input_quant.scale[None, :], 1.0
        max_abs = np.abs(weight).max(axis=1)
        w_scale = np.where(max_abs > 0, max_abs / WEIGHT_MAX, 1.0)
        w_q = np.clip(round_half_up(weight / w_scale[:, None]), -WEIGHT_MAX, WEIGHT_MAX).astype(np.int8)
        acc_scale = in_scale * w_scale
        bias_q = round_half_up(bias / acc_scale).astype(np.int64)
        if input_quant.per_channel:
            bias_q -= w_q.astype(np.int64) @ in_zero
        else:
            bias_q -= in_zero * w_q.astype(np.int64).sum(axis=1)
        if np.any(np.abs(bias_q) > BIAS_LIMIT):
            raise ValueError(
                "Linear.from_float: bias does not fit +-2^30 accumulator units (input scale too small for this bias)"
            )
        mult, shift = quantize_multiplier(acc_scale / output_scale)
        channels = np.stack([bias_q, mult, shift], axis=1).astype(np.int32)
        assert int(np.abs(channels).max()) <= INT32_MAX
        return cls(k, n, pack_weights(w_q), channels)
