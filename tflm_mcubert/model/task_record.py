"""The task a checkpoint was trained on, as config.json records it (`TASK_KEY`).

`finetune`, `distill` and `search` write it so that later steps can default to the task's own data:
`export` and `evaluate` calibrate on the task's training text rather than on built-in English sentences
(a model fine-tuned on a narrow domain saturates its int8 logits on text it never saw). A local task is
recorded by its absolute path; a checkpoint moved to another machine keeps the record, and the steps that
read it say when the data is not there and fall back to their defaults.
"""

from __future__ import annotations

from pathlib import Path

from tflm_mcubert.errors import UserError

TASK_KEY = "tflm_mcubert_task"
_FIELDS = ("task", "text_column", "text_pair_column", "label_column")


def task_record(task: str, *, text_column: str, text_pair_column: str | None, label_column: str) -> dict:
    """The record of `task` (a task name or a local file/directory) and the columns it was read with."""
    path = Path(task)
    name = str(path.resolve()) if path.exists() else str(task)
    return {
        "task": name,
        "text_column": text_column,
        "text_pair_column": text_pair_column,
        "label_column": label_column,
    }


def read_task_record(raw: dict, source: str) -> dict | None:
    """config.json's task record (`raw` is the parsed file), None when it has none; refused when malformed,
    since a wrong record would silently calibrate on the wrong text."""
    record = raw.get(TASK_KEY)
    if record is None:
        return None
    if not isinstance(record, dict) or set(record) != set(_FIELDS):
        raise UserError(f"{source}: {TASK_KEY} must be an object with exactly the fields {', '.join(_FIELDS)}")
    for field in _FIELDS:
        value = record[field]
        if not (isinstance(value, str) and value) and not (field == "text_pair_column" and value is None):
            raise UserError(f"{source}: {TASK_KEY}.{field} must be a non-empty string, got {value!r}")
    return dict(record)
