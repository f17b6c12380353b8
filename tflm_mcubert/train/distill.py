"""Knowledge distillation: the training objective (labels + teacher logits + optional hidden states) and
the initialisation of a small student from a large teacher.

Teacher logits are computed once per split and cached in the run directory: the teacher has no dropout
and is frozen, so its logits are a fixed function of the data and recomputing them every epoch (a full
MiniLM forward per student step) would buy nothing.
"""

from __future__ import annotations

import dataclasses

import keras
import numpy as np
import tensorflow as tf

from tflm_mcubert.errors import UserError
from tflm_mcubert.model.bert import INPUT_NAMES, BertModel
from tflm_mcubert.model.config import BertConfig


@dataclasses.dataclass
class Objective:
    """Per-example training loss.

    loss = (1 - kd_weight) · CE(labels) + kd_weight · T² · KL(softmax(teacher/T) ‖ softmax(student/T))
           + hidden_weight · MSE(student, teacher last hidden states over unmasked tokens)

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

    def __post_init__(self):
        if not 0.0 <= self.kd_weight <= 1.0:
            raise UserError(f"--kd-weight must be in [0, 1], got {self.kd_weight}")
        if self.temperature <= 0:
            raise UserError(f"--temperature must be positive, got {self.temperature}")
        if self.hidden_weight < 0:
            raise UserError(f"--hidden-kd must be non-negative, got {self.hidden_weight}")
        if self.hidden_weight > 0 and self.hidden_teacher is None:
            raise ValueError("hidden-state KD needs a hidden_teacher model")

    @property
    def uses_teacher_logits(self) -> bool:
        return self.kd_weight > 0

    def check_student(self, student: BertModel) -> None:
        if self.hidden_weight > 0 and self.hidden_teacher.config.hidden_size != student.config.hidden_size:
            raise UserError(
                f"hidden-state KD needs teacher and student of one width; the teacher has "
                f"{self.hidden_teacher.config.hidden_size}, the student "
                f"{student.config.hidden_size} (use --hidden-kd 0)"
            )

    def per_example_loss(self, model: BertModel, batch) -> tf.Tensor:
        inputs = {name: batch[name] for name in INPUT_NAMES}
        out = model(inputs, training=True)
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
        return loss


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


def student_from_teacher(teacher: BertModel, config: BertConfig, *, seed: int) -> tuple[BertModel, dict]:
    """A student of `config` initialised from `teacher` where shapes allow; returns it and what was copied.

    Embedding tables: the teacher's, projected to the student's width by SVD (`embedding_projection`),
    or copied when the widths match. Encoder layers, pooler and classifier: copied from evenly spaced
    teacher layers when the widths match, else freshly initialised (seeded).
    """
    if teacher.embeddings.word_lookup is not None:
        raise UserError("the teacher has a compressed word embedding; distil from an uncompressed model")
    keras.utils.set_random_seed(seed)
    student = BertModel(config)
    t_emb, s_emb = teacher.embeddings, student.embeddings
    same_width = config.hidden_size == teacher.config.hidden_size
    tables = ("word_embeddings", "position_embeddings", "token_type_embeddings")
    if same_width:
        for name in tables:
            getattr(s_emb, name).assign(getattr(t_emb, name))
        s_emb.layer_norm.set_weights(t_emb.layer_norm.get_weights())
        chosen = teacher_layers_for(config.num_hidden_layers, teacher.config.num_hidden_layers)
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
