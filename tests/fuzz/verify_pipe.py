"""Both C verifier entry points under ASan + UBSan for the Python mutation campaigns: a small driver
(harnesses/verify_model_pipe.c) fed one model per frame, so that the campaign can compare each C
answer with the Python reader's and a sanitizer finding is a crash of the driver."""

from __future__ import annotations

import struct
import subprocess
from pathlib import Path

import run_fuzzers

HERE = Path(__file__).resolve().parent


class SanitizerFinding(RuntimeError):
    """The driver died: its stderr holds the ASan / UBSan report."""


def build(out_dir: Path) -> Path:
    cc = run_fuzzers.compiler()
    if cc is None:
        raise SystemExit("clang not found: the verifier driver is built with clang's ASan + UBSan (Debian: clang)")
    binary = out_dir / "verify_model_pipe"
    sources = sorted(str(p) for p in (run_fuzzers.CUSTOM_OPS / "src").glob("*.c"))
    sanitizers = ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined"]
    source = HERE / "harnesses" / "verify_model_pipe.c"
    subprocess.run([cc, *run_fuzzers.FLAGS, *sanitizers, "-o", str(binary), str(source), *sources], check=True)
    return binary


class VerifyPipe:
    """verify(model, expected) -> (status, verified, status of _expected)."""

    def __init__(self, binary: Path, log: Path):
        self._log = log
        self._stderr = open(log, "wb")  # noqa: SIM115 (closed in close())
        env = {"ASAN_OPTIONS": "detect_leaks=0:abort_on_error=0", "UBSAN_OPTIONS": "print_stacktrace=1"}
        self._process = subprocess.Popen(
            [str(binary)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, env=env
        )

    def verify(self, model: bytes, expected: tuple[int, int]) -> tuple[int, int, int]:
        try:
            self._process.stdin.write(struct.pack("<III", len(model), *expected) + model)
            self._process.stdin.flush()
            answer = self._process.stdout.read(12)
        except BrokenPipeError:
            answer = b""
        if len(answer) != 12:
            self._process.wait()
            raise SanitizerFinding(self._log.read_text(errors="replace")[-4000:])
        return struct.unpack("<iii", answer)

    def close(self) -> None:
        self._process.stdin.close()
        self._process.wait()
        self._stderr.close()


def expected_of(model: bytes) -> tuple[int, int]:
    """The (size, CRC-32) a firmware built for `model` carries (integrity.expected_crc32)."""
    from tflm_mcubert.tflite.integrity import expected_crc32

    return len(model), expected_crc32(model) & 0xFFFFFFFF
