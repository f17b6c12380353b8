"""An export owns its folder: it writes every file into a staging folder next to --out and moves the set
into place, so --out never mixes two exports' files.

    report = write_folder(out_dir, lambda staging: export_into(staging), force=False, expected=known_files)

A file of the earlier export that this one does not write is removed only when the earlier report.json
lists it (`all_files`); a file this export would overwrite, or one that looks like an export's output
(model.tflite, model_vocab.*, tokenizer/, ...), that no report lists is refused by name unless --force,
which overwrites the first kind and keeps the second. A file no export wrote is never deleted.

`read_report` is the one validated reader of an export's report.json (also `tokenize`'s).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from tflm_mcubert.errors import DoesNotFitError, UserError
from tflm_mcubert.export import bundles
from tflm_mcubert.firmware.cmake_bundle import BUNDLE_DIR, BUNDLE_PARTS
from tflm_mcubert.firmware.firmware_files import FILES as FIRMWARE_FILES
from tflm_mcubert.firmware.vocab_files import VOCAB_FILES

REPORT = "report.json"
MODEL_IDS = "model_ids.npy"  # a decoder export's tokenizer id -> model id, when its table is reordered
TOKENIZER_DIR = "tokenizer"
# Top-level names an export writes (besides <model>_mcubert.zip and tokenizer/): found in --out without a
# report that lists them, they are another export's leftovers, which this export refuses to mix with.
EXPORT_NAMES = frozenset({"model.tflite", "model_data.cc", "model_data.h", *FIRMWARE_FILES, *VOCAB_FILES, REPORT})


def read_report(path: Path, flag: str = "--export") -> dict:
    """An export's report.json as a dict, or a UserError naming what is wrong with it."""
    try:
        report = json.loads(Path(path).read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise UserError(f"{flag}: {path} is not a readable report.json ({exc}); export again") from None
    if not isinstance(report, dict):
        raise UserError(f"{flag}: {path} holds a JSON {type(report).__name__}, not an export's report (an object)")
    files = report.get("files", [])
    if not isinstance(files, list) or not all(isinstance(name, str) for name in files):
        raise UserError(f"{flag}: {path}: 'files' is not a list of file names; export again")
    for key, kind, name in (("seq_len", int, "integer"), ("model", dict, "object")):
        if key in report and not isinstance(report[key], kind):
            raise UserError(f"{flag}: {path}: {key!r} is not a JSON {name}; export again")
    return report


def files_under(folder: Path) -> list[str]:
    """Every file below `folder`, as sorted '/'-separated paths relative to it."""
    return sorted(p.relative_to(folder).as_posix() for p in Path(folder).rglob("*") if p.is_file())


def _legacy_owned(out_dir: Path, files: list[str]) -> set[str]:
    """What a report without `all_files` owns: its names, and what its folders hold of an export's."""
    owned = {name for name in files if not name.endswith("/")}
    for folder in (name.rstrip("/") for name in files if name.endswith("/")):
        for rel in files_under(out_dir / folder) if (out_dir / folder).is_dir() else []:
            if folder != BUNDLE_DIR or rel.startswith(BUNDLE_PARTS):  # the rest of cmake/ is the user's
                owned.add(f"{folder}/{rel}")
    return owned


def _inside(out_dir: Path, rel: str) -> bool:
    """Whether `rel` names a path below `out_dir` (a report's list never reaches outside the folder)."""
    root = out_dir.resolve()
    return bool(rel) and not Path(rel).is_absolute() and (root / rel).resolve().is_relative_to(root)


def owned_files(out_dir: Path) -> set[str]:
    """The files the export already in `out_dir` lists as its own (none without a readable report.json)."""
    out_dir = Path(out_dir)
    path = out_dir / REPORT
    if not path.is_file():
        return set()
    try:
        report = read_report(path, flag="--out")
    except UserError:
        return set()  # nothing is owned: report.json itself is refused by name below
    listed = report.get("all_files")
    if not isinstance(listed, list) or not all(isinstance(name, str) for name in listed):
        listed = _legacy_owned(out_dir, report["files"])
    return {rel for rel in listed if _inside(out_dir, rel)}


def _looks_exported(rel: str) -> bool:
    return (
        rel in EXPORT_NAMES or rel.startswith(f"{TOKENIZER_DIR}/") or ("/" not in rel and rel.endswith("_mcubert.zip"))
    )


def unowned(out_dir: Path, owned: set[str], written) -> list[str]:
    """Files in `out_dir` that this export would overwrite (`written`) or that look like an export's, and
    that no earlier report lists as its own."""
    out_dir = Path(out_dir)
    candidates = {p.name for p in out_dir.iterdir() if p.is_file()} | set(written)
    if (out_dir / TOKENIZER_DIR).is_dir():
        candidates |= {f"{TOKENIZER_DIR}/{rel}" for rel in files_under(out_dir / TOKENIZER_DIR)}
    return sorted(
        rel
        for rel in candidates
        if rel not in owned and (out_dir / rel).is_file() and (rel in written or _looks_exported(rel))
    )


def check_unowned(out_dir: Path, owned: set[str], written=(), force: bool = False) -> None:
    """A UserError naming the files no earlier export there owns (see `unowned`), unless `force`."""
    found = unowned(out_dir, owned, set(written))
    if found and not force:
        shown = ", ".join(found[:6]) + (f" and {len(found) - 6} more" if len(found) > 6 else "")
        raise UserError(
            f"--out {out_dir}: holds files no earlier export's report.json lists as its own: {shown}; "
            "move them away or pass --force (overwrites those this export writes, keeps the rest)"
        )


def staging_folder(out_dir: Path) -> Path:
    """A fresh folder next to `out_dir` (inside it when its parent cannot be written), on its file system."""
    out_dir = Path(out_dir).resolve()  # `--out .` has a name and a parent too
    try:
        return Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.export-", dir=out_dir.parent))
    except OSError:
        return Path(tempfile.mkdtemp(prefix=".export-", dir=out_dir))


def discard(staging: Path) -> None:
    shutil.rmtree(staging, ignore_errors=True)


def _remove_stale(out_dir: Path, stale: list[str]) -> None:
    """Delete the earlier export's files in `stale`, then the folders that removal left empty."""
    folders = set()
    for rel in stale:
        (out_dir / rel).unlink(missing_ok=True)
        folders.update(parent for parent in Path(rel).parents if parent != Path("."))
    for folder in sorted(folders, key=lambda p: len(p.parts), reverse=True):
        path = out_dir / folder
        if path.is_dir() and not any(path.iterdir()):
            path.rmdir()


def move_into_place(staging: Path, out_dir: Path, owned: set[str], force: bool = False) -> list[str]:
    """Move every file of `staging` into `out_dir` (report.json last) and remove the earlier export's files
    this one did not write; returns the files moved. Refuses, moving nothing, when a file it would
    overwrite or one like an export's is not the earlier export's (see `check_unowned`), unless `force`."""
    out_dir = Path(out_dir)
    written = files_under(staging)
    check_unowned(out_dir, owned, written, force)
    for rel in sorted(written, key=lambda rel: rel == REPORT):
        target = out_dir / rel
        if target.is_dir() and not target.is_symlink():
            raise UserError(f"--out {out_dir}: {rel} is a folder where the export writes a file; move it away")
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staging / rel, target)
    _remove_stale(out_dir, sorted(owned - set(written)))
    discard(staging)
    return written


def write_folder(out_dir: Path, work, force: bool = False, expected=()):
    """`work(staging)` writes an export into a staging folder; its files then replace the earlier export's
    in `out_dir` (also when `work` raises DoesNotFitError: the files are kept for inspection). Files no
    earlier export owns are refused before the work starts where they can be (`expected`: files known
    to be written; see `check_unowned`)."""
    owned = owned_files(out_dir)
    check_unowned(out_dir, owned, expected, force)
    staging = staging_folder(out_dir)
    try:
        try:
            result = work(staging)
        except DoesNotFitError:
            move_into_place(staging, out_dir, owned, force)
            raise
        move_into_place(staging, out_dir, owned, force)
        return result
    finally:
        discard(staging)


def finish_report(out_dir: Path, report: dict, started: float, request, details: str, kind) -> None:
    """The export's last step, either kind: the asked-for bundles (`kind`: bundles.ENCODER or DECODER,
    described as "<model>, <details>"), then report.json naming every file (what a later export here may
    replace) and the seconds it took since `started`."""
    model = str(request.checkpoint or request.preset)
    report["files"] += bundles.write_bundles(out_dir, request.bundles, model, f"{model}, {details}", kind)
    report["all_files"] = sorted([*files_under(out_dir), REPORT])
    report["seconds"] = round(time.time() - started, 1)
    (out_dir / REPORT).write_text(json.dumps(report, indent=2) + "\n")


def model_ids(export_dir: Path, vocab_size: int) -> np.ndarray:
    """Tokenizer id -> model id of an export (the identity when its table is dense)."""
    path = Path(export_dir) / MODEL_IDS
    return np.load(path) if path.is_file() else np.arange(vocab_size)
