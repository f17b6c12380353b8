"""The real CMSIS-NN kernels in bench/kernel_cost.py: a user's CMSIS-NN checkout (CMSIS_NN_DIR, or
--cmsis-nn-dir; never committed, never downloaded here) built for each core with the emulator's startup
and bench/cmsis_nn/cmsis_nn_shim.c, and the linear layers run through it the way TFLM 90b983c's CMSIS-NN
FULLY_CONNECTED does:

    conv1x1   arm_convolve_1x1_s8_fast -> arm_nn_mat_mult_nt_t_s8 (TFLM's path for BERT's rank-3 inputs)
    fc        arm_fully_connected_per_channel_s8 -> a vector-matrix product per token (rank-2 inputs)
    fc-s4     arm_fully_connected_s4 -> arm_nn_vec_mat_mult_t_s4 per token: TFLM's only path for int4
              weights, per-tensor quantization (run_fc_s4; bench/w4_gemm.py), when the checkout has it

Compiled with -O2, TFLM's optimization level for third-party kernels. Outputs are checked against the
MCUBERT reference within one unit (CMSIS-NN rounds its requantization twice, the MCUBERT contract once).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
KINDS = {"conv1x1": "cmsisnn_bench_conv1x1", "fc": "cmsisnn_bench_fc"}
SOURCES = (
    "Source/ConvolutionFunctions/arm_convolve_1x1_s8_fast.c",
    "Source/ConvolutionFunctions/arm_convolve_get_buffer_sizes_s8.c",
    "Source/FullyConnectedFunctions/arm_fully_connected_per_channel_s8.c",
    "Source/FullyConnectedFunctions/arm_fully_connected_get_buffer_sizes_s8.c",
)
S4_SOURCES = (  # CMSIS-NN's int4-weight fully connected (4ab83cc, TFLM's pin, has it; older checkouts may not)
    "Source/FullyConnectedFunctions/arm_fully_connected_s4.c",
    "Source/NNSupportFunctions/arm_nn_vec_mat_mult_t_s4.c",
)
FLOAT_FLAGS = {
    "cortex-m7": ["-mfloat-abi=hard", "-mfpu=fpv5-d16"],
    "cortex-m4": ["-mfloat-abi=hard", "-mfpu=fpv4-sp-d16"],
}


def revision(cmsis_nn_dir: Path) -> str:
    done = subprocess.run(
        ["git", "-C", str(cmsis_nn_dir), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    return done.stdout.strip() if done.returncode == 0 else "revision unknown (not a git checkout)"


def build_image(cmsis_nn_dir: Path, cpu: str, build: Path) -> Path:
    """The shim and CMSIS-NN's s8 linear kernels, linked for the emulator."""
    cmsis_nn_dir = Path(cmsis_nn_dir)
    if not (cmsis_nn_dir / "Include" / "arm_nnfunctions.h").is_file():
        raise SystemExit(f"CMSIS_NN_DIR={cmsis_nn_dir} is not a CMSIS-NN checkout (no Include/arm_nnfunctions.h)")
    support = sorted(str(p) for p in (cmsis_nn_dir / "Source" / "NNSupportFunctions").glob("*_s8*.c"))
    s4 = [str(cmsis_nn_dir / s) for s in S4_SOURCES] if has_s4(cmsis_nn_dir) else []
    image = build / cpu / "cmsis_nn_emu.elf"
    image.parent.mkdir(parents=True, exist_ok=True)
    command = [
        "arm-none-eabi-gcc",
        f"-mcpu={cpu}",
        "-mthumb",
        *FLOAT_FLAGS.get(cpu, ["-mfloat-abi=soft"]),
        "-O2",
        "-g",
        "-std=c99",
        "-ffunction-sections",
        "-fdata-sections",
        f"-I{cmsis_nn_dir / 'Include'}",
        *(["-DCMSISNN_BENCH_S4"] if s4 else []),
        str(ROOT / "custom_ops" / "test" / "arm" / "startup.c"),
        str(HERE / "cmsis_nn" / "cmsis_nn_shim.c"),
        *(str(cmsis_nn_dir / s) for s in SOURCES),
        *support,
        *s4,
        "-nostartfiles",
        "-T",
        str(ROOT / "custom_ops" / "test" / "arm" / "mps2.ld"),
        "--specs=nano.specs",
        "--specs=nosys.specs",
        "-Wl,--gc-sections",
        "-o",
        str(image),
    ]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"building CMSIS-NN for {cpu} failed:\n{done.stderr[-3000:]}")
    return image


def has_s4(cmsis_nn_dir: Path) -> bool:
    return all((Path(cmsis_nn_dir) / s).is_file() for s in S4_SOURCES)


def pack_s4(w: np.ndarray) -> np.ndarray:
    """int4 values [n][k] (k even) in CMSIS-NN's s4 layout: row-major, two a byte, the first in the low nibble."""
    pairs = (w.astype(np.int16) & 0xF).reshape(-1, 2)
    return (pairs[:, 0] | (pairs[:, 1] << 4)).astype(np.uint8).view(np.int8)


def requantize_per_tensor(acc: np.ndarray, multiplier: int, shift: int) -> np.ndarray:
    """acc * multiplier * 2^(shift - 31), rounded once, saturated to int8: what CMSIS-NN computes up to
    its second rounding (it rounds the doubling-high product, then the shift)."""
    scaled = np.round(acc.astype(np.float64) * multiplier * 2.0 ** (shift - 31))
    return np.clip(scaled, -128, 127).astype(np.int8)


def run_fc_s4(emu, x: np.ndarray, w: np.ndarray, bias: np.ndarray, multiplier: int, shift: int, *, count=True):
    """(y int8[tokens, n], CallResult) of arm_fully_connected_s4 on int4 weights `w` [n][k], zero offsets,
    checked within one unit of the once-rounded result."""
    tokens, k = x.shape
    n = w.shape[0]
    mark = emu.heap_mark()
    try:
        x_at = emu.put(np.ascontiguousarray(x, np.int8))
        w_at = emu.put(pack_s4(w))
        b_at = emu.put(np.ascontiguousarray(bias, np.int32))
        y_at = emu.alloc(tokens * n)
        result = emu.call(
            "cmsisnn_bench_fc_s4", x_at, tokens, k, n, w_at, b_at, multiplier, shift, y_at, count_instructions=count
        )
        if result.value != 0:
            raise RuntimeError(f"CMSIS-NN fc-s4: status {result.value} (-2: the checkout has no s4 kernels)")
        y = np.frombuffer(emu.read(y_at, tokens * n), np.int8).reshape(tokens, n).copy()
    finally:
        emu.release(mark)
    want = requantize_per_tensor(x.astype(np.int64) @ w.T.astype(np.int64) + bias, multiplier, shift)
    if np.abs(y.astype(np.int16) - want).max() > 1:
        raise RuntimeError("CMSIS-NN fc-s4: output differs from the reference by more than one")
    return y, result


def run_linear(emu, kind: str, x: np.ndarray, linear, *, count_instructions: bool = True):
    """(y int8[tokens, out], the call's CallResult) of one linear layer through the real kernel."""
    tokens, k = x.shape
    n = linear.out_features
    mark = emu.heap_mark()
    try:
        x_at = emu.put(np.ascontiguousarray(x, np.int8))
        w_at = emu.put(np.ascontiguousarray(linear.weight, np.int8))
        channels = emu.put(np.ascontiguousarray(linear.channels, np.int32))
        y_at = emu.alloc(tokens * n)
        scratch = emu.alloc(max(4, emu.call("cmsisnn_bench_scratch_bytes", k, n).value), 16)
        result = emu.call(
            KINDS[kind], x_at, tokens, k, n, w_at, channels, y_at, scratch, count_instructions=count_instructions
        )
        if result.value != 0:
            raise RuntimeError(f"CMSIS-NN {kind}: status {result.value}")
        y = np.frombuffer(emu.read(y_at, tokens * n), np.int8).reshape(tokens, n).copy()
        return y, result
    finally:
        emu.release(mark)
