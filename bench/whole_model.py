"""Whole model, head to head: BERT-tiny through TFLM with the MCUBERT ops against the stock int8 export
through stock TFLM, executed instructions per op and in total, and the arena each needs. Prints a table;
not a test.

    TFLM_DIR=... TFLM_LIB=... python bench/whole_model.py [--core cortex-m7|cortex-m55] [--seq-len 128]
        [--tflm-lib-cmsis-nn LIB] [--no-reference] [--summary FILE]

TFLM_LIB is a libtensorflow-microlite.a of that checkout built for the core: TARGET_ARCH=cortex-m7+fp
FPU=fpv5-sp-d16 (TFLM's reference kernels; single precision, the FPU unicorn's Cortex-M7 has), or
TARGET_ARCH=cortex-m55 for --core cortex-m55; --tflm-lib-cmsis-nn (or TFLM_LIB_CMSIS_NN) adds a run of the
stock model on a TFLM built the same way with OPTIMIZED_KERNEL_DIR=cmsis_nn (on the M55: CMSIS-NN's MVE
kernels). --no-reference drops the stock model on the reference kernels (TFLM_LIB may then be the CMSIS-NN
build: the MCUBERT model runs only its custom ops, the same on either). Neither library is built or
downloaded here. Flatbuffers and gemmlowp headers: TFLM_THIRD_PARTY_INCLUDES, or FLATBUFFERS_INCLUDE and
GEMMLOWP_DIR. The summary names TFLM's revision from a git checkout's HEAD, else from TFLM_REVISION, and
CMSIS-NN's from CMSIS_NN_DIR (the checkout the CMSIS-NN library was built from) or CMSIS_NN_REVISION.

Both exports are built into examples/baremetal's mcubert_app with TFLM's MicroProfiler (per-op ticks of
tflite::GetCurrentTimeTicks()), for an emulator-only board with room for the stock model (4.4 MB):
- cortex-m7: `emulator-m7` (16 MiB of "Flash") under unicorn (tflm_mcubert/measure/firmware_emulator.py),
  whose DWT cycle counter reads executed instructions;
- cortex-m55: `emulator-m55` (the code and the model in the DDR of QEMU's mps3-an547) under
  `qemu-system-arm -M mps3-an547 -icount shift=0`, where SysTick counts QEMU's virtual clock, 1 ns per
  executed instruction: the board's mcubert_cycles() and GetCurrentTimeTicks() turn it into executed
  instructions (calibrated on a loop of known length; examples/baremetal/src/icount_systick.c). The
  MCUBERT kernels are built with MCUBERT_KERNEL_PATH=mve (the linear layers on Helium).
Each app also checks its output against its export's reference before the figures are kept. --summary
writes the committed summary (bench/results/whole_model.json, whole_model_m55.json); bench/report.py makes
the kernels page's tables of it. The counts are executed instructions, not cycles.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from emulated_firmware import EMULATOR_REGIONS, firmware_sizes  # noqa: E402 - bench/ is the script's folder


def third_party_includes() -> str:
    if os.environ.get("TFLM_THIRD_PARTY_INCLUDES"):
        return os.environ["TFLM_THIRD_PARTY_INCLUDES"]
    missing = [name for name in ("FLATBUFFERS_INCLUDE", "GEMMLOWP_DIR") if not os.environ.get(name)]
    if missing:
        raise SystemExit(f"set TFLM_THIRD_PARTY_INCLUDES, or {' and '.join(missing)}")
    return f"{os.environ['FLATBUFFERS_INCLUDE']};{os.environ['GEMMLOWP_DIR']}"


@dataclasses.dataclass(frozen=True)
class Core:
    name: str  # as the tables print it
    board: str  # examples/baremetal's emulator-only board
    tflm_arch: str  # TFLM's TARGET_ARCH (and FPU) the libraries are built with
    emulator: str
    kernel_path: str | None = None  # MCUBERT_KERNEL_PATH of the kernels (None: the board's default)


CORES = {
    "cortex-m7": Core("Cortex-M7", "emulator-m7", "cortex-m7+fp FPU=fpv5-sp-d16", "unicorn"),
    "cortex-m55": Core(
        "Cortex-M55", "emulator-m55", "cortex-m55", "QEMU mps3-an547 -icount shift=0", kernel_path="mve"
    ),
}


def build_app(core: Core, export_dir: Path, build: Path, tflm_dir: str, tflm_lib: str) -> Path:
    return firmware_sizes.build(
        core.board,
        build,
        target="mcubert_app",
        cmake_args=(
            f"-DMCUBERT_EXPORT_DIR={export_dir}",
            f"-DTFLM_DIR={tflm_dir}",
            f"-DTFLM_LIB={tflm_lib}",
            f"-DTFLM_THIRD_PARTY_INCLUDES={third_party_includes()}",
            "-DMCUBERT_APP_PROFILE=ON",
            *([f"-DMCUBERT_KERNEL_PATH={core.kernel_path}"] if core.kernel_path else []),
        ),
    )


def per_op(console: str) -> dict[str, int]:
    """MicroProfiler::LogTicksPerTagCsv's lines: tag -> ticks (here: executed instructions)."""
    rows = {}
    for tag, ticks in re.findall(r"^([A-Za-z_][A-Za-z0-9_]*), (\d+)\r?$", console, re.MULTILINE):
        rows[tag] = int(ticks)
    return rows


def measure(core: Core, name: str, export_dir: Path, build: Path, tflm_dir: str, tflm_lib: str) -> dict:
    """One setup's Invoke, per-op and arena figures (executed instructions), its output checked."""
    elf = build_app(core, export_dir, build, tflm_dir, tflm_lib)
    if core.board == "emulator-m7":
        from tflm_mcubert.measure.firmware_emulator import run_firmware

        run = run_firmware(elf, "cortex-m7", EMULATOR_REGIONS)
        status, console, extra = run.status, run.console, {"total": run.instructions}
    else:
        from tests.qemu import run_qemu

        (status, console), extra = run_qemu(elf, machine="mps3-an547", icount=True, timeout=1800), {}
    if status != 0 or "output matches the reference: yes" not in console:
        raise SystemExit(f"{name}: the app failed or its output differs from the reference:\n{console[-2000:]}")
    invoke = int(re.search(r"invoke: (\d+) cycles", console)[1])  # the board's counter: executed instructions
    arena = int(re.search(r"arena used: (\d+) of", console)[1])
    return {"name": name, "ops": per_op(console), "invoke": invoke, "arena": arena, **extra}


def _first_line(command: list[str]) -> str:
    done = subprocess.run(command, capture_output=True, text=True)
    return done.stdout.splitlines()[0] if done.returncode == 0 and done.stdout else "not found"


def _revision(directory: str | None, variable: str) -> str:
    """A checkout's HEAD (short), else the revision the environment states, else 'not recorded'."""
    if directory:
        command = ["git", "-C", directory, "rev-parse", "--show-toplevel", "--short", "HEAD"]
        done = subprocess.run(command, capture_output=True, text=True)
        lines = done.stdout.split()
        if done.returncode == 0 and len(lines) == 2 and Path(lines[0]).resolve() == Path(directory).resolve():
            return lines[1]  # the checkout's own HEAD, not that of a repository it lies in
    return os.environ.get(variable) or "not recorded"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--core", choices=sorted(CORES), default="cortex-m7")
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--tflm-lib-cmsis-nn", default=os.environ.get("TFLM_LIB_CMSIS_NN"))
    parser.add_argument("--no-reference", action="store_true", help="skip the stock model on the reference kernels")
    parser.add_argument("--summary", type=Path, help="also write the summary here (bench/results/whole_model*.json)")
    args = parser.parse_args(argv)
    core = CORES[args.core]
    tflm_dir, tflm_lib = os.environ.get("TFLM_DIR"), os.environ.get("TFLM_LIB")
    if not tflm_dir or not tflm_lib:
        raise SystemExit(
            f"set TFLM_DIR (a tflite-micro checkout) and TFLM_LIB (its microlite library, TARGET_ARCH={core.tflm_arch})"
        )
    from tflm_mcubert.boards import get_board
    from tflm_mcubert.export.pipeline import ExportRequest, run_export

    cmsis_nn = _revision(os.environ.get("CMSIS_NN_DIR"), "CMSIS_NN_REVISION")
    started = time.time()
    rows = []
    with tempfile.TemporaryDirectory(prefix="mcubert_whole_") as tmp:
        work = Path(tmp)
        board = get_board("nucleo-h7a3zi-q")  # the export's fit check only; the app runs on the emulator board
        run_export(ExportRequest(out_dir=work / "mcubert", board=board, seq_len=args.seq_len))
        try:
            run_export(ExportRequest(out_dir=work / "stock", board=board, seq_len=args.seq_len, schedule="stock"))
        except Exception as exc:  # noqa: BLE001 - the stock model misses every board's Flash: files are written
            if not (work / "stock" / "model_data.cc").is_file():
                raise
            print(f"(stock export: {exc})")
        ours = "MCUBERT ops through TFLM" + (" (MVE path)" if args.core == "cortex-m55" else "")
        rows.append(measure(core, ours, work / "mcubert", work / "b1", tflm_dir, tflm_lib))
        if not args.no_reference:
            name = "stock int8 through TFLM (reference kernels)"
            rows.append(measure(core, name, work / "stock", work / "b2", tflm_dir, tflm_lib))
        if args.tflm_lib_cmsis_nn:
            name = f"stock int8 through TFLM + CMSIS-NN {cmsis_nn} (`OPTIMIZED_KERNEL_DIR=cmsis_nn`)"
            rows.append(measure(core, name, work / "stock", work / "b3", tflm_dir, args.tflm_lib_cmsis_nn))
    for row in rows:
        row["vs_ours"] = round(row["invoke"] / rows[0]["invoke"], 3)
    print_tables(rows, args.seq_len, core)
    print(f"measured in {time.time() - started:.0f} s")
    if args.summary:
        from provenance import provenance

        flags = [f"--core {args.core}"] + ([f"--seq-len {args.seq_len}"] if args.seq_len != 128 else [])
        flags += ["--no-reference"] * args.no_reference + ["--tflm-lib-cmsis-nn LIB"] * bool(args.tflm_lib_cmsis_nn)
        command = f"TFLM_DIR=... TFLM_LIB=... python bench/whole_model.py {' '.join(flags)} --summary {args.summary}"
        summary = {
            "bench": "whole_model" + ("" if args.core == "cortex-m7" else "_m55"),
            "command": command,
            "seq_len": args.seq_len,
            "core": args.core,
            "setup": (
                f"the default BERT-tiny exports at {args.seq_len} tokens, each built into mcubert_app with TFLM's "
                f"MicroProfiler for the emulator-only board {core.board}, run under {core.emulator}; TFLM "
                f"{_revision(tflm_dir, 'TFLM_REVISION')}'s microlite, TARGET_ARCH={core.tflm_arch}"
                + (f"; CMSIS-NN {cmsis_nn} (OPTIMIZED_KERNEL_DIR=cmsis_nn)" if args.tflm_lib_cmsis_nn else "")
                + (
                    f"; the MCUBERT kernels built with MCUBERT_KERNEL_PATH={core.kernel_path}"
                    if core.kernel_path
                    else ""
                )
            ),
            "counting": "executed instructions, not cycles: "
            + (
                "unicorn's DWT cycle counter counts them"
                if args.core == "cortex-m7"
                else "SysTick on QEMU's -icount shift=0 clock (1 ns an instruction), calibrated on a loop of "
                "2,000,000 instructions (examples/baremetal/src/icount_systick.c); resolution one tick, about "
                "31 instructions"
            ),
            "toolchain": {tool: _first_line([tool, "--version"]) for tool in ("arm-none-eabi-gcc", "qemu-system-arm")},
            "rows": rows,
        }
        args.summary.write_text(json.dumps(summary | {"provenance": provenance({})}, indent=1) + "\n")
    return 0


def _core_name(summary: dict) -> str:
    return CORES[summary.get("core", "cortex-m7")].name


def markdown_table(summary: dict) -> str:
    """Invoke (executed instructions), arena used and the ratio to ours, per setup (the kernels page's table)."""
    out = [
        f"| BERT-tiny, seq {summary['seq_len']}, {_core_name(summary)} | Invoke | arena used | vs ours |",
        "|---|---:|---:|---:|",
    ]
    for row in summary["rows"]:
        out.append(f"| {row['name']} | {row['invoke'] / 1e6:.1f} M | {row['arena']:,} B | {row['vs_ours']:.2f} |")
    return "\n".join(out)


def per_op_table(summary: dict) -> str:
    """Each setup's ops, largest first: executed instructions and share of Invoke (the kernels page's table)."""
    out = ["| setup | ops, largest first: instructions (share of Invoke) |", "|---|---|"]
    for row in summary["rows"]:
        ops = sorted(row["ops"].items(), key=lambda item: -item[1])
        cells = [
            f"{tag} {ticks / 1e6:.{2 if ticks < 1e5 else 1}f} M ({ticks / row['invoke']:.0%})" for tag, ticks in ops
        ]
        rest = row["invoke"] - sum(row["ops"].values())
        if rest >= 0.05e6:
            cells.append(f"the rest {rest / 1e6:.1f} M")
        out.append(f"| {row['name']} | {', '.join(cells)} |")
    return "\n".join(out)


def print_tables(rows: list[dict], seq_len: int, core: Core) -> None:
    ours = rows[0]
    print(f"\nBERT-tiny, seq {seq_len}, one inference on {core.name} ({core.emulator}): executed instructions\n")
    print("| model | invoke | arena used | invoke / ours | ours / this |")
    print("|---|---|---|---|---|")
    for row in rows:
        ratio = row["invoke"] / ours["invoke"]
        print(f"| {row['name']} | {row['invoke']:,} | {row['arena']:,} B | {ratio:.3f} | {1 / ratio:.3f} |")
    for row in rows:
        print(f"\n{row['name']}, per op (TFLM MicroProfiler):\n")
        print("| op | instructions | share |")
        print("|---|---|---|")
        for tag, ticks in sorted(row["ops"].items(), key=lambda item: -item[1]):
            print(f"| {tag} | {ticks:,} | {ticks / row['invoke']:.1%} |")


if __name__ == "__main__":
    sys.exit(main())
