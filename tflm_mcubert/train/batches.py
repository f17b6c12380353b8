"""Tokenized task splits and their batches: seeded shuffles, dynamic padding, and data fingerprints.

A split is tokenized once into ragged int32 arrays. A batch is padded to its own longest sequence (not to
`max_seq_len`): sentiment sentences average ~30 word pieces, so padding to 128 would spend most of every
step on padding. The order of epoch e depends only on (seed, e), so a resumed run sees the same batches
as an uninterrupted one without any saved RNG state.
"""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np

from tflm_mcubert.data.tasks import LABEL, TEXT, TEXT_PAIR
from tflm_mcubert.errors import UserError

Batch = dict[str, np.ndarray]


@dataclasses.dataclass(frozen=True)
class EncodedSplit:
    """One tokenized split: example k is `input_ids[k]`, `token_type_ids[k]` (int32, unpadded), `labels[k]`."""

    name: str
    input_ids: list[np.ndarray]
    token_type_ids: list[np.ndarray]
    labels: np.ndarray
    pad_id: int

    def __len__(self) -> int:
        return len(self.labels)

    def fingerprint(self) -> str:
        digest = hashlib.sha256(f"{self.name}:{len(self)}:{self.pad_id}".encode())
        for ids, types in zip(self.input_ids, self.token_type_ids):
            digest.update(np.int32(ids.size).tobytes() + ids.tobytes() + types.tobytes())
        digest.update(self.labels.astype(np.int32).tobytes())
        return digest.hexdigest()

    def subset(self, rows) -> "EncodedSplit":
        """The examples `rows`, in that order."""
        rows = [int(r) for r in rows]
        return dataclasses.replace(
            self,
            input_ids=[self.input_ids[r] for r in rows],
            token_type_ids=[self.token_type_ids[r] for r in rows],
            labels=self.labels[rows],
        )

    def extended(self, other: "EncodedSplit") -> "EncodedSplit":
        """This split's examples followed by `other`'s (one tokenizer's: the same padding id)."""
        if other.pad_id != self.pad_id:
            raise ValueError("cannot join splits of two tokenizers")
        return dataclasses.replace(
            self,
            input_ids=self.input_ids + other.input_ids,
            token_type_ids=self.token_type_ids + other.token_type_ids,
            labels=np.concatenate([self.labels, other.labels]).astype(np.int32),
        )

    def remapped(self, new_id_of: np.ndarray) -> "EncodedSplit":
        """The same examples with every token id (padding included) mapped through `new_id_of[old_id]`:
        what a tokenizer with a permuted vocabulary would have produced."""
        new_id_of = np.asarray(new_id_of, np.int32)
        return dataclasses.replace(
            self, input_ids=[new_id_of[ids] for ids in self.input_ids], pad_id=int(new_id_of[self.pad_id])
        )


def encode_split(split, tokenizer, *, name: str, max_seq_len: int, num_labels: int, vocab_size: int) -> EncodedSplit:
    """Tokenize a `datasets` split of a task (columns text[, text_pair], label), truncating to max_seq_len."""
    if tokenizer.pad_token_id is None:
        raise UserError("the tokenizer has no [PAD] token, so batches cannot be padded")
    pairs = TEXT_PAIR in split.column_names
    # list(): datasets 5 returns a lazy Column, which the tokenizer does not accept.
    encoded = tokenizer(
        list(split[TEXT]),
        list(split[TEXT_PAIR]) if pairs else None,
        truncation=True,
        max_length=max_seq_len,
        return_token_type_ids=True,
    )
    input_ids = [np.asarray(ids, np.int32) for ids in encoded["input_ids"]]
    token_type_ids = [np.asarray(types, np.int32) for types in encoded["token_type_ids"]]
    labels = np.asarray(split[LABEL], np.int32)
    if labels.size and (labels.min() < 0 or labels.max() >= num_labels):
        bad = int(labels[(labels < 0) | (labels >= num_labels)][0])
        raise UserError(f"{name} split: label {bad} is outside 0..{num_labels - 1} ({num_labels} labels)")
    top = max((int(ids.max()) for ids in input_ids if ids.size), default=0)
    if top >= vocab_size:
        raise UserError(
            f"the tokenizer produces id {top}, but the model's vocabulary has {vocab_size} ids: "
            f"tokenizer and checkpoint do not match"
        )
    if len(labels) == 0:
        raise UserError(f"the {name} split is empty")
    return EncodedSplit(name, input_ids, token_type_ids, labels, int(tokenizer.pad_token_id))


def pad_batch(split: EncodedSplit, rows: np.ndarray, length: int | None = None) -> Batch:
    """Rows of `split` padded to `length` (default: their longest), with `index` = the rows themselves."""
    rows = np.asarray(rows, np.int64)
    length = max((split.input_ids[r].size for r in rows), default=1) if length is None else length
    input_ids = np.full((rows.size, length), split.pad_id, np.int32)
    token_type_ids = np.zeros((rows.size, length), np.int32)
    attention_mask = np.zeros((rows.size, length), np.int32)
    for k, r in enumerate(rows):
        n = split.input_ids[r].size
        input_ids[k, :n] = split.input_ids[r]
        token_type_ids[k, :n] = split.token_type_ids[r]
        attention_mask[k, :n] = 1
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "token_type_ids": token_type_ids,
        "labels": split.labels[rows],
        "index": rows.astype(np.int32),
    }


def epoch_order(size: int, seed: int, epoch: int) -> np.ndarray:
    """The shuffled example order of one training epoch: a function of (seed, epoch) alone."""
    return np.random.default_rng([seed, epoch]).permutation(size)


def steps_per_epoch(size: int, batch_size: int) -> int:
    return -(-size // batch_size)


def training_batch(split: EncodedSplit, *, batch_size: int, seed: int, step: int) -> Batch:
    """Global step `step` of seeded training over `split` (the last batch of an epoch may be smaller)."""
    per_epoch = steps_per_epoch(len(split), batch_size)
    epoch, position = divmod(step, per_epoch)
    rows = epoch_order(len(split), seed, epoch)[position * batch_size : (position + 1) * batch_size]
    return pad_batch(split, rows)


def evaluation_batches(split: EncodedSplit, batch_size: int):
    """The split in order, padded batch by batch."""
    for start in range(0, len(split), batch_size):
        yield pad_batch(split, np.arange(start, min(start + batch_size, len(split))))
