"""The shape each board picks on the reference task: `distill --preset auto --board B` on rotten tomatoes for
every board the shape search prices (the Cortex-M7 boards: nucleo-f746zg, nucleo-f767zi, nucleo-h7a3zi-q),
then the chosen student through B's board path, for the figures `boards` prints. A script, not a test.

One policy for every board, what "the shape B picks" means here: 128 tokens (the export's default sequence)
and a latency cap of 100 ms for the encoder's estimate at 128 tokens on B (about half BERT-tiny's estimate
on the F746ZG, 194.8 ms), the default 3 candidates, seed 0 only: a showcase of the choice, not an accuracy
comparison (bench/board_shape_latency.py compares the F746ZG's choice with BERT-tiny over seeds). The
teacher T is all-MiniLM-L6-v2 fine-tuned one epoch (`python -m tflm_mcubert finetune --checkpoint
sentence-transformers/all-MiniLM-L6-v2 --task rotten_tomatoes --epochs 1 --out T`). Per board B, in OUT/B/:

    python -m tflm_mcubert distill --teacher T --task rotten_tomatoes --max-seq-len 64 --seed 0 --preset auto \\
        --recipe logits --board B --max-latency-ms 100 --export-seq-len 128 --shape-candidates 3 --rank-by student \\
        --out OUT/B/student

then the chosen shape `<shape>-w<bits>` at its weight width `bits`, as bench/board_shape_latency.py's board
path (its `board_path`):

    python -m tflm_mcubert search --checkpoint OUT/B/student --mode adaptive --board B --weight-bits bits \\
        --qat-weight-bits bits --seed 0 --epochs 0.5 --finetune-epochs 1 --max-seq-len 64 \\
        --export-seq-len 128 --out OUT/B/board/model
    python -m tflm_mcubert evaluate --checkpoint OUT/B/board/model --seq-len 128 --split validation test \\
        --weight-bits bits ...
    python -m tflm_mcubert export --checkpoint OUT/B/board/model --board B --seq-len 128 --weight-bits bits ...

(the word tables scaled to what B's Flash leaves the chosen encoder; evaluate: the integer model through the
ops' numpy reference, as the firmware computes it; the export's report.json: the latency estimate on B with
its Flash stalls, the arena and the whole model's Flash).

`--run` runs what is missing, board by board (resumable: a finished step is read back, an interrupted
`distill` resumes; `--start-before HH:MM` starts no step at or after that UTC time, rerun to go on); without
it the finished boards are only summarized. The summary (`--out`) keeps provenance (commit, environment,
SHA-256 of every checkpoint read) and per board the search's plan and candidates (their dev and test
accuracy as `distill` scored them), its wall time, the integer model's per-example correctness (packed bits)
and dev/test accuracy, and the export's estimate, arena and Flash. `--package-data` also writes the per-board
reference shapes `python -m tflm_mcubert boards` prints (tflm_mcubert/data/board_shapes.json; a test keeps it
equal to `reference(summary)`); `--figures DIR` draws each board's search (dev accuracy against estimated
latency and Flash, the Pareto front joined) as DIR/board_shapes_<board>.png.

    python bench/board_shapes.py --teacher /work/runs/rt/teacher --runs /work/runs/shapes --run \\
        --out bench/results/board_shapes.json --package-data tflm_mcubert/data/board_shapes.json \\
        --figures docs/benchmarks/img
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import steps  # noqa: E402
import board_shape_latency  # noqa: E402
from board_shape_summary import INTEGER, SPLITS  # noqa: E402
from provenance import provenance  # noqa: E402
import start_before  # noqa: E402
from results_bits import correct  # noqa: E402

BOARDS = ("nucleo-f746zg", "nucleo-f767zi", "nucleo-h7a3zi-q")  # the boards `distill --preset auto` prices
SEED = 0
SHAPE = board_shape_latency.SHAPE  # "<shape>-w<bits>"


def student_folder(opts, board: str) -> Path:
    return opts.runs / board / "student"


def board_folder(opts, board: str) -> Path:
    """The chosen student's board path: the search's own where it ranked on it, else OUT/<board>/board/."""
    return board_shape_latency.ranked_board_folder(student_folder(opts, board)) or opts.runs / board / "board"


def distill_command(opts, board: str) -> list[str]:
    """`distill --preset auto --board board` at the policy's sequence and cap."""
    command = ["distill", "--teacher", str(opts.teacher), "--task", opts.task, "--max-seq-len", str(opts.max_seq_len)]
    # --recipe: one for every board (a summary without it was searched with logits, --preset auto's only one then)
    command += ["--seed", str(SEED), "--preset", "auto", "--recipe", opts.recipe, "--board", board]
    command += ["--max-latency-ms", f"{opts.max_latency_ms:g}", "--export-seq-len", str(opts.export_seq_len)]
    # --rank-by: the policy's; a summary without it ranked on the float students, --preset auto's only way then
    command += ["--shape-candidates", str(opts.shape_candidates), "--rank-by", opts.rank_by]
    return command + ["--out", str(student_folder(opts, board)), "--resume", "--quiet"]


def chosen(opts, board: str) -> tuple[str, int] | None:
    """(shape, weight bits) `board`'s search chose, or None before it finished."""
    metrics = student_folder(opts, board) / "metrics.json"
    if not metrics.is_file():
        return None
    match = SHAPE.fullmatch(json.loads(metrics.read_text())["shape_search"]["chosen"])
    return match[1], int(match[2])


def board_commands(opts, board: str) -> list[tuple[list[str], Path]]:
    """The chosen student's board path on `board` (bench/board_shape_latency.py's), with the export."""
    bits = chosen(opts, board)[1]
    return board_shape_latency.board_path(
        opts, student_folder(opts, board), board_folder(opts, board), board, bits, SEED, export=True
    )


def run(opts, boards: list[str]) -> None:
    """Board by board: the search, then its chosen student's board path (one training job at a time)."""
    for number, board in enumerate(boards, 1):
        tag = f"[board {number}/{len(boards)}: {board}]"
        if not _step(opts, distill_command(opts, board), student_folder(opts, board) / "metrics.json", tag):
            return
        if chosen(opts, board) is None:  # the distill failed (logged): go on with the next board
            continue
        for command, done in board_commands(opts, board):
            if not _step(opts, command, done, tag):
                return
            if not done.is_file():
                break


def _step(opts, command: list[str], done: Path, tag: str) -> bool:
    """Run `command` unless `done` exists; False when past --start-before (nothing started)."""
    if done.is_file():
        return True
    if start_before.reached(opts.start_before):
        steps.log(f"{tag} not starting {command[0]}: {start_before.name(opts.start_before)} reached", opts.runs)
        return False
    steps.run_step(command, done, f"{tag} {command[0]}", opts.runs)
    return True


# ------------------------------------------------------------------------------------------- collecting


def board_entry(opts, board: str) -> dict | None:
    """Everything the summary keeps of `board`: its search, the chosen student's board path and export."""
    search = board_shape_latency.shape_search_record(student_folder(opts, board))
    if search is None:
        return None
    shape, bits = chosen(opts, board)
    record = board_shape_latency.board_record(board_folder(opts, board), bits)
    integer = None
    if record is not None:
        integer = {
            "correct": record["correct"][INTEGER],
            "accuracy": {split: 100 * float(correct(record, split, INTEGER).mean()) for split in SPLITS},
            "evaluated": record["evaluated"],
            "search_seconds": record["search_seconds"],
            "evaluate_seconds": record["evaluate_seconds"],
        }
    return {
        "shape": shape,
        "weight_bits": bits,
        "search": search,
        "integer_model": integer,
        "export": board_shape_latency.export_record(board_folder(opts, board), board),
    }


def accuracy_of(entry: dict, split: str) -> float:
    """The integer model's accuracy on `split` in percent, recomputed from its packed bits."""
    return 100 * float(correct(entry["integer_model"], split, None).mean())


def reference(summary: dict) -> dict:
    """The per-board reference shapes `boards` prints (the package's data/board_shapes.json), from a summary:
    only the boards whose board path finished."""
    settings = summary["settings"]
    boards = {}
    for board, entry in summary["boards"].items():
        if not entry or not entry["integer_model"] or not entry["export"]:
            continue
        export = entry["export"]
        boards[board] = {
            "shape": f"{entry['shape']}-w{entry['weight_bits']}",
            "dev_accuracy": round(accuracy_of(entry, "validation"), 2),
            "test_accuracy": round(accuracy_of(entry, "test"), 2),
            "latency_ms": round(export["latency_ms"], 1),
            "arena_bytes": export["arena_bytes"],
            "flash_bytes": export["flash_bytes"],
            "candidates": {c["shape"]: round(100 * c["validation_accuracy"], 2) for c in entry["search"]["candidates"]},
        }
    keep = {k: settings[k] for k in ("task", "seq_len", "max_latency_ms", "seed")} | {"recipe": recipe_of(settings)}
    return {"settings": keep, "source": "bench/results/board_shapes.json", "boards": boards}


def recipe_of(settings: dict) -> str:
    """The summary's distill recipe: logits where it names none (--preset auto had no other then)."""
    return settings.get("recipe", "logits")


def markdown_table(summary: dict) -> str:
    """Per board: the chosen shape, its integer model's dev/test accuracy, the estimate, arena, Flash, and every
    candidate's dev accuracy as `distill` scored it; the search's wall time."""
    lines = [
        "| board | chosen shape | integer model dev | integer model test | est. ms at 128 tokens | arena "
        "| Flash (whole model) | candidates' dev (float student, QAT) | search min |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for board, entry in summary["boards"].items():
        if not entry:
            lines.append(f"| {board} | – | – | – | – | – | – | – | – |")
            continue
        search, export = entry["search"], entry["export"]
        shape = f"{entry['shape']}-w{entry['weight_bits']}"
        scores = ", ".join(
            (f"**{c['shape']}**" if c["chosen"] else c["shape"]) + f" {100 * c['validation_accuracy']:.2f}"
            for c in search["candidates"]
        )
        accuracy = [f"{accuracy_of(entry, s):.2f}" if entry["integer_model"] else "–" for s in SPLITS]
        cost = ["–"] * 3
        if export:
            cost = [
                f"{export['latency_ms']:.1f}",
                *(f"{export[k] / 1024:,.1f} KB" for k in ("arena_bytes", "flash_bytes")),
            ]
        wall = f"{search['wall_seconds'] / 60:.1f}" if search.get("wall_seconds") else "–"
        lines.append("| " + " | ".join([board, shape, *accuracy, *cost, scores, wall]) + " |")
    return "\n".join(lines)


def summarize(opts, boards: list[str], argv: list[str]) -> dict:
    entries = {board: board_entry(opts, board) for board in boards}
    checkpoints = {"teacher": opts.teacher}
    for board, entry in entries.items():
        if entry:
            checkpoints[f"{board}-student"] = student_folder(opts, board)
            if entry["integer_model"]:
                checkpoints[f"{board}-board"] = board_folder(opts, board) / "model"
    example = boards[0]
    return {
        "command": "python bench/board_shapes.py " + shlex.join(argv),
        "settings": {
            "task": opts.task,
            "seed": SEED,
            "max_seq_len": opts.max_seq_len,
            "seq_len": opts.export_seq_len,
            "max_latency_ms": opts.max_latency_ms,
            "recipe": opts.recipe,
            "shape_candidates": opts.shape_candidates,
            "rank_by": opts.rank_by,
            "search_epochs": opts.search_epochs,
            "search_finetune_epochs": opts.search_finetune_epochs,
            # the first board's commands (python -m tflm_mcubert ...); the others differ in --board and folders
            "commands": [shlex.join(distill_command(opts, example))]
            + ([shlex.join(c) for c, _ in board_commands(opts, example)] if chosen(opts, example) else []),
        },
        "teacher": board_shape_latency.teacher_record(opts.teacher),
        "provenance": provenance(checkpoints),
        "boards": entries,
    }


def figures(summary: dict, folder: Path) -> list[Path]:
    """Each board's search drawn as `distill --preset auto` draws it (dev accuracy against the estimated
    latency and the Flash besides the word tables), as folder/board_shapes_<board>.png."""
    from tflm_mcubert.export.shape_figure import draw_shape_search

    return [
        draw_shape_search(entry["search"], folder / f"board_shapes_{board}.png")
        for board, entry in summary["boards"].items()
        if entry
    ]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=Path, required=True, help="the runs' folder (OUT)")
    parser.add_argument("--teacher", type=Path, help="the fine-tuned teacher (distill --teacher); needed with --run")
    parser.add_argument("--boards", default=",".join(BOARDS), help=f"comma list (default {','.join(BOARDS)})")
    parser.add_argument("--task", default="rotten_tomatoes")
    parser.add_argument("--max-seq-len", type=int, default=64, help="distill and search: training tokens")
    parser.add_argument("--export-seq-len", type=int, default=128, help="the tokens priced, exported, evaluated")
    parser.add_argument("--max-latency-ms", type=float, default=100.0, help="the search's cap on every board")
    parser.add_argument("--shape-candidates", type=int, default=3, help="distill --shape-candidates")
    parser.add_argument(
        "--rank-by",
        choices=("board", "student"),
        default="student",
        help="distill --rank-by on every board (default student: the policy the published table was searched with)",
    )
    parser.add_argument(
        "--recipe",
        choices=("logits", "layers"),
        default="logits",
        help="distill --recipe on every board (default logits)",
    )
    parser.add_argument("--search-epochs", type=float, default=0.5, help="board path: search --epochs")
    parser.add_argument("--search-finetune-epochs", type=float, default=1.0, help="board path: --finetune-epochs")
    parser.add_argument("--run", action="store_true", help="run the missing steps first")
    start_before.add_argument(parser)
    parser.add_argument("--out", type=Path, help="summary JSON (default RUNS/summary.json)")
    parser.add_argument("--package-data", type=Path, help="also write the reference shapes `boards` prints here")
    parser.add_argument("--figures", type=Path, help="also draw each board's search here (board_shapes_<board>.png)")
    args = parser.parse_args(argv)
    boards = [b for b in args.boards.split(",") if b]
    unknown = sorted(set(boards) - set(BOARDS))
    if unknown:
        parser.error(f"--boards: the shape search prices {', '.join(BOARDS)} only, not {', '.join(unknown)}")
    if args.run:
        if not args.teacher:
            parser.error("--run needs --teacher")
        args.runs.mkdir(parents=True, exist_ok=True)
        run(args, boards)
    summary = summarize(args, boards, argv if argv is not None else sys.argv[1:])
    print(markdown_table(summary))
    out = args.out or args.runs / "summary.json"
    out.write_text(json.dumps(summary, indent=1, default=float) + "\n")
    print(f"summary {out} ({out.stat().st_size:,} bytes)")
    if args.package_data:
        args.package_data.write_text(json.dumps(reference(summary), indent=1) + "\n")
        print(f"reference shapes {args.package_data}")
    if args.figures:
        for path in figures(summary, args.figures):
            print(f"figure {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
