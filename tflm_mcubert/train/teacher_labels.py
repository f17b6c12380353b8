"""The teacher-labelled examples `distill --augment N --unlabeled FILE|DIR` adds to the training split
(texts from `train/augment.py`): tokenized for teacher and student, and labelled by the teacher's logits.

The logits are computed once per example and kept in the run directory, chunk by chunk as they complete:
with many copies per sentence, labelling is minutes of teacher forwards, and a run stopped during it
resumes at its last saved chunk instead of starting over. Examples are labelled in order of length, so a
batch holds sentences of about one length and pads little.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from tflm_mcubert.data.tasks import LABEL, TEXT
from tflm_mcubert.errors import UserError
from tflm_mcubert.train.augment import Augmentation, augment_texts, embedding_neighbours
from tflm_mcubert.train.batches import EncodedSplit, encode_split
from tflm_mcubert.train.trainer import RunDirectory, predict_logits, progress_bar

LABELLING_CHUNK = 2048  # examples between saves of the partial logits: ~a minute of MiniLM on 2 cores
CACHE_NAME = "teacher-logits-extra"


@dataclasses.dataclass
class ExtraExamples:
    """Teacher-labelled examples in the student's tokenization, their teacher logits, and a record of them."""

    student: EncodedSplit
    logits: np.ndarray
    record: dict


@dataclasses.dataclass
class Tokenization:
    """A tokenizer and the vocabulary size of the model that reads its ids."""

    tokenizer: object
    vocab_size: int


@dataclasses.dataclass
class LabellingTeacher:
    """The teacher, the digest of its checkpoint (half of its logits' cache key), and its tokenization."""

    model: object
    fingerprint: str
    side: Tokenization


def extra_examples(
    run: RunDirectory,
    augmentation: Augmentation,
    *,
    train_texts: list[str],
    unlabeled: list[str],
    seed: int,
    teacher: LabellingTeacher,
    student_side: Tokenization,
    max_seq_len: int,
    batch_size: int,
    progress: bool = True,
) -> ExtraExamples:
    """The augmented copies of `train_texts` (seeded) and the `unlabeled` texts, labelled by `teacher`."""
    began = time.monotonic()
    augmented = []
    if augmentation.per_sentence:
        table = np.asarray(teacher.model.embeddings.word_embeddings.numpy())
        neighbours = embedding_neighbours(train_texts, teacher.side.tokenizer.get_vocab(), table)
        mask = getattr(teacher.side.tokenizer, "mask_token", None)
        augmented = augment_texts(train_texts, augmentation.per_sentence, seed, neighbours, mask)
    texts = augmented + unlabeled
    for_teacher = encode_texts(texts, teacher.side, max_seq_len)
    key = f"{teacher.fingerprint}:{for_teacher.fingerprint()}"
    logits = labelled_logits(run, key, for_teacher, teacher.model, batch_size, progress)
    labels = np.argmax(logits, axis=-1).astype(np.int32)
    student = encode_texts(texts, student_side, max_seq_len)
    student = dataclasses.replace(student, labels=labels)
    record = {
        "augment_per_sentence": augmentation.per_sentence,
        "augmented_examples": len(augmented),
        "unlabeled": augmentation.unlabeled,
        "unlabeled_examples": len(unlabeled),
        "seconds": round(time.monotonic() - began, 1),  # augmenting, tokenizing and the teacher's labelling
    }
    return ExtraExamples(student, logits, record)


def encode_texts(texts: list[str], side: Tokenization, max_seq_len: int) -> EncodedSplit:
    """`texts` as an unlabelled split (labels 0 until the teacher's are known)."""
    import datasets

    rows = datasets.Dataset.from_dict({TEXT: texts, LABEL: [0] * len(texts)})
    return encode_split(
        rows, side.tokenizer, name="teacher-labelled", max_seq_len=max_seq_len, num_labels=1, vocab_size=side.vocab_size
    )


def labelled_logits(
    run: RunDirectory, key: str, split: EncodedSplit, teacher, batch_size: int, progress: bool = True
) -> np.ndarray:
    """The teacher's logits on every example of `split`, from the run directory as far as they are there
    (same `key`: teacher and examples), computed for the rest and saved every `LABELLING_CHUNK` examples."""
    order = np.argsort([ids.size for ids in split.input_ids], kind="stable")
    logits = np.zeros((len(split), teacher.config.num_labels), np.float32)
    done = 0
    found = run.load_arrays(CACHE_NAME)
    if found is not None and found[1].get("key") == key:
        (arrays, meta) = found
        logits, done = arrays["value"], int(meta["done"])
    bar = progress_bar("teacher labels", len(split), done, enabled=progress, unit="example")
    try:
        while done < len(split):
            rows = order[done : done + LABELLING_CHUNK]
            logits[rows] = predict_logits(teacher, split.subset(rows), batch_size)
            done += len(rows)
            run.save_arrays(CACHE_NAME, {"value": logits}, {"key": key, "done": done})
            bar.update(len(rows))
    finally:
        bar.close()
    return logits


def check_single_text_task(pair_task: bool) -> None:
    if pair_task:
        raise UserError(
            "--augment and --unlabeled take single-text tasks; a sentence-pair task's pairs cannot be "
            "edited or supplied one text at a time"
        )
