"""Executed instructions of one int8 linear layer on the Cortex-M55, MVE against DSP path, MEASURED
UNDER QEMU (mps3-an547, `-icount shift=0`). Prints figures; not a test.

The same firmware (bench/m55_gemm_main.c) is linked against the kernels built for the M55 twice: the
DSP path (MCUBERT_KERNEL_PATH=dsp: SMLAD micro-kernel, Thumb-2 assembly) and the MVE path (=mve: the
pair4 gemm on Helium, everything else identical). It runs one layer of TOKENS x IN -> OUT on
pseudo-random int8 data: the gemm alone (row widening + micro-kernel over every block and channel)
and the whole layer (the same plus the output stage, requantization, which is the same code on both
paths). Both images must print the same CRC of the outputs (the golden-case QEMU test proves each
path bit-exact against the reference; this only checks they agree here).

How instructions are counted: with `-icount shift=0` QEMU's virtual clock advances exactly 1 ns per
executed guest instruction, and SysTick (processor clock) counts on that clock. The firmware times a
loop of a known instruction count (SUBS + BNE, 2 x 10^6 instructions) to get instructions per tick,
then converts the regions' ticks; the resolution is one tick (tens of instructions). These are
instruction counts, not cycles: QEMU models no pipeline, and an MVE instruction takes 2 or more
cycles (beats) on the M55 where most scalar ones take 1.

    python bench/m55_gemm.py [--shapes 128x128x128,128x128x512,128x512x128]

Needs arm-none-eabi-gcc 10+ (Cortex-M55), cmake and qemu-system-arm 6.0+ (mps3-an547).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tflm_mcubert.measure import kernel_build  # noqa: E402

CUSTOM_OPS = ROOT / "custom_ops"
ARCH = ["-mcpu=cortex-m55", "-mthumb", "-mfloat-abi=hard", "-mfpu=auto"]
PATHS = ("dsp", "mve")
# The firmware calls the library's internal functions: it must see MCUBERT_MVE as the library did.
PATH_FLAGS = {"dsp": ["-mgeneral-regs-only"], "mve": ["-fno-tree-vectorize"]}


def firmware(library: Path, work: Path, name: str, shape: tuple[int, int, int]) -> Path:
    """The bench image of kernel path `name` ("dsp" or "mve") for one shape."""
    tokens, in_features, out_features = shape
    elf = work / f"{name}-{tokens}x{in_features}x{out_features}.elf"
    command = [
        "arm-none-eabi-gcc",
        *ARCH,
        "-std=c99",
        "-O2",
        *PATH_FLAGS[name],
        f"-DTOKENS={tokens}",
        f"-DIN={in_features}",
        f"-DOUT={out_features}",
        "-I",
        str(CUSTOM_OPS / "include"),
        "-I",
        str(CUSTOM_OPS / "src"),
        "-I",
        str(CUSTOM_OPS / "test" / "arm"),
        str(ROOT / "bench" / "m55_gemm_main.c"),
        str(CUSTOM_OPS / "test" / "arm" / "startup.c"),
        str(library),
        "-nostartfiles",
        "-T",
        str(CUSTOM_OPS / "test" / "arm" / "an547.ld"),
        "--specs=nano.specs",
        "--specs=nosys.specs",
        "-Wl,--gc-sections",
        "-o",
        str(elf),
    ]
    subprocess.run(command, check=True)
    return elf


def run(elf: Path) -> dict[str, int]:
    command = ["qemu-system-arm", "-M", "mps3-an547", "-icount", "shift=0", "-nographic", "-monitor", "none"]
    command += ["-serial", "none", "-semihosting-config", "enable=on,target=native", "-kernel", str(elf)]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=600)
    console = proc.stderr + proc.stdout
    if proc.returncode != 0:
        raise RuntimeError(f"{elf.name} exited {proc.returncode}:\n{console}")
    return {key: int(value) for key, value in re.findall(r"^(\w+) (-?\d+)$", console, re.M)}


def instructions(figures: dict[str, int]) -> tuple[float, dict[str, float]]:
    """(instructions per tick, {region: instructions}) from the calibration loop."""
    loop_instructions = 2 * (figures["calibration_loops"] - 1)
    per_tick = loop_instructions / (figures["calibration_ticks"] - figures["empty_ticks"])
    return per_tick, {region: figures[f"{region}_ticks"] * per_tick for region in ("gemm", "layer")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", default="128x128x128,128x128x512,128x512x128", help="TOKENSxINxOUT,...")
    args = parser.parse_args()
    shapes = [tuple(int(v) for v in shape.split("x")) for shape in args.shapes.split(",")]
    with tempfile.TemporaryDirectory(prefix="m55_gemm_") as folder:
        work = Path(folder)
        libraries = {
            path: kernel_build.build(kernel_build.Variant("cortex-m55", path=path), work, "mcubert").library
            for path in PATHS
        }
        print("Cortex-M55, one int8 linear layer (pair4 weights): executed instructions MEASURED UNDER QEMU")
        print("mps3-an547 -icount shift=0 (SysTick, calibrated); instructions, not cycles.\n")
        header = f"{'tokens x in -> out':>20} {'MACs':>10} {'region':>6} {'DSP':>11} {'MVE':>11} {'MVE/DSP':>8}"
        print(header + f" {'DSP/MAC':>8} {'MVE/MAC':>8}")
        for shape in shapes:
            tokens, in_features, out_features = shape
            macs = tokens * in_features * out_features
            results = {}
            for path in PATHS:
                figures = run(firmware(libraries[path], work, path, shape))
                expected_path = {"dsp": 1, "mve": 2}[path]
                if figures["path"] != expected_path:
                    raise RuntimeError(f"{path} image reports path {figures['path']}")
                results[path] = (figures, instructions(figures)[1])
            if results["dsp"][0]["output_crc"] != results["mve"][0]["output_crc"]:
                raise RuntimeError(f"{shape}: the DSP and MVE outputs differ")
            for region in ("gemm", "layer"):
                dsp, mve = results["dsp"][1][region], results["mve"][1][region]
                label = f"{tokens} x {in_features} -> {out_features}"
                print(
                    f"{label:>20} {macs:>10} {region:>6} {dsp:>11.0f} {mve:>11.0f} {mve / dsp:>8.3f}"
                    f" {dsp / macs:>8.3f} {mve / macs:>8.3f}"
                )
        per_tick = instructions(results["mve"][0])[0]
        print(f"\n(calibration: {per_tick:.3f} instructions per SysTick tick; outputs identical on both paths)")


if __name__ == "__main__":
    main()
