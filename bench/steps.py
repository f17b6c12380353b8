"""The benchmarks' steps: one `python -m tflm_mcubert ...` command of this checkout, run unless the file it
leaves is there (so an interrupted benchmark resumes where it stopped), timed, its progress logged; and the
claim that keeps a runs folder to one set of settings.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def log(message: str, out: Path | None = None) -> None:
    line = f"{time.strftime('%H:%M:%S', time.gmtime())} {message}"
    print(line, file=sys.stderr, flush=True)
    if out is not None:
        with open(out / "progress.log", "a") as f:
            f.write(line + "\n")


def claim(out: Path, settings: dict) -> None:
    """Refuse to mix runs made with other settings into `out`."""
    out.mkdir(parents=True, exist_ok=True)
    record = out / "bench.json"
    if record.is_file():
        previous = json.loads(record.read_text())
        if previous != settings:
            changed = {k: (previous.get(k), settings.get(k)) for k in settings if previous.get(k) != settings.get(k)}
            raise SystemExit(f"{out} holds runs made with other settings (was, now): {changed}")
    record.write_text(json.dumps(settings, indent=1) + "\n")


def package_env() -> dict:
    """The environment of a step: this checkout's package first, the hub never asked."""
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))  # this checkout's package
    return {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": path}


HEARTBEAT_SECONDS = 60.0  # how often a running step's wall time so far is written down


def run_step(command: list[str], done: Path, name: str, out: Path) -> float | None:
    """Run `python -m tflm_mcubert ...command` unless `done` exists: its wall seconds (kept in
    `done`.seconds, read back when it was done before), None (logged) if it failed. A step stopped part way
    (a killed job, a failure) and run again (resuming) counts the earlier attempts' seconds too: they are
    written down every HEARTBEAT_SECONDS while it runs (`attempts_file`)."""
    timing = done.with_name(done.name + ".seconds")
    if done.exists():
        return float(timing.read_text()) if timing.is_file() else 0.0
    attempts = attempts_file(out, done)
    earlier = float(attempts.read_text()) if attempts.is_file() else 0.0
    log(f"{name} {' '.join(command)}" + (f" (after {earlier:.0f} s of earlier attempts)" if earlier else ""), out)
    began = time.monotonic()
    process = subprocess.Popen(
        step_argv(command), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=package_env()
    )
    while True:
        try:
            _, stderr = process.communicate(timeout=HEARTBEAT_SECONDS)
            break
        except subprocess.TimeoutExpired:
            attempts.write_text(f"{earlier + time.monotonic() - began:.1f}\n")
    seconds = earlier + time.monotonic() - began
    if process.returncode != 0:
        attempts.write_text(f"{seconds:.1f}\n")
        log(f"{name} failed ({process.returncode}): {stderr.strip().splitlines()[-3:]}", out)
        return None
    log(f"{name} done in {seconds:.0f} s", out)
    timing.write_text(f"{seconds:.1f}\n")
    attempts.unlink(missing_ok=True)
    return seconds


def step_argv(command: list[str]) -> list[str]:
    return [sys.executable, "-m", "tflm_mcubert", *command]


def attempts_file(out: Path, done: Path) -> Path:
    """Where the wall seconds of `done`'s unfinished attempts are kept: in `out`/attempts/, not beside
    `done`, whose folder is the command's own output."""
    try:
        key = done.resolve().relative_to(out.resolve())
    except ValueError:
        key = done.resolve().relative_to(done.resolve().anchor)
    folder = out / "attempts"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / ("__".join(key.parts) + ".seconds")
