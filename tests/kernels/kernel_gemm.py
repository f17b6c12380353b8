"""The gemm tests' cases and the host client of custom_ops/test/host_gemm_runner.c (one matrix
product per request through the chunked micro-kernels, under ASan/UBSan)."""

from __future__ import annotations

import dataclasses
import os
import struct
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from tflm_mcubert.ops.linear import int_matmul, pack_weights
from tflm_mcubert.ops.linear_int4 import matmul_int4, pack_weights_int4


@dataclasses.dataclass(frozen=True)
class GemmCase:
    name: str
    x: np.ndarray  # int8 [tokens, K]
    weight: np.ndarray  # int8 [N, K], values in [-7, 7]
    split: int  # the rows' two segments: [0, split), [split, K)

    @property
    def out_features(self) -> int:
        return self.weight.shape[0]

    def packed(self, kind: int) -> np.ndarray:
        return pack_weights_int4(self.weight) if kind == 4 else pack_weights(self.weight)

    def expected(self, kind: int) -> np.ndarray:
        if kind == 4:
            return matmul_int4(self.x, self.packed(4), self.out_features, self.x.shape[1])
        return int_matmul(self.x, self.weight.T)


def gemm_case(tokens: int, k: int, n: int, *, split: int | None = None, extreme: str = "", seed: int = 0) -> GemmCase:
    """Random int8 activations and int4 weights; extreme "max": every product at its bound
    (-128 x -7 and -128 x 7, alternating channels), "mixed": random signs at the bounds."""
    rng = np.random.default_rng(seed or tokens * 1_000_003 + k * 1009 + n)
    x = rng.integers(-128, 128, size=(tokens, k)).astype(np.int8)
    w = rng.integers(-7, 8, size=(n, k)).astype(np.int8)
    if extreme == "max":
        x[:] = -128
        w[:] = np.where(np.arange(n)[:, None] % 2 == 0, -7, 7)
    elif extreme == "mixed":
        x = np.where(rng.random((tokens, k)) < 0.5, -128, 127).astype(np.int8)
        w = np.where(rng.random((n, k)) < 0.5, -7, 7).astype(np.int8)
    split = k if split is None else split
    name = f"t{tokens}-k{k}-n{n}" + (f"-split{split}" if split != k else "") + (f"-{extreme}" if extreme else "")
    return GemmCase(name, x, w, split)


CASES = [
    gemm_case(1, 1, 1),  # K = 1: the tail is the whole product
    gemm_case(2, 7, 3),
    gemm_case(3, 8, 5),  # one full word, no tail
    gemm_case(4, 9, 8),  # one chunk, a 1-value tail
    gemm_case(4, 13, 17),  # odd N: three chunks, the last of one channel
    gemm_case(1, 37, 9),
    gemm_case(2, 64, 2),
    gemm_case(3, 71, 11),
    gemm_case(5, 40, 7),  # two row blocks, the second of one row
    gemm_case(7, 100, 16),
    gemm_case(4, 24, 9, split=5),  # a group straddling the segments
    gemm_case(3, 30, 4, split=16),
    gemm_case(4, 4096, 3, extreme="max"),  # the accumulator bound
    gemm_case(4, 200, 9, extreme="mixed"),
]


class GemmRunner:
    """One host_gemm_runner process (restarted after a crash; the crash raises with its report)."""

    def __init__(self, executable: Path):
        self.executable = Path(executable)
        self._proc: subprocess.Popen | None = None
        self._stderr = None

    def close(self):
        if self._proc is not None:
            self._proc.stdin.close()
            self._proc.wait(timeout=10)
            self._proc = None

    def run(self, case: GemmCase, kind: int) -> np.ndarray:
        if self._proc is None or self._proc.poll() is not None:
            self._stderr = tempfile.TemporaryFile()
            env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0:halt_on_error=1", UBSAN_OPTIONS="halt_on_error=1")
            self._proc = subprocess.Popen(
                [str(self.executable)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, env=env
            )
        tokens, k = case.x.shape
        n = case.out_features
        weights = case.packed(kind).tobytes()
        request = struct.pack("<6i", kind, case.split, tokens, k, n, len(weights))
        request += np.ascontiguousarray(case.x[:, : case.split]).tobytes()
        request += np.ascontiguousarray(case.x[:, case.split :]).tobytes() + weights
        try:
            self._proc.stdin.write(request)
            self._proc.stdin.flush()
            answer = self._proc.stdout.read(4 + 4 * tokens * n)
        except BrokenPipeError:
            answer = b""
        if len(answer) != 4 + 4 * tokens * n:
            self._proc.wait(timeout=10)
            self._stderr.seek(0)
            report = self._stderr.read().decode(errors="replace")
            self._proc = None
            raise AssertionError(f"{self.executable.name} died on {case.name}:\n{report[-6000:]}")
        (status,) = struct.unpack_from("<i", answer)
        assert status == 0, f"{case.name}: status {status}"
        return np.frombuffer(answer, "<i4", offset=4).reshape(tokens, n).astype(np.int64)
