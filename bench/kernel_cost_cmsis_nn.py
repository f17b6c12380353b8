"""The real CMSIS-NN kernels in bench/kernel_cost.py: a user's CMSIS-NN checkout (CMSIS_NN_DIR, or
--cmsis-nn-dir; never committed, never downloaded here) built for each core with the emulator's startup
and bench/cmsis_nn/cmsis_nn_shim.c, and the linear layers run through it the way TFLM 90b983c's CMSIS-NN
FULLY_CONNECTED does:

    conv1x1   arm_convolve_1x1_s8_fast -> arm_nn_mat_mult_nt_t_s8 (TFLM's path for BERT's rank-3 inputs)
    fc        arm_fully_connected_per_channel_s8 -> a vector-matrix product per token (rank-2 inputs)

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
        str(ROOT / "custom_ops" / "test" / "arm" / "startup.c"),
        str(HERE / "cmsis_nn" / "cmsis_nn_shim.c"),
        *(str(cmsis_nn_dir / s) for s in SOURCES),
        *support,
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
