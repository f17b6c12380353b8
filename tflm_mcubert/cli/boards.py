"""`boards`: the boards `export --board` knows, and the longest sequence (a decoder: context) each one holds.

A sequence fits when both hold: the export's own arena figure (the planner's smallest plan plus
TFLM's bookkeeping, as `export` computes it) fits the largest contiguous SRAM region less the default
reserve, and the default export's .tflite fits Flash less the default code reserve. The Flash size is
the default export's at FLASH_PROBE_SEQ tokens (seeded random weights, the default embedding compression),
as the package's Flash probes hold it (export/flash_probes.py: measured by exporting, kept equal to a fresh
export by a test), so `boards` loads no TensorFlow; a longer sequence adds only its rows of the int8
position table (hidden bytes per token).

The `fits` columns answer a second question, for BERT-tiny and BERT-mini at int8 and int4 encoder weights at
SIZED_SEQ tokens: does the model fit when its embedding is sized to what the rest of it leaves of the
board's Flash (export/flash_budget.py, as `export --board` sizes its default embedding), the arena in the
largest SRAM region? Each cell gives the bytes left for the word tables.

The reference shape of a board (the boards the shape search prices) is what `distill --preset auto --board B`
chose on rotten tomatoes at 128 tokens under a 100 ms estimate, measured through the board path by
bench/board_shapes.py and shipped as data/board_shapes.json (a test keeps it equal to the benchmark's
summary): a figure read, not computed here.
"""

from __future__ import annotations

import functools
import json
from importlib import resources

from tflm_mcubert.boards import BOARDS, DEFAULT_FLASH_RESERVE, DEFAULT_SRAM_RESERVE, Board, get_board, human_bytes
from tflm_mcubert.errors import UserError
from tflm_mcubert.export.board_fit import smallest_embedding_fits
from tflm_mcubert.export.decoder_export import DECODER_PRESETS, longest_context_on
from tflm_mcubert.export.flash_budget import FlashTarget, whole_model_budget
from tflm_mcubert.export.flash_probes import PRICED_LABELS, PRICED_PRESETS, shipped_default_flash
from tflm_mcubert.export.measure_probes import measured_default_flash
from tflm_mcubert.export.mcubert_export import largest_fitting_seq_len
from tflm_mcubert.export.shape_space import shape_space
from tflm_mcubert.model.config import PRESETS, check_seq_len, preset
from tflm_mcubert.ops import contract
from tflm_mcubert.ops.widths import Widths
from tflm_mcubert.schedule.memory import Dims

# The kernels' path per core (custom_ops/README.md); cores not named run plain C.
KERNEL_PATHS = {"cortex-m4": "DSP", "cortex-m7": "DSP", "cortex-m33": "DSP", "cortex-m55": "DSP + MVE"}
FLASH_PROBE_SEQ = 8
SIZED_SEQ = 128  # the export's default sequence
WEIGHT_WIDTHS = (8, 4)


def add_parser(subparsers) -> list[str]:
    boards = subparsers.add_parser("boards", help="the known boards and the longest sequence each fits")
    boards.add_argument("--json", action="store_true", help="print JSON instead of a table")
    shapes = boards.add_argument_group("student shapes (priced before training)")
    shapes.add_argument(
        "--shapes",
        metavar="BOARD",
        help="list the encoder shapes (layers, width, heads, FFN, weight width) that fit BOARD, fastest first, "
        "with their Flash, the bytes left for the word tables, the arena and the estimated latency",
    )
    shapes.add_argument("--seq-len", type=int, default=SIZED_SEQ, help=f"with --shapes (default {SIZED_SEQ})")
    shapes.add_argument("--max-latency-ms", type=float, help="with --shapes: admit only shapes estimated under it")
    shapes.add_argument("--labels", type=int, default=PRICED_LABELS, help=f"with --shapes (default {PRICED_LABELS})")
    return ["boards"]


@functools.lru_cache(maxsize=None)
def default_flash_bytes(preset: str) -> int:
    """Flash of the default export of `preset` at FLASH_PROBE_SEQ tokens: the package's probe
    (export/flash_probes.py), else measured by exporting it."""
    if shipped := shipped_default_flash(preset):
        return shipped
    return measured_default_flash(preset)  # an export: loads TensorFlow


def flash_bytes_at(preset: str, seq_len: int) -> int:
    """The default export's Flash at `seq_len`: the probe plus the position table's extra rows."""
    return default_flash_bytes(preset) + (seq_len - FLASH_PROBE_SEQ) * PRESETS[preset].hidden_size


def longest_sequence(board: Board, preset: str) -> int | None:
    """The longest sequence whose arena and Flash fit `board` (None: not even one token)."""
    config = PRESETS[preset]
    by_arena = largest_fitting_seq_len(config, config.max_position_embeddings + 1, board.arena_budget(), PRICED_LABELS)
    spare = board.flash_budget() - flash_bytes_at(preset, 1)
    if by_arena is None or spare < 0:
        return None
    return min(by_arena, 1 + spare // config.hidden_size)


def sized_fit(board: Board, name: str, weight_bits: int) -> dict:
    """Whether `name` at `weight_bits` fits `board` with an embedding sized to the Flash the rest leaves
    (int8 word tables, adaptive embedding's shape scaled to it), and how many bytes that is."""
    config = preset(name, num_labels=PRICED_LABELS)
    whole = whole_model_budget(
        config, FlashTarget.of_board(board), seq_len=SIZED_SEQ, widths=Widths.uniform(weight_bits)
    )
    flash_ok = smallest_embedding_fits(config, whole.embedding_bytes, 8)
    by_arena = largest_fitting_seq_len(config, SIZED_SEQ + 1, board.arena_budget(), PRICED_LABELS)
    return {
        "fits": flash_ok and bool(by_arena and by_arena >= SIZED_SEQ),
        "embedding_bytes": whole.embedding_bytes,
        "flash_budget_bytes": whole.target.budget_bytes,
    }


def decoder_context(board: Board, name: str) -> int:
    """The longest context (KV cache positions, up to the ops' limit) a decoder of a preset's shape holds in
    `board`'s arena (its word table is sized to the Flash, as `export` sizes it)."""
    raw = DECODER_PRESETS[name]
    dims = Dims(hidden=raw["n_embd"], heads=raw["n_head"], ffn=4 * raw["n_embd"], layers=raw["n_layer"])
    return longest_context_on(board, dims, contract.MAX_SEQ_LEN)


@functools.lru_cache(maxsize=None)
def reference_shapes() -> dict:
    """The per-board shapes `distill --preset auto` chose on the reference task (data/board_shapes.json)."""
    return json.loads(resources.files("tflm_mcubert.data").joinpath("board_shapes.json").read_text())


def _sized_cell(fit: dict) -> str:
    return f"yes ({human_bytes(fit['embedding_bytes'])})" if fit["fits"] else "-"


def board_rows() -> list[dict]:
    rows = []
    for board in BOARDS.values():
        row = board.to_json()
        row["kernels"] = KERNEL_PATHS.get(board.core, "plain C")
        row["arena_budget_bytes"] = board.arena_budget(DEFAULT_SRAM_RESERVE)
        row["flash_budget_bytes"] = board.flash_budget(DEFAULT_FLASH_RESERVE)
        row["longest_seq_len"] = {preset: longest_sequence(board, preset) for preset in PRICED_PRESETS}
        row["default_export_flash_bytes"] = {
            preset: flash_bytes_at(preset, FLASH_PROBE_SEQ) for preset in PRICED_PRESETS
        }
        row["decoder_context"] = {name: decoder_context(board, name) for name in DECODER_PRESETS}
        row["sized_fits"] = {
            f"{name} int{bits}": sized_fit(board, name, bits) for name in PRICED_PRESETS for bits in WEIGHT_WIDTHS
        }
        shape = reference_shapes()["boards"].get(board.name)
        row["reference_shape"] = {**reference_shapes()["settings"], **shape} if shape else None
        rows.append(row)
    return rows


def _context_cell(context: int) -> str:
    return str(context) if context else "-"


def _seq_cell(seq_len: int | None, positions: int) -> str:
    if seq_len is None:
        return "-"
    return f"{seq_len} (all)" if seq_len == positions else str(seq_len)


def run(args) -> int:
    if args.shapes:
        return run_shapes(args)
    rows = board_rows()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    sized = [f"{name} int{bits}" for name in PRICED_PRESETS for bits in WEIGHT_WIDTHS]
    header = ("board", "MCU", "core", "kernels", "MHz", "largest SRAM", "Flash", *(f"{p} seq" for p in PRICED_PRESETS))
    header += tuple(f"{key} fits" for key in sized) + tuple(f"{name} context" for name in DECODER_PRESETS)
    table = [header]
    for row in rows:
        region = row["largest_sram_region"]
        fits = [_seq_cell(row["longest_seq_len"][p], PRESETS[p].max_position_embeddings) for p in PRICED_PRESETS]
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
                *(_sized_cell(row["sized_fits"][key]) for key in sized),
                *(_context_cell(row["decoder_context"][name]) for name in DECODER_PRESETS),
            )
        )
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    for line in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip())
    bootloaders = ", ".join(
        f"{human_bytes(b.bootloader_bytes)} on the {b.name}" for b in BOARDS.values() if b.bootloader_bytes
    )
    print(
        f"\nseq: the longest sequence of the default export (a {PRICED_LABELS}-label classifier, the default "
        f"embedding compression) whose tensor arena fits the largest SRAM region less "
        f"{human_bytes(DEFAULT_SRAM_RESERVE)} and whose .tflite fits Flash less "
        f"{human_bytes(DEFAULT_FLASH_RESERVE)} (and less a factory bootloader's share: {bootloaders}); "
        "all: every position the model has; -: none. "
        + ", ".join(
            f"{p}: {human_bytes(flash_bytes_at(p, FLASH_PROBE_SEQ))} at {FLASH_PROBE_SEQ} tokens"
            for p in PRICED_PRESETS
        )
        + "."
    )
    print(
        f"fits: at {SIZED_SEQ} tokens with int8 or int4 encoder weights, the embedding sized to the Flash the "
        "rest of the model leaves (in brackets: the bytes left for its int8 word tables; "
        "`search --board` / `export --board` size it so)."
    )
    print(
        "context: the most positions a decoder of that shape holds in its int8 KV caches in the arena (the largest "
        f"SRAM region less {human_bytes(DEFAULT_SRAM_RESERVE)} and TFLM's bookkeeping; at most "
        f"{contract.MAX_SEQ_LEN:,}, the ops' limit), its word table compressed to the board's Flash as "
        f"`export` does; the presets {', '.join(DECODER_PRESETS)} themselves have 256 positions."
    )
    print_reference_shapes(rows)
    return 0


def print_reference_shapes(rows: list[dict]) -> None:
    """The shape `distill --preset auto` chose per board on the reference task, with its measured figures."""
    chosen = [row for row in rows if row["reference_shape"]]
    if not chosen:
        return
    settings = reference_shapes()["settings"]
    header = ("board", "reference shape", "dev", "test", "ms (est.)", "arena", "Flash", "candidates' dev")
    table = [header]
    for row in chosen:
        shape = row["reference_shape"]
        table.append(
            (
                row["name"],
                shape["shape"],
                f"{shape['dev_accuracy']:.2f}",
                f"{shape['test_accuracy']:.2f}",
                f"{shape['latency_ms']:.1f}",
                human_bytes(shape["arena_bytes"]),
                human_bytes(shape["flash_bytes"]),
                ", ".join(f"{name} {dev:.2f}" for name, dev in shape["candidates"].items()),
            )
        )
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    print()
    for line in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip())
    print(
        f"\nreference shape: what `distill --preset auto --recipe {settings['recipe']} --board B --max-latency-ms "
        f"{settings['max_latency_ms']:g} "
        f"--export-seq-len {settings['seq_len']}` chose on {settings['task'].replace('_', ' ')} (seed "
        f"{settings['seed']}, the best of the candidates on dev), measured through the board path at "
        f"{settings['seq_len']} tokens (bench/board_shapes.py): dev / test, the integer model's accuracy in percent "
        "as the firmware computes it; ms, the encoder's estimate with the board's Flash stalls; arena and Flash "
        "(the whole model, word tables sized to the board) as `export` reports them; candidates' dev: each "
        "candidate's distilled student, quantization-aware. One seed: a showcase of the choice, not a comparison."
    )


def run_shapes(args) -> int:
    board = get_board(args.shapes)
    check_seq_len(args.seq_len)
    if args.labels < 1:
        raise UserError(f"--labels must be at least 1, got {args.labels}")
    vocab = PRESETS["bert-tiny"].vocab_size
    priced = shape_space(
        board, args.seq_len, vocab_size=vocab, labels=args.labels, vocab_bytes=0, max_latency_ms=args.max_latency_ms
    )
    admitted = [p for p in priced if p.fits and (args.max_latency_ms is None or p.latency_ms <= args.max_latency_ms)]
    if args.json:
        print(json.dumps({"board": board.name, "seq_len": args.seq_len, "shapes": [p.to_json() for p in priced]}))
        return 0
    header = ("shape", "layers", "hidden", "heads", "ffn", "weights", "Flash", "word tables", "arena", "ms (est.)")
    table = [header] + [
        (
            p.shape.name,
            *(str(v) for v in (p.shape.layers, p.shape.hidden, p.shape.heads, p.shape.ffn)),
            f"int{p.shape.weight_bits}",
            human_bytes(p.flash_bytes),
            human_bytes(p.embedding_bytes),
            human_bytes(p.arena_bytes),
            f"{p.latency_ms:,.1f}",
        )
        for p in admitted
    ]
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    for line in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip())
    cap = f" and under {args.max_latency_ms:g} ms" if args.max_latency_ms is not None else ""
    print(
        f"\n{len(admitted)} of {len(priced)} shapes fit {board.name} at {args.seq_len} tokens{cap}. Flash: the model "
        f"less its word tables ({vocab:,}-token vocabulary, no tokenizer blob); word tables: what the board's Flash "
        "leaves them (at least the smallest embedding); arena: the plan plus TFLM's bookkeeping; ms: the encoder "
        "layers' estimated cycles (the kernels' fitted model plus Flash stalls) over the clock, an estimate."
    )
    return 0
