"""Executed instructions of one int8 linear layer on the Cortex-M55, MVE against DSP path, MEASURED
UNDER QEMU (mps3-an547, `-icount shift=0`). Prints figures; not a test.

The same firmware (bench/m55_gemm_main.c) is linked against the kernels built for the M55 twice: the
DSP path (MCUBERT_KERNEL_PATH=dsp: SMLAD micro-kernel, Thumb-2 assembly) and the MVE path (=mve: the
pair4 gemm and int8 output stage on Helium, everything else identical). It runs one layer of TOKENS x IN -> OUT on
pseudo-random int8 data: the gemm alone (row widening + micro-kernel over every block and channel)
and the whole layer (the same plus the output stage, requantization, on MVE too on the MVE path). Both
images must print the same CRC of the outputs (the golden-case QEMU test proves each
path bit-exact against the reference; this only checks they agree here).

How instructions are counted: with `-icount shift=0` QEMU's virtual clock advances exactly 1 ns per
executed guest instruction, and SysTick (processor clock) counts on that clock. The firmware times a
loop of a known instruction count (SUBS + BNE, 2 x 10^6 instructions) to get instructions per tick,
then converts the regions' ticks; the resolution is one tick (tens of instructions). These are
instruction counts, not cycles: QEMU models no pipeline, and an MVE instruction takes 2 or more
cycles (beats) on the M55 where most scalar ones take 1.

Estimated cycles: each image runs a second time with QEMU's block log (measure/qemu_blocks.py), cut into
the regions at the firmware's bench_mark() calls, and every executed block is costed by the Cortex-M55
model of measure/instruction_classes.py (two beats per MVE instruction on its pipe, overlap across pipes,
after LLVM's scheduling model of the core). An ESTIMATE, for code and data in zero-wait-state memory.

With a CMSIS-NN checkout (--cmsis-nn-dir, or CMSIS_NN_DIR; TFLM pins 4ab83cc; never committed), a third
image runs the layer through CMSIS-NN built for the M55 (its MVE path, ARM_MATH_MVEI):
arm_convolve_1x1_s8_fast -> arm_nn_mat_mult_nt_t_s8, the kernel TFLM's CMSIS-NN FULLY_CONNECTED runs for
BERT's rank-3 activations, at -O2 (TFLM's level for third-party kernels), its outputs checked within one
unit of a once-rounded reference (CMSIS-NN rounds twice).

    python bench/m55_gemm.py [--shapes 128x128x128,128x128x512,128x512x128] [--w4-shapes ...] [--cmsis-nn-dir DIR]

--w4-shapes (default: the same three) measures the layers again with int4 weights (w4row), through the
int4-weight gemm on both paths (no CMSIS-NN column for them).

Needs arm-none-eabi-gcc 10+ (Cortex-M55), cmake and qemu-system-arm 6.0+ (mps3-an547).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tflm_mcubert.measure import kernel_build  # noqa: E402
from tflm_mcubert.measure.instruction_classes import InstructionProfile  # noqa: E402
from tflm_mcubert.measure.qemu_blocks import traced_run  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
import kernel_cost_cmsis_nn as cmsis_nn  # noqa: E402

CUSTOM_OPS = ROOT / "custom_ops"
ARCH = ["-mcpu=cortex-m55", "-mthumb", "-mfloat-abi=hard", "-mfpu=auto"]
PATHS = ("dsp", "mve")
# The firmware calls the library's internal functions: it must see MCUBERT_MVE as the library did.
PATH_FLAGS = {"dsp": ["-mgeneral-regs-only"], "mve": ["-fno-tree-vectorize"]}


def firmware(
    library: Path,
    work: Path,
    name: str,
    shape: tuple[int, int, int],
    cmsis_nn_dir: Path | None = None,
    weight_bits: int = 8,
) -> Path:
    """The bench image of kernel path `name` ("dsp" or "mve") for one shape and weight width; with
    `cmsis_nn_dir`, the image whose layer is CMSIS-NN's (built for the M55, so on its MVE path; `library`
    then gives only the CRC)."""
    tokens, in_features, out_features = shape
    elf = work / f"{name}-{tokens}x{in_features}x{out_features}{'-w4' if weight_bits == 4 else ''}.elf"
    cmsis = []
    if cmsis_nn_dir is not None:
        support = sorted(str(p) for p in (cmsis_nn_dir / "Source" / "NNSupportFunctions").glob("*_s8*.c"))
        sources = [str(cmsis_nn_dir / source) for source in cmsis_nn.SOURCES]
        shim = str(ROOT / "bench" / "cmsis_nn" / "cmsis_nn_shim.c")
        cmsis = [
            "-DCMSIS_NN_LAYER",
            "-DCMSISNN_BENCH_NO_MAIN",
            f"-I{cmsis_nn_dir / 'Include'}",
            shim,
            *sources,
            *support,
        ]
    command = [
        "arm-none-eabi-gcc",
        *ARCH,
        "-std=c99",
        "-O2",
        *(PATH_FLAGS[name] if cmsis_nn_dir is None else []),
        *cmsis,
        f"-DTOKENS={tokens}",
        f"-DIN={in_features}",
        f"-DOUT={out_features}",
        f"-DWEIGHT_BITS={weight_bits}",
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


def marked_cycles(elf: Path, count: int) -> list[float]:
    """Estimated Cortex-M55 cycles of the `count` regions a firmware brackets with bench_mark() calls (a traced
    run's segments 1, 3, 5, ...: before, [region], between, [region], ..., after)."""
    symbols = subprocess.run(["arm-none-eabi-nm", str(elf)], capture_output=True, text=True, check=True).stdout
    mark = int(re.search(r"^([0-9a-f]+) T bench_mark$", symbols, re.M)[1], 16)
    run = traced_run(elf, machine="mps3-an547", marks=frozenset({mark & ~1}))
    if run.status != 0:
        raise RuntimeError(f"{elf.name} exited {run.status} traced:\n{run.console}")
    profile = InstructionProfile(elf, "armv8.1-m.main")
    return [profile.cycles(run.segments[2 * i + 1], "cortex-m55") for i in range(count)]


def estimated_cycles(elf: Path) -> dict[str, float]:
    """{region: estimated Cortex-M55 cycles}: the matrix product, then the whole layer."""
    return dict(zip(("gemm", "layer"), marked_cycles(elf, 2)))


def instructions(figures: dict[str, int]) -> tuple[float, dict[str, float]]:
    """(instructions per tick, {region: instructions}) from the calibration loop."""
    loop_instructions = 2 * (figures["calibration_loops"] - 1)
    per_tick = loop_instructions / (figures["calibration_ticks"] - figures["empty_ticks"])
    return per_tick, {region: figures[f"{region}_ticks"] * per_tick for region in ("gemm", "layer")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", default="128x128x128,128x128x512,128x512x128", help="TOKENSxINxOUT,...")
    parser.add_argument(
        "--w4-shapes",
        default="128x128x128,128x128x512,128x512x128",
        help="TOKENSxINxOUT,... measured again with int4 weights (the int4-weight gemm); '' for none",
    )
    parser.add_argument(
        "--cmsis-nn-dir",
        default=os.environ.get("CMSIS_NN_DIR"),
        help="a CMSIS-NN checkout (default: $CMSIS_NN_DIR): adds its MVE layer as a third column",
    )
    parser.add_argument("--json", help="also write the summary here (bench/report.py renders its tables)")
    args = parser.parse_args()
    cmsis_nn_dir = Path(args.cmsis_nn_dir) if args.cmsis_nn_dir else None
    if cmsis_nn_dir is not None and not (cmsis_nn_dir / "Include" / "arm_nnfunctions.h").is_file():
        parser.error(f"--cmsis-nn-dir {cmsis_nn_dir}: not a CMSIS-NN checkout (no Include/arm_nnfunctions.h)")
    shapes = [(tuple(int(v) for v in shape.split("x")), 8) for shape in args.shapes.split(",")]
    shapes += [(tuple(int(v) for v in shape.split("x")), 4) for shape in args.w4_shapes.split(",") if shape]
    from provenance import provenance

    summary = {
        "command": "python bench/m55_gemm.py" + (" --cmsis-nn-dir DIR" if cmsis_nn_dir else ""),
        **counting_and_toolchain(),
        "cmsis_nn": cmsis_nn.revision(cmsis_nn_dir) if cmsis_nn_dir else None,
        "rows": measure(shapes, cmsis_nn_dir),
        "provenance": provenance({}),
    }
    print(markdown_table(summary))
    if summary["cmsis_nn"]:
        print(f"\nCMSIS-NN {summary['cmsis_nn']} (MVE, -O2), the whole layer, outputs within one unit:\n")
        print(cmsis_nn_table(summary))
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1) + "\n")


def counting_and_toolchain(what: str = "executed instructions") -> dict:
    """How an M55 summary counts, and the toolchain it counted with."""
    return {
        "counting": f"{what} under QEMU mps3-an547 -icount shift=0 (SysTick, calibrated); "
        "estimated cycles from QEMU's block log and the Cortex-M55 model of measure/instruction_classes.py",
        "toolchain": {tool: _first_line([tool, "--version"]) for tool in ("arm-none-eabi-gcc", "qemu-system-arm")},
    }


def _first_line(command: list[str]) -> str:
    done = subprocess.run(command, capture_output=True, text=True)
    return done.stdout.splitlines()[0] if done.returncode == 0 and done.stdout else "not found"


def measure(shapes, cmsis_nn_dir: Path | None) -> list[dict]:
    """One row a (shape, weight bits): instructions of the gemm and the whole layer on the DSP and MVE paths,
    and of CMSIS-NN's whole layer when a checkout is given (int8 weights)."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="m55_gemm_") as folder:
        work = Path(folder)
        libraries = {
            path: kernel_build.build(kernel_build.Variant("cortex-m55", path=path), work, "mcubert").library
            for path in PATHS
        }
        for shape, bits in shapes:
            print(f"{'x'.join(map(str, shape))} int{bits} ...", file=sys.stderr, flush=True)
            elves = {path: firmware(libraries[path], work, path, shape, weight_bits=bits) for path in PATHS}
            results = {path: _measured(elves[path], path) for path in PATHS}
            if results["dsp"][0]["output_crc"] != results["mve"][0]["output_crc"]:
                raise RuntimeError(f"{shape} int{bits}: the DSP and MVE outputs differ")
            row = {"shape": list(shape), **{path: {k: round(v) for k, v in results[path][1].items()} for path in PATHS}}
            if bits != 8:
                row["weight_bits"] = bits
            for path in PATHS:
                cycles = estimated_cycles(elves[path])
                row[path].update({f"{region}_cycles": round(value) for region, value in cycles.items()})
            if cmsis_nn_dir is not None and bits == 8:
                elf = firmware(libraries["mve"], work, "cmsis-nn", shape, cmsis_nn_dir)
                row["cmsis_nn_layer"] = round(_measured(elf, "cmsis-nn")[1]["layer"])
                row["cmsis_nn_layer_cycles"] = round(estimated_cycles(elf)["layer"])
            rows.append(row)
    return rows


def _measured(elf: Path, name: str) -> tuple[dict[str, int], dict[str, float]]:
    """(the image's figures, {region: instructions}), checked: the path it ran, or CMSIS-NN's status and outputs."""
    figures = run(elf)
    if name == "cmsis-nn":
        if figures["status"] != 0 or figures["max_difference"] > 1:
            raise RuntimeError(f"{elf.name}: CMSIS-NN status {figures['status']}, off by {figures['max_difference']}")
    elif figures["path"] != {"dsp": 1, "mve": 2}[name]:
        raise RuntimeError(f"{name} image reports path {figures['path']}")
    return figures, instructions(figures)[1]


def _label(shape, weight_bits: int = 8) -> str:
    return "{}x{}->{}".format(*shape) + (", int4 weights" if weight_bits == 4 else "")


def markdown_table(summary: dict) -> str:
    """DSP against MVE path per shape: the matrix product alone and the whole layer, executed instructions
    (with instructions per MAC) and estimated cycles."""
    lines = [
        "| tokens x in -> out | region | DSP | MVE | MVE / DSP | per MAC (DSP / MVE) | est. cycles DSP / MVE | "
        "MVE / DSP (est. cycles) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in summary["rows"]:
        macs = row["shape"][0] * row["shape"][1] * row["shape"][2]
        for region, name in (("gemm", "matrix product"), ("layer", "whole layer")):
            label = _label(row["shape"], row.get("weight_bits", 8))
            lines.append(f"| {label} | {name} | {dsp_mve_cells(row['dsp'], row['mve'], region, macs)} |")
    return "\n".join(lines)


def dsp_mve_cells(dsp: dict, mve: dict, region: str, macs: int | None = None) -> str:
    """The table cells of one region measured on both paths: instructions DSP, MVE, their ratio, (per MAC,)
    then the estimated cycles and their ratio."""
    cells = [f"{dsp[region]:,}", f"{mve[region]:,}", f"{mve[region] / dsp[region]:.3f}"]
    if macs:
        cells.append(f"{dsp[region] / macs:.3f} / {mve[region] / macs:.3f}")
    dsp_cycles, mve_cycles = dsp[f"{region}_cycles"], mve[f"{region}_cycles"]
    cells += [f"{dsp_cycles:,} / {mve_cycles:,}", f"{mve_cycles / dsp_cycles:.3f}"]
    return " | ".join(cells)


def cmsis_nn_table(summary: dict) -> str:
    """Our MVE layer against CMSIS-NN's, per shape: executed instructions and estimated cycles."""
    lines = [
        "| tokens x in -> out | ours, MVE | CMSIS-NN, MVE | ours / CMSIS-NN | est. cycles, ours / CMSIS-NN | ratio |",
        "|---|---|---|---|---|---|",
    ]
    for row in summary["rows"]:
        if "cmsis_nn_layer" not in row:
            continue
        ours, theirs = row["mve"]["layer"], row["cmsis_nn_layer"]
        ours_cycles, theirs_cycles = row["mve"]["layer_cycles"], row["cmsis_nn_layer_cycles"]
        lines.append(
            f"| {_label(row['shape'])} | {ours:,} | {theirs:,} | {ours / theirs:.3f} | "
            f"{ours_cycles:,} / {theirs_cycles:,} | {ours_cycles / theirs_cycles:.3f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
