"""Try a model in a given TFLM arena size, in a child process.

The tflite-micro wheel does not always fail cleanly when the arena is too small: some kernels use a
persistent buffer the allocator could not provide, and the process dies (SIGSEGV; seen on BERT at arena
sizes of 0-100 and 20,000 bytes, while 60,000 gives a clean error). So every size that might be too small
is tried in a child first; a crash there only means "does not fit".

One child serves many probes (a bisection makes ~20), and is restarted after a crash. The child is
`python -m tflm_mcubert.runtime.arena_probe_child MODEL.tflite` (arena_probe_child.py): it reads lines
"allocate N" or "run N" and answers each with a line "1" (fits) or "0 TFLM's report".
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

_PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the directory holding tflm_mcubert/


class ArenaProbe:
    """Parent side: `with ArenaProbe(model_bytes) as probe: probe.fits("run", 300_000)`."""

    def __init__(self, model_bytes: bytes):
        self._model_file = tempfile.NamedTemporaryFile(prefix="tflm_probe_", suffix=".tflite", delete=False)
        self._model_file.write(model_bytes)
        self._model_file.close()
        self._child: subprocess.Popen | None = None
        self._child_errors = tempfile.TemporaryFile(mode="w+")  # the child's Python-level errors, if any
        self.last_failure = ""  # why the last probe that failed did not fit, as TFLM put it

    def __enter__(self) -> "ArenaProbe":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def fits(self, kind: str, arena_bytes: int) -> bool:
        """Whether TFLM can `allocate` (set up) or `run` (set up and invoke) the model in the arena."""
        if kind not in ("allocate", "run"):
            raise ValueError(f"kind must be 'allocate' or 'run', got {kind!r}")
        child = self._running_child()
        try:
            child.stdin.write(f"{kind} {int(arena_bytes)}\n")
            child.stdin.flush()
            answer = child.stdout.readline()
        except BrokenPipeError:
            answer = ""
        if answer.startswith("1"):
            return True
        if answer.startswith("0"):
            self.last_failure = answer[1:].strip()
        elif not answer:
            status = self._reap()
            if status >= 0:  # not killed by a signal: the child itself is broken
                raise RuntimeError(f"arena probe child exited with status {status}:\n{self._child_error_text()}")
            self.last_failure = f"TFLM crashed on this arena size (signal {-status})"
        else:
            self._child.kill()
            self._reap()
            raise RuntimeError(f"arena probe: unexpected answer {answer!r}")
        return False

    def close(self) -> None:
        if self._child is not None:
            self._child.stdin.close()
            self._reap()
        self._child_errors.close()
        Path(self._model_file.name).unlink(missing_ok=True)

    def _child_error_text(self) -> str:
        self._child_errors.seek(0)
        return self._child_errors.read()[-4000:]

    def _running_child(self) -> subprocess.Popen:
        if self._child is None:
            env = dict(os.environ)
            env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_PACKAGE_ROOT), env.get("PYTHONPATH")) if p)
            self._child = subprocess.Popen(
                [sys.executable, "-m", "tflm_mcubert.runtime.arena_probe_child", self._model_file.name],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._child_errors,
                text=True,
                errors="replace",
                env=env,
            )
        return self._child

    def _reap(self) -> int:
        child, self._child = self._child, None
        try:
            return child.wait(timeout=60)
        except subprocess.TimeoutExpired:
            child.kill()
            return child.wait()
