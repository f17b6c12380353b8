"""Calls into the gemm driver (custom_ops/test/gemm_driver.c) under the Cortex-M emulator.

The `mcubert_gemm_emu` image (measure/kernel_build.py) holds the library and the driver, which runs
a whole matrix product through the chunked micro-kernels — pair4 int8 weights (kind 8) or w4row
int4 weights (kind 4, ops/linear_int4.py) — and returns the raw int32 accumulators:

    emu = ArmEmulator(".../mcubert_gemm_emu.elf", "cortex-m4")
    acc, call = run_gemm(emu, 4, x, pack_weights_int4(w), n, count_instructions=True)
"""

from __future__ import annotations

import numpy as np

from tflm_mcubert.measure.arm_emulator import ArmEmulator, CallResult

KINDS = {8: "pair4 int8", 4: "w4row int4"}


def run_gemm(
    emu: ArmEmulator,
    kind: int,
    x: np.ndarray,
    weights: np.ndarray,
    out_features: int,
    *,
    split: int | None = None,
    count_instructions: bool = False,
    misalign: int = 0,
) -> tuple[np.ndarray, CallResult]:
    """acc int64[tokens, out_features] = x @ W^T for int8 x[tokens, K] and packed `weights` of `kind`.
    split: the rows as two segments, K values [0, split) and [split, K) (default: one segment);
    misalign: the weights' address mod 16 (the kernels read weight words with plain loads)."""
    if kind not in KINDS:
        raise ValueError(f"kind {kind}: one of {sorted(KINDS)}")
    x = np.ascontiguousarray(x, np.int8)
    tokens, k = x.shape
    split = k if split is None else split
    mark = emu.heap_mark()
    try:
        first = emu.put(np.ascontiguousarray(x[:, :split]))
        second = emu.put(np.ascontiguousarray(x[:, split:]))
        packed = emu.put(np.ascontiguousarray(weights).tobytes(), 16, misalign)
        acc = emu.alloc(4 * tokens * out_features)
        scratch = emu.alloc(8 * k, 16)
        args = (kind, first, second, split, tokens, k, out_features, packed, acc, scratch)
        result = emu.call("mcubert_gemm_driver", *args, count_instructions=count_instructions)
        if result.value != 0:
            raise RuntimeError(f"mcubert_gemm_driver({kind}) returned {result.value}")
        raw = np.frombuffer(emu.read(acc, 4 * tokens * out_features), "<i4")
        return raw.reshape(tokens, out_features).astype(np.int64), result
    finally:
        emu.release(mark)
