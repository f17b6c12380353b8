"""More text for a distilled student: augmented copies of the training sentences and the user's unlabeled
in-domain text (`distill --augment N --unlabeled FILE|DIR`). The teacher labels them (its logits, cached in
the run directory by `train/teacher_labels.py`), so no human label is needed: the student learns to imitate
the teacher on more of its input space, which a small student fits better than the labelled split alone
(TinyBERT's task data augmentation, Jiao et al. 2020).

Each augmented copy is one of five edits of a sentence's whitespace-separated words, drawn with the
weights of `OPERATIONS`:

- replace: some words by one of their nearest neighbours in the teacher's word-embedding table (cosine);
- mask: some words by the tokenizer's mask token;
- drop: some words removed;
- swap: two words exchanged;
- mix: the first half of the sentence followed by the second half of another training sentence.

Copy k of sentence i depends only on (seed, i, k), so the same seed gives the same texts on every machine,
and a resumed run finds the same examples (and so its cached teacher logits) again. A copy equal to its
original is redrawn; the edit's label may differ from the original's, which is why the teacher, not the
original label, labels it.

Unlabeled text: a UTF-8 `.txt` file, one text a line, or a directory of them (read recursively, in name
order); blank lines are skipped and repeated lines kept once.
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import numpy as np

from tflm_mcubert.errors import UserError

OPERATIONS = {"replace": 0.4, "mask": 0.15, "drop": 0.15, "swap": 0.15, "mix": 0.15}
EDIT_PROBABILITY = 0.3  # per word, for replace; mask and drop use half of it (they remove information)
NEIGHBOURS = 8  # candidates per word for replace: beyond ~10, cosine neighbours drift off topic
REDRAWS = 8  # attempts at a copy that differs from its original before giving up on that copy
UNLABELED_SUFFIX = ".txt"
MAX_AUGMENT = 64  # per sentence: above this the teacher's labelling alone would take hours on a CPU


@dataclasses.dataclass(frozen=True)
class Augmentation:
    """What the student trains on beyond the labelled split: `per_sentence` augmented copies of each
    training sentence and the texts of `unlabeled` (a file or directory), all labelled by the teacher."""

    per_sentence: int = 0
    unlabeled: str | None = None

    def __post_init__(self):
        if not 0 <= self.per_sentence <= MAX_AUGMENT:
            raise UserError(f"--augment must be in 0..{MAX_AUGMENT} copies per sentence, got {self.per_sentence}")

    @property
    def active(self) -> bool:
        return self.per_sentence > 0 or self.unlabeled is not None


# --- unlabeled text --------------------------------------------------------------------------------------


def read_unlabeled(source: str | Path) -> list[str]:
    """The texts of a `.txt` file (one a line) or of every `.txt` file under a directory, in name order;
    blank lines skipped, repeats kept once. A clear error for a missing path, a directory without `.txt`
    files, a file that is not UTF-8, or no text at all."""
    path = Path(source)
    if path.is_dir():
        files = sorted(p for p in path.rglob(f"*{UNLABELED_SUFFIX}") if p.is_file())
        if not files:
            raise UserError(f"--unlabeled {path}: the directory holds no {UNLABELED_SUFFIX} files (one text a line)")
    elif path.is_file():
        files = [path]
    else:
        raise UserError(f"--unlabeled {path}: no such file or directory")
    texts = []
    for file in files:
        texts += [line.strip() for line in _read_utf8(file).splitlines() if line.strip()]
    if not texts:
        raise UserError(f"--unlabeled {path}: holds no text (only blank lines)")
    return list(dict.fromkeys(texts))


def _read_utf8(file: Path) -> str:
    data = file.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise UserError(
            f"--unlabeled {file}: not UTF-8 text (byte {error.start}, line {line}); convert it, e.g. with iconv"
        ) from None


def texts_digest(texts: list[str]) -> str:
    """What a resumed run must find unchanged in the unlabeled text (its path alone could be rewritten)."""
    digest = hashlib.sha256()
    for text in texts:
        digest.update(text.encode() + b"\0")
    return digest.hexdigest()


# --- neighbours in the teacher's embedding space -----------------------------------------------------------


def embedding_neighbours(
    texts: list[str], vocab: dict[str, int], table: np.ndarray, count: int = NEIGHBOURS
) -> dict[str, tuple[str, ...]]:
    """For each word of `texts` that is one whole-word piece of `vocab`, its `count` nearest whole-word
    pieces by cosine similarity of `table`'s rows (ties broken by id, so the result is deterministic)."""
    candidates = sorted((i, t) for t, i in vocab.items() if _is_word_piece(t) and i < len(table))
    if len(candidates) <= count:
        return {}
    ids = np.array([i for i, _ in candidates])
    words = [t for _, t in candidates]
    position = {t: k for k, t in enumerate(words)}
    wanted = sorted({w.lower() for text in texts for w in text.split()} & set(position))
    rows = table[ids].astype(np.float32)
    rows /= np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)
    out = {}
    for start in range(0, len(wanted), 512):  # 512 x |candidates| similarities at a time: bounded memory
        chunk = wanted[start : start + 512]
        query = np.array([position[w] for w in chunk])
        similarity = rows[query] @ rows.T
        similarity[np.arange(len(chunk)), query] = -np.inf  # a word is not its own neighbour
        top = np.argpartition(-similarity, count, axis=1)[:, :count]
        for word, row, picks in zip(chunk, similarity, top):
            ranked = sorted(picks, key=lambda k: (-row[k], k))
            out[word] = tuple(words[k] for k in ranked)
    return out


def _is_word_piece(token: str) -> bool:
    return len(token) > 1 and token.isalpha() and token.isascii()


# --- augmented copies ------------------------------------------------------------------------------------


def augment_texts(
    texts: list[str],
    per_sentence: int,
    seed: int,
    neighbours: dict[str, tuple[str, ...]],
    mask_token: str | None = None,
) -> list[str]:
    """`per_sentence` edited copies of each of `texts` (copy k of text i at index i·per_sentence + k); see
    the module docstring. Without a `mask_token` the mask edit drops the words instead."""
    words = [text.split() for text in texts]
    names = list(OPERATIONS)
    weights = np.array(list(OPERATIONS.values()))
    out = []
    for i, original in enumerate(words):
        for k in range(per_sentence):
            rng = np.random.default_rng([seed, i, k])
            copy = original
            for _ in range(REDRAWS):
                operation = names[rng.choice(len(names), p=weights / weights.sum())]
                copy = _edit(operation, original, words, rng, neighbours, mask_token)
                if copy != original:
                    break
            out.append(" ".join(copy))
    return out


def _edit(operation, original, words, rng, neighbours, mask_token) -> list[str]:
    if operation == "replace":
        return [
            neighbours[w.lower()][rng.integers(len(neighbours[w.lower()]))]
            if w.lower() in neighbours and rng.random() < EDIT_PROBABILITY
            else w
            for w in original
        ]
    if operation == "mask" and mask_token is not None:
        return [mask_token if rng.random() < EDIT_PROBABILITY / 2 else w for w in original]
    if operation in ("mask", "drop"):
        kept = [w for w in original if rng.random() >= EDIT_PROBABILITY / 2]
        return kept or original
    if operation == "swap":
        if len(original) < 2:
            return original
        a, b = rng.choice(len(original), size=2, replace=False)
        swapped = list(original)
        swapped[a], swapped[b] = swapped[b], swapped[a]
        return swapped
    other = words[rng.integers(len(words))]  # mix
    return original[: (len(original) + 1) // 2] + other[len(other) // 2 :]
