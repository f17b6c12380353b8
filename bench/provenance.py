"""What a committed summary says about where its figures came from: the code's commit, the environment
(CPU, Python and the libraries that compute the figures) and the SHA-256 of every checkpoint it read.

    summary["provenance"] = provenance({"student": "runs/rt/student"})
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import platform
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = (
    "tflm-mcubert",
    "numpy",
    "tensorflow",
    "keras",
    "transformers",
    "tokenizers",
    "torch",
    "tflite-micro",
    "unicorn",
)


def commit() -> str:
    """HEAD's hash, with "+changes" when the work tree differs from it (then the figures are not HEAD's)."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=30)
        return done.stdout.strip() if done.returncode == 0 else ""

    head = git("rev-parse", "HEAD") or "unknown (not a git checkout)"
    return head + ("+changes" if git("status", "--porcelain", "--untracked-files=no") else "")


def cpu() -> str:
    try:
        names = [line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                 if line.startswith("model name")]  # fmt: skip
    except OSError:
        names = []
    return f"{names[0]} x {len(names)}" if names else platform.processor() or platform.machine()


def environment() -> dict:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return {"cpu": cpu(), "python": platform.python_version(), "system": platform.platform(), "packages": versions}


def checkpoint_sha256(path: Path) -> str:
    """One digest of a checkpoint folder: every file's relative path and bytes, in path order (or a file's)."""
    path = Path(path)
    digest = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]:
        digest.update(str(file.relative_to(path) if path.is_dir() else file.name).encode() + b"\0")
        with open(file, "rb") as stream:
            for block in iter(lambda: stream.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def provenance(checkpoints: dict[str, str | Path | None]) -> dict:
    """{"commit", "environment", "checkpoints": {role: {"path", "sha256"}}} for the checkpoints that exist."""
    found = {role: Path(p) for role, p in checkpoints.items() if p and Path(p).exists()}
    return {
        "commit": commit(),
        "environment": environment(),
        "checkpoints": {role: {"path": str(p), "sha256": checkpoint_sha256(p)} for role, p in found.items()},
    }
