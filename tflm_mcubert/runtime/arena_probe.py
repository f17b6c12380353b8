"""Try a model in a given TFLM arena size, in a child process (tflm_process.TflmProcess).

The tflite-micro wheel does not always fail cleanly when the arena is too small: some kernels use a
persistent buffer the allocator could not provide, and the process dies. So every size that might be
too small is tried in a child first; a crash there only means "does not fit".
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

from tflm_mcubert.runtime.arena_search import TflmError
from tflm_mcubert.runtime.tflm_process import TflmProcess
from tflm_mcubert.tflite.graph import parse


class ArenaProbe:
    """`with ArenaProbe(model_bytes) as probe: probe.fits("run", 300_000)`: the wheel's own kernels,
    zero inputs."""

    def __init__(self, model_bytes: bytes):
        graph = parse(bytes(model_bytes))
        self._zeros = {f"input_{io.position}": np.zeros(io.tensor.shape, io.tensor.dtype) for io in graph.inputs}
        self._output_count = len(graph.outputs)
        self._model_file = tempfile.NamedTemporaryFile(prefix="tflm_probe_", suffix=".tflite", delete=False)
        self._model_file.write(model_bytes)
        self._model_file.close()
        self._tflm = TflmProcess(sys.executable)
        self.last_failure = ""  # why the last probe that failed did not fit, as TFLM put it

    def __enter__(self) -> "ArenaProbe":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def fits(self, kind: str, arena_bytes: int) -> bool:
        """Whether TFLM can `allocate` (set up) or `run` (set up and invoke) the model in the arena."""
        if kind not in ("allocate", "run"):
            raise ValueError(f"kind must be 'allocate' or 'run', got {kind!r}")
        request = {"mode": kind, "arena_bytes": int(arena_bytes), "output_count": self._output_count, **self._zeros}
        try:
            self._tflm.request(request, Path(self._model_file.name))
        except TflmError as exc:
            self.last_failure = " ".join(str(exc).split())  # one line, whatever line breaks TFLM used
            return False
        return True

    def close(self) -> None:
        self._tflm.close()
        Path(self._model_file.name).unlink(missing_ok=True)
