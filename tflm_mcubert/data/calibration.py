"""Representative inputs for post-training quantization: real sentences when there is a tokenizer, else
seeded random token ids (a random-weight model has no meaningful text anyway). Without --calibration, a
checkpoint that records its task (model/task_record.py) calibrates on that task's training text."""

from __future__ import annotations

import csv
import dataclasses

from importlib import resources
from pathlib import Path

import sys

import numpy as np

from tflm_mcubert.data import tasks
from tflm_mcubert.errors import UserError

Sample = dict[str, np.ndarray]  # input name -> int32 [1, seq_len]
Text = str | tuple[str, str]  # a sentence, or a sentence pair
BUILTIN_SOURCE = "built-in English sentences"


def builtin_sentences() -> list[str]:
    text = resources.files("tflm_mcubert.data").joinpath("calibration_sentences.txt").read_text()
    return [line.strip() for line in text.splitlines() if line.strip()]


def evaluation_sentences() -> list[str]:
    """Held-out English sentences (none is a calibration sentence): the default fidelity texts."""
    text = resources.files("tflm_mcubert.data").joinpath("evaluation_sentences.txt").read_text()
    return [line.strip() for line in text.splitlines() if line.strip()]


def read_sentences(path: str | Path, flag: str = "--calibration") -> list[str]:
    """One text per line (a .txt), or the first text-like column of a .csv/.tsv. `flag` names the option
    the path came from, in errors."""
    path = Path(path)
    if not path.is_file():
        alternative = ", or 'random'" if flag == "--calibration" else ""
        raise UserError(f"{flag}: no such file {str(path)!r} (give a text file, one sentence a line{alternative})")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError:
        raise UserError(f"{flag}: {path} is not UTF-8 text") from None
    if path.suffix.lower() in (".csv", ".tsv"):
        rows = list(csv.reader(lines, delimiter="\t" if path.suffix.lower() == ".tsv" else ","))
        header, body = rows[0] if rows else [], rows[1:]
        column = next(
            (i for i, name in enumerate(header) if name.strip().lower() in ("text", "sentence", "sentence1", "review")),
            None,
        )
        if column is None:
            raise UserError(
                f"{flag}: {path} has no text column (expected one of text/sentence/sentence1/review; found {header})"
            )
        lines = [row[column] for row in body if len(row) > column]
    sentences = [line.strip() for line in lines if line.strip()]
    if not sentences:
        raise UserError(f"{flag}: {path} holds no text")
    return sentences


def task_texts(record: dict, count: int) -> list[Text]:
    """The first `count` texts (pairs for a pair task) of the recorded task's training split (already shuffled)."""
    data = tasks.load_task(
        record["task"],
        text_column=record["text_column"],
        text_pair_column=record["text_pair_column"],
        label_column=record["label_column"],
    )
    rows = data["train"].select(range(min(count, len(data["train"]))))
    if tasks.TEXT_PAIR in rows.column_names:
        return list(zip(rows[tasks.TEXT], rows[tasks.TEXT_PAIR]))
    return list(rows[tasks.TEXT])


def _default_texts(task: dict | None, count: int) -> tuple[list[Text], str]:
    """Without --calibration: the checkpoint's task when it records one and its data is here, else built-in."""
    if task is not None:
        try:
            return task_texts(task, count), f"the training split of {task['task']} (the checkpoint's task)"
        except (UserError, OSError, ConnectionError) as err:
            print(
                f"warning: the checkpoint's task {task['task']} cannot be read here ({err}); calibrating on "
                f"{BUILTIN_SOURCE} (give --calibration with text like the model's input)",
                file=sys.stderr,
            )
    return builtin_sentences(), BUILTIN_SOURCE


def tokenize(tokenizer, sentences: list[Text], seq_len: int) -> list[Sample]:
    samples = []
    for sentence in sentences:
        first, second = sentence if isinstance(sentence, tuple) else (sentence, None)
        enc = tokenizer(first, second, max_length=seq_len, truncation=True, padding="max_length", return_tensors="np")
        samples.append(
            {
                "input_ids": enc["input_ids"].astype(np.int32),
                "attention_mask": enc["attention_mask"].astype(np.int32),
                "token_type_ids": enc.get("token_type_ids", np.zeros_like(enc["input_ids"])).astype(np.int32),
            }
        )
    return samples


def random_samples(vocab_size: int, seq_len: int, count: int, seed: int = 0) -> list[Sample]:
    """Random ids framed like real input: [CLS]=101 ... [SEP]=102 then padding, lengths varied."""
    if seq_len < 2:
        raise ValueError(f"random_samples: seq_len must be at least 2 ([CLS] and [SEP]), got {seq_len}")
    rng = np.random.default_rng(seed)
    samples = []
    for _ in range(count):
        length = int(rng.integers(max(2, seq_len // 4), seq_len + 1))
        ids = np.zeros((1, seq_len), np.int32)
        ids[0, :length] = (
            rng.integers(1000, vocab_size, length) if vocab_size > 1000 else rng.integers(1, vocab_size, length)
        )
        if vocab_size > 102:
            ids[0, 0], ids[0, length - 1] = 101, 102
        mask = np.zeros((1, seq_len), np.int32)
        mask[0, :length] = 1
        samples.append({"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros((1, seq_len), np.int32)})
    return samples


@dataclasses.dataclass(frozen=True)
class Calibration:
    """--calibration, read once: its sentences (None: random ids) and samples at any sequence length."""

    sentences: list[Text] | None
    source: str  # BUILTIN_SOURCE, the checkpoint's task, the file, or "random"
    tokenizer: object
    vocab_size: int
    count: int
    seed: int

    @classmethod
    def load(
        cls, spec: str | None, *, tokenizer, vocab_size: int, count: int = 32, seed: int = 0, task: dict | None = None
    ) -> "Calibration":
        """`spec` is --calibration; `task` the checkpoint's task record, the default source of text."""
        if spec == "random" or (spec is None and tokenizer is None):
            return cls(None, "random", tokenizer, vocab_size, count, seed)
        given = read_sentences(spec) if spec is not None else None  # a missing file is named first
        if tokenizer is None:
            raise UserError(
                "--calibration: text needs a tokenizer, and this checkpoint has none "
                "(add vocab.txt to it, or use --calibration random)"
            )
        sentences, source = _default_texts(task, count) if given is None else (given, spec)
        return cls(sentences, source, tokenizer, vocab_size, count, seed)

    def samples(self, seq_len: int) -> tuple[list[Sample], str]:
        """The samples at `seq_len` and a one-line description of where they came from (for the report)."""
        if self.sentences is None:
            return (
                random_samples(self.vocab_size, seq_len, self.count, self.seed),
                f"{self.count} random token sequences (seed {self.seed})",
            )
        return (
            tokenize(self.tokenizer, self.sentences[: self.count], seq_len),
            f"{min(self.count, len(self.sentences))} sentences from {self.source}",
        )


def calibration_samples(
    spec: str | None, *, tokenizer, vocab_size: int, seq_len: int, count: int = 32, seed: int = 0
) -> tuple[list[Sample], str]:
    """Returns the samples and a one-line description of where they came from (for the report)."""
    return Calibration.load(spec, tokenizer=tokenizer, vocab_size=vocab_size, count=count, seed=seed).samples(seq_len)
