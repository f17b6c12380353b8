"""The board picks the student: `distill --preset auto --board B [--max-latency-ms CAP]` against BERT-tiny
distilled with the same recipe, both through B's board path at --export-seq-len tokens, over seeds. A script,
not a test. `--board` (default nucleo-f746zg), `--recipe` (both arms' `distill --recipe`, default logits) and
`--max-latency-ms` (0: no cap) make it the comparison at any board's budget; the defaults are the
F746ZG's under half BERT-tiny's latency.

The cap defaults to half BERT-tiny's estimate at 128 tokens on the F746ZG (194.8 ms -> 97.4 ms; `python -m
tflm_mcubert boards --shapes nucleo-f746zg --seq-len 128 --max-latency-ms 97.4` lists the shapes under it).
The teacher T is all-MiniLM-L6-v2 fine-tuned one epoch (`python -m tflm_mcubert finetune --checkpoint
sentence-transformers/all-MiniLM-L6-v2 --task rotten_tomatoes --epochs 1 --out T`). Seed 0 of the searched
arm is the search itself, in OUT/auto-s0/ (its candidates in shapes/<shape>/):

    python -m tflm_mcubert distill --teacher T --task rotten_tomatoes --max-seq-len 64 --preset auto \\
        --recipe logits --board nucleo-f746zg --max-latency-ms 97.4 --export-seq-len 128 --rank-by board \\
        --seed 0 --out OUT/auto-s0

(the committed summary ranked its candidates with `--rank-by student`, on the float students: it names no
--rank-by)

the other seeds distill the shape it chose, at the weight width it was trained at (`<shape>-w<bits>`):

    python -m tflm_mcubert distill ... --preset <shape> --recipe logits --qat-weight-bits <bits> --seed S \\
        --out OUT/chosen-sS

and BERT-tiny gets the recipe every candidate of the search got (logits-only KD, quantization-aware at its
int8 width, the same epochs and sequence length):

    python -m tflm_mcubert distill ... --preset bert-tiny --recipe logits --qat-weight-bits 8 --seed S \\
        --out OUT/bert-tiny-sS

(Where the search chose BERT-tiny at int8, its anchor candidate, the searched arm's other seeds are these
runs, the same commands; BERT-tiny's seed 0 is that candidate once the search trained it. `--tiny-from
OTHER_OUT` takes another board's run's BERT-tiny students, untrained here: their distill names no board.)
Each student then goes the board path at 128 tokens, the same for both arms, at its own weight width B
(in OUT/board/<arm>-sS/, but the searched arm's seed 0 in its chosen candidate's board/ when the search ranked
on the board path: it ran these search and evaluate already; the export, for the latency estimate, Flash and
arena, for seed 0 only):

    python -m tflm_mcubert search --checkpoint OUT/<arm>-sS --mode adaptive --board nucleo-f746zg \\
        --weight-bits B --qat-weight-bits B --seed S --epochs 0.5 --finetune-epochs 1 --max-seq-len 64 \\
        --export-seq-len 128 --out .../model
    python -m tflm_mcubert evaluate --checkpoint .../model --seq-len 128 --split validation test --weight-bits B ...
    python -m tflm_mcubert export --checkpoint .../model --board nucleo-f746zg --seq-len 128 --weight-bits B ...

(the search's final fine-tune quantization-aware at B, as the students were distilled; evaluate: the
integer model through the ops' numpy reference, as the firmware computes it). `--run` runs what is missing
(resumable: a finished step is read back; `--start-before HH:MM` starts none at or after that UTC time), seed
by seed; without it the finished runs are only summarized. The summary (`--out`, e.g.
bench/results/board_shape_latency.json) keeps per arm and seed the float student's dev/test accuracy, the
integer model's and its float twin's per-example correctness (packed bits, results_bits.py), steps and wall
seconds; per arm the export's latency estimate, Flash and arena; the search's candidates; and the searched
shape against BERT-tiny: paired t over seeds and the paired bootstrap over examples and seeds (bench_stats.py).

    python bench/board_shape_latency.py --teacher /work/runs/lat/teacher --runs /work/runs/lat \\
        --seeds 0,1,2,3,4,5,6,7,8,9 --run --out bench/results/board_shape_latency.json

`--earlier SUMMARY` grows a committed summary on a machine that lacks its runs: the seeds it holds are taken
from it (the search too, and which shape it chose), the missing ones run here, and the new summary's
provenance keeps the earlier commit, environment and hashes (earlier.py):

    python bench/board_shape_latency.py ... --earlier bench/results/board_shape_latency.json \\
        --seeds 0,1,2,3,4,5,6,7,8,9 --run --out bench/results/board_shape_latency.json

`--embedding-bits 4` puts both arms' students through the board path with int4 word tables (twice the
numbers in the bytes the encoder leaves them), in OUT/board-e4/; `--search-from SUMMARY` takes the shape
from a summary of the same task, board and recipe (not its runs, which are another comparison), so the
same students are compared at the other width from any seeds, the first of them exported:

    python bench/board_shape_latency.py ... --embedding-bits 4 --seeds 5,6,7,8,9 --run \\
        --search-from bench/results/board_shape_layers_rotten_tomatoes_nucleo-f767zi.json --out ...
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import steps  # noqa: E402
import distill_augment  # noqa: E402
import earlier  # noqa: E402
from board_shape_summary import BOARD, CHOSEN, SPLITS, TINY, TINY_SHAPE  # noqa: E402
from board_shape_summary import markdown, summarize  # noqa: E402
from distill_augment import seconds_of  # noqa: E402
from provenance import provenance  # noqa: E402
from tflm_mcubert.compress.width_search import WidthCandidate  # noqa: E402
import start_before  # noqa: E402

SHAPE = re.compile(r"(L\d+-H\d+-A\d+-F\d+)-w([48])")
SEARCH_SETTINGS = ("task", "board", "recipe", "rank_by", "max_latency_ms")  # what --search-from must share


def is_baseline(opts, arm: str, seed: int) -> bool:
    """Whether `arm` at `seed` is the baseline's own run: the searched arm past seed 0 where the search chose
    BERT-tiny at int8, whose students and board paths are the baseline's commands exactly."""
    return arm == TINY or (seed > 0 and chosen_shape(opts) == TINY_SHAPE)


def student_folder(opts, arm: str, seed: int) -> Path:
    arm = TINY if is_baseline(opts, arm, seed) else arm
    if arm == TINY:
        return tiny_student(opts.tiny_from or opts.runs, seed)
    return opts.runs / ("auto-s0" if arm == CHOSEN and seed == 0 else f"{arm}-s{seed}")


def tiny_student(runs: Path, seed: int) -> Path:
    """BERT-tiny's student at `seed` in `runs`: at seed 0 the search's anchor candidate once it is trained
    (the same distill, byte for byte), else RUNS/bert-tiny-sS."""
    anchor = runs / "auto-s0" / "shapes" / f"{TINY_SHAPE[0]}-w{TINY_SHAPE[1]}"
    if seed == 0 and (anchor / "metrics.json").is_file() and not (runs / f"{TINY}-s0" / "metrics.json").is_file():
        return anchor
    return runs / f"{TINY}-s{seed}"


def board_folder(opts, arm: str, seed: int) -> Path:
    """Where `arm`'s student at `seed` goes the board path: OUT/board/<arm>-sS/, or the search's own (for
    BERT-tiny too where the search chose it: its student is the search's anchor candidate)."""
    searched = arm == CHOSEN or chosen_shape(opts) == TINY_SHAPE
    own = searched and seed == 0 and opts.embedding_bits is None  # the search's board path has int8 tables
    ranked = ranked_board_folder(opts.runs / "auto-s0") if own else None
    board = "board" if opts.embedding_bits is None else f"board-e{opts.embedding_bits}"
    return ranked or opts.runs / board / f"{TINY if is_baseline(opts, arm, seed) else arm}-s{seed}"


def ranked_board_folder(search: Path) -> Path | None:
    """The chosen candidate's board/ of the `distill --preset auto` in `search` where it ranked on the board
    path (`--rank-by board`): that search and evaluate are the board path's, already run."""
    metrics = search / "metrics.json"
    if not metrics.is_file():
        return None
    folder = search / "shapes" / json.loads(metrics.read_text())["shape_search"]["chosen"] / "board"
    return folder if (folder / "evaluate.json").is_file() else None


def chosen_shape(opts) -> tuple[str, int] | None:
    """(shape, weight bits) the search in OUT/auto-s0 chose (else the --earlier or --search-from summary's
    search), or None before it finished."""
    metrics = opts.runs / "auto-s0" / "metrics.json"
    if metrics.is_file():
        chosen = json.loads(metrics.read_text())["shape_search"]["chosen"]
    elif (summary := opts.earlier_summary or opts.search_summary) is not None:
        chosen = summary["search"]["chosen"]
    else:
        return None
    match = SHAPE.fullmatch(chosen)
    return match[1], int(match[2])


def common_args(opts, seed: int) -> list[str]:
    args = ["distill", "--teacher", str(opts.teacher), "--task", opts.task, "--max-seq-len", str(opts.max_seq_len)]
    return args + ["--seed", str(seed)]


def student_command(opts, arm: str, seed: int) -> list[str] | None:
    """distill of `arm` at `seed` (None: the chosen shape is not known yet)."""
    command = common_args(opts, seed)
    if arm == TINY:
        command += ["--preset", "bert-tiny", "--recipe", opts.recipe, "--qat-weight-bits", "8"]
    elif seed == 0:
        # --recipe: the one both arms are distilled with (the search's default would be layers)
        command += [
            "--preset",
            "auto",
            "--recipe",
            opts.recipe,
            "--board",
            opts.board,
            *(("--max-latency-ms", f"{opts.max_latency_ms:g}") if opts.max_latency_ms else ()),
        ]
        command += ["--export-seq-len", str(opts.export_seq_len), "--shape-candidates", str(opts.shape_candidates)]
        command += ["--rank-by", opts.rank_by]  # a summary without it ranked on the float students
    elif (shape := chosen_shape(opts)) is None:
        return None
    else:
        # --recipe: what the search trained every candidate with
        command += ["--preset", shape[0], "--recipe", opts.recipe, "--qat-weight-bits", str(shape[1])]
    return command + ["--out", str(student_folder(opts, arm, seed)), "--resume", "--quiet"]


def weight_bits(opts, arm: str) -> int:
    return 8 if arm == TINY else chosen_shape(opts)[1]


def board_commands(opts, arm: str, seed: int) -> list[tuple[list[str], Path]]:
    """(command, the file it leaves when done) of the board path: search, evaluate, and the export at export_seed."""
    student, folder = student_folder(opts, arm, seed), board_folder(opts, arm, seed)
    bits, export = weight_bits(opts, arm), seed == export_seed(opts)
    return board_path(opts, student, folder, opts.board, bits, seed, export=export, tables=opts.embedding_bits)


def export_seed(opts) -> int:
    """The seed whose board path is exported (latency estimate, Flash, arena): the search's, 0, unless the
    shape came from --search-from, whose comparison may start at another seed: then its first."""
    return 0 if opts.search_summary is None else min(opts.seeds)


def board_path(
    opts, student: Path, folder: Path, board: str, bits: int, seed: int, *, export: bool, tables: int | None = None
) -> list[tuple[list[str], Path]]:
    """(command, the file it leaves when done) of `student`'s board path on `board` at `bits`-bit weights, in
    `folder`: search (model/), evaluate (evaluate.json), and with `export` the export (export/report.json).
    `tables`: the word tables' width (search/evaluate/export --embedding-bits; None: search's default, float
    tables trained and stored int8)."""
    model, bits = str(folder / "model"), str(bits)
    widths = ["--weight-bits", bits] + (["--embedding-bits", str(tables)] if tables else [])
    search = ["search", "--checkpoint", str(student), "--task", opts.task, "--out", model]
    search += ["--resume", "--quiet", "--seed", str(seed), "--mode", "adaptive", "--board", board]
    search += [*widths, "--epochs", str(opts.search_epochs)]
    search += ["--finetune-epochs", str(opts.search_finetune_epochs), "--max-seq-len", str(opts.max_seq_len)]
    search += ["--export-seq-len", str(opts.export_seq_len), "--qat-weight-bits", bits]
    evaluate = ["evaluate", "--checkpoint", model, "--task", opts.task, "--seq-len", str(opts.export_seq_len)]
    evaluate += ["--split", *SPLITS, *widths, "--json", str(folder / "evaluate.json")]
    steps = [(search, folder / "model" / "metrics.json"), (evaluate, folder / "evaluate.json")]
    if export:
        command = ["export", "--checkpoint", model, "--board", board, "--seq-len", str(opts.export_seq_len)]
        steps.append((command + [*widths, "--out", str(folder / "export")], folder / "export" / "report.json"))
    return steps


def run(opts, seeds: list[int]) -> None:
    """Seed by seed: both arms' students, then their board paths (so the pairs grow together)."""
    for seed in seeds:
        for stage in ("student", "board"):
            for arm in (CHOSEN, TINY):
                if start_before.reached(opts.start_before):
                    steps.log(
                        f"not starting {stage} {arm}-s{seed}: {start_before.name(opts.start_before)} reached", opts.runs
                    )
                    return
                tag, done = f"[{arm} seed {seed}]", student_folder(opts, arm, seed) / "metrics.json"
                if arm == CHOSEN and is_baseline(opts, arm, seed):  # the baseline arm runs them
                    continue
                if earlier.holds(opts.earlier_summary, arm, seed) and not done.is_file():  # run on another machine
                    continue
                if stage == "student":
                    if arm == TINY and opts.tiny_from:  # another board's run trains them
                        continue
                    command = student_command(opts, arm, seed)
                    if command is not None:
                        steps.run_step(command, done, f"{tag} distill", opts.runs)
                    continue
                if done.is_file() and chosen_shape(opts) is not None:
                    for command, finished in board_commands(opts, arm, seed):
                        if steps.run_step(command, finished, f"{tag} {command[0]}", opts.runs) is None:
                            break


# ------------------------------------------------------------------------------------------- collecting


def student_record(folder: Path) -> dict:
    metrics = json.loads((folder / "metrics.json").read_text())
    stages = metrics["stages"]
    return {
        "accuracy": {split: 100 * metrics[f"{split}_accuracy"] for split in SPLITS},  # float, QAT-scored
        "steps": sum(stage["steps"] for stage in stages),
        "train_seconds": sum(stage["seconds"] for stage in stages),
        # the command's wall time; the search's (seed 0): its chosen candidate's distill, like the other seeds'
        "seconds": _chosen(metrics)["seconds"] if "shape_search" in metrics else _wall(folder, metrics),
        "teacher_accuracy": {split: 100 * metrics[f"teacher_{split}_accuracy"] for split in SPLITS},
    }


def _wall(folder: Path, metrics: dict) -> float:
    return seconds_of(folder / "metrics.json") or metrics["seconds"]


def _chosen(metrics: dict) -> dict:
    return next(c for c in metrics["shape_search"]["candidates"] if c["chosen"])


def board_record(folder: Path, bits: int, tables: int | None = None) -> dict | None:
    """distill_augment's board record of evaluate's integer model at `bits`-bit weights and `tables`-bit word
    tables (None: int8)."""
    record = distill_augment.board_record(folder, WidthCandidate(bits, tables).integer_model)
    if record and record["search_seconds"] is None:  # the ranking's (ranked_board_folder): one time for both
        together = json.loads((folder / "evaluate.json").read_text()).get("seconds")
        record |= {"search_seconds": together, "evaluate_seconds": 0.0 if together is not None else None}
    return record


def export_record(folder: Path, board: str = BOARD) -> dict | None:
    """The export's estimate on `board` (encoder layers; with Flash stalls as `boards --shapes` gives it),
    Flash and arena."""
    path = folder / "export" / "report.json"
    if not path.is_file():
        return None
    report = json.loads(path.read_text())
    estimate = report["latency_estimate"]["boards"][board]
    fits = report["fits"]
    return {
        "latency_ms": estimate["flash"].get("encoder_ms_with_flash", estimate["encoder_ms"]),
        "latency_ms_zero_wait": estimate["encoder_ms"],
        "seq_len": estimate["seq_len"],
        "fits": fits["ok"],
        "flash_bytes": fits["flash"]["model_bytes"],  # the whole model as exported, word tables included
        "flash_budget_bytes": fits["flash"]["budget_bytes"],
        "arena_bytes": fits["sram"]["arena_bytes"],
    }


def collect(opts, seeds: list[int]) -> dict:
    """Each arm's runs at `seeds` in OUT (none before the search chose); the local ones only."""
    runs = {CHOSEN: [], TINY: []}
    if chosen_shape(opts) is None:
        return runs
    for arm in runs:
        for seed in seeds:
            folder = student_folder(opts, arm, seed)
            if (folder / "metrics.json").is_file():
                board = board_record(board_folder(opts, arm, seed), weight_bits(opts, arm), opts.embedding_bits)
                runs[arm].append({"seed": seed, "student": student_record(folder), "board": board})
    return runs


def exports_record(opts, runs: dict) -> dict:
    """Per arm the export of the exported seed's board path (the --earlier summary's where OUT has none)."""
    theirs = (opts.earlier_summary or {}).get("exports", {})
    exported = export_seed(opts)
    return {arm: export_record(board_folder(opts, arm, exported), opts.board) or theirs.get(arm) for arm in runs}


def teacher_record(teacher: Path | None) -> dict | None:
    """The teacher's own run (finetune's metrics.json): what it was fine-tuned from, its accuracy, its time."""
    metrics = teacher / "metrics.json" if teacher else None
    if metrics is None or not metrics.is_file():
        return None
    record = json.loads(metrics.read_text())
    keep = {"checkpoint": record.get("checkpoint"), "seconds": record.get("seconds")}
    return {**keep, "accuracy": {split: 100 * record[f"{split}_accuracy"] for split in SPLITS}}


def search_record(opts) -> dict | None:
    """The search's plan and candidates (metrics.json's shape_search), as it chose: OUT/auto-s0's, else the
    --earlier or --search-from summary's."""
    taken = (opts.earlier_summary or opts.search_summary or {}).get("search")
    return shape_search_record(opts.runs / "auto-s0") or taken


def shape_search_record(folder: Path) -> dict | None:
    """The plan and candidates of the `distill --preset auto` in `folder` (metrics.json's shape_search), as it
    chose, and its wall seconds; None before it finished."""
    metrics = folder / "metrics.json"
    if not metrics.is_file():
        return None
    search = json.loads(metrics.read_text())["shape_search"]
    keep = ("shape", "weight_bits", "encoder_params", "flash_bytes", "embedding_bytes", "arena_bytes", "latency_ms")
    keep += ("validation_accuracy", "test_accuracy", "steps", "seconds", "board", "chosen")  # board: --rank-by board
    candidates = [{k: c[k] for k in keep if k in c} for c in search["candidates"]]
    wall = _wall(folder, json.loads(metrics.read_text()))  # the whole `distill --preset auto`
    return {**{k: v for k, v in search.items() if k != "candidates"}, "wall_seconds": wall, "candidates": candidates}


def parse_arguments(argv) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=Path, required=True, help="the runs' folder (OUT)")
    parser.add_argument("--teacher", type=Path, help="the fine-tuned teacher (distill --teacher); needed with --run")
    parser.add_argument("--seeds", default="0,1,2,3,4")
    parser.add_argument("--task", default="rotten_tomatoes")
    parser.add_argument("--max-seq-len", type=int, default=64, help="distill and search: training tokens")
    parser.add_argument("--export-seq-len", type=int, default=128, help="the tokens priced, exported, evaluated")
    parser.add_argument("--board", default=BOARD, help=f"the board the shapes are searched for (default {BOARD})")
    parser.add_argument(
        "--max-latency-ms",
        type=float,
        default=97.4,
        help="the search's cap (default: half BERT-tiny's on the F746ZG at 128 tokens; 0: no cap)",
    )
    parser.add_argument(
        "--recipe",
        choices=("logits", "layers"),
        default="logits",
        help="distill --recipe of both arms (default logits)",
    )
    parser.add_argument("--shape-candidates", type=int, default=3, help="distill --shape-candidates")
    parser.add_argument(
        "--rank-by", choices=("board", "student"), default="board", help="distill --rank-by (default board)"
    )
    parser.add_argument("--search-epochs", type=float, default=0.5, help="board path: search --epochs")
    parser.add_argument("--search-finetune-epochs", type=float, default=1.0, help="board path: --finetune-epochs")
    parser.add_argument(
        "--embedding-bits",
        type=int,
        choices=(8, 4),
        help="board path of both arms: the word tables trained and stored at this width (search, evaluate and "
        "export --embedding-bits); default: search's own (float tables trained, stored int8), in OUT/board/ "
        "rather than OUT/board-e<bits>/",
    )
    parser.add_argument(
        "--tiny-from",
        type=Path,
        help="another board's OUT whose BERT-tiny students to take the board path (their distill names no board), "
        "not trained here; a seed whose student is not there yet gets its board path on a later --run",
    )
    parser.add_argument("--run", action="store_true", help="run the missing steps first")
    start_before.add_argument(parser)
    earlier.add_argument(parser)
    parser.add_argument(
        "--search-from",
        type=Path,
        help="a summary of this task, board and recipe whose search names the shape (its runs are not taken): "
        "the same search compared at other board-path settings, e.g. --embedding-bits, from any seeds",
    )
    parser.add_argument("--out", type=Path, help="summary JSON (default RUNS/summary.json)")
    args = parser.parse_args(argv)
    args.seeds = [int(s) for s in args.seeds.split(",")]
    args.earlier_summary = earlier.load(args.earlier, settings(args))
    search_settings = {k: v for k, v in settings(args).items() if k in SEARCH_SETTINGS}
    args.search_summary = earlier.load(args.search_from, search_settings) if args.search_from else None
    if args.search_summary is not None and args.search_summary.get("search") is None:
        parser.error(f"--search-from {args.search_from}: it holds no search")
    return parser, args


def main(argv=None) -> int:
    parser, args = parse_arguments(argv)
    seeds = args.seeds
    if args.run:
        if not args.teacher:
            parser.error("--run needs --teacher")
        args.runs.mkdir(parents=True, exist_ok=True)
        run(args, seeds)
    local, search = collect(args, seeds), search_record(args)
    if search is None:
        raise SystemExit(f"{args.runs / 'auto-s0'}: the search has not finished; run with --run")
    runs = earlier.merge_runs(local, args.earlier_summary, seeds)
    summary = build_summary(args, argv, runs, search, exports_record(args, runs))
    taken = earlier.taken_roles(local, runs, suffixes=("", "-board"))
    summary["provenance"] = earlier.merge_provenance(summary["provenance"], args.earlier_summary, taken)
    print(markdown(summary["statistics"], summary["exports"], search["chosen"], args.board, args.export_seq_len))
    out = args.out or args.runs / "summary.json"
    out.write_text(json.dumps(summary, indent=1, default=float) + "\n")
    print(f"summary {out} ({out.stat().st_size:,} bytes)")
    return 0


def settings(args: argparse.Namespace) -> dict:
    """What makes two runs of this benchmark comparable (an --earlier summary must have the same; one made
    before --embedding-bits has none, which is search's default)."""
    keys = (*SEARCH_SETTINGS, "max_seq_len", "export_seq_len", "search_epochs", "search_finetune_epochs")
    return {k: getattr(args, k) for k in (*keys, "embedding_bits")}


def build_summary(args: argparse.Namespace, argv, runs: dict, search: dict, exports: dict) -> dict:
    """The committed summary: settings and commands, the teacher, the checkpoints' hashes, the search, the
    exports, every run and the statistics."""
    checkpoints = {"teacher": args.teacher}
    for arm, rows in runs.items():
        for r in rows:
            checkpoints[f"{arm}-s{r['seed']}"] = student_folder(args, arm, r["seed"])
            checkpoints[f"{arm}-s{r['seed']}-board"] = board_folder(args, arm, r["seed"]) / "model"
    return {
        "command": "python bench/board_shape_latency.py " + shlex.join(argv if argv is not None else sys.argv[1:]),
        "settings": {
            **settings(args),
            # seed 1's commands (python -m tflm_mcubert ...); the other seeds differ in --seed and folders
            "commands": {
                arm: [
                    shlex.join(student_command(args, arm, 1)),
                    *(shlex.join(c) for c, _ in board_commands(args, arm, 1)),
                ]
                for arm in runs
            },
        },
        "teacher": teacher_record(args.teacher) or (args.earlier_summary or {}).get("teacher"),
        "provenance": provenance(checkpoints),
        "search": search,
        "exports": exports,
        "runs": runs,
        "statistics": summarize(runs),
    }


if __name__ == "__main__":
    raise SystemExit(main())
