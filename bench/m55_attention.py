"""Executed instructions and estimated cycles of the attention's two batched products (QK^T and P.V) on
the Cortex-M55, MVE against DSP path, MEASURED UNDER QEMU (mps3-an547, `-icount shift=0`). Prints figures;
not a test.

The firmware (bench/m55_attention_main.c) runs one layer's products as MCUBERT_ATTENTION does (tiles of 4
query rows, mcubert_gemm_4xn_rows over key and value chunks), linked against the kernels built for the M55
on the DSP path and on the MVE path; each product alone ("gemm": widening + micro-kernel) and with its
output stage (int16 scores; the weighted mean requantized to int8). Both images must print the same CRC of
the outputs. Counting and cycle estimate as bench/m55_gemm.py (SysTick under -icount, QEMU's block log
costed by the Cortex-M55 model of measure/instruction_classes.py: an ESTIMATE).

With a CMSIS-NN checkout (--cmsis-nn-dir, or CMSIS_NN_DIR), a third image runs the same products through
CMSIS-NN's arm_batch_matmul_s8 built for the M55 (its MVE path), what TFLM's CMSIS-NN BATCH_MATMUL calls,
with the right-hand side already transposed (TFLM transposes it first: not counted); int8 x int8 both
times (stock TFLM's softmax output is int8), so its P.V does half the multiply width of ours.

    python bench/m55_attention.py [--shapes 128x64x2] [--cmsis-nn-dir DIR] [--json FILE]

Needs arm-none-eabi-gcc 10+, cmake and qemu-system-arm 6.0+.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from tflm_mcubert.measure import kernel_build  # noqa: E402

import kernel_cost_cmsis_nn as cmsis_nn  # noqa: E402
from m55_gemm import ARCH, PATH_FLAGS, PATHS, counting_and_toolchain, dsp_mve_cells, marked_cycles, run  # noqa: E402

CUSTOM_OPS = ROOT / "custom_ops"
REGIONS = ("scores_gemm", "scores", "context_gemm", "context")
CMSIS_NN_SOURCES = (
    "Source/FullyConnectedFunctions/arm_batch_matmul_s8.c",
    "Source/FullyConnectedFunctions/arm_vector_sum_s8.c",
)


def firmware(library: Path, work: Path, name: str, shape: tuple[int, int, int], cmsis_nn_dir: Path | None = None):
    """The bench image of path `name` ("dsp", "mve" or "cmsis-nn") for one shape (tokens, head size, heads)."""
    tokens, head_size, heads = shape
    elf = work / f"attention-{name}-{tokens}x{head_size}x{heads}.elf"
    extra = []
    if cmsis_nn_dir is not None:
        support = sorted(str(p) for p in (cmsis_nn_dir / "Source" / "NNSupportFunctions").glob("*_s8*.c"))
        extra = [
            "-DCMSIS_NN_BMM",
            f"-I{cmsis_nn_dir / 'Include'}",
            *(str(cmsis_nn_dir / s) for s in CMSIS_NN_SOURCES),
            *support,
        ]
    command = ["arm-none-eabi-gcc", *ARCH, "-std=c99", "-O2", *(PATH_FLAGS.get(name, [])), *extra]
    command += [f"-DS={tokens}", f"-DDH={head_size}", f"-DHEADS={heads}"]
    command += ["-I", str(CUSTOM_OPS / "include"), "-I", str(CUSTOM_OPS / "src"), "-I", str(CUSTOM_OPS / "test/arm")]
    command += [str(ROOT / "bench" / "m55_attention_main.c"), str(CUSTOM_OPS / "test" / "arm" / "startup.c")]
    command += [str(library), "-nostartfiles", "-T", str(CUSTOM_OPS / "test" / "arm" / "an547.ld")]
    command += ["--specs=nano.specs", "--specs=nosys.specs", "-Wl,--gc-sections", "-o", str(elf)]
    subprocess.run(command, check=True)
    return elf


def estimated_cycles(elf: Path) -> dict[str, float]:
    """{region: estimated Cortex-M55 cycles} of the REGIONS, bracketed by bench_mark() calls in that order."""
    return dict(zip(REGIONS, marked_cycles(elf, len(REGIONS))))


def measured(elf: Path, name: str) -> tuple[dict[str, int], dict[str, float]]:
    """(the image's figures, {region: instructions}), checked: the path it ran, or CMSIS-NN's status."""
    figures = run(elf)
    if name == "cmsis-nn":
        if figures["status"] != 0:
            raise RuntimeError(f"{elf.name}: CMSIS-NN status {figures['status']}")
    elif figures["path"] != {"dsp": 1, "mve": 2}[name]:
        raise RuntimeError(f"{name} image reports path {figures['path']}")
    per_tick = 2 * (figures["calibration_loops"] - 1) / (figures["calibration_ticks"] - figures["empty_ticks"])
    return figures, {region: figures[f"{region}_ticks"] * per_tick for region in REGIONS}


def measure(shapes, cmsis_nn_dir: Path | None) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="m55_attention_") as folder:
        work = Path(folder)
        libraries = {
            path: kernel_build.build(kernel_build.Variant("cortex-m55", path=path), work, "mcubert").library
            for path in PATHS
        }
        for shape in shapes:
            print(f"{'x'.join(map(str, shape))} ...", file=sys.stderr, flush=True)
            row = {"shape": list(shape)}
            crcs = {}
            for path in PATHS:
                elf = firmware(libraries[path], work, path, shape)
                figures, counts = measured(elf, path)
                crcs[path] = figures["output_crc"]
                cycles = estimated_cycles(elf)
                row[path] = {region: round(counts[region]) for region in REGIONS}
                row[path].update({f"{region}_cycles": round(cycles[region]) for region in REGIONS})
            if crcs["dsp"] != crcs["mve"]:
                raise RuntimeError(f"{shape}: the DSP and MVE outputs differ")
            if cmsis_nn_dir is not None:
                elf = firmware(libraries["mve"], work, "cmsis-nn", shape, cmsis_nn_dir)
                counts = measured(elf, "cmsis-nn")[1]
                cycles = estimated_cycles(elf)
                row["cmsis_nn"] = {region: round(counts[region]) for region in ("scores", "context")}
                row["cmsis_nn"].update({f"{r}_cycles": round(cycles[r]) for r in ("scores", "context")})
            rows.append(row)
    return rows


def _label(shape) -> str:
    return "s {} x dh {}, {} heads".format(*shape)


def markdown_table(summary: dict) -> str:
    """DSP against MVE path per shape and product: executed instructions (and per MAC), estimated cycles."""
    lines = [
        "| shape | product | DSP | MVE | MVE / DSP | per MAC (DSP / MVE) | est. cycles DSP / MVE | "
        "MVE / DSP (est. cycles) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    names = {
        "scores_gemm": "QK^T gemm",
        "scores": "QK^T + int16 scores",
        "context_gemm": "P.V gemm",
        "context": "P.V + int8 context",
    }
    for row in summary["rows"]:
        tokens, head_size, heads = row["shape"]
        macs = heads * tokens * tokens * head_size
        for region in REGIONS:
            cells = dsp_mve_cells(row["dsp"], row["mve"], region, macs)
            lines.append(f"| {_label(row['shape'])} | {names[region]} | {cells} |")
    return "\n".join(lines)


def cmsis_nn_table(summary: dict) -> str:
    """Our MVE products (with output stages) against CMSIS-NN's arm_batch_matmul_s8."""
    lines = [
        "| shape | product | ours, MVE | CMSIS-NN, MVE | ours / CMSIS-NN | est. cycles, ours / CMSIS-NN | ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in summary["rows"]:
        for region, name in (("scores", "QK^T"), ("context", "P.V")):
            ours, theirs = row["mve"][region], row["cmsis_nn"][region]
            ours_cycles, theirs_cycles = row["mve"][f"{region}_cycles"], row["cmsis_nn"][f"{region}_cycles"]
            lines.append(
                f"| {_label(row['shape'])} | {name} | {ours:,} | {theirs:,} | {ours / theirs:.3f} | "
                f"{ours_cycles:,} / {theirs_cycles:,} | {ours_cycles / theirs_cycles:.3f} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", default="128x64x2,256x64x2", help="TOKENSxHEAD_SIZExHEADS,...")
    parser.add_argument(
        "--cmsis-nn-dir",
        default=os.environ.get("CMSIS_NN_DIR"),
        help="a CMSIS-NN checkout (default: $CMSIS_NN_DIR): adds arm_batch_matmul_s8 (MVE) as a third column",
    )
    parser.add_argument("--json", help="also write the summary here (bench/report.py renders its tables)")
    args = parser.parse_args()
    cmsis_nn_dir = Path(args.cmsis_nn_dir) if args.cmsis_nn_dir else None
    if cmsis_nn_dir is not None and not (cmsis_nn_dir / "Include" / "arm_nnfunctions.h").is_file():
        parser.error(f"--cmsis-nn-dir {cmsis_nn_dir}: not a CMSIS-NN checkout (no Include/arm_nnfunctions.h)")
    shapes = [tuple(int(v) for v in shape.split("x")) for shape in args.shapes.split(",")]
    from provenance import provenance

    summary = {
        "command": "python bench/m55_attention.py" + (" --cmsis-nn-dir DIR" if cmsis_nn_dir else ""),
        **counting_and_toolchain(),
        "cmsis_nn": cmsis_nn.revision(cmsis_nn_dir) if cmsis_nn_dir else None,
        "rows": measure(shapes, cmsis_nn_dir),
        "provenance": provenance({}),
    }
    print(markdown_table(summary))
    if summary["cmsis_nn"]:
        print(f"\nCMSIS-NN {summary['cmsis_nn']} arm_batch_matmul_s8 (MVE, -O2), with output stages:\n")
        print(cmsis_nn_table(summary))
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
