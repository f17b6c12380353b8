"""`plan`: peak activation memory vs sequence length for every schedule, with the boards' SRAM budgets.

Prints a table and writes a PNG (the paper's Figure 7): mcubert, cmsis-nn (untiled TFLite graph),
burrello (per-head, untiled along tokens) and flash (FlashAttention-style), as modelled in
schedule/memory.py at one tile size, plus horizontal lines at each board's arena budget. With
`--measure-stock`, the stock int8 .tflite is converted at a few sequence lengths and its smallest
TFLM arena measured (tflite-micro wheel, 64-bit host): the real counterpart of the cmsis-nn curve.
"""

from __future__ import annotations

from pathlib import Path

from tflm_mcubert.boards import get_board
from tflm_mcubert.data.calibration import random_samples
from tflm_mcubert.errors import UserError
from tflm_mcubert.files import output_file
from tflm_mcubert.model.config import BertConfig, preset
from tflm_mcubert.runtime.tflm_runner import min_arena_bytes
from tflm_mcubert.schedule.memory import SCHEDULES, model_peak

DEFAULT_SEQ_LENS = tuple(range(32, 513, 32))


def add_parser(subparsers) -> list[str]:
    plan = subparsers.add_parser("plan", help="peak memory vs sequence length per schedule (table + PNG)")
    plan.add_argument("--checkpoint", help="Hugging Face BERT directory (only its config.json is read)")
    plan.add_argument("--preset", default="bert-tiny", help="bert-tiny or bert-mini (without --checkpoint)")
    plan.add_argument(
        "--seq-lens",
        default=",".join(map(str, DEFAULT_SEQ_LENS)),
        help="comma-separated sequence lengths (default 32,64,...,512)",
    )
    plan.add_argument("--tile", type=int, default=4, help="tile of the tiled schedules (default 4)")
    plan.add_argument(
        "--boards",
        default="nucleo-f746zg,nucleo-f767zi,nucleo-h7a3zi-q",
        help="boards whose arena budget is drawn (comma-separated; '' for none)",
    )
    plan.add_argument(
        "--measure-stock",
        action="store_true",
        help="also convert the stock int8 model and measure its TFLM arena (slow)",
    )
    plan.add_argument(
        "--measure-seq-lens",
        default="32,64,128",
        help="sequence lengths measured with --measure-stock (default 32,64,128)",
    )
    plan.add_argument("--out", default="plan.png", help="PNG to write (default plan.png)")
    return ["plan"]


def _ints(text: str, what: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise UserError(f"{what}: expected comma-separated integers, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise UserError(f"{what}: expected positive integers, got {text!r}")
    return values


def _config(args):
    if args.checkpoint:
        return BertConfig.from_json_file(Path(args.checkpoint) / "config.json"), args.checkpoint
    return preset(args.preset), args.preset


def memory_table(config, seq_lens: list[int], tile: int) -> dict[str, list[int]]:
    return {name: [model_peak(name, s, config, min(tile, s), min(tile, s)) for s in seq_lens] for name in SCHEDULES}


def measure_stock(config, seq_lens: list[int]) -> dict[int, int]:
    """Smallest TFLM arena of the stock int8 export of a seeded random model at each length."""
    from tflm_mcubert.export.stock import export_stock
    from tflm_mcubert.model.bert import build_model

    model = build_model(config, seed=0)
    measured = {}
    for s in seq_lens:
        tflite = export_stock(model, seq_len=s, precision="int8", calibration=random_samples(config.vocab_size, s, 4))
        measured[s] = min_arena_bytes(tflite)
    return measured


def draw(path: Path, title: str, seq_lens, table, budgets: dict[str, int], stock: dict[int, int]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.8), dpi=120)
    for name, values in table.items():
        ax.plot(seq_lens, [v / 1024 for v in values], marker="o", markersize=3, label=name)
    if stock:
        xs = sorted(stock)
        ax.plot(xs, [stock[s] / 1024 for s in xs], "k^", label="stock TFLM (measured)")
    for board, budget in budgets.items():
        ax.axhline(budget / 1024, linestyle="--", linewidth=0.8, color="grey")
        ax.annotate(
            f"{board} ({budget // 1024} KiB)", (seq_lens[0], budget / 1024), fontsize=7, va="bottom", color="dimgrey"
        )
    ax.set_xlabel("sequence length (tokens)")
    ax.set_ylabel("peak activation memory (KiB)")
    ax.set_yscale("log")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def run(args) -> int:
    seq_lens = _ints(args.seq_lens, "--seq-lens")
    out = output_file(args.out, "--out")
    if args.tile < 1:
        raise UserError(f"--tile must be at least 1, got {args.tile}")
    config, name = _config(args)
    table = memory_table(config, seq_lens, args.tile)
    boards = [b.strip() for b in args.boards.split(",") if b.strip()]
    budgets = {b: get_board(b).arena_budget() for b in boards}
    stock = measure_stock(config, _ints(args.measure_seq_lens, "--measure-seq-lens")) if args.measure_stock else {}

    columns = list(table)
    print(
        f"peak activation memory (KiB) of {name} (d={config.hidden_size}, layers={config.num_hidden_layers}), "
        f"tile {args.tile}"
    )
    print("seq_len  " + "  ".join(f"{c:>9}" for c in columns) + ("  stock(measured)" if stock else ""))
    for i, s in enumerate(seq_lens):
        row = "  ".join(f"{table[c][i] / 1024:>9.1f}" for c in columns)
        extra = f"  {stock[s] / 1024:>15.1f}" if s in stock else ""
        print(f"{s:>7}  {row}{extra}")
    for board, budget in budgets.items():
        longest = max((s for s, v in zip(seq_lens, table["mcubert"]) if v <= budget), default=None)
        print(f"{board}: arena budget {budget / 1024:.0f} KiB; longest listed seq_len that mcubert fits: {longest}")
    draw(out, f"{name}: peak memory per schedule (tile {args.tile})", seq_lens, table, budgets, stock)
    print(f"wrote {out}")
    return 0
