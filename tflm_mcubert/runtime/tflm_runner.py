"""Run a .tflite in the real TFLite Micro interpreter (the tflite-micro wheel) and measure what it needs.

Arena figures come from this host build of TFLM, which is 64-bit: TFLM's bookkeeping in the arena
(TfLiteEvalTensor, node and registration structs, pointers in kernels' persistent data) holds 8-byte
pointers, so a 32-bit Cortex-M needs somewhat less than `min_arena_bytes` reports (export/tflm_arena.py
models the difference); the tensor buffers, the bulk, are the same size on both.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from typing import Mapping

import numpy as np
from tflite_micro.python.tflite_micro import runtime

from tflm_mcubert.runtime.arena_probe import ArenaProbe
from tflm_mcubert.runtime.arena_search import TflmError, smallest_passing
from tflm_mcubert.tflite.graph import TensorInfo, parse

# Host memory is cheap: a run that does not ask for a particular arena gets one far larger than any
# model here needs. (The wheel's own default, 10x the model size, is 250 MB for MiniLM.)
DEFAULT_ARENA_BYTES = 64 * 1024 * 1024


def quantize(values, tensor: TensorInfo) -> np.ndarray:
    """Real values -> the integer representation of a per-tensor quantized int8/int16 tensor."""
    scale, zero_point = _per_tensor_params(tensor)
    info = np.iinfo(tensor.dtype)
    q = np.round(np.asarray(values, np.float64) / scale) + zero_point
    return np.clip(q, info.min, info.max).astype(tensor.dtype)


def dequantize(values, tensor: TensorInfo) -> np.ndarray:
    """The integer representation of a quantized tensor -> float32 real values."""
    scale, zero_point = _per_tensor_params(tensor)
    return ((np.asarray(values, np.float64) - zero_point) * scale).astype(np.float32)


def _per_tensor_params(tensor: TensorInfo) -> tuple[float, int]:
    if len(tensor.scales) != 1:
        raise ValueError(f"tensor {tensor.name!r} is not per-tensor quantized (scales: {tensor.scales})")
    return tensor.scales[0], tensor.zero_points[0] if tensor.zero_points else 0


class TflmRunner:
    """One TFLM interpreter over one model, for several runs (allocation happens once, here).

    The arena is first tried in a child process (see `arena_probe`: a too-small arena can crash TFLM),
    so that a model that does not fit raises TflmError rather than killing this process.
    """

    def __init__(self, model_bytes: bytes, arena_bytes: int = DEFAULT_ARENA_BYTES):
        model_bytes = bytes(model_bytes)
        parse(model_bytes)  # a clear error for what is not a model, before any child is started
        with ArenaProbe(model_bytes) as probe:
            if not probe.fits("allocate", arena_bytes):
                raise TflmError(
                    f"TFLM could not set up the model in a {int(arena_bytes):,}-byte arena: {probe.last_failure}"
                )
        self._set_up(model_bytes, arena_bytes)

    @classmethod
    def without_probe(cls, model_bytes: bytes, arena_bytes: int) -> "TflmRunner":
        """Set up in this process straight away: only for an arena known to be safe (or in a probe child)."""
        runner = cls.__new__(cls)
        runner._set_up(bytes(model_bytes), arena_bytes)
        return runner

    def _set_up(self, model_bytes: bytes, arena_bytes: int) -> None:
        self.graph = parse(model_bytes)
        self.arena_bytes = int(arena_bytes)
        with _native_stderr() as native:
            try:
                self._interpreter = runtime.Interpreter.from_bytes(model_bytes, arena_size=self.arena_bytes)
                failure = None
            except RuntimeError as exc:
                failure = exc
        if failure is not None:
            raise TflmError(
                f"TFLM could not set up the model in a {self.arena_bytes:,}-byte arena: {failure}{_report(native)}"
            )

    def run(self, inputs: Mapping[str, np.ndarray], *, dequantize_outputs: bool = True) -> dict[str, np.ndarray]:
        """Invoke on `inputs` (keyed by input name); outputs keyed by output name.

        Float inputs to a quantized input tensor are quantized. Quantized outputs are returned as float32
        real values unless `dequantize_outputs` is False (then as the model's int8/int16).
        """
        expected = {io.name for io in self.graph.inputs}
        if set(inputs) != expected:
            raise ValueError(f"inputs must be exactly {sorted(expected)}, got {sorted(inputs)}")
        for io in self.graph.inputs:
            self._interpreter.set_input(_as_input(inputs[io.name], io.tensor), io.position)
        with _native_stderr() as native:
            try:
                self._interpreter.invoke()
                failure = None
            except RuntimeError as exc:
                failure = exc
        if failure is not None:
            raise TflmError(f"TFLM failed to invoke the model: {failure}{_report(native)}")
        outputs = {}
        for io in self.graph.outputs:
            value = np.array(self._interpreter.get_output(io.position))  # a copy: the arena is reused
            if dequantize_outputs and io.tensor.is_quantized and value.dtype.kind == "i":
                value = dequantize(value, io.tensor)
            outputs[io.name] = value
        return outputs


def run_tflm(
    model_bytes: bytes,
    inputs: Mapping[str, np.ndarray],
    arena_bytes: int = DEFAULT_ARENA_BYTES,
    *,
    dequantize_outputs: bool = True,
) -> dict[str, np.ndarray]:
    """Run the model once in TFLM: `TflmRunner(model_bytes, arena_bytes).run(inputs)`."""
    return TflmRunner(model_bytes, arena_bytes).run(inputs, dequantize_outputs=dequantize_outputs)


def _as_input(value, tensor: TensorInfo) -> np.ndarray:
    array = np.asarray(value)
    if tuple(array.shape) != tensor.shape:
        raise ValueError(f"input {tensor.name!r}: shape {array.shape} != the model's {tensor.shape}")
    if array.dtype == tensor.dtype:
        return np.ascontiguousarray(array)
    if tensor.is_quantized and array.dtype.kind == "f":
        return quantize(array, tensor)
    if array.dtype.kind in "iub" and tensor.dtype.kind in "iu":
        info = np.iinfo(tensor.dtype)
        if array.size and (array.min() < info.min or array.max() > info.max):
            raise ValueError(f"input {tensor.name!r}: values outside {tensor.dtype}")
        return array.astype(tensor.dtype)
    raise ValueError(f"input {tensor.name!r}: cannot feed {array.dtype} to a {tensor.type_name} tensor")


def min_arena_bytes(model_bytes: bytes) -> int:
    """The smallest arena in which TFLM both allocates and invokes the model, by bisection.

    The answer is exact: the model runs with it and fails with one byte less (both are probed). It is a
    figure for this 64-bit host build (see the module docstring). Probes run in a child process, since
    a too-small arena can crash TFLM.
    """
    model_bytes = bytes(model_bytes)
    with ArenaProbe(model_bytes) as probe:
        # Allocation is the cheap test and the binding one in practice: bisect on it, then on a full run
        # from there in case invoking needs more.
        fits = smallest_passing(lambda n: probe.fits("allocate", n), lower_failing=_arena_lower_bound(model_bytes))
        if not probe.fits("run", fits):
            fits = smallest_passing(lambda n: probe.fits("run", n), lower_failing=fits)
        if probe.fits("run", fits - 1):
            raise TflmError(f"arena search is inconsistent: the model runs in {fits - 1:,} bytes as well as {fits:,}")
    return fits


def _arena_lower_bound(model_bytes: bytes) -> int:
    """An arena size that certainly fails: below what the largest operator's activations alone need.

    Starting the bisection there keeps it away from the tiny sizes at which TFLM crashes.
    """
    graph = parse(model_bytes)
    largest = 0
    for op in graph.ops:
        live = {i for i in (*op.inputs, *op.outputs) if i >= 0 and not graph.tensors[i].constant_bytes}
        largest = max(largest, sum(graph.tensors[i].nbytes for i in live))
    return max(largest - 1, 0)


@contextlib.contextmanager
def _native_stderr():
    """Collect what native code writes to file descriptor 2 (TFLM reports errors there, not to Python).

    Yields a list that holds the text once the block has exited.
    """
    collected: list[str] = []
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield collected
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            collected.append(sink.read().decode(errors="replace"))


def _report(native: list[str]) -> str:
    text = "".join(native).strip()
    return f"\n{text}" if text else ""
