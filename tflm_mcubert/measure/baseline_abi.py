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

import numpy as np

from tflm_mcubert.ops import contract
from tflm_mcubert.ops.linear import Linear, unpack_weights
from tflm_mcubert.ops import kernel_abi
from tflm_mcubert.measure.arm_emulator import ArmEmulator, CallResult, KernelRun, run_kernel
from tflm_mcubert.ops.kernel_abi import KernelCall

SCHEDULES = ("cmsis", "burrello", "flash")
# Every schedule's MLP is the untiled CMSIS-strategy one (the schedules differ in attention).
_PREFIX = {
    (contract.ATTENTION, "cmsis"): "mcubert_baseline_cmsis_attention",
    (contract.ATTENTION, "burrello"): "mcubert_baseline_burrello_attention",
    (contract.ATTENTION, "flash"): "mcubert_baseline_flash_attention",
    (contract.MLP, "cmsis"): "mcubert_baseline_cmsis_mlp",
    (contract.MLP, "burrello"): "mcubert_baseline_cmsis_mlp",
    (contract.MLP, "flash"): "mcubert_baseline_cmsis_mlp",
}
# (weight tensor, channels tensor) of every linear layer, by op.
_LINEARS = {
    contract.ATTENTION: [(f"{n}_weights", f"{n}_channels") for n in ("query", "key", "value", "output")],
    contract.MLP: [("fc1_weights", "fc1_channels"), ("fc2_weights", "fc2_channels")],
}


def row_major_call(call: KernelCall) -> KernelCall:
    """`call` with every pair4 weight tensor unpacked to row-major int8 [out][in]."""
    tensors = dict(call.tensors)
    for weights, channels in _LINEARS[call.op]:
        n = tensors[channels].size // 3
        k = call.params.hidden if weights != "fc2_weights" else call.params.ffn
        tensors[weights] = np.ascontiguousarray(unpack_weights(tensors[weights], n, k)).reshape(-1)
    return dataclasses.replace(call, tensors=tensors)


def run_baseline(
    emu: ArmEmulator, schedule: str, call: KernelCall, *, count_instructions: bool = False, scratch_fill: int = 0x5A
) -> KernelRun:
    """Run `schedule`'s version of an attention or MLP call (built for the library kernel)."""
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown baseline {schedule!r} (known: {', '.join(SCHEDULES)})")
    prefix = _PREFIX[(call.op, schedule)]
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
