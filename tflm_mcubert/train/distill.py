"""Knowledge distillation: the training objective (labels + teacher logits + optional hidden states) and
the initialisation of a small student from a large teacher.

Teacher logits are computed once per split and cached in the run directory: the teacher has no dropout
and is frozen, so its logits are a fixed function of the data and recomputing them every epoch (a full
MiniLM forward per student step) would buy nothing.
"""

from __future__ import annotations

import dataclasses
import math

import keras
import numpy as np
import tensorflow as tf

from tflm_mcubert.errors import UserError
from tflm_mcubert.model.bert import INPUT_NAMES, BertModel
from tflm_mcubert.model.config import BertConfig
from tflm_mcubert.train.intermediate import IntermediateKD, forward_internals
from tflm_mcubert.train.layer_kd import projection_misfit


@dataclasses.dataclass
class Objective:
    """Per-example training loss.

    loss = (1 - kd_weight) · CE(labels) + kd_weight · T² · KL(softmax(teacher/T) ‖ softmax(student/T))
           + hidden_weight · MSE(student, teacher last hidden states over unmasked tokens)

    + intermediate_weight · (`IntermediateKD`: projected hidden-state MSE + self-attention relation KL)

    The T² keeps the KD gradients on the scale of the CE ones (Hinton et al. 2015), so kd_weight means
    the same at every temperature. Batches carry `teacher_logits` when kd_weight > 0. Hidden-state KD runs
    `hidden_teacher` on the fly (hidden states are too large to cache) and needs equal widths: it serves
    the compression stages, whose teacher is the uncompressed version of the same model.
    """

    kd_weight: float = 0.0
    temperature: float = 2.0
    hidden_weight: float = 0.0
    hidden_teacher: BertModel | None = None
    # Student id -> teacher id, when the student reads a permuted vocabulary (the compressed fine-tune).
    teacher_ids: np.ndarray | None = None
    intermediate_weight: float = 0.0
    intermediate: IntermediateKD | None = None
    # False: the intermediate terms alone (the first of TinyBERT's two phases: no labels, no logits).
    logit_terms: bool = True

    def __post_init__(self):
        if not 0.0 <= self.kd_weight <= 1.0:
            raise UserError(f"--kd-weight must be in [0, 1], got {self.kd_weight}")
        if self.temperature <= 0:
            raise UserError(f"--temperature must be positive, got {self.temperature}")
        if self.hidden_weight < 0:
            raise UserError(f"--hidden-kd must be non-negative, got {self.hidden_weight}")
        if self.hidden_weight > 0 and self.hidden_teacher is None:
            raise ValueError("hidden-state KD needs a hidden_teacher model")
        if self.intermediate_weight < 0:
            raise UserError(f"--intermediate-kd must be non-negative, got {self.intermediate_weight}")
        if self.intermediate_weight > 0 and self.intermediate is None:
            raise ValueError("intermediate KD needs an IntermediateKD")
        if not self.logit_terms and self.intermediate_weight == 0:
            raise ValueError("an objective without logit terms needs intermediate KD: it would have no loss")

    @property
    def extra_variables(self) -> list:
        """Variables the objective trains besides the model's (the intermediate maps; never exported)."""
        return [] if self.intermediate is None else list(self.intermediate.projections)

    @property
    def uses_teacher_logits(self) -> bool:
        return self.kd_weight > 0 and self.logit_terms

    def check_student(self, student: BertModel) -> None:
        if self.hidden_weight > 0 and self.hidden_teacher.config.hidden_size != student.config.hidden_size:
            raise UserError(
                f"hidden-state KD needs teacher and student of one width; the teacher has "
                f"{self.hidden_teacher.config.hidden_size}, the student "
                f"{student.config.hidden_size} (use --hidden-kd 0)"
            )

    def per_example_loss(self, model: BertModel, batch) -> tf.Tensor:
        inputs = {name: batch[name] for name in INPUT_NAMES}
        if self.intermediate_weight > 0:
            out = forward_internals(model, inputs)  # = model(inputs), with the per-layer tensors kept
            layer_terms = self.intermediate_weight * self.intermediate.per_example_loss(out, inputs)
            if not self.logit_terms:
                return layer_terms
        else:
            out, layer_terms = model(inputs, training=True), None
        logits = out["logits"]
        loss = tf.nn.sparse_softmax_cross_entropy_with_logits(batch["labels"], logits)
        if self.kd_weight > 0:
            t = self.temperature
            teacher_log_probs = tf.nn.log_softmax(batch["teacher_logits"] / t, axis=-1)
            student_log_probs = tf.nn.log_softmax(logits / t, axis=-1)
            kl = tf.reduce_sum(tf.exp(teacher_log_probs) * (teacher_log_probs - student_log_probs), axis=-1)
            loss = (1.0 - self.kd_weight) * loss + self.kd_weight * (t * t) * kl
        if self.hidden_weight > 0:
            teacher_inputs = dict(inputs)
            if self.teacher_ids is not None:
                teacher_inputs["input_ids"] = tf.gather(tf.constant(self.teacher_ids, tf.int32), inputs["input_ids"])
            target = tf.stop_gradient(self.hidden_teacher(teacher_inputs)["last_hidden_state"])
            mask = tf.cast(batch["attention_mask"], tf.float32)
            per_token = tf.reduce_mean(tf.square(out["last_hidden_state"] - target), axis=-1)
            loss += self.hidden_weight * tf.reduce_sum(per_token * mask, -1) / tf.maximum(tf.reduce_sum(mask, -1), 1.0)
        return loss if layer_terms is None else loss + layer_terms


# --- students --------------------------------------------------------------------------------------------


def student_config(teacher: BertConfig, shape: BertConfig) -> BertConfig:
    """`shape` (a preset's widths and depth) with the teacher's vocabulary, positions, types and labels."""
    return dataclasses.replace(
        shape,
        vocab_size=teacher.vocab_size,
        max_position_embeddings=teacher.max_position_embeddings,
        type_vocab_size=teacher.type_vocab_size,
        pad_token_id=teacher.pad_token_id,
        layer_norm_eps=teacher.layer_norm_eps,
        num_labels=teacher.num_labels,
    ).validate()


def embedding_projection(teacher: BertModel, width: int) -> np.ndarray:
    """The [teacher width, width] projection onto the top right singular vectors of the teacher's word,
    position and token-type tables stacked: one basis for all three, because the model only ever sees
    their sum, which a common projection preserves (separate bases would not add up). A student wider
    than the teacher gets zero columns past the teacher's width."""
    emb = teacher.embeddings
    stacked = np.concatenate(
        [
            np.asarray(emb.word_embeddings.numpy()),
            np.asarray(emb.position_embeddings.numpy()),
            np.asarray(emb.token_type_embeddings.numpy()),
        ]
    ).astype(np.float64)
    _, _, vt = np.linalg.svd(stacked, full_matrices=False)
    projection = np.zeros((stacked.shape[1], width), np.float32)
    kept = min(width, vt.shape[0])
    projection[:, :kept] = vt[:kept].T
    return projection


def teacher_layers_for(student_layers: int, teacher_layers: int) -> list[int]:
    """Evenly spaced teacher layers ending with the last one (6 → 2: layers 2 and 5), DistilBERT-style."""
    return [round((i + 1) * teacher_layers / student_layers) - 1 for i in range(student_layers)]


def student_from_teacher(
    teacher: BertModel, config: BertConfig, *, seed: int, init: str = "random"
) -> tuple[BertModel, dict]:
    """A student of `config` initialised from `teacher` where shapes allow; returns it and what was copied.

    Embedding tables: the teacher's, projected to the student's width by SVD (`embedding_projection`),
    or copied when the widths match. init "random": encoder layers, pooler and classifier copied from evenly
    spaced teacher layers when the widths match, else freshly initialised (seeded). init "projected": those
    layers projected to the student's width (`project_encoder`; a plain copy when the shapes match).
    """
    if teacher.embeddings.word_lookup is not None:
        raise UserError("the teacher has a compressed word embedding; distil from an uncompressed model")
    keras.utils.set_random_seed(seed)
    student = BertModel(config)
    t_emb, s_emb = teacher.embeddings, student.embeddings
    same_width = config.hidden_size == teacher.config.hidden_size
    tables = ("word_embeddings", "position_embeddings", "token_type_embeddings")
    chosen = teacher_layers_for(config.num_hidden_layers, teacher.config.num_hidden_layers)
    if init == "projected":
        misfit = projection_misfit(teacher.config, config)
        if misfit:
            raise UserError(misfit)
        basis = (
            np.eye(config.hidden_size, dtype=np.float32)
            if same_width
            else embedding_projection(teacher, config.hidden_size)
        )
        for name in tables:
            getattr(s_emb, name).assign(np.asarray(getattr(t_emb, name).numpy()) @ basis)
        return student, project_encoder(teacher, student, chosen, basis)
    if same_width:
        for name in tables:
            getattr(s_emb, name).assign(getattr(t_emb, name))
        s_emb.layer_norm.set_weights(t_emb.layer_norm.get_weights())
        for target, index in zip(student.encoder_layers, chosen):
            target.set_weights(teacher.encoder_layers[index].get_weights())
        student.pooler.set_weights(teacher.pooler.get_weights())
        if teacher.classifier is not None and student.classifier is not None:
            student.classifier.set_weights(teacher.classifier.get_weights())
        return student, {"embeddings": "copied", "encoder_layers_from": chosen, "pooler": "copied"}
    projection = embedding_projection(teacher, config.hidden_size)
    for name in tables:
        getattr(s_emb, name).assign(np.asarray(getattr(t_emb, name).numpy()) @ projection)
    return student, {
        "embeddings": f"SVD projection {teacher.config.hidden_size} -> {config.hidden_size}",
        "encoder_layers_from": None,
        "pooler": "random",
    }


# --- projected-teacher initialisation ---------------------------------------------------------------------


def _weights(layer) -> list[np.ndarray]:
    return [np.asarray(w, np.float64) for w in layer.get_weights()]


def _set(layer, weights) -> None:
    layer.set_weights([np.asarray(w, np.float32) for w in weights])


def _project_norm(source, target, basis) -> None:
    """A LayerNorm's (γ, β) in the student's basis. β projects exactly; γ is a per-unit scale, which a
    rotation turns into a full matrix: its diagonal in the new basis is the closest per-unit scale (and
    is γ itself when the basis is the identity)."""
    gamma, beta = _weights(source)
    _set(target, [(basis**2).T @ gamma, beta @ basis])


def project_encoder(teacher: BertModel, student: BertModel, chosen: list[int], basis: np.ndarray) -> dict:
    """The student's encoder, pooler and classifier from the teacher's layers `chosen`, projected by `basis`
    ([teacher width, student width], orthonormal columns) on every input and output. Heads: a student
    head of m teacher heads' width takes m whole teacher heads side by side (their scores add, so the
    query is scaled by √m to keep each one's 1/√d), the heads whose output rows weigh most after
    projection; FFN: the intermediate units with the largest projected in·out weight norms. With equal
    shapes (identity basis, all heads and units kept) it is an exact copy."""
    t_cfg, s_cfg = teacher.config, student.config
    misfit = projection_misfit(t_cfg, s_cfg)
    if misfit:
        raise UserError(misfit)
    merge = s_cfg.head_size // t_cfg.head_size
    basis = np.asarray(basis, np.float64)
    _project_norm(teacher.embeddings.layer_norm, student.embeddings.layer_norm, basis)
    heads_taken = []
    for target, index in zip(student.encoder_layers, chosen):
        heads_taken.append(_project_layer(teacher.encoder_layers[index], target, basis, t_cfg, s_cfg, merge))
    w, b = _weights(teacher.pooler)
    _set(student.pooler, [basis.T @ w @ basis, b @ basis])
    if teacher.classifier is not None and student.classifier is not None:
        w, b = _weights(teacher.classifier)
        _set(student.classifier, [basis.T @ w, b])
    return {
        "embeddings": f"SVD projection {t_cfg.hidden_size} -> {s_cfg.hidden_size}"
        if t_cfg.hidden_size != s_cfg.hidden_size
        else "copied",
        "encoder_layers_from": chosen,
        "init": "projected",
        "teacher_heads": heads_taken,
        "pooler": "projected",
    }


def _project_layer(source, target, basis, t_cfg: BertConfig, s_cfg: BertConfig, merge: int) -> list[int]:
    t_att, s_att = source.attention, target.attention
    t_size = t_cfg.head_size
    out_w, out_b = _weights(t_att.output_dense)
    weight = [np.linalg.norm(out_w[h * t_size : (h + 1) * t_size] @ basis) for h in range(t_cfg.num_attention_heads)]
    # The heaviest heads, in the teacher's order (so equal shapes keep every head where it was).
    heads = sorted(np.argsort(weight, kind="stable")[::-1][: s_cfg.num_attention_heads * merge].tolist())
    cols = np.concatenate([np.arange(h * t_size, (h + 1) * t_size) for h in heads])
    for name, scale in (("query", math.sqrt(merge)), ("key", 1.0), ("value", 1.0)):
        w, b = _weights(getattr(t_att, name))
        _set(getattr(s_att, name), [basis.T @ w[:, cols] * scale, b[cols] * scale])
    _set(s_att.output_dense, [out_w[cols] @ basis, out_b @ basis])
    _project_norm(t_att.layer_norm, s_att.layer_norm, basis)
    t_ff, s_ff = source.feed_forward, target.feed_forward
    w1, b1 = _weights(t_ff.intermediate)
    w2, b2 = _weights(t_ff.output_dense)
    norms = np.linalg.norm(basis.T @ w1, axis=0) * np.linalg.norm(w2 @ basis, axis=1)
    keep = np.sort(np.argsort(norms, kind="stable")[::-1][: s_cfg.intermediate_size])
    _set(s_ff.intermediate, [basis.T @ w1[:, keep], b1[keep]])
    _set(s_ff.output_dense, [w2[keep] @ basis, b2 @ basis])
    _project_norm(t_ff.layer_norm, s_ff.layer_norm, basis)
    return heads
