"""Intermediate-layer distillation across widths (TinyBERT's hidden-state transfer, MiniLM-v2's self-attention
relations): what a narrow student learns from a wide teacher's layers, not only from its logits.

For each mapped pair (the embeddings' output, then student layer i ↔ teacher layer `teacher_layers_for`[i]):

    hidden:    MSE(student hidden · W_i, teacher hidden) over unmasked tokens, W_i a learned [student width,
               teacher width] map (trained with the student, never exported)
    relations: for each of Q, K, V, both models' vectors re-split into R relation heads;
               KL(softmax(t tᵀ/√d_t) ‖ softmax(s sᵀ/√d_s)) per query token, averaged over heads and tokens

Why relations rather than head-averaged attention probabilities: the teacher has 12 heads, the student 2,
and the mean of 12 attention maps is a blur no 2-head student is asked to produce by its own design; the
relations need no head correspondence (R divides both widths), transfer the values' structure too (the
attention maps say nothing of V), and are the objective the teacher itself (all-MiniLM) was distilled with.

The teacher runs on the fly, frozen (its hidden states do not fit a cache), up to its last mapped layer.
`forward_internals` repeats `BertModel.call` with the per-layer tensors kept; a test holds it to the model.
"""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

from tflm_mcubert.errors import UserError
from tflm_mcubert.model.bert import BertModel
from tflm_mcubert.train.layer_kd import relation_misfit


def _mask_bias(model: BertModel, attention_mask, dtype):
    if attention_mask is None:
        return tf.zeros((1, 1, 1, 1), dtype)
    keep = tf.cast(tf.convert_to_tensor(attention_mask), tf.int32)
    bias_of = tf.constant([model.mask_value, 0.0], dtype)
    return tf.reshape(tf.gather(bias_of, keep), (-1, 1, 1, tf.shape(keep)[1]))


def _attention(att, hidden, mask_bias):
    """`BertSelfAttention.call`, also returning its (q, k, v) before the head split."""
    c = att.config
    q_raw, k_raw, v_raw = att.query(hidden), att.key(hidden), att.value(hidden)
    q = att._split_heads(q_raw * (1.0 / math.sqrt(c.head_size)))
    k = att._split_heads(k_raw)
    v_t = att._split_heads(v_raw, perm=(0, 2, 3, 1))
    probs = tf.nn.softmax(tf.matmul(q, k, transpose_b=True) + mask_bias, axis=-1)
    context = tf.matmul(probs, v_t, transpose_b=True)
    context = tf.reshape(tf.transpose(context, (0, 2, 1, 3)), (-1, tf.shape(hidden)[1], c.hidden_size))
    return att.layer_norm(att.output_dense(context) + hidden), (q_raw, k_raw, v_raw)


def forward_internals(model: BertModel, inputs: dict, *, layers: int | None = None, head: bool = True) -> dict:
    """`model`'s forward keeping `hidden_states` (the embeddings' output, then each layer's) and `qkv` (each
    layer's query, key and value before the head split); through the first `layers` layers only (the
    teacher stops at its last mapped one), and with `logits` when `head` and the model has a classifier."""
    input_ids = tf.convert_to_tensor(inputs["input_ids"], tf.int32)
    types = inputs.get("token_type_ids")
    types = tf.zeros_like(input_ids) if types is None else tf.convert_to_tensor(types, tf.int32)
    hidden = model.embeddings(input_ids, types)
    mask_bias = _mask_bias(model, inputs.get("attention_mask"), hidden.dtype)
    states, qkv = [hidden], []
    for layer in model.encoder_layers[: layers if layers is not None else len(model.encoder_layers)]:
        hidden, projections = _attention(layer.attention, hidden, mask_bias)
        hidden = layer.feed_forward(hidden)
        states.append(hidden)
        qkv.append(projections)
    out = {"hidden_states": states, "qkv": qkv}
    if head and layers is None:
        out["last_hidden_state"] = hidden
        if model.classifier is not None:
            out["logits"] = model.classifier(model.pooler(hidden[:, 0]))
    return out


def relation_log_probs(x, heads: int, mask_bias):
    """log softmax(x xᵀ/√d) per relation head: x [batch, seq, width] → [batch, heads, seq, seq]."""
    width = x.shape[-1]
    d = width // heads
    split = tf.transpose(tf.reshape(x, (-1, tf.shape(x)[1], heads, d)), (0, 2, 1, 3))
    scores = tf.matmul(split, split, transpose_b=True) * (1.0 / math.sqrt(d))
    return tf.nn.log_softmax(scores + mask_bias, axis=-1)


def relation_kl(teacher_x, student_x, heads: int, mask_bias, token_mask):
    """Per-example KL(teacher relations ‖ student relations), mean over relation heads and unmasked queries."""
    t = relation_log_probs(teacher_x, heads, mask_bias)
    s = relation_log_probs(student_x, heads, mask_bias)
    # Masked keys have probability exactly 0 under the teacher: they add 0·(finite) to the sum.
    per_query = tf.reduce_mean(tf.reduce_sum(tf.exp(t) * (t - s), axis=-1), axis=1)
    return masked_token_mean(per_query, token_mask)


def masked_token_mean(per_token, token_mask):
    return tf.reduce_sum(per_token * token_mask, -1) / tf.maximum(tf.reduce_sum(token_mask, -1), 1.0)


class IntermediateKD:
    """The intermediate terms (module docstring) of a student against a frozen teacher. `pairs`: (student
    state index, teacher state index) over `hidden_states` (0 = embeddings); `projections`: one learned
    [student width, teacher width] map per pair, started at `initial_map` (the embeddings' SVD basis,
    transposed: where the student's embeddings already live) so the first steps compare like with like."""

    def __init__(self, teacher: BertModel, student: BertModel, layer_map: list[int], *, relation_heads: int,
                 initial_map: np.ndarray, teacher_ids: np.ndarray | None = None):  # fmt: skip
        s_width, t_width = student.config.hidden_size, teacher.config.hidden_size
        misfit = relation_misfit(t_width, s_width, relation_heads)
        if misfit:
            raise UserError(misfit)
        if initial_map.shape != (s_width, t_width):
            raise ValueError(f"initial_map must be [{s_width}, {t_width}], got {list(initial_map.shape)}")
        self.teacher, self.relation_heads, self.teacher_ids = teacher, relation_heads, teacher_ids
        self.pairs = [(0, 0)] + [(i + 1, t + 1) for i, t in enumerate(layer_map)]
        self.teacher_depth = max(layer_map) + 1
        self.projections = [
            tf.Variable(np.asarray(initial_map, np.float32), name=f"intermediate_map_{i}")
            for i in range(len(self.pairs))
        ]

    def teacher_internals(self, inputs: dict) -> dict:
        teacher_inputs = dict(inputs)
        if self.teacher_ids is not None:
            teacher_inputs["input_ids"] = tf.gather(tf.constant(self.teacher_ids, tf.int32), inputs["input_ids"])
        found = forward_internals(self.teacher, teacher_inputs, layers=self.teacher_depth, head=False)
        return tf.nest.map_structure(tf.stop_gradient, found)

    def per_example_loss(self, student_out: dict, inputs: dict) -> tf.Tensor:
        """Σ over pairs of the hidden MSE, + Σ over mapped layers of the Q, K and V relation KLs."""
        teacher_out = self.teacher_internals(inputs)
        token_mask = tf.cast(inputs["attention_mask"], tf.float32)
        mask_bias = tf.reshape(((token_mask - 1.0) * 1e9), (-1, 1, 1, tf.shape(token_mask)[1]))
        loss = 0.0
        for (s, t), projection in zip(self.pairs, self.projections):
            mapped = tf.matmul(student_out["hidden_states"][s], projection)
            per_token = tf.reduce_mean(tf.square(mapped - teacher_out["hidden_states"][t]), axis=-1)
            loss += masked_token_mean(per_token, token_mask)
        for s, t in self.pairs[1:]:
            for t_x, s_x in zip(teacher_out["qkv"][t - 1], student_out["qkv"][s - 1]):
                loss += relation_kl(t_x, s_x, self.relation_heads, mask_bias, token_mask)
        return loss
