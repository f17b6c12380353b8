"""Offline activation quantization: the (scale, zero point) of every int8 tensor the ops exchange.

Activations are int8 per tensor, except the hidden state: per channel (TensorQuant with array scale
and zero point; layernorm.hidden_quant), free for the kernels (SPEC.md section 2). Tensors that feed
a matmul against *weights* (the hidden state, the GELU output, the FC1 output that indexes the GELU
table) are asymmetric: their zero point folds into the bias offline, so it costs the kernel nothing
and buys up to one bit of range (GELU output is [-0.17, max], LayerNorm output is rarely centred).
Tensors that meet *another activation* in a matmul (Q, K, V, the attention context) are symmetric
(zero point 0): an asymmetric pair would need row sums of both operands at run time. Scores are
symmetric too; their zero point would cancel in (rowmax - score) anyway.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tflm_mcubert.ops.fixed_point import INT8_MAX, INT8_MIN, round_half_up, saturate

# A tensor observed as all zeros (e.g. the context of a fully masked calibration input) still
# needs a scale; any works, and one that keeps downstream biases representable is best.
_ZERO_RANGE_FALLBACK = 1.0


@dataclasses.dataclass(frozen=True, eq=False)
class TensorQuant:
    """real = scale * (q - zero_point), q in int8.

    Per tensor (a float and an int), or per channel of the last axis (float64[d] and int64[d]
    arrays): the hidden state, whose LayerNorm outlier channels would otherwise set one coarse step
    for all (layernorm.hidden_quant).
    """

    scale: float | np.ndarray
    zero_point: int | np.ndarray = 0

    def __post_init__(self):
        if np.ndim(self.scale) or np.ndim(self.zero_point):
            object.__setattr__(self, "scale", np.array(self.scale, np.float64).reshape(-1))
            object.__setattr__(self, "zero_point", np.array(self.zero_point, np.int64).reshape(-1))
        scale, zero_point = np.asarray(self.scale), np.asarray(self.zero_point)
        if not (np.all(np.isfinite(scale)) and np.all(scale > 0)):
            raise ValueError(f"TensorQuant: scale must be finite and > 0, got {self.scale!r}")
        if np.any(zero_point < INT8_MIN) or np.any(zero_point > INT8_MAX):
            raise ValueError(f"TensorQuant: zero point {self.zero_point} is outside int8")

    @property
    def per_channel(self) -> bool:
        return np.ndim(self.scale) > 0

    def __eq__(self, other) -> bool:
        if not isinstance(other, TensorQuant):
            return NotImplemented
        return (
            np.shape(self.scale) == np.shape(other.scale)
            and np.shape(self.zero_point) == np.shape(other.zero_point)
            and bool(np.all(self.scale == other.scale))
            and bool(np.all(self.zero_point == other.zero_point))
        )

    __hash__ = None

    @classmethod
    def symmetric(cls, max_abs: float) -> "TensorQuant":
        max_abs = float(max_abs)
        return cls((max_abs if max_abs > 0 else _ZERO_RANGE_FALLBACK) / INT8_MAX, 0)

    @classmethod
    def asymmetric(cls, lo: float, hi: float) -> "TensorQuant":
        """Covers [min(lo, 0), max(hi, 0)] so that real 0 is exactly representable."""
        lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
        scale = (hi - lo if hi > lo else _ZERO_RANGE_FALLBACK) / (INT8_MAX - INT8_MIN)
        zero_point = int(np.clip(round_half_up(INT8_MIN - lo / scale), INT8_MIN, INT8_MAX))
        return cls(scale, zero_point)

    @classmethod
    def observe(cls, values: np.ndarray, *, symmetric: bool) -> "TensorQuant":
        values = np.asarray(values, dtype=np.float64)
        if symmetric:
            return cls.symmetric(float(np.abs(values).max(initial=0.0)))
        return cls.asymmetric(float(values.min(initial=0.0)), float(values.max(initial=0.0)))

    def quantize(self, real: np.ndarray) -> np.ndarray:
        return saturate(
            round_half_up(np.asarray(real, np.float64) / self.scale) + self.zero_point, INT8_MIN, INT8_MAX, np.int8
        )

    def dequantize(self, q: np.ndarray) -> np.ndarray:
        return self.scale * (np.asarray(q, dtype=np.float64) - self.zero_point)
