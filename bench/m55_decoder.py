"""Executed instructions and estimated cycles of the decoder's one-token ops on the Cortex-M55, MVE against
DSP path, MEASURED UNDER QEMU (mps3-an547, `-icount shift=0`). Prints figures; not a test.

The cases are the QEMU golden firmware's (tests/kernels/kernel_golden.py): a step of MCUBERT_CAUSAL_ATTENTION
over a full cache of a calibrated GPT-2-like block, and MCUBERT_LM_HEAD tied to a clustered word table;
each validates, runs its kernel and compares every output byte with the numpy reference (the image fails
otherwise). bench/m55_decoder_main.c times the kernel call alone through the generator's hooks, on the
kernels built for the M55 on its DSP path and on its MVE path. Counting and the cycle estimate as
bench/m55_gemm.py (SysTick under -icount; QEMU's block log costed by the Cortex-M55 model of
measure/instruction_classes.py: an ESTIMATE).

    python bench/m55_decoder.py [--json FILE]

Needs arm-none-eabi-gcc 10+, cmake, qemu-system-arm 6.0+ and the test extras (the cases come from tests/).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests" / "kernels"))

from tflm_mcubert.measure import kernel_build  # noqa: E402

from m55_gemm import ARCH, PATH_FLAGS, PATHS, counting_and_toolchain, dsp_mve_cells, marked_cycles, run  # noqa: E402

CUSTOM_OPS = ROOT / "custom_ops"


def cases() -> list[tuple[str, object]]:
    """(label, case): the decoder ops at a GPT-2-like width (d 128, 4 heads) and a 256-token cache."""
    import kernel_cases
    import test_kernels_lm_head as lm_head_cases

    return [
        (
            "causal attention, d 128, 4 heads, position 255",
            kernel_cases.causal_attention_case(128, 4, 255, context=256),
        ),
        ("causal attention, d 128, 2 heads, position 63", kernel_cases.causal_attention_case(128, 2, 63, context=64)),
        (
            "LM head, d 128, 7,500 ids (ranks 128, 32, 8), top 5",
            lm_head_cases.tied_case(128, (500, 2000, 5000), (32, 8), 5)[0],
        ),
    ]


def firmware(library: Path, work: Path, name: str, golden: Path) -> Path:
    elf = work / f"decoder-{name}.elf"
    command = ["arm-none-eabi-gcc", *ARCH, "-std=c99", "-O2", *PATH_FLAGS[name]]
    command += ["-DGOLDEN_KERNEL_BEGIN()=bench_begin()", "-DGOLDEN_KERNEL_END()=bench_end()"]
    command += ["-include", str(ROOT / "bench" / "m55_decoder_hooks.h")]
    command += ["-I", str(CUSTOM_OPS / "include"), "-I", str(CUSTOM_OPS / "src"), "-I", str(CUSTOM_OPS / "test/arm")]
    command += [str(ROOT / "bench" / "m55_decoder_main.c"), str(golden), str(CUSTOM_OPS / "test/arm/startup.c")]
    command += [str(library), "-nostartfiles", "-T", str(CUSTOM_OPS / "test" / "arm" / "an547.ld")]
    command += ["--specs=nano.specs", "--specs=nosys.specs", "-Wl,--gc-sections", "-o", str(elf)]
    subprocess.run(command, check=True)
    return elf


def measure() -> list[dict]:
    import kernel_golden

    labelled = cases()
    rows = [{"case": label, "name": case.name} for label, case in labelled]
    with tempfile.TemporaryDirectory(prefix="m55_decoder_") as folder:
        work = Path(folder)
        golden = work / "golden.c"
        golden.write_text(kernel_golden.generate([(case, {}) for _, case in labelled]))
        for path in PATHS:
            library = kernel_build.build(kernel_build.Variant("cortex-m55", path=path), work, "mcubert").library
            elf = firmware(library, work, path, golden)
            figures = run(elf)
            if figures["path"] != {"dsp": 1, "mve": 2}[path]:
                raise RuntimeError(f"{path} image reports path {figures['path']}")
            per_tick = 2 * (figures["calibration_loops"] - 1) / (figures["calibration_ticks"] - figures["empty_ticks"])
            cycles = marked_cycles(elf, len(rows))
            for i, row in enumerate(rows):
                if figures[f"status_{i}"] != 0:
                    raise RuntimeError(f"{path}: {row['name']} is not bit-exact (status {figures[f'status_{i}']})")
                row[path] = round(figures[f"case_{i}"] * per_tick)
                row[f"{path}_cycles"] = round(cycles[i])
    return rows


def markdown_table(summary: dict) -> str:
    lines = [
        "| op, one token | DSP | MVE | MVE / DSP | est. cycles DSP / MVE | MVE / DSP (est. cycles) |",
        "|---|---|---|---|---|---|",
    ]
    for row in summary["rows"]:
        dsp, mve = ({"op": row[path], "op_cycles": row[f"{path}_cycles"]} for path in ("dsp", "mve"))
        lines.append(f"| {row['case']} | {dsp_mve_cells(dsp, mve, 'op')} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", help="also write the summary here (bench/report.py renders its table)")
    args = parser.parse_args()
    from provenance import provenance

    summary = {
        "command": "python bench/m55_decoder.py",
        **counting_and_toolchain("executed instructions of the kernel call"),
        "rows": measure(),
        "provenance": provenance({}),
    }
    print(markdown_table(summary))
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
