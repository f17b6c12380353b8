"""Decoder tokens per second, ESTIMATED per board and context length from counted instructions. Prints a
table; not a test.

    python bench/decoder_speed.py [EXPORT_DIR] [--contexts 16,64,128,256] [--tokens 8] [--summary FILE]

EXPORT_DIR: a decoder export (`python -m tflm_mcubert export --checkpoint <GPT-2 dir> --out DIR`); without it
the gpt2-d128x2 preset (random weights, GPT-2's 50,257 ids, its word table compressed to the F746ZG's
Flash) is exported into a temporary folder. The export's `mcubert_generate` (examples/baremetal) is built
for the emulator-only board `emulator-m7` and run under unicorn (tflm_mcubert/measure/firmware_emulator.py),
whose DWT cycle counter reads executed instructions: for each context c a prompt of c - tokens ids is fed,
then `tokens` ids are generated, and the firmware prints the instructions of a generated token (positions
c - tokens .. c - 1: attention over the cache grows with the position).

Estimates per board (labelled as such, not measured on a board):
  compute   core clock / instructions (one instruction a cycle, no wait states: an upper bound)
  +Flash    also every constant byte of the model read from Flash once a token (a decoder step reads each
            weight once: no reuse across tokens), every cache line a miss costing the board's
            FlashTiming.miss_cycles (schedule/flash_traffic.py's stall model; an upper estimate of the stall)

--summary writes the committed summary (bench/results/decoder_speed.json: the rows, the command and
provenance with the export's SHA-256); bench/report.py makes the decoder page's table of it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import re
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from emulated_firmware import EMULATOR_REGIONS, firmware_sizes  # noqa: E402 - bench/ is the script's folder

BOARDS = ("nucleo-f746zg", "nucleo-f767zi", "nucleo-h7a3zi-q")
_PER_TOKEN = re.compile(r"prompt (\d+): (\d+) ids in, ids out:[^;]*; prompt \d+ cycles, (\d+) cycles a generated token")


def export_preset(out: Path) -> Path:
    from tflm_mcubert.boards import get_board
    from tflm_mcubert.export.pipeline import ExportRequest, run_export

    run_export(ExportRequest(out_dir=out, board=get_board("nucleo-f746zg"), preset="gpt2-d128x2"))
    return out


def instructions_per_token(export_dir: Path, contexts: list[int], tokens: int, work: Path) -> dict[int, int]:
    """Executed instructions of one generated token at each context (the last `tokens` positions of it)."""
    from tflm_mcubert.firmware.app_data import app_data_from_export, write_app_data
    from tflm_mcubert.measure.firmware_emulator import run_firmware

    calls = dataclasses.replace(app_data_from_export(export_dir), vocab=b"")  # prompts as ids
    write_app_data(calls, work / "data")
    elf = firmware_sizes.build(
        "emulator-m7",
        work / "build",
        target="mcubert_generate",
        cmake_args=(f"-DMCUBERT_GENERATE_DATA_DIR={work / 'data'}",),
    )
    rng = np.random.default_rng(0)
    lines = [" ".join(str(i) for i in rng.integers(0, calls.vocab_size, c - tokens)) for c in contexts]
    (work / "prompts.txt").write_text("\n".join(lines) + "\n")
    run = run_firmware(
        elf, "cortex-m7", EMULATOR_REGIONS, command_line=f"prompts={work / 'prompts.txt'} tokens={tokens + 1}"
    )
    if run.status != 0:
        raise SystemExit(f"mcubert_generate exited {run.status}:\n{run.console}")
    found = {int(n): int(cycles) for n, _, cycles in _PER_TOKEN.findall(run.console)}
    return {c: found[i + 1] for i, c in enumerate(contexts)}


def flash_stall_cycles(constant_bytes: int, board) -> float:
    timing = board.flash_timing
    return 0.0 if timing is None else math.ceil(constant_bytes / timing.cache_line_bytes) * timing.miss_cycles


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("export_dir", nargs="?")
    parser.add_argument("--contexts", default="16,64,128,256")
    parser.add_argument("--tokens", type=int, default=8)
    parser.add_argument("--json", help="also write the figures here")
    parser.add_argument("--summary", type=Path, help="also write the summary here (bench/results/decoder_speed.json)")
    args = parser.parse_args(argv)
    from tflm_mcubert.boards import get_board

    with tempfile.TemporaryDirectory(prefix="decoder-speed-") as tmp:
        export_dir = Path(args.export_dir) if args.export_dir else export_preset(Path(tmp) / "export")
        report = json.loads((export_dir / "report.json").read_text())
        limit = report["context"]
        contexts = [c for c in (int(x) for x in args.contexts.split(",")) if args.tokens < c <= limit]
        measured = instructions_per_token(export_dir, contexts, args.tokens, Path(tmp))
        if args.summary:
            from provenance import provenance

            record = provenance({"export": export_dir})
    constant = report.get("model_bytes", report["flash_bytes"])  # the .tflite's: the tokenizer blob is not read a token
    print(f"decoder: {report['model']}, context {limit}, model {constant:,} B")
    print("board             MHz  context  instr/token  tokens/s compute  tokens/s +Flash (ESTIMATES)")
    rows = []
    for name in BOARDS:
        board = get_board(name)
        for context, count in measured.items():
            compute = board.clock_hz / count
            flash = board.clock_hz / (count + flash_stall_cycles(constant, board))
            rows.append(
                {"board": name, "clock_mhz": board.clock_hz / 1e6, "context": context, "instructions": count,
                 "compute": compute, "flash": flash}
            )  # fmt: skip
            print(
                f"{name:<16} {board.clock_hz // 10**6:>4}  {context:>7}  {count:>11,}  {compute:>16.1f}  {flash:>15.1f}"
            )
    if args.json:
        Path(args.json).write_text(json.dumps({"model": report["model"], "rows": rows}, indent=1) + "\n")
    if args.summary:
        command = "python bench/decoder_speed.py " + " ".join(argv if argv is not None else sys.argv[1:])
        decoder = {"model": report["model"], "context": limit, "model_bytes": constant, "tokens": args.tokens}
        summary = {"bench": "decoder_speed", "command": command, "decoder": decoder, "rows": rows}
        args.summary.write_text(json.dumps(summary | {"provenance": record}, indent=1) + "\n")
    return 0


def markdown_table(summary: dict) -> str:
    """Instructions of a generated token and the ESTIMATED tokens per second, per board and context."""
    out = ["| board (clock) | context | instructions / token | tokens/s, compute | tokens/s, +Flash |"]
    out.append("|---|---:|---:|---:|---:|")
    for r in summary["rows"]:
        out.append(
            f"| {r['board']} ({r['clock_mhz']:.0f} MHz) | {r['context']} | {r['instructions']:,} | "
            f"{r['compute']:.1f} | {r['flash']:.1f} |"
        )
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
