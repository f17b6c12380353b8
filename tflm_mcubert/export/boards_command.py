"""`boards`: the boards `export --board` knows, and the longest sequence each one's SRAM holds.

The sequence lengths are the export's own arena figure (the planner's smallest plan plus TFLM's
bookkeeping, as `export` computes it) against the board's largest contiguous SRAM region less the
default reserve. Flash is not in them: the model's size depends on its embedding compression, and
`export --board NAME` checks both.
"""

from __future__ import annotations

import json

from tflm_mcubert.boards import BOARDS, DEFAULT_FLASH_RESERVE, DEFAULT_SRAM_RESERVE, Board, human_bytes
from tflm_mcubert.model.config import PRESETS

FIT_PRESETS = ("bert-tiny", "bert-mini")
FIT_LABELS = 2  # a sequence classifier, as the default export builds
DSP_CORES = {"cortex-m4", "cortex-m7", "cortex-m33"}  # the kernels' DSP path; others run plain C


def add_parser(subparsers) -> list[str]:
    boards = subparsers.add_parser("boards", help="the known boards and the longest sequence each fits")
    boards.add_argument("--json", action="store_true", help="print JSON instead of a table")
    return ["boards"]


def longest_sequence(board: Board, preset: str) -> int | None:
    """The longest sequence whose arena fits `board` (None: not even one token)."""
    from tflm_mcubert.export.mcubert_export import largest_fitting_seq_len

    config = PRESETS[preset]
    return largest_fitting_seq_len(config, config.max_position_embeddings + 1, board.arena_budget(), FIT_LABELS)


def board_rows() -> list[dict]:
    rows = []
    for board in BOARDS.values():
        row = board.to_json()
        row["kernels"] = "DSP" if board.core in DSP_CORES else "plain C"
        row["arena_budget_bytes"] = board.arena_budget(DEFAULT_SRAM_RESERVE)
        row["flash_budget_bytes"] = board.flash_budget(DEFAULT_FLASH_RESERVE)
        row["longest_seq_len"] = {preset: longest_sequence(board, preset) for preset in FIT_PRESETS}
        rows.append(row)
    return rows


def _seq_cell(seq_len: int | None, positions: int) -> str:
    if seq_len is None:
        return "-"
    return f"{seq_len} (all)" if seq_len == positions else str(seq_len)


def run(args) -> int:
    rows = board_rows()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    header = ("board", "MCU", "core", "kernels", "MHz", "largest SRAM", "Flash", *(f"{p} seq" for p in FIT_PRESETS))
    table = [header]
    for row in rows:
        region = row["largest_sram_region"]
        fits = [_seq_cell(row["longest_seq_len"][p], PRESETS[p].max_position_embeddings) for p in FIT_PRESETS]
        table.append(
            (
                row["name"],
                row["mcu"],
                row["core"],
                row["kernels"],
                str(row["clock_hz"] // 1_000_000),
                f"{human_bytes(region['bytes'])} ({region['name']})",
                human_bytes(row["flash_bytes"]),
                *fits,
            )
        )
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    for line in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip())
    print(
        f"\nseq: the longest sequence whose tensor arena fits the largest SRAM region less "
        f"{human_bytes(DEFAULT_SRAM_RESERVE)} (a {FIT_LABELS}-label classifier; all: every position the "
        "model has). Flash depends on the embedding compression: `export --board NAME` checks both."
    )
    return 0
