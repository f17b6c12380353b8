"""Quantization-aware fine-tune of a decoder (`export --qat-steps N` of a GPT-2 / GPT-Neo checkpoint), the
counterpart of quantize/qat.py (the encoder's), with its fake-quant helper and step loop.

  student   a copy of the float DecoderModel whose forward (every position at once) fake-quantizes (int8,
            straight-through) where the decoder ops quantize (ops/SPEC.md 4.5-4.8): the residual stream
            after the embedding and after every block, per channel at s_z * 2^R with its zero points (the
            stream's exact int8 grid); LN1's and LN2's outputs, FC1's output and the activation (per tensor,
            asymmetric); Q, K, V (the KV cache holds K and V) and the attention context at the value's range
            (per tensor, symmetric); the scores at their int16 step; LN_f's output, which the tied LM head reads
  weights   int8 per output channel (the linear layers), per channel of d (the word and position tables);
            a matrix stored int4 (--weight-bits 4 or auto) as w4row stores it, its clip ratios re-chosen by
            MSE as the encoder's QAT does (quantize/weight_fake_quant.py)
  ranges    those of a first PTQ calibration (calibrate_decoder), fixed during the fine-tune
  table     the word table the export stores: kept dense it is fine-tuned with the rest; compressed
            (adaptive) the student reads the compressed table's reconstruction, frozen, so the rest of the
            model learns to live with it and compressing the student again gives back the same table
  teacher   the float model itself (frozen), with its dense table
  loss      KL(teacher || student) of the next-token distributions at every position of the samples
  then      the fine-tuned float weights are calibrated again (calibrate_decoder)

The exp table's entries, LayerNorm arithmetic and the int16 pre-norm sums stay in float, as in qat.py.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tflm_mcubert.errors import UserError
from tflm_mcubert.ops.attention import choose_score_scale
from tflm_mcubert.ops.causal_attention import stream_quant
from tflm_mcubert.ops.layernorm import float_layer_norm
from tflm_mcubert.ops.quantization import INT8_MAX, INT8_MIN, TensorQuant
from tflm_mcubert.ops.topology import DECODER
from tflm_mcubert.ops.widths import Widths
from tflm_mcubert.quantize.qat import QatSettings, fake_quant, fine_tune
from tflm_mcubert.quantize.quantized_decoder import QuantizedDecoder, float_blocks

# A decoder's KD on next-token distributions moves further per step than the encoder's hidden-state MSE
# needs to: qat.py's 1e-5 barely moves it in a few hundred steps.
DECODER_LEARNING_RATE = 1e-4


def decoder_qat_settings(steps: int, seed: int = 0) -> QatSettings:
    if steps < 1:
        raise UserError(f"--qat-steps must be at least 1, got {steps}")
    return QatSettings(steps=steps, learning_rate=DECODER_LEARNING_RATE, seed=seed)


@dataclasses.dataclass(frozen=True)
class DecoderRanges:
    """Fake-quant ranges (lo, hi, symmetric) by name: 'stream{j}' (j = 0 after the embedding, 2i + 1 after
    block i's attention, 2i + 2 after its MLP; per channel), 'layer{i}.attention.{normed,query,key,value}',
    'layer{i}.mlp.{normed,pre_activation,activation}', 'final.normed' (per tensor); and the score step
    'layer{i}.attention.score_step'."""

    ranges: dict
    weights: object | None = None  # the student's int4 matrices, a WeightFakeQuant (None: every matrix int8)

    def __call__(self, name: str, x):
        """x fake-quantized as the int8 model stores `name`."""
        return fake_quant(x, *self.ranges[name])

    def scores(self, layer: int, x):
        """Attention scores rounded to the int16 step whose 256 exp-table entries the kernel reads (SPEC 2:
        at least 12/255, coarse enough to matter), straight-through."""
        import tensorflow as tf

        step = self.ranges[f"layer{layer}.attention.score_step"]
        return x + tf.stop_gradient(tf.floor(x / step + 0.5) * step - x)


def int8_range(quant: TensorQuant) -> tuple:
    """(lo, hi, symmetric=False) of `quant`'s int8 grid (per channel when it is), which fake_quant keeps
    exactly: the ops clamp to [-128, 127] whether the zero point is 0 or not."""
    scale, zero = np.asarray(quant.scale, np.float64), np.asarray(quant.zero_point, np.float64)
    return (INT8_MIN - zero) * scale, (INT8_MAX - zero) * scale, False


def decoder_ranges(model, sequences, decoder: QuantizedDecoder) -> DecoderRanges:
    """The ranges `decoder` (calibrate_decoder of `model` on `sequences`) quantizes at: the stream's from its
    ops' output channels, the others observed in the same float pass as the calibration's."""
    stream_channels = [decoder.embedding.output_residual]
    stream_channels += [op.output_residual for layer in decoder.layers for op in layer]
    ranges = {f"stream{j}": int8_range(stream_quant(c, decoder.z_scale)) for j, c in enumerate(stream_channels)}
    table = np.asarray(model.token_embeddings.numpy(), np.float64)
    position = np.asarray(model.position_embeddings.numpy(), np.float64)
    xs = [table[np.asarray(s)] + position[: len(s)] for s in sequences]
    for i, (attention, mlp) in enumerate(float_blocks(model)):
        seen, xs = _observe(attention, xs)
        ranges.update(_observed_ranges(f"layer{i}.attention", seen, ("normed",), ("query", "key", "value")))
        ranges[f"layer{i}.attention.score_step"] = choose_score_scale(float(np.abs(seen["scores"]).max()))
        seen, xs = _observe(mlp, xs)
        ranges.update(_observed_ranges(f"layer{i}.mlp", seen, ("normed", "pre_activation", "activation"), ()))
    gamma, beta = (np.asarray(w.numpy(), np.float64) for w in (model.ln_f.gamma, model.ln_f.beta))
    normed = float_layer_norm(np.concatenate(xs), gamma, beta, model.config.layer_norm_eps)
    ranges["final.normed"] = int8_range(TensorQuant.observe(normed, symmetric=False))
    return DecoderRanges(ranges)


def fake_quant_weights(w):
    """w [.., channels] fake-quantized to int8 in [-127, 127] per channel of its last axis at max|w| / 127:
    a Keras kernel [in, out] as Linear.from_float stores it (per output channel), a word or position table
    [rows, d] as the embedding does (per channel of d). The scale follows the weights, without gradient."""
    import tensorflow as tf

    peak = tf.stop_gradient(tf.maximum(tf.reduce_max(tf.abs(w), axis=0), 1e-12))
    return fake_quant(w, -peak, peak, True)


def decoder_matrices(model) -> list[tuple[str, str, object]]:
    """(op node name, matrix name, Dense layer) of every block's linear layers, named as Widths names them."""
    out = []
    for i, block in enumerate(model.blocks):
        denses = ((block.query, block.key, block.value, block.output_dense), (block.fc, block.proj))
        for op, layers in zip(DECODER.layer, denses, strict=True):
            out += [(op.node_name(i), name, dense) for name, dense in zip(op.linear_layers, layers, strict=True)]
    return out


def int4_weights(model, widths: Widths | None):
    """The fake quantization (a WeightFakeQuant) of `model`'s matrices that `widths` stores int4 (None when
    there are none)."""
    from tflm_mcubert.quantize.weight_fake_quant import WeightFakeQuant  # TensorFlow

    chosen = [m for m in decoder_matrices(model) if widths is not None and widths.matrix(f"{m[0]}.{m[1]}") == 4]
    return WeightFakeQuant(model, widths, matrices=chosen) if chosen else None


def _dense(layer, x, fq: DecoderRanges):
    """A Keras Dense layer with its kernel fake-quantized (int8, or int4 where fq.weights holds it)."""
    import tensorflow as tf

    int4 = fq.weights.of_layer(layer) if fq.weights is not None else None
    kernel = fake_quant_weights(layer.kernel) if int4 is None else fq.weights.kernel(int4, layer.kernel)
    y = tf.matmul(x, kernel)
    return y + layer.bias if layer.use_bias else y


def _observe(block, xs) -> tuple[dict, list]:
    """(each observed value of `block`'s float forward over the sequences xs, flattened; its outputs)."""
    seen: dict = {}
    outputs = []
    for x in xs:
        observed: dict = {}
        outputs.append(block.forward(x, observed))
        for key, value in observed.items():
            seen.setdefault(key, []).append(np.asarray(value).reshape(-1))
    return {k: np.concatenate(v) for k, v in seen.items()}, outputs


def _observed_ranges(prefix: str, seen: dict, asymmetric, symmetric) -> dict:
    """TensorQuant.observe's ranges, as the ops' quantize chooses them, named prefix.key."""
    ranges = {f"{prefix}.{k}": int8_range(TensorQuant.observe(seen[k], symmetric=False)) for k in asymmetric}
    ranges.update({f"{prefix}.{k}": int8_range(TensorQuant.observe(seen[k], symmetric=True)) for k in symmetric})
    return ranges


def _attention(block, h, fq, i: int):
    """h + attention(LN1(h)), fake-quantized as MCUBERT_CAUSAL_ATTENTION stores its tensors."""
    import tensorflow as tf

    from tflm_mcubert.model.decoder import attention_bias  # Keras

    config, name = block.config, f"layer{i}.attention"
    x = fq(f"{name}.normed", block.ln_1(h))
    projections = (("query", block.query), ("key", block.key), ("value", block.value))
    q, k, v = (fq(f"{name}.{t}", _dense(dense, x, fq)) for t, dense in projections)
    q, k, v = (block._heads(t) for t in (q, k, v))
    scores = fq.scores(i, tf.matmul(q, k, transpose_b=True) * config.attention_scales[i])
    scores += attention_bias(tf.shape(q)[2], tf.shape(k)[2], config.windows[i])
    context = tf.matmul(tf.nn.softmax(scores, axis=-1), v)
    context = tf.reshape(tf.transpose(context, (0, 2, 1, 3)), (tf.shape(h)[0], -1, config.hidden_size))
    # the context is stored at the value's range (causal_attention: a convex combination of values)
    return fq(f"stream{2 * i + 1}", h + _dense(block.output_dense, fq(f"{name}.value", context), fq))


def _mlp(block, h, fq, i: int):
    """h + MLP(LN2(h)), fake-quantized as MCUBERT_DECODER_MLP stores its tensors."""
    name = f"layer{i}.mlp"
    pre = fq(f"{name}.pre_activation", _dense(block.fc, fq(f"{name}.normed", block.ln_2(h)), fq))
    return fq(f"stream{2 * i + 2}", h + _dense(block.proj, fq(f"{name}.activation", block.act(pre)), fq))


def fake_quant_op(model, h, fq: DecoderRanges, op: int):
    """The residual stream h [batch, s, d] after the model's `op`-th attention or MLP (2i: block i's
    attention, 2i + 1: its MLP), fake-quantized."""
    block = model.blocks[op // 2]
    return _attention(block, h, fq, op // 2) if op % 2 == 0 else _mlp(block, h, fq, op // 2)


def fake_quant_logits(model, ids, fq: DecoderRanges, table=None):
    """[batch, s, vocab] logits of the DecoderModel forward with int8 fake quantization where the decoder ops
    quantize; `table`: the word table read by the embedding and the tied head (default the model's)."""
    import tensorflow as tf

    table = fake_quant_weights(model.token_embeddings if table is None else table)
    ids = tf.convert_to_tensor(ids, tf.int32)
    position = fake_quant_weights(model.position_embeddings)[: tf.shape(ids)[1]]
    h = fq("stream0", tf.gather(table, ids) + position[tf.newaxis])
    for op in range(2 * len(model.blocks)):
        h = fake_quant_op(model, h, fq, op)
    normed = tf.reshape(fq("final.normed", model.ln_f(h)), (-1, model.config.hidden_size))
    logits = tf.matmul(normed, table, transpose_b=True)  # tf.einsum's gradient here is 100x slower on CPU
    return tf.reshape(logits, (tf.shape(ids)[0], tf.shape(ids)[1], model.config.vocab_size))


def padded(sequences) -> tuple[np.ndarray, np.ndarray]:
    """(ids int32[n, longest] padded with 0 at the end, valid float32[n, longest]): a causal model's
    positions before the padding do not see it."""
    longest = max(len(s) for s in sequences)
    ids = np.zeros((len(sequences), longest), np.int32)
    valid = np.zeros((len(sequences), longest), np.float32)
    for row, sequence in enumerate(sequences):
        ids[row, : len(sequence)] = sequence
        valid[row, : len(sequence)] = 1.0
    return ids, valid


def distill_decoder(model, sequences, ranges: DecoderRanges, settings: QatSettings, table=None, widths=None):
    """(fine-tuned copy of `model`, KD loss per step) on the token id sequences `sequences` (checkpoint ids).
    `table`: the compressed word table's reconstruction in checkpoint id order, which the student reads
    frozen (None: the dense table, fine-tuned); `widths`: the matrices' stored widths (default all int8)."""
    import tensorflow as tf

    from tflm_mcubert.model.decoder import copy_decoder  # Keras

    if settings.steps < 1:
        raise UserError(f"--qat-steps must be at least 1, got {settings.steps}")
    if not sequences:
        raise UserError("QAT needs calibration sequences")
    student = copy_decoder(model, table=table)
    variables = student.trainable_variables
    if table is not None:
        variables = [v for v in variables if v is not student.token_embeddings]
    ids, valid = (tf.constant(a) for a in padded(sequences))
    ranges = dataclasses.replace(ranges, weights=int4_weights(student, widths))
    refresh = ranges.weights.refresher() if ranges.weights is not None else None

    def loss_of_rows(rows):
        chosen, keep = tf.gather(ids, rows), tf.gather(valid, rows)
        target = tf.nn.softmax(tf.stop_gradient(model(chosen)))
        log_student = tf.nn.log_softmax(fake_quant_logits(student, chosen, ranges))
        kl = tf.reduce_sum(target * (tf.math.log(target + 1e-12) - log_student), axis=-1)
        return tf.reduce_sum(kl * keep) / tf.reduce_sum(keep)

    return student, fine_tune(loss_of_rows, variables, len(sequences), settings, before_step=refresh)


def table_of_clusters(clusters, permutation) -> np.ndarray | None:
    """The float word table a compressed embedding stores, in checkpoint id order (None: it is dense)."""
    if permutation is None:
        return None
    rows = [u if vt is None else u @ vt for u, vt in clusters]
    return np.concatenate(rows)[np.asarray(permutation)]
