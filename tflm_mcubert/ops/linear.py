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

A layer stores its weights at one of two widths (`weight_bits`, SPEC.md 3.1.1): 8 = int8 in pair4, 4 =
int4 in [-7, 7] in the "w4row" layout (ops/linear_int4.py), the same bytes viewed as int8. Either way
`weight` is the unpacked int8 matrix and the arithmetic above is unchanged.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from tflm_mcubert.ops.fixed_point import (
    INT32_MAX,
    check_multipliers,
    int_matmul,
    quantize_multiplier,
    requantize,
    round_half_up,
)
from tflm_mcubert.ops.linear_int4 import (
    WEIGHT4_MAX,
    pack_weights_int4,
    packed_size_int4,
    unpack_weights_int4,
)
from tflm_mcubert.ops.quantization import TensorQuant
from tflm_mcubert.ops.validation import OpSpecError, check_array, check_int

PACK_CHANNELS = 2  # output channels per group (the micro-kernel's N)
PACK_DEPTH = 4  # K values per channel per group (one SMLAD pair of pairs)
WEIGHT_MAX = 127  # symmetric int8 weights: [-127, 127], as TFLite's int8 per-channel spec
WEIGHT_BITS = (4, 8)  # storage widths: 4 = w4row int4 in [-7, 7], 8 = pair4 int8
MAX_IN_FEATURES = 4096
# |bias| <= 2^30 and |sum x*w| <= 4096 * 128 * 127 < 2^26 keep every accumulator inside int32.
BIAS_LIMIT = 1 << 30


def packed_size(out_features: int, in_features: int) -> int:
    pairs = -(-out_features // PACK_CHANNELS)
    blocks = -(-in_features // PACK_DEPTH)
    return pairs * blocks * PACK_CHANNELS * PACK_DEPTH


def stored_size(out_features: int, in_features: int, weight_bits: int = 8) -> int:
    """Bytes of an [N, K] layer's packed weights at `weight_bits` (pair4 for 8, w4row for 4)."""
    return packed_size(out_features, in_features) if weight_bits == 8 else packed_size_int4(out_features, in_features)


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


@dataclasses.dataclass(frozen=True, eq=False)
class Linear:
    """One quantized linear layer as serialized: packed weights + int32[N, 3] channel rows."""

    in_features: int
    out_features: int
    packed_weights: np.ndarray  # int8[stored_size(N, K, weight_bits)]: pair4 (8) or w4row bytes (4)
    channels: np.ndarray  # int32[N, 3]: bias, multiplier, shift
    weight_bits: int = 8

    def validate(self, op: str, field: str) -> "Linear":
        if not 1 <= self.in_features <= MAX_IN_FEATURES:
            raise OpSpecError(op, f"{field}.in_features", f"{self.in_features} is outside [1, {MAX_IN_FEATURES}]")
        if self.weight_bits not in WEIGHT_BITS:
            raise OpSpecError(op, "weight_bits", f"{self.weight_bits} is not a weight width (4: packed int4, 8: int8)")
        check_array(op, f"{field}.channels", self.channels, np.int32, (self.out_features, 3))
        bias = self.channels[:, 0].astype(np.int64)
        if np.any(np.abs(bias) > BIAS_LIMIT):
            raise OpSpecError(op, f"{field}.channels", "bias exceeds +-2^30 (accumulator bound)")
        problem = check_multipliers(self.channels[:, 1], self.channels[:, 2])
        if problem:
            raise OpSpecError(op, f"{field}.channels", problem)
        weight = self._unpack(op, f"{field}.weights")
        if self.weight_bits == 8 and weight.size and int(weight.min()) < -WEIGHT_MAX:
            raise OpSpecError(op, f"{field}.weights", "weights must be in [-127, 127] (symmetric int8)")
        return self

    def _unpack(self, op: str = "pack", field: str = "weights") -> np.ndarray:
        n, k = self.out_features, self.in_features
        if self.weight_bits == 8:
            return unpack_weights(self.packed_weights, n, k, op=op, field=field)
        stored = check_array(op, field, self.packed_weights, np.int8, (packed_size_int4(n, k),))
        return unpack_weights_int4(stored.view(np.uint8), n, k, op=op, field=field)

    @functools.cached_property
    def weight(self) -> np.ndarray:
        """int8[N, K], unpacked (the reference computes from this; the model stores the packed form)."""
        return self._unpack()

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
        cls,
        weight: np.ndarray,
        bias: np.ndarray,
        input_quant: TensorQuant,
        output_scale: float,
        weight_bits: int = 8,
    ) -> "Linear":
        """Quantize a float layer y = x W^T + b: per-channel symmetric weights, bias in acc units.

        `weight_bits` 8: int8 in [-127, 127] (pair4), scale max|w| / 127 per output channel; 4: int4 in
        [-7, 7] (w4row), scale a max|w| / 7 with the clip ratio a per channel chosen by MSE
        (int4_clip_ratios; SPEC.md 3.1.1).
        A per-channel input quantization folds into the weights (column k scaled by s_in[k], input
        scale 1) before they are quantized per output channel, and its zero points into the bias."""
        if weight_bits not in WEIGHT_BITS:
            raise ValueError(f"Linear.from_float: weight_bits {weight_bits!r} (choose 4 or 8)")
        weight = np.asarray(weight, dtype=np.float64)
        bias = np.asarray(bias, dtype=np.float64)
        n, k = weight.shape
        in_scale, in_zero = input_quant.scale, input_quant.zero_point
        if input_quant.per_channel:
            weight, in_scale = weight * input_quant.scale[None, :], 1.0
        w_max = WEIGHT_MAX if weight_bits == 8 else WEIGHT4_MAX
        max_abs = np.abs(weight).max(axis=1)
        if weight_bits == 4:
            max_abs = max_abs * int4_clip_ratios(weight)  # MSE-chosen clipping (SPEC.md 3.1.1)
        w_scale = np.where(max_abs > 0, max_abs / w_max, 1.0)
        w_q = np.clip(round_half_up(weight / w_scale[:, None]), -w_max, w_max).astype(np.int8)
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
        packed = pack_weights(w_q) if weight_bits == 8 else pack_weights_int4(w_q).view(np.int8)
        return cls(k, n, packed, channels, weight_bits)


INT4_CLIP_RATIOS = np.linspace(1.0, 0.5, 26)  # the clip ratios tried, largest first (ties keep the larger)


def int4_clip_ratios(weight: np.ndarray) -> np.ndarray:
    """Per output channel of a float [N, K] weight: the ratio a in INT4_CLIP_RATIOS whose int4 quantization
    (scale a max|w| / 7, values clamped to [-7, 7]) has the least squared error; 1 for an all-zero row."""
    max_abs = np.abs(weight).max(axis=1, keepdims=True)
    best = np.full(max_abs.shape, np.inf)
    chosen = np.ones(max_abs.shape)
    for ratio in INT4_CLIP_RATIOS:
        scale = np.where(max_abs > 0, ratio * max_abs / WEIGHT4_MAX, 1.0)
        q = np.clip(round_half_up(weight / scale), -WEIGHT4_MAX, WEIGHT4_MAX)
        error = ((q * scale - weight) ** 2).sum(axis=1, keepdims=True)
        better = error < best
        best, chosen = np.where(better, error, best), np.where(better, ratio, chosen)
    return chosen[:, 0]


def check_weight_bits(op: str, bits) -> int:
    """An op's `weight_bits` option: 4 or 8 (SPEC.md 3.1.1)."""
    bits = check_int(op, "weight_bits", bits, min(WEIGHT_BITS), max(WEIGHT_BITS))
    if bits not in WEIGHT_BITS:
        raise OpSpecError(op, "weight_bits", f"{bits} is not a weight width (4: packed int4, 8: int8)")
    return bits


def layer_widths(op: str, layers: tuple[str, ...], weight_bits) -> tuple[int, ...]:
    """The width of each of an op's linear layers (in `layers`' order) from `weight_bits`: one width for
    all (an int), or one per layer (a tuple in that order, or a {layer: width} mapping naming them all)."""
    if isinstance(weight_bits, dict):
        if set(weight_bits) != set(layers):
            raise OpSpecError(op, "weight_bits", f"widths for {sorted(weight_bits)}, expected one for each of {layers}")
        weight_bits = tuple(weight_bits[layer] for layer in layers)
    if not isinstance(weight_bits, tuple):
        return (check_weight_bits(op, weight_bits),) * len(layers)
    if len(weight_bits) != len(layers):
        raise OpSpecError(op, "weight_bits", f"{len(weight_bits)} widths for the {len(layers)} layers {layers}")
    for layer, bits in zip(layers, weight_bits):
        if bits not in WEIGHT_BITS:
            raise OpSpecError(op, "weight_bits", f"{layer}: {bits!r} is not a weight width (4: packed int4, 8: int8)")
    return tuple(int(b) for b in weight_bits)


def check_layer_bits(op: str, field: str, layer: Linear, bits: int) -> None:
    """A layer stores its weights at the width its op declares for it."""
    if layer.weight_bits != bits:
        raise OpSpecError(op, f"{field}.weights", f"stored at {layer.weight_bits} bits in an op of weight_bits {bits}")


def weight_bits_options(widths: tuple[int, ...]) -> dict[str, int]:
    """The options entries of an op's layer widths: none when all are int8 (version 1's options, byte for
    byte), `weight_bits = 4` when all are int4 (version 3), and when they mix `int4_layers`, bit i set for
    each int4 layer i, with `weight_bits = 8` (version 8, whose fields include version 3's; SPEC.md 3.1.2)."""
    if set(widths) == {8}:
        return {}
    if set(widths) == {4}:
        return {"weight_bits": 4}
    return {"weight_bits": 8, "int4_layers": sum(1 << i for i, bits in enumerate(widths) if bits == 4)}


def int4_layers_option(layers: tuple[Linear, ...]) -> dict[str, int]:
    """A decoder op's width options (version 9, SPEC.md 3.1.2): none when every layer is int8 (its first
    version's options, byte for byte), else the `int4_layers` mask alone (bit i: layer i is int4)."""
    mask = sum(1 << i for i, layer in enumerate(layers) if layer.weight_bits == 4)
    return {"int4_layers": mask} if mask else {}


def widths_from_options(layers: tuple[str, ...], options: dict[str, int]) -> tuple[int, ...]:
    """Each layer's width as the options declare it: 4 where `int4_layers` has its bit, else `weight_bits`
    (8 when absent)."""
    mask, bits = options.get("int4_layers", 0), options.get("weight_bits", 8)
    return tuple(4 if mask >> i & 1 else bits for i in range(len(layers)))


def uniform_width(widths: tuple[int, ...]) -> int | tuple[int, ...]:
    """One width when every layer shares it (how params record a uniform op), else the per-layer tuple."""
    return widths[0] if len(set(widths)) == 1 else widths


def linear_from_int4(packed: np.ndarray, channels: np.ndarray, out_features: int, in_features: int) -> Linear:
    """The int8 Linear (pair4) with the same weights and channel rows as the w4row bytes `packed`: every
    reference computation of an int4 layer (accumulate, requantized, the ops' output stages) is this
    layer's, unchanged."""
    weight = unpack_weights_int4(np.asarray(packed).view(np.uint8), out_features, in_features)
    return Linear(in_features, out_features, pack_weights(weight), np.asarray(channels, dtype=np.int32))
