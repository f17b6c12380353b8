"""Whole model, head to head: BERT-tiny through TFLM with the MCUBERT ops against the stock int8 export
through stock TFLM, executed instructions per op and in total, and the arena each needs. Prints a table;
not a test.

    TFLM_DIR=... TFLM_LIB=... python bench/whole_model.py [--seq-len 128] [--tflm-lib-cmsis-nn LIB] [--summary FILE]

TFLM_LIB is a libtensorflow-microlite.a of that checkout built for TARGET_ARCH=cortex-m7+fp FPU=fpv5-sp-d16
(TFLM's reference kernels; single precision, the FPU unicorn's Cortex-M7 has); --tflm-lib-cmsis-nn (or
TFLM_LIB_CMSIS_NN) adds a run of the stock model on a TFLM built the same way with
OPTIMIZED_KERNEL_DIR=cmsis_nn. Neither is built or downloaded here. Flatbuffers and gemmlowp headers:
TFLM_THIRD_PARTY_INCLUDES, or FLATBUFFERS_INCLUDE and GEMMLOWP_DIR.

Both exports are built into examples/baremetal's mcubert_app with TFLM's MicroProfiler (per-op ticks
from the DWT cycle counter) for the emulator-only board `emulator-m7` (16 MiB of "Flash": the stock
BERT-tiny is 4.4 MB, more than the mps2 boards' memory map) and run under unicorn
(tflm_mcubert/measure/firmware_emulator.py), whose cycle counter reads executed instructions. Each app
also checks its output against its export's reference before the figures are kept. --summary writes the
committed summary (bench/results/whole_model.json); bench/report.py makes the kernels page's tables of it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
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


def build_app(export_dir: Path, build: Path, tflm_dir: str, tflm_lib: str) -> Path:
    return firmware_sizes.build(
        "emulator-m7",
        build,
        target="mcubert_app",
        cmake_args=(
            f"-DMCUBERT_EXPORT_DIR={export_dir}",
            f"-DTFLM_DIR={tflm_dir}",
            f"-DTFLM_LIB={tflm_lib}",
            f"-DTFLM_THIRD_PARTY_INCLUDES={third_party_includes()}",
            "-DMCUBERT_APP_PROFILE=ON",
        ),
    )


def per_op(console: str) -> dict[str, int]:
    """MicroProfiler::LogTicksPerTagCsv's lines: tag -> ticks (here: executed instructions)."""
    rows = {}
    for tag, ticks in re.findall(r"^([A-Za-z_][A-Za-z0-9_]*), (\d+)\r?$", console, re.MULTILINE):
        rows[tag] = int(ticks)
    return rows


def measure(name: str, export_dir: Path, build: Path, tflm_dir: str, tflm_lib: str) -> dict:
    from tflm_mcubert.measure.firmware_emulator import run_firmware

    elf = build_app(export_dir, build, tflm_dir, tflm_lib)
    run = run_firmware(elf, "cortex-m7", EMULATOR_REGIONS)
    if run.status != 0 or "output matches the reference: yes" not in run.console:
        raise SystemExit(f"{name}: the app failed or its output differs from the reference:\n{run.console[-2000:]}")
    invoke = int(re.search(r"invoke: (\d+) cycles", run.console)[1])
    arena = int(re.search(r"arena used: (\d+) of", run.console)[1])
    return {"name": name, "ops": per_op(run.console), "invoke": invoke, "arena": arena, "total": run.instructions}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--tflm-lib-cmsis-nn", default=os.environ.get("TFLM_LIB_CMSIS_NN"))
    parser.add_argument("--summary", type=Path, help="also write the summary here (bench/results/whole_model.json)")
    args = parser.parse_args(argv)
    tflm_dir, tflm_lib = os.environ.get("TFLM_DIR"), os.environ.get("TFLM_LIB")
    if not tflm_dir or not tflm_lib:
        raise SystemExit(
            "set TFLM_DIR (a tflite-micro checkout) and TFLM_LIB (its microlite library, TARGET_ARCH=cortex-m7+fp "
            "FPU=fpv5-sp-d16)"
        )
    from tflm_mcubert.boards import get_board
    from tflm_mcubert.export.pipeline import ExportRequest, run_export

    started = time.time()
    rows = []
    with tempfile.TemporaryDirectory(prefix="mcubert_whole_") as tmp:
        work = Path(tmp)
        board = get_board("nucleo-h7a3zi-q")  # the export's fit check only; the app runs on emulator-m7
        run_export(ExportRequest(out_dir=work / "mcubert", board=board, seq_len=args.seq_len))
        try:
            run_export(ExportRequest(out_dir=work / "stock", board=board, seq_len=args.seq_len, schedule="stock"))
        except Exception as exc:  # noqa: BLE001 - the stock model misses every board's Flash: files are written
            if not (work / "stock" / "model_data.cc").is_file():
                raise
            print(f"(stock export: {exc})")
        rows.append(measure("MCUBERT ops, TFLM", work / "mcubert", work / "b1", tflm_dir, tflm_lib))
        rows.append(measure("stock int8, TFLM reference kernels", work / "stock", work / "b2", tflm_dir, tflm_lib))
        if args.tflm_lib_cmsis_nn:
            rows.append(
                measure("stock int8, TFLM + CMSIS-NN", work / "stock", work / "b3", tflm_dir, args.tflm_lib_cmsis_nn)
            )
    print_tables(rows, args.seq_len)
    print(f"measured in {time.time() - started:.0f} s")
    if args.summary:
        from provenance import provenance

        for row in rows:
            row["vs_ours"] = row["invoke"] / rows[0]["invoke"]
        command = "python bench/whole_model.py " + " ".join(argv if argv is not None else sys.argv[1:])
        summary = {"bench": "whole_model", "command": command, "seq_len": args.seq_len, "rows": rows}
        args.summary.write_text(json.dumps(summary | {"provenance": provenance({})}, indent=1) + "\n")
    return 0


def markdown_table(summary: dict) -> str:
    """Invoke (executed instructions), arena used and the ratio to ours, per setup (the kernels page's table)."""
    out = [
        f"| BERT-tiny, seq {summary['seq_len']}, Cortex-M7 | Invoke | arena used | vs ours |",
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


def print_tables(rows: list[dict], seq_len: int) -> None:
    ours = rows[0]
    print(f"\nBERT-tiny, seq {seq_len}, one inference on Cortex-M7 (unicorn): executed instructions\n")
    print("| model | invoke | arena used | invoke / ours |")
    print("|---|---|---|---|")
    for row in rows:
        ratio = row["invoke"] / ours["invoke"]
        print(f"| {row['name']} | {row['invoke'] / 1e6:.1f} M | {row['arena']:,} B | {ratio:.2f} |")
    for row in rows:
        print(f"\n{row['name']}, per op (TFLM MicroProfiler):\n")
        print("| op | instructions | share |")
        print("|---|---|---|")
        for tag, ticks in sorted(row["ops"].items(), key=lambda item: -item[1]):
            print(f"| {tag} | {ticks / 1e6:.2f} M | {ticks / row['invoke']:.1%} |")


if __name__ == "__main__":
    sys.exit(main())
