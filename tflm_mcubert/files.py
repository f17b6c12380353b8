"""Where commands write (`--out`, `--json`, `--dump`): checked before any work, one clear line when wrong.

A long export or search must not end in a traceback because its output directory is a file or sits
on a read-only file system, so the location is created and probed with a real write up front.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from tflm_mcubert.errors import UserError

METRICS_FILE = "metrics.json"  # what a training command (finetune, distill, search) measured, in its --out


def output_directory(path: str | Path, flag: str = "--out") -> Path:
    """`path` as an existing, writable directory (created if missing), or a UserError naming why not."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UserError(f"{flag} {path}: is a file; name a directory (new or existing)")
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename and Path(exc.filename) != path else ""
        raise UserError(f"{flag} {path}: cannot be written: {exc.strerror or exc}{where}") from None
    return path


def output_file(path: str | Path, flag: str) -> Path:
    """`path` as a file that can be written: its directory exists and is writable, and it is no directory."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{flag} {path}: is a directory; name a file")
    output_directory(path.parent, flag=f"{flag} {path}: its directory")
    return path
