"""Optional quantization-aware fine-tune by knowledge distillation (`export --qat-steps N`).

A short, simple QAT on the calibration samples, before the final PTQ calibration:

  student   a copy of the float model whose forward fake-quantizes (int8, straight-through gradient)
            every tensor the MCUBERT ops quantize: hidden states after each LayerNorm (asymmetric),
            Q, K, V and the attention context (symmetric), FC1 output and activation (asymmetric),
            with the ranges of a first PTQ calibration (fixed during the fine-tune)
  teacher   the float model itself (frozen)
  loss      mean squared error of the last hidden state over real tokens (plus of the logits for a
            classifier), student vs teacher
  then      the fine-tuned float weights are calibrated again (quantize/calibrate.py)

With `embedding_bits=4` the student also fake-quantizes the compressed embedding's word tables as
`export --embedding-bits 4` stores them (ops/SPEC.md 4.1.1), straight-through: cluster 0 per
channel x per row, each U_i per column, to [-7, 7], V_i int8 with U_i's column scales folded in
(`model/stored_tables.py`); so the fine-tune learns tables that survive 4 bits.

Every encoder matrix's weights (Q, K, V, O, FC1, FC2) are fake-quantized at the width the export stores
them (`widths`: one for all, or per matrix as `export --weight-bits auto` chose): int8 per channel, or
int4 per channel with the export's MSE clip ratio, the hidden state's channel scales folded in as the
export folds them (quantize/weight_fake_quant.py: the ratios are re-chosen every few steps, why there).
Those channel scales are the first calibration's: the final calibration sees the fine-tuned model and may
move a channel's power of two, which moves that column's grid (on a random tiny model most of them moved
after 40 steps at lr 1e-4; the int4 error still fell by a quarter, tests/quantize/test_weight_qat.py).

Scores, the exp table, LayerNorm arithmetic and the pre-norm sums are left in float: the spec
computes them in 14-16 bits or exactly, so they add little error. Steps are few and the learning
rate small: the student should learn to live with int8 activations, not to forget the teacher.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from tflm_mcubert.errors import UserError
from tflm_mcubert.ops.widths import Widths


@dataclasses.dataclass(frozen=True)
class QatSettings:
    steps: int = 0
    learning_rate: float = 1e-5
    batch_size: int = 8
    seed: int = 0
    embedding_bits: int = 8  # 4: also fake-quantize the word tables as int4 (SPEC 4.1.1)
    widths: Widths = Widths()  # every encoder matrix's weights, fake-quantized as stored (int8 or int4)


def _fake_quant_ranges(ranges) -> dict[str, tuple[float, float, bool]]:
    """name -> (lo, hi, symmetric) from a calibration RangeSet."""
    out = {}
    for name, r in ranges.ranges.items():
        kind = name.rsplit(".", 1)[-1]
        if kind in ("query", "key", "value", "context"):
            out[name] = (-r.max_abs, r.max_abs, True)
        elif kind in ("output", "fc1_output", "activation"):
            out[name] = (min(r.lo, 0.0), max(r.hi, 0.0), False)
    return out


def fake_quant(x, lo, hi, symmetric: bool):
    """x fake-quantized to int8 over [lo, hi] (straight-through inside the range, no gradient outside):
    scalars per tensor, or vectors (or tensors) per channel of the last axis. symmetric: [-127, 127] steps
    (zero point 0). A range on the int8 grid (TensorQuant's) is kept exactly; rounding is half up, as the ops
    round."""
    import tensorflow as tf

    if np.ndim(lo) == 0 and not tf.is_tensor(lo):
        if hi <= lo:
            return x
        return tf.quantization.fake_quant_with_min_max_args(x, min=lo, max=hi, num_bits=8, narrow_range=symmetric)
    # tf's per-channel op also differentiates its ranges, a hundred times the cost of the forward on CPU
    lo, hi = (tf.cast(v, x.dtype) for v in (lo, hi))
    step = (hi - lo) / (254.0 if symmetric else 255.0)
    clipped = tf.clip_by_value(x, lo, hi)
    rounded = tf.floor((clipped - lo) / step + 0.5) * step + lo
    return clipped + tf.stop_gradient(rounded - clipped)


def fine_tune(loss_of_rows, variables, sample_count: int, settings: QatSettings, before_step=None) -> list[float]:
    """The loss per step of `settings.steps` Adam steps on `variables`, each on a random batch of sample
    rows (`loss_of_rows(rows)`: a scalar tensor from an int32 tensor of sample indices); `before_step(n)`,
    when given, runs before step n (outside the traced step)."""
    import keras
    import tensorflow as tf

    optimizer = keras.optimizers.Adam(settings.learning_rate)

    @tf.function
    def step(rows):
        with tf.GradientTape() as tape:
            loss = loss_of_rows(rows)
        grads = tape.gradient(loss, variables)
        optimizer.apply_gradients([(g, v) for g, v in zip(grads, variables) if g is not None])
        return loss

    rng = np.random.default_rng(settings.seed)
    size = min(settings.batch_size, sample_count)
    losses = []
    for n in range(settings.steps):
        if before_step is not None:
            before_step(n)
        losses.append(float(step(tf.constant(rng.choice(sample_count, size, replace=False), tf.int32))))
    return losses


def int4_word_vectors(lookup, ids):
    """A ClusteredLowRankEmbedding's word vectors with its tables fake-quantized as SPEC 4.1.1 stores them
    (`model.stored_tables`: cluster 0 per channel x per row, U_i per column, Vᵀ_i int8 per channel)."""
    from tflm_mcubert.model.stored_tables import stored_word_vectors

    return stored_word_vectors(lookup, ids, 4)


def _embeddings(model, ids, types, embedding_bits: int):
    """BertEmbeddings' forward, with int4 word tables when asked (and the embedding is compressed)."""
    import tensorflow as tf

    emb = model.embeddings
    if embedding_bits != 4 or emb.word_lookup is None or not hasattr(emb.word_lookup, "us"):
        return emb(ids, types)
    words = int4_word_vectors(emb.word_lookup, ids)
    positions = emb.position_embeddings[: tf.shape(ids)[1]][tf.newaxis]
    return emb.layer_norm(words + positions + tf.gather(emb.token_type_embeddings, types))


def fake_quant_forward(model, inputs: dict, ranges: dict, embedding_bits: int = 8):
    """The BertModel forward with int8 fake quantization where the MCUBERT ops quantize (and int4
    word tables with embedding_bits=4)."""
    import tensorflow as tf

    def fq(name, x):
        return fake_quant(x, *ranges[name]) if name in ranges else x

    config = model.config
    ids = tf.convert_to_tensor(inputs["input_ids"], tf.int32)
    keep = tf.cast(tf.convert_to_tensor(inputs["attention_mask"]), tf.float32)
    types = tf.convert_to_tensor(inputs["token_type_ids"], tf.int32)
    h = fq("embedding.output", _embeddings(model, ids, types, embedding_bits))
    bias = tf.reshape((1.0 - keep) * -1e9, (-1, 1, 1, tf.shape(keep)[1]))
    heads, dh = config.num_attention_heads, config.head_size

    def split(x):
        return tf.transpose(tf.reshape(x, (-1, tf.shape(x)[1], heads, dh)), (0, 2, 1, 3))

    for i, layer in enumerate(model.encoder_layers):
        att, ff = layer.attention, layer.feed_forward
        name = f"layer{i}.attention"
        q, k, v = (
            fq(f"{name}.{t}", dense(h)) for t, dense in (("query", att.query), ("key", att.key), ("value", att.value))
        )
        scores = tf.matmul(split(q), split(k), transpose_b=True) / math.sqrt(dh)
        context = tf.matmul(tf.nn.softmax(scores + bias, axis=-1), split(v))
        context = tf.reshape(tf.transpose(context, (0, 2, 1, 3)), (-1, tf.shape(h)[1], config.hidden_size))
        h = fq(f"{name}.output", att.layer_norm(att.output_dense(fq(f"{name}.context", context)) + h))
        name = f"layer{i}.mlp"
        f1 = fq(f"{name}.fc1_output", ff.intermediate(h))
        h = fq(f"{name}.output", ff.layer_norm(ff.output_dense(fq(f"{name}.activation", ff.act(f1))) + h))
    out = {"last_hidden_state": h}
    if model.classifier is not None:
        out["logits"] = model.classifier(model.pooler(h[:, 0]))
    return out


def distill(model, samples: list[dict], ranges, settings: QatSettings, quantized=None) -> tuple[object, list[float]]:
    """(fine-tuned copy of `model`, loss per step). `samples`: int32 [1, s] dicts in the model's ids.
    `quantized`: the first calibration's QuantizedBert, whose hidden-state channel scales the weight fake
    quantization folds in as the export does (None: rows quantized unscaled)."""
    import tensorflow as tf

    from tflm_mcubert.quantize.weight_fake_quant import WeightFakeQuant, column_scales_of

    if settings.steps < 1:
        raise UserError(f"--qat-steps must be at least 1, got {settings.steps}")
    if not samples:
        raise UserError("QAT needs calibration samples")
    student = model.with_options()
    scales = column_scales_of(quantized) if quantized is not None else None
    weights = WeightFakeQuant(student, settings.widths, scales).install()
    batch = {
        k: np.concatenate([s[k] for s in samples]).astype(np.int32)
        for k in ("input_ids", "attention_mask", "token_type_ids")
    }
    teacher = {k: tf.constant(v) for k, v in model(batch).items() if k in ("last_hidden_state", "logits")}
    fq_ranges = _fake_quant_ranges(ranges)
    hidden = float(model.config.hidden_size)
    inputs = {k: tf.constant(v) for k, v in batch.items()}

    def loss_of_rows(rows):
        chosen = {k: tf.gather(v, rows) for k, v in inputs.items()}
        keep = tf.cast(chosen["attention_mask"][..., None], tf.float32)
        out = fake_quant_forward(student, chosen, fq_ranges, settings.embedding_bits)
        diff = (out["last_hidden_state"] - tf.gather(teacher["last_hidden_state"], rows)) * keep
        loss = tf.reduce_sum(diff * diff) / (tf.reduce_sum(keep) * hidden)
        if "logits" in out:
            loss += tf.reduce_mean((out["logits"] - tf.gather(teacher["logits"], rows)) ** 2)
        return loss

    losses = fine_tune(loss_of_rows, student.trainable_variables, len(samples), settings, weights.refresher())
    weights.remove()  # the student's float weights are what calibration quantizes again
    return student, losses
