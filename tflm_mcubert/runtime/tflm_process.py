"""The parent side of tflm_child.py: the one way this package runs TFLM outside its own process.

Both users keep one child for many requests (an arena bisection makes ~20): the arena probe of
tflm_runner.py (this Python, the wheel's own kernels) and the binding of our ops (tflm_binding.py, a
Python 3.13 environment). A crash of the child is reported as a TflmError and the next request
starts a new one.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from tflm_mcubert.errors import UserError
from tflm_mcubert.runtime.arena_search import TflmError

CHILD_SCRIPT = Path(__file__).with_name("tflm_child.py")
STATUS_DONE, STATUS_TFLM_ERROR, STATUS_WRONG_WHEEL = 0, 3, 4  # tflm_child.py's answers


class TflmSetupError(UserError):
    """The TFLM environment is missing or wrong (no Python 3.13, another wheel, a failed build)."""


class TflmProcess:
    """`with TflmProcess(python) as tflm: response, output = tflm.request({"mode": "run", ...}, model)`."""

    def __init__(self, python: Path | str = sys.executable, expected_version: str = ""):
        self.python, self.expected_version = str(python), expected_version
        self._child: subprocess.Popen | None = None
        self._child_errors = tempfile.TemporaryFile(mode="w+")  # the child's Python-level errors, if any
        self._directory = tempfile.TemporaryDirectory(prefix="mcubert-tflm-")
        self._crash = ""

    def __enter__(self) -> "TflmProcess":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def request(self, request: dict, model: bytes | Path | None = None) -> tuple[dict, str]:
        """(response arrays, what TFLM printed). `model`: its bytes, or the path of a file holding them.

        Raises TflmError when TFLM refused the model or crashed, TflmSetupError when the child runs
        another wheel than `expected_version`."""
        folder = Path(self._directory.name)
        paths = [folder / name for name in ("request.npz", "response.npz", "output.txt")]
        arrays = {key: np.asarray(value) for key, value in request.items()}
        arrays["expected_version"] = np.array(self.expected_version)
        if isinstance(model, (bytes, bytearray, memoryview)):
            (folder / "model.tflite").write_bytes(bytes(model))
            model = folder / "model.tflite"
        if model is not None:
            arrays["model_path"] = np.array(str(model))
        np.savez(paths[0], **arrays)
        paths[2].unlink(missing_ok=True)
        try:
            status = self._ask(" ".join(str(p) for p in paths))
        finally:
            output = paths[2].read_text(errors="replace").strip() if paths[2].exists() else ""
        if status is None:
            raise TflmError(f"TFLM crashed ({self._crash}){': ' + output if output else ''}")
        if status == STATUS_TFLM_ERROR:
            raise TflmError(output)
        if status == STATUS_WRONG_WHEEL:
            raise TflmSetupError(output)
        with np.load(paths[1], allow_pickle=False) as response:
            return {key: response[key] for key in response.files}, output

    def close(self) -> None:
        if self._child is not None:
            self._child.stdin.close()
            self._reap()
        self._child_errors.close()
        self._directory.cleanup()

    def _ask(self, line: str) -> int | None:
        """The child's status for one request line; None if it crashed (the signal in self._crash)."""
        child = self._running_child()
        try:
            child.stdin.write(line + "\n")
            child.stdin.flush()
            answer = child.stdout.readline()
        except BrokenPipeError:
            answer = ""
        if answer.strip() in (str(STATUS_DONE), str(STATUS_TFLM_ERROR), str(STATUS_WRONG_WHEEL)):
            return int(answer)
        if answer:
            child.kill()
            self._reap()
            raise RuntimeError(f"TFLM child: unexpected answer {answer!r}")
        status = self._reap()
        if status >= 0:  # not killed by a signal: the child itself is broken
            raise TflmSetupError(f"the TFLM child ({self.python}) exited with status {status}:\n{self._errors()}")
        self._crash = f"signal {-status}"
        return None

    def _errors(self) -> str:
        self._child_errors.seek(0)
        return self._child_errors.read()[-4000:]

    def _running_child(self) -> subprocess.Popen:
        if self._child is None:
            self._child = subprocess.Popen(
                [self.python, str(CHILD_SCRIPT)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._child_errors,
                text=True,
                errors="replace",
            )
        return self._child

    def _reap(self) -> int:
        child, self._child = self._child, None
        try:
            return child.wait(timeout=60)
        except subprocess.TimeoutExpired:
            child.kill()
            return child.wait()
