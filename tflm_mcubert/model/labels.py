"""Label names: a classifier's `id2label` / `label2id`, from the task's labels or the checkpoint's own.

A checkpoint names its classes in config.json as Hugging Face does (`id2label`: {"0": "negative", ...} and
`label2id`). Names that say nothing (HF's default "LABEL_0", ..., or the ids themselves "0", "1", ...) count
as no names: a checkpoint or task without names gets HF's default, "LABEL_0", "LABEL_1", ....

`finetune`, `distill` and `search` write the names (`choose_label_names`: the task's when it has names,
else the checkpoint's); `export` carries them into report.json and the firmware files, `evaluate` into its
per-label figures.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tflm_mcubert.errors import UserError

ID2LABEL, LABEL2ID = "id2label", "label2id"


def default_label_names(count: int) -> list[str]:
    """Hugging Face's names for unnamed classes."""
    return [f"LABEL_{i}" for i in range(count)]


def are_default(names) -> bool:
    """True for names that carry no meaning: HF's "LABEL_i" or the ids "i" themselves."""
    names = list(names)
    return names == default_label_names(len(names)) or names == [str(i) for i in range(len(names))]


def label_maps(names: list[str]) -> dict:
    """config.json's `id2label` and `label2id` for `names` (ids in order)."""
    check_label_names(names, "label names")
    return {ID2LABEL: {str(i): n for i, n in enumerate(names)}, LABEL2ID: {n: i for i, n in enumerate(names)}}


def check_label_names(names: list[str], source: str) -> None:
    for i, name in enumerate(names):
        if not isinstance(name, str):
            raise UserError(f"{source}: label {i} is {name!r}, not a string")
        if "\0" in name:
            raise UserError(f"{source}: label {i} ({name!r}) holds a NUL character, which no C string can carry")
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise UserError(f"{source}: label name(s) {', '.join(map(repr, duplicates))} name more than one id")


def names_from_config(raw: dict, num_labels: int | None, source: str) -> list[str] | None:
    """The class names of a parsed config.json, or None when it has none (or only default ones)."""
    if not num_labels or ID2LABEL not in raw:
        return None
    id2label = raw[ID2LABEL]
    if not isinstance(id2label, dict):
        raise UserError(f"{source}: id2label must be an object mapping ids to names, got {type(id2label).__name__}")
    try:
        by_id = {int(k): v for k, v in id2label.items()}
    except ValueError:
        raise UserError(f"{source}: id2label keys must be ids 0..{num_labels - 1}, got {sorted(id2label)}") from None
    if sorted(by_id) != list(range(num_labels)):
        raise UserError(
            f"{source}: id2label names ids {sorted(by_id)}, but the classifier has {num_labels} labels "
            f"(ids 0..{num_labels - 1})"
        )
    names = [by_id[i] for i in range(num_labels)]
    check_label_names(names, f"{source} id2label")
    return None if are_default(names) else names


def checkpoint_label_names(ckpt_dir: str | Path, num_labels: int | None) -> list[str] | None:
    """The names in a checkpoint directory's config.json, or None (see `names_from_config`)."""
    path = Path(ckpt_dir) / "config.json"
    try:
        raw = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read the label names ({exc})") from None
    return names_from_config(raw, num_labels, str(path)) if isinstance(raw, dict) else None


def names_or_default(names: list[str] | None, count: int) -> list[str]:
    return list(names) if names else default_label_names(count)


def choose_label_names(
    task_names: list[str], checkpoint_names: list[str] | None, what: str, *, strict: bool = False, warn=None
) -> list[str]:
    """The names a trained model's checkpoint gets: the task's (its ids are what the model was trained on)
    when they mean something, else the checkpoint's, else HF's default. A disagreement is reported through
    `warn`; with `strict` (the checkpoint's logits teach the model: distill, search) a task whose names are
    the checkpoint's in another order is refused, since its ids would contradict the checkpoint's."""
    warn = warn or (lambda message: print(message, file=sys.stderr, flush=True))
    meaningful = None if are_default(task_names) else list(task_names)
    if meaningful and checkpoint_names and meaningful != list(checkpoint_names):
        if strict and sorted(meaningful) == sorted(checkpoint_names):
            raise UserError(
                f"{what}: the task's labels by id {meaningful} are the checkpoint's id2label "
                f"{list(checkpoint_names)} in another order: its logits would teach the wrong ids; "
                f"fine-tune the checkpoint on this task first, or fix its config.json id2label"
            )
        warn(
            f"warning: the task's labels by id {meaningful} differ from {what}'s id2label "
            f"{list(checkpoint_names)}; the output names the ids by the task's labels (what it was trained on)"
        )
    if meaningful:
        return meaningful
    if checkpoint_names:
        return list(checkpoint_names)
    return default_label_names(len(task_names))


def labels_entry(num_labels: int | None, names: list[str] | None) -> dict:
    """{"labels": names by id} for a classifier (HF's default names without), {} for a bare encoder: what
    export's and evaluate's reports say about the model's classes."""
    return {"labels": names_or_default(names, num_labels)} if num_labels else {}
