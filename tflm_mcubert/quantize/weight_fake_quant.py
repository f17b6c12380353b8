"""Fake quantization of linear weights, as the export stores them (straight-through): every encoder matrix,
or the decoder's int4 ones (quantize/decoder_qat.py).

Every encoder matrix (Q, K, V, O of the attention, FC1 and FC2 of the MLP) is quantized per output channel
exactly as `ops.linear.Linear.from_float` quantizes it (SPEC.md 3.1.1):

  int8   scale max|w| / 127, values round-half-up, clamped to [-127, 127]
  int4   scale a max|w| / 7, a the per-channel clip ratio chosen by MSE (`ops.linear.int4_clip_ratios`,
         the export's own function: one definition of the rule), values clamped to [-7, 7]

A per-channel input quantization (the hidden state into Q, K, V and FC1: power-of-two channel scales,
`ops.layernorm.hidden_quant`) folds into the columns before the rows are quantized, as the export folds it;
given those scales (`column_scales`) the fake-quantized kernel is the stored weight, dequantized, exactly.
Without them (the search's fine-tune, which has no calibration) the rows are quantized unscaled.

The forward uses the fake-quantized kernel, the gradient goes straight through to the float kernel
(identity, clipped values included). max|w| follows the weights every step, in the graph. The int4 clip
ratios are re-chosen by MSE on the current weights by `refresh()` (the callers: every RATIO_REFRESH_STEPS
steps and at the end), not every step and not learned: the MSE argmin is piecewise constant in the weights,
so between refreshes it rarely moves, while one refresh costs about as much as a few training steps (26
trial quantizations of every matrix, numpy); and a learned (LSQ) scale would not be what the export stores,
which re-chooses the ratio by MSE from the final weights alone (so the last refresh, on the final weights,
makes the forward the export's).
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import tensorflow as tf

from tflm_mcubert.ops.linear import WEIGHT_MAX, int4_clip_ratios
from tflm_mcubert.ops.linear_int4 import WEIGHT4_MAX
from tflm_mcubert.ops.topology import ENCODER
from tflm_mcubert.ops.widths import Widths

RATIO_REFRESH_STEPS = 25  # the int4 clip ratios are re-chosen by MSE this often (see the module docstring)
# Their input is the hidden state (per channel); O reads the attention context and FC2 the activation (per tensor).
READS_HIDDEN_STATE = ("query", "key", "value", "fc1")


def encoder_matrices(model) -> list[tuple[str, str, object]]:
    """(op name, matrix name, Dense layer) of every encoder matrix, op names as calibration names them."""
    out = []
    for i, layer in enumerate(model.encoder_layers):
        att, ff = layer.attention, layer.feed_forward
        denses = ((att.query, att.key, att.value, att.output_dense), (ff.intermediate, ff.output_dense))
        for op, layers in zip(ENCODER.layer, denses, strict=True):
            out += [(op.node_name(i), name, dense) for name, dense in zip(op.linear_layers, layers, strict=True)]
    return out


def column_scales_of(quantized) -> dict[str, np.ndarray]:
    """op name -> the per-channel scales of its hidden-state input in a calibrated QuantizedBert (the op's
    Q, K, V or FC1 columns are scaled by them before quantization); an op with a per-tensor input has none."""
    out = {}
    for i in range(len(quantized.layers)):
        for k, op in enumerate(ENCODER.layer):
            quant = quantized.hidden_quant[len(ENCODER.layer) * i + k]  # the hidden state before the op
            if quant.per_channel:
                out[op.node_name(i)] = np.asarray(quant.scale, np.float64)
    return out


def fake_quantized(kernel, bits: int, ratios=None, column_scale=None):
    """The Keras kernel [K in, N out] as stored at `bits` (per output channel), gradient straight through.
    `ratios`: float64[N] int4 clip ratios; `column_scale`: float64[K] input channel scales folded in first."""
    w = tf.cast(tf.stop_gradient(kernel), tf.float64)
    if column_scale is not None:
        w = w * column_scale[:, None]
    w_max = float(WEIGHT_MAX if bits == 8 else WEIGHT4_MAX)
    max_abs = tf.reduce_max(tf.abs(w), axis=0)
    if bits == 4:
        max_abs = max_abs * ratios
    scale = tf.where(max_abs > 0, max_abs / w_max, tf.ones_like(max_abs))
    stored = tf.clip_by_value(tf.floor(w / scale + 0.5), -w_max, w_max) * scale
    if column_scale is not None:
        stored = stored / column_scale[:, None]
    return kernel + tf.stop_gradient(tf.cast(stored, kernel.dtype) - kernel)


@dataclasses.dataclass(eq=False)
class _Matrix:
    dense: object
    bits: int
    column_scale: tf.Tensor | None
    ratios: tf.Variable | None  # int4 only: the clip ratios of the last refresh


class WeightFakeQuant:
    """The fake quantization of one model's encoder matrices; `install()` makes the model's forward use it
    (model.bert.EncoderDense.kernel_quantizer), `remove()` undoes that."""

    def __init__(self, model, widths: Widths, column_scales: dict[str, np.ndarray] | None = None, matrices=None):
        """`widths`: each matrix's stored width (ops/widths.py); `column_scales`:
        op name -> its input's channel scales; `matrices`: (op name, matrix name, Dense layer) of the
        matrices to quantize (default: every encoder matrix of `model`)."""
        column_scales = column_scales or {}
        self.model, self.matrices = model, []
        for op, name, dense in encoder_matrices(model) if matrices is None else matrices:
            bits = widths.matrix(f"{op}.{name}")
            scale = column_scales.get(op) if name in READS_HIDDEN_STATE else None
            scale = None if scale is None else tf.constant(scale, tf.float64)
            ratios = None
            if bits == 4:
                ratios = tf.Variable(tf.ones(dense.kernel.shape[1], tf.float64), trainable=False)
            self.matrices.append(_Matrix(dense, bits, scale, ratios))
        self.refresh()

    def refresh(self) -> None:
        """Re-choose every int4 matrix's clip ratios by MSE on its current weights (the export's rule)."""
        for m in self.matrices:
            if m.ratios is not None:
                w = m.dense.kernel.numpy().astype(np.float64).T  # [N out, K in], as Linear.from_float takes it
                if m.column_scale is not None:
                    w = w * m.column_scale.numpy()[None, :]
                m.ratios.assign(int4_clip_ratios(w))

    def kernel(self, m: _Matrix, kernel):
        return fake_quantized(kernel, m.bits, m.ratios, m.column_scale)

    def of_layer(self, dense) -> _Matrix | None:
        """The matrix of Dense layer `dense` (None: not one of these)."""
        return next((m for m in self.matrices if m.dense is dense), None)

    def install(self) -> "WeightFakeQuant":
        for m in self.matrices:
            m.dense.kernel_quantizer = functools.partial(self.kernel, m)
        return self

    def remove(self) -> None:
        for m in self.matrices:
            m.dense.kernel_quantizer = None

    def refresher(self, every: int = RATIO_REFRESH_STEPS):
        """A callable for a training loop's before-step hook (its arguments, e.g. the step, are ignored):
        refresh() every `every` calls (the constructor chose the ratios of the first steps)."""
        calls = {"n": 0}

        def before_step(*_):
            if calls["n"] and calls["n"] % every == 0:
                self.refresh()
            calls["n"] += 1

        return before_step
