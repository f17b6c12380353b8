"""Per-example correctness as packed bits: what a committed summary keeps of a run's predictions. Never the
data set's labels, never the predictions themselves: whether each example was right is all the paired
statistics (McNemar, the paired bootstrap in bench_stats.py) read, and it is 1/8 of a byte an example.

    record = {"predictions": {"test": [...]}, "labels": {"test": [...]}}     # a run as a script writes it
    compact(record) == {"correct": {"test": "1275:..."}}                       # as it is committed
    correct(record, "test")                                                    # either form: bool[examples]

A run that evaluates several models keeps them by name: {"predictions": {model: {split: [...]}}} becomes
{"correct": {model: {split: bits}}}; `correct(record, split, model)` and `models(record)` read both forms.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np

PREDICTIONS, LABELS, CORRECT = "predictions", "labels", "correct"


def pack(correct_examples) -> str:
    """ "<count>:<base64 of the bits, most significant first>"."""
    bits = np.asarray(correct_examples, bool)
    return f"{bits.size}:{base64.b64encode(np.packbits(bits).tobytes()).decode()}"


def unpack(text: str) -> np.ndarray:
    count, _, data = text.partition(":")
    return np.unpackbits(np.frombuffer(base64.b64decode(data), np.uint8), count=int(count)).astype(bool)


def correct(record: dict, split: str | None, model: str | None = None) -> np.ndarray:
    """bool[examples] of `record` on `split` (of `model`, for a run that evaluates several; split None for
    a run of one text whose labels are one list), either form."""
    if CORRECT in record:
        entry = record[CORRECT][model] if model is not None else record[CORRECT]
        return unpack(entry if split is None else entry[split])
    entry = record[PREDICTIONS][model] if model is not None else record[PREDICTIONS]
    labels = record[LABELS] if split is None else record[LABELS][split]
    return np.asarray(entry if split is None else entry[split]) == np.asarray(labels)


def models(record: dict) -> set[str]:
    """The models a several-model run evaluated (empty for a one-model run or a run without predictions)."""
    entry = record.get(CORRECT, record.get(PREDICTIONS, {}))
    return {name for name, value in entry.items() if isinstance(value, dict)}


def compact(value):
    """`value` (a summary, a run, any JSON) with every run's predictions and labels replaced by its packed
    correctness."""
    if isinstance(value, list):
        return [compact(item) for item in value]
    if not isinstance(value, dict):
        return value
    out = {key: compact(item) for key, item in value.items() if key not in (PREDICTIONS, LABELS)}
    if PREDICTIONS in value and LABELS in value:
        out[CORRECT] = _packed(value[PREDICTIONS], value[LABELS])
    else:
        out.update({key: value[key] for key in (PREDICTIONS, LABELS) if key in value})
    return out


def _packed(predictions: dict, labels) -> dict:
    def bits(predicted, expected) -> str:
        return pack(np.asarray(predicted) == np.asarray(expected))

    if isinstance(labels, list):  # one text: {model: predictions}
        return {name: bits(p, labels) for name, p in predictions.items()}
    return {
        name: {split: bits(p, labels[split]) for split, p in by_split.items()}
        if isinstance(by_split, dict)
        else bits(by_split, labels[name])
        for name, by_split in predictions.items()
    }


def write_json(path: Path, record: dict) -> None:
    """A summary file as it is committed: each run's predictions and labels as its per-example correctness in
    packed bits (results_bits.py), written compact."""
    path.write_text(json.dumps(compact(record), separators=(",", ":")) + "\n")
