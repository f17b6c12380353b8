"""Calls into the re-implemented baselines of custom_ops/baselines/ under the Cortex-M emulator.

The baselines (CMSIS-NN's per-token 1x2x4 strategy in an untiled graph, Burrello et al.'s per-head
attention, a FlashAttention-style schedule; see custom_ops/baselines/mcubert_baselines.h) take
the library kernels' arguments, except that linear weights are row-major int8 [out][in] instead of
pair4. They live in the `mcubert_baselines_emu` target's image (measure/kernel_build.py), which also holds
the library, so one emulator measures both sides.

    emu = ArmEmulator(".../mcubert_baselines_emu.elf", "cortex-m7")
    run = run_baseline(emu, "flash", kernel_abi.attention_call(params, hidden, mask), count_instructions=True)
    y, call = run_linear(emu, "cmsis", x, linear, count_instructions=True)   # call.instructions
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np

from tflm_mcubert.measure.arm_emulator import ArmEmulator, CallResult, KernelRun, run_kernel
from tflm_mcubert.ops import kernel_abi
from tflm_mcubert.ops.kernel_abi import KernelCall
from tflm_mcubert.ops.linear import Linear, unpack_weights
from tflm_mcubert.ops.registry import op as op_of

SCHEDULES = ("cmsis", "burrello", "flash")
# A schedule's version of an op is mcubert_baseline_<schedule>_<c_name>; where a schedule has none
# (Burrello's and the FlashAttention-style schedules differ in attention only) its op is CMSIS's.
_FALLBACK_SCHEDULE = "cmsis"
# A contract dimension symbol -> the params field that holds it.
_DIMENSION_FIELDS = {"d": "hidden"}
_PACKED = re.compile(r"\[packed\((\w+), (\w+)\)\]")


def _linears(op: str) -> list[tuple[str, str, str]]:
    """(weights, channels, in-features symbol) of every pair4 linear layer of `op`, from its contract."""
    names = {t.name for t in op_of(op).contract.inputs}
    found = []
    for t in op_of(op).contract.inputs:
        match = _PACKED.fullmatch(t.shape)
        channels = t.name.removesuffix("_weights") + "_channels"
        if match and channels in names:
            found.append((t.name, channels, match.group(2)))
    return found


def row_major_call(call: KernelCall) -> KernelCall:
    """`call` with every pair4 weight tensor unpacked to row-major int8 [out][in]."""
    tensors = dict(call.tensors)
    for weights, channels, in_features in _linears(call.op):
        n = tensors[channels].size // 3
        k = getattr(call.params, _DIMENSION_FIELDS.get(in_features, in_features))
        tensors[weights] = np.ascontiguousarray(unpack_weights(tensors[weights], n, k)).reshape(-1)
    return dataclasses.replace(call, tensors=tensors)


def baseline_prefix(emu: ArmEmulator, schedule: str, op: str) -> str:
    """The symbol prefix of `schedule`'s version of `op` in the baselines image."""
    c_name = op_of(op).c_name
    for candidate in (schedule, _FALLBACK_SCHEDULE):
        prefix = f"mcubert_baseline_{candidate}_{c_name}"
        if f"{prefix}_s8" in emu.image.symbols:
            return prefix
    raise ValueError(f"no {schedule} baseline of {op} in the emulator image (mcubert_baselines_emu)")


def run_baseline(
    emu: ArmEmulator, schedule: str, call: KernelCall, *, count_instructions: bool = False, scratch_fill: int = 0x5A
) -> KernelRun:
    """Run `schedule`'s version of an attention or MLP call (built for the library kernel)."""
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown baseline {schedule!r} (known: {', '.join(SCHEDULES)})")
    prefix = baseline_prefix(emu, schedule, call.op)
    size = emu.call(f"{prefix}_get_buffer_size", *call.dims()).value
    return run_kernel(
        emu,
        row_major_call(call),
        validate=False,
        symbol=f"{prefix}_s8",
        scratch_size=size,
        count_instructions=count_instructions,
        scratch_fill=scratch_fill,
    )


def run_linear(
    emu: ArmEmulator, kind: str, x: np.ndarray, linear: Linear, *, count_instructions: bool = False
) -> tuple[np.ndarray, CallResult]:
    """y = clamp8(requantize(x W^T + bias)) for int8 x[tokens, in]: kind "ours" (the library's
    4 x 2 x 4 row-block kernel on pair4 weights) or "cmsis" (1x2x4 per token, row-major).
    Returns (y int8[tokens, out], the call's CallResult: instructions and block profile when
    counted)."""
    x = np.ascontiguousarray(x, np.int8)
    tokens, k = x.shape
    n = linear.out_features
    mark = emu.heap_mark()
    try:
        x_address = emu.put(x)
        channels = emu.put(np.ascontiguousarray(linear.channels, np.int32))
        y = emu.alloc(tokens * n)
        if kind == "ours":
            weights = emu.put(np.ascontiguousarray(linear.packed_weights, np.int8))
            scratch = emu.alloc(8 * k, 16)
            result = emu.call(
                "mcubert_bench_linear_s8",
                x_address,
                tokens,
                k,
                n,
                weights,
                channels,
                y,
                scratch,
                count_instructions=count_instructions,
            )
        elif kind == "cmsis":
            weights = emu.put(np.ascontiguousarray(linear.weight, np.int8))
            result = emu.call(
                "mcubert_baseline_cmsis_linear_s8",
                x_address,
                tokens,
                k,
                n,
                weights,
                channels,
                y,
                count_instructions=count_instructions,
            )
        else:
            raise ValueError(f"unknown linear kind {kind!r} (ours, cmsis)")
        if result.value != kernel_abi.OK:
            raise RuntimeError(f"{kind} linear failed with status {result.value}")
        return np.frombuffer(emu.read(y, tokens * n), np.int8).reshape(tokens, n).copy(), result
    finally:
        emu.release(mark)
