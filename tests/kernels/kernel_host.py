"""Client of custom_ops/test/host_runner.c: kernel calls on the host under ASan/UBSan.

The driver is a separate process (sanitizer runtimes and the Python interpreter do not mix well
in one process); it reads requests on stdin and answers on stdout. If it dies (an ASan or UBSan
report aborts it), the call raises KernelCrash with the report, and the next call restarts it.
"""

from __future__ import annotations

import dataclasses
import os
import struct
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from tflm_mcubert.ops import kernel_abi
from tflm_mcubert.ops.kernel_abi import KernelCall
from tflm_mcubert.ops.registry import OPS

MAGIC = 0x5242434D
CMD_RUN, CMD_VALIDATE, CMD_BUFFER_SIZE, CMD_INFO, CMD_RUN_UNCHECKED = 1, 2, 3, 4, 5
FLAG_DATA, FLAG_NULL_VIEW, FLAG_NULL_DATA = 1, 2, 4
SCRATCH_NULL = 0xFFFFFFFF


class KernelCrash(AssertionError):
    """The driver process died: a sanitizer report (or a crash) is in the message."""


@dataclasses.dataclass
class Result:
    status: int
    message: str
    output: np.ndarray | None = None

    @property
    def ok(self) -> bool:
        return self.status == kernel_abi.OK


@dataclasses.dataclass
class TensorSpec:
    """One entry of validate's tensor list, for hand-made (possibly wrong) lists."""

    dtype: int
    elements: int
    data: bytes = b""
    null_view: bool = False
    misalign: int = 0
    null_data: bool = False  # RUN: the kernel gets a NULL pointer for this tensor


def tensor_specs(call: KernelCall, *, null_views=(), misalign: dict[str, int] | None = None, null_data=()):
    misalign = misalign or {}
    specs = []
    for name, array in call.tensor_list:
        elements = kernel_abi.output_elements(call) if name == "output" else array.size
        specs.append(
            TensorSpec(
                kernel_abi.DTYPE_CODES[array.dtype],
                elements,
                array.tobytes(),
                null_view=name in null_views or (name == "output" and not array.size),
                misalign=misalign.get(name, 0),
                null_data=name in null_data,
            )
        )
    return specs


class HostRunner:
    def __init__(self, executable: Path):
        self.executable = Path(executable)
        self._proc: subprocess.Popen | None = None
        self._stderr = None

    # -- process management --------------------------------------------------------------

    def _start(self):
        self._stderr = tempfile.TemporaryFile()
        env = dict(
            os.environ,
            ASAN_OPTIONS="detect_leaks=0:halt_on_error=1",
            UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1",
        )
        self._proc = subprocess.Popen(
            [str(self.executable)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, env=env
        )

    def close(self):
        if self._proc is not None:
            try:
                self._proc.stdin.close()
                self._proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self._proc.kill()
            self._proc = None

    def _crash(self) -> KernelCrash:
        proc = self._proc
        self._proc = None
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        self._stderr.seek(0)
        report = self._stderr.read().decode(errors="replace")
        return KernelCrash(f"{self.executable.name} exited with {proc.returncode}:\n{report[-6000:]}")

    def _exchange(self, request: bytes) -> tuple[int, str, bytes, int]:
        if self._proc is None or self._proc.poll() is not None:
            self._start()
        try:
            self._proc.stdin.write(request)
            self._proc.stdin.flush()
            head = self._read(8)
            status, message_size = struct.unpack("<iI", head)
            message = self._read(message_size).decode()
            (output_size,) = struct.unpack("<I", self._read(4))
            output = self._read(output_size)
            (value,) = struct.unpack("<i", self._read(4))
        except (BrokenPipeError, EOFError):
            raise self._crash() from None
        return status, message, output, value

    def _read(self, n: int) -> bytes:
        data = self._proc.stdout.read(n) if n else b""
        if len(data) != n:
            raise EOFError
        return data

    # -- requests ------------------------------------------------------------------------

    @staticmethod
    def _encode_call(command: int, op: str, params, specs: list[TensorSpec]) -> bytes:
        raw = bytes(params)
        parts = [
            struct.pack("<III", MAGIC, command, kernel_abi.OP_IDS[op]),
            struct.pack("<I", len(raw)),
            raw,
            struct.pack("<I", len(specs)),
        ]
        for spec in specs:
            flags = FLAG_DATA | (FLAG_NULL_VIEW if spec.null_view else 0) | (FLAG_NULL_DATA if spec.null_data else 0)
            parts.append(struct.pack("<iiIII", spec.dtype, spec.elements, flags, spec.misalign, len(spec.data)))
            parts.append(spec.data)
        return b"".join(parts)

    def run(
        self,
        call: KernelCall,
        *,
        validate: bool = True,
        scratch_fill: int = 0xA5,
        scratch_size: int | None = None,
        scratch_misalign: int = 0,
        misalign: dict[str, int] | None = None,
        params=None,
        null_data=(),
        null_scratch: bool = False,
    ) -> Result:
        """Validate (unless told not to) and run; Result.output is the result tensor's bytes
        (after the call, whether or not it succeeded)."""
        if scratch_size is None:
            scratch_size = self.buffer_size(call.op, call.dims())
        if null_scratch:
            scratch_misalign = SCRATCH_NULL
        specs = tensor_specs(call, misalign=misalign, null_data=null_data)
        request = self._encode_call(
            CMD_RUN if validate else CMD_RUN_UNCHECKED, call.op, params if params is not None else call.params, specs
        )
        request += struct.pack("<IiI", scratch_fill, scratch_size, scratch_misalign)
        status, message, output, _ = self._exchange(request)
        dtype = OPS[call.op].output_dtype if status == kernel_abi.OK else np.dtype(np.int8)
        result = np.frombuffer(output, dtype).copy() if output else None
        return Result(status, message, result)

    def validate(self, op: str, params, specs: list[TensorSpec] | None) -> Result:
        """validate() with an explicit tensor list (None: options only)."""
        request = self._encode_call(CMD_VALIDATE, op, params, specs or [])  # [] -> tensors NULL
        status, message, _, _ = self._exchange(request)
        return Result(status, message)

    def buffer_size(self, op: str, dims) -> int:
        dims = list(dims) + [0] * (4 - len(dims))
        request = struct.pack("<III", MAGIC, CMD_BUFFER_SIZE, kernel_abi.OP_IDS[op])
        request += struct.pack("<4i", *dims)
        return self._exchange(request)[3]

    def uses_dsp_path(self) -> bool:
        return bool(self._exchange(struct.pack("<III", MAGIC, CMD_INFO, 0))[3])
