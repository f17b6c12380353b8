"""Today's distill recipe against teacher-labelled augmentation (`distill --augment N`), over seeds, for the
float student and for the integer model as exported for the NUCLEO-F746ZG. A script, not a test.

Each arm and seed is a student (OUT/<arm>-s<seed>/, `distill`'s output)

    python -m tflm_mcubert distill --teacher T --task rotten_tomatoes --max-seq-len 64 --seed S --out OUT/base-sS
    python -m tflm_mcubert distill ... --seed S --augment 1 --out OUT/aug1-sS

and that student through today's default board path, the same for every arm (bench/board_accuracy.py's
tiny-f746-default, search seed = the student's seed), in OUT/board/<arm>-s<seed>/:

    python -m tflm_mcubert search --checkpoint OUT/base-sS --mode adaptive --board nucleo-f746zg --weight-bits 8 \\
        --seed S --epochs 0.5 --finetune-epochs 1 --max-seq-len 64 --export-seq-len 64 --out .../model
    python -m tflm_mcubert evaluate --checkpoint .../model --split validation test --weight-bits 8 --json ...

(the integer model through the ops' numpy reference, as the firmware computes it). `--preset` distils another
student (e.g. bert-mini) and `--board-config` takes it another of bench/board_accuracy.py's board paths (e.g.
mini-f767-w4e4p: the NUCLEO-F767ZI with int4 weights and tables). `--run` runs what is
missing (resumable: a finished step is read back; `--stages` which, `--start-before HH:MM` starts none at or
after that UTC time); without it the finished runs are only summarized. The summary (`--out`, e.g.
bench/results/distill_augment.json) keeps per arm and seed the float student's and the integer model's
dev/test accuracy, which examples each got right (packed bits, results_bits.py), steps and wall seconds; and,
against the first arm, the paired t-test over seeds and the paired bootstrap over examples and seeds
(bench_stats.py). `markdown_table` (bench/report.py) recomputes every figure from the bits.

    python bench/distill_augment.py --teacher /work/runs/distill/teacher --runs /work/runs/distill \\
        --arms base,epochs12,aug1 --seeds 0,1,2,3,4,5 --run --out bench/results/distill_augment.json
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shlex
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import board_accuracy  # noqa: E402
import steps  # noqa: E402
from bench_stats import format_p, paired_difference, statistics  # noqa: E402
from provenance import provenance  # noqa: E402
import start_before  # noqa: E402
from results_bits import correct, pack  # noqa: E402

BOARD_CONFIG = "tiny-f746-default"  # today's default `search --board nucleo-f746zg` and export
SPLITS = ("validation", "test")
STAGES = ("student", "board")
INTEGER, FLOAT = "integer", "float"  # the board path's models: evaluate's int8 model, and its float twin


# ---------------------------------------------------------------------------------------------- running


# Named arms of the intermediate-layer recipes (train/intermediate.py), on top of --augment 1 (the best of
# the earlier arms): projected-teacher init, then the layers alone for 2 epochs, then aug1's 6 logit epochs;
# and its two halves alone (the init; the layers' stage from a fresh encoder). Apart from these, `layers-q8`
# is the board benchmarks' student (bench/board_shape_latency.py's BERT-tiny: `--recipe layers`,
# quantization-aware at int8; `layers-q4` at int4, BERT-mini's width at the F767ZI), `layers-q8-i<E>` the
# same with its layers' stage E epochs long, and `layers-q8-aug<N>` with N teacher-labelled copies of each
# sentence (the recipe's is 1).
LOGITS = ("--recipe", "logits")
LAYERS = ("--recipe", "layers", "--qat-weight-bits")
NAMED_ARMS = {
    "ikd": ["--augment", "1", "--init", "projected", "--intermediate-kd", "1", "--intermediate-epochs", "2"],
    "pinit": ["--augment", "1", "--init", "projected"],
    "ikdrand": ["--augment", "1", "--intermediate-kd", "1", "--intermediate-epochs", "2"],
}


def arm_args(arm: str) -> list[str]:
    """distill's options of an arm, each on top of `--recipe logits` (logits-only KD from fresh layers, the
    recipe every arm is compared with): `base` (that recipe), `aug<N>` (--augment N), `epochs<E>` (E epochs:
    `epochs12` takes the steps of `aug1`'s 6 epochs, the equal-budget control), or one of NAMED_ARMS
    (`ikd` sets what `--recipe layers` does)."""
    if arm == "base":
        return [*LOGITS]
    if arm in NAMED_ARMS:
        return [*LOGITS, *NAMED_ARMS[arm]]
    if match := re.fullmatch(r"layers-q([48])(?:-i(\d+))?(?:-aug(\d+))?", arm):
        longer = ["--intermediate-epochs", match[2]] if match[2] else []
        return [*LAYERS, match[1], *longer, *(["--augment", match[3]] if match[3] else [])]
    match = re.fullmatch(r"(aug|epochs)(\d+)", arm)
    if not match:
        known = ", ".join(NAMED_ARMS)
        raise SystemExit(f"unknown arm {arm!r} (base, aug<N>, epochs<E>, layers-q<4|8>[-i<E>][-aug<N>] or {known})")
    return [*LOGITS, "--augment" if match[1] == "aug" else "--epochs", match[2]]


def student_command(opts, arm: str, seed: int) -> list[str]:
    command = ["distill", "--teacher", str(opts.teacher), "--task", opts.task, "--max-seq-len", str(opts.max_seq_len)]
    command += ["--preset", opts.preset] if getattr(opts, "preset", None) else []
    command += ["--seed", str(seed), *arm_args(arm), "--out", str(opts.runs / f"{arm}-s{seed}")]
    return command + ["--resume", "--quiet"]


def board_config(opts) -> str:
    """The board path's configuration (board_accuracy.CONFIGS): --board-config, default BOARD_CONFIG."""
    return getattr(opts, "board_config", None) or BOARD_CONFIG


def board_commands(opts, arm: str, seed: int) -> tuple[list[str], list[str]]:
    """(search, evaluate) of the student's board path (board_accuracy.py's run_one; default tiny-f746-default)."""
    config, folder = board_accuracy.CONFIGS[board_config(opts)], opts.runs / "board" / f"{arm}-s{seed}"
    search = ["search", "--checkpoint", str(opts.runs / f"{arm}-s{seed}"), "--task", opts.task]
    search += ["--out", str(folder / "model"), "--resume", "--quiet", "--seed", str(seed)]
    search += ["--epochs", str(opts.search_epochs), "--finetune-epochs", str(opts.search_finetune_epochs)]
    search += ["--max-seq-len", str(opts.max_seq_len), "--export-seq-len", str(opts.max_seq_len)]
    search += config.search_args(opts.task)
    evaluate = ["evaluate", "--checkpoint", str(folder / "model"), "--task", opts.task]
    evaluate += ["--seq-len", str(opts.max_seq_len), "--split", *SPLITS, "--weight-bits", str(config.weight_bits)]
    return search, evaluate + ["--json", str(folder / "evaluate.json")]


def run(opts, arms: list[str], seeds: list[int]) -> None:
    """The missing steps, stage by stage (all students first, then their board paths), seed by seed."""
    for stage in opts.stages:
        for seed in seeds:
            for arm in arms:
                if start_before.reached(opts.start_before):
                    reached = start_before.name(opts.start_before)
                    steps.log(f"not starting {stage} {arm}-s{seed}: {reached} reached", opts.runs)
                    return
                tag = f"[{arm} seed {seed}]"
                if stage == "student":
                    command = student_command(opts, arm, seed)
                    done = opts.runs / f"{arm}-s{seed}" / "metrics.json"
                    if steps.run_step(command, done, f"{tag} distill", opts.runs) is None:
                        continue
                elif (opts.runs / f"{arm}-s{seed}" / "metrics.json").is_file():
                    search, evaluate = board_commands(opts, arm, seed)
                    folder = opts.runs / "board" / f"{arm}-s{seed}"
                    if steps.run_step(search, folder / "model" / "metrics.json", f"{tag} search", opts.runs):
                        steps.run_step(evaluate, folder / "evaluate.json", f"{tag} evaluate", opts.runs)


# ------------------------------------------------------------------------------------------- collecting


def predicted_correct(run: Path, task: str, max_seq_len: int) -> dict[str, np.ndarray]:
    """Per-example correctness of the float student in `run` on the task's dev and test splits, its encoder's
    weights fake-quantized where its run scored it so (`distill --qat-weight-bits`: metrics.json's
    accuracy_weights)."""
    from tflm_mcubert.ops.widths import Widths
    from tflm_mcubert.quantize.weight_fake_quant import WeightFakeQuant
    from tflm_mcubert.train.trainer import predict_logits
    from tflm_mcubert.train.workflows import DataOptions, load_classifier, load_task_data

    model, tokenizer, _ = load_classifier(str(run))
    scored_at = json.loads((run / "metrics.json").read_text()).get("accuracy_weights", "float")
    if scored_at != "float":
        WeightFakeQuant(model, Widths.uniform(int(scored_at))).install()
    splits = load_task_data(DataOptions(task, max_seq_len=max_seq_len), tokenizer, model.config.vocab_size).splits
    return {s: np.argmax(predict_logits(model, splits[s], 64), axis=-1) == splits[s].labels for s in SPLITS}


def seconds_of(path: Path) -> float | None:
    timing = path.with_name(path.name + ".seconds")
    return float(timing.read_text()) if timing.is_file() else None


def student_record(folder: Path, opts) -> dict:
    metrics = json.loads((folder / "metrics.json").read_text())
    stages, bits = metrics["stages"], predicted_correct(folder, opts.task, opts.max_seq_len)
    for split in SPLITS:  # the re-prediction is the run's own
        stated = metrics[f"{split}_accuracy"]
        if abs(bits[split].mean() - stated) > 1e-9:
            raise SystemExit(f"{folder}: {split} re-predicted {bits[split].mean():.6f}, metrics.json {stated:.6f}")
    return {
        "steps": sum(stage["steps"] for stage in stages),  # an intermediate stage's too
        "train_examples": metrics.get("train_examples"),
        "train_seconds": sum(stage["seconds"] for stage in stages),
        "labelling_seconds": metrics.get("teacher_labelled", {}).get("seconds", 0.0),
        "seconds": seconds_of(folder / "metrics.json") or metrics["seconds"],  # the command's wall time
        "correct": {split: pack(bits[split]) for split in SPLITS},
        # the teacher's accuracy as the student's run measured it (one teacher: the same in every run)
        "teacher_accuracy": {split: 100 * metrics[f"teacher_{split}_accuracy"] for split in SPLITS},
    }


def board_record(folder: Path, name: str | None = None) -> dict | None:
    """The board path's record in `folder`: `evaluate`'s integer model `name` (default: today's board path's) and
    its float twin, each example's correctness packed, steps and seconds; None before its evaluate ran."""
    evaluation = folder / "evaluate.json"
    if not evaluation.is_file():
        return None
    by_split = json.loads(evaluation.read_text())["by_split"]
    name = name or board_accuracy.quantized_name(board_accuracy.CONFIGS[BOARD_CONFIG], 8)
    bits = {
        model: {
            split: pack(np.asarray(by_split[split]["predictions"][key]) == np.asarray(by_split[split]["labels"]))
            for split in SPLITS
        }
        for model, key in ((INTEGER, name), (FLOAT, "float"))
    }
    search = json.loads((folder / "model" / "metrics.json").read_text())
    return {
        "evaluated": name,
        "steps": sum(s.get("steps", 0) for s in search.get("stages", [])) or None,
        "search_seconds": seconds_of(folder / "model" / "metrics.json"),
        "evaluate_seconds": seconds_of(evaluation),
        "correct": bits,
    }


def collect(opts, arms: list[str], seeds: list[int]) -> dict:
    runs = {}
    for arm in arms:
        runs[arm] = []
        for seed in seeds:
            folder = opts.runs / f"{arm}-s{seed}"
            if (folder / "metrics.json").is_file():
                config = board_accuracy.CONFIGS[board_config(opts)]
                name = board_accuracy.quantized_name(config, config.weight_bits)
                board = board_record(opts.runs / "board" / f"{arm}-s{seed}", name)
                runs[arm].append({"seed": seed, "student": student_record(folder, opts), "board": board})
    return runs


# ------------------------------------------------------------------------------------------- statistics


def accuracy_bits(run: dict, path: str, split: str) -> np.ndarray | None:
    """bool[examples] of `run`'s `path` ("student", "board:integer", "board:float") on `split`, or None."""
    part, _, model = path.partition(":")
    record = run.get(part)
    if not record:
        return None
    return correct(record, split, model or None)


PATHS = {"student": "float student", f"board:{INTEGER}": "integer model", f"board:{FLOAT}": "its float twin"}


def board_name(settings: dict) -> str:
    """The board a summary's board path exports for, as the tables name it: "F746ZG"."""
    board = board_accuracy.CONFIGS[settings.get("board_config") or BOARD_CONFIG].board
    return board.rsplit("-", 1)[-1].upper()


def _path_labels(board: str) -> dict[str, str]:
    return {**PATHS, f"board:{INTEGER}": f"{PATHS[f'board:{INTEGER}']} ({board})"}


def summarize(runs: dict[str, list[dict]]) -> dict:
    """Per arm: mean ± sd of every path and split, cost; against the first arm: paired t and bootstrap p."""
    arms, first = list(runs), next(iter(runs))
    out = {"arms": {}, "against": first, "differences": {}}
    for arm in arms:
        stats = {"seeds": [r["seed"] for r in runs[arm]]}
        for path in PATHS:
            per_split = {}
            for split in SPLITS:
                values = [b.mean() for r in runs[arm] if (b := accuracy_bits(r, path, split)) is not None]
                per_split[split] = {**statistics(values), "n": len(values)} if values else None
            stats[path] = per_split
        students = [r["student"] for r in runs[arm]]
        boards = [r["board"] for r in runs[arm] if r["board"]]
        stats["steps"] = sorted({s["steps"] for s in students})
        stats["student_minutes"] = statistics([s["seconds"] for s in students], 1 / 60) if students else None
        labelling = [s["labelling_seconds"] for s in students]
        stats["labelling_minutes"] = statistics(labelling, 1 / 60) if students else None
        board_seconds = [(b["search_seconds"] or 0) + (b["evaluate_seconds"] or 0) for b in boards]
        stats["board_minutes"] = statistics(board_seconds, 1 / 60) if boards else None
        out["arms"][arm] = stats
    out["differences"] = {arm: _versus(runs[arm], runs[first]) for arm in arms[1:]}
    # Later arms against each earlier one but the first (e.g. aug1 against its equal-steps control).
    out["pairs"] = [
        {"arm": arm, "against": reference, "versus": _versus(runs[arm], runs[reference])}
        for i, arm in enumerate(arms)
        for reference in arms[1:i]
    ]
    return out


def _versus(arm_runs: list[dict], reference_runs: list[dict]) -> dict:
    """Per path, on the seeds both arms ran: mean difference in points, paired t over seeds, paired bootstrap."""
    base = {r["seed"]: r for r in reference_runs}
    other = {r["seed"]: r for r in arm_runs}
    versus = {}
    for path in PATHS:
        both = sorted(set(base) & set(other))
        seeds = [s for s in both if all(accuracy_bits(r[s], path, "test") is not None for r in (base, other))]
        entry = {"seeds": seeds}
        if seeds:
            for split in SPLITS:
                a, b = (np.array([accuracy_bits(runs[s], path, split) for s in seeds]) for runs in (other, base))
                entry[split] = paired_difference(a, b)
        versus[path] = entry
    return versus


def _cell(stats: dict | None) -> str:
    if not stats:
        return "–"
    return f"{stats['mean']:.2f}" if stats.get("n") == 1 else f"{stats['mean']:.2f} ± {stats['sd']:.2f}"


def _p(value) -> str:
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else format_p(value)


def markdown(summary: dict, board: str = "F746ZG") -> str:
    """Two tables: per arm the accuracies and cost, and each arm against the first (and later arms against
    each other); `board` names the integer model's."""
    labels = _path_labels(board)
    lines = [
        "| recipe | seeds | steps | float student dev | float student test | integer model dev | integer model test "
        "| distill min | board path min |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for arm, s in summary["arms"].items():
        student, integer = s["student"], s[f"board:{INTEGER}"]
        steps = ", ".join(f"{n:,}" for n in s["steps"])
        seeds = f"{len(s['seeds'])}" + (f" ({integer['test']['n']} on the board path)" if integer["test"] and
                                         integer["test"]["n"] != len(s["seeds"]) else "")  # fmt: skip
        minutes = [f"{m['mean']:.1f}" if m else "–" for m in (s["student_minutes"], s["board_minutes"])]
        row = [arm, seeds, steps, *(_cell(x[split]) for x in (student, integer) for split in SPLITS), *minutes]
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", f"| against {summary['against']} | seeds | dev, points (paired t p) | test, points (paired t p) "
                  "| test: paired bootstrap p |", "|---|---|---|---|---|"]  # fmt: skip
    lines += [_difference_row(f"{arm}: {label}", versus[path]) for arm, versus in summary["differences"].items()
              for path, label in labels.items() if versus[path]["seeds"]]  # fmt: skip
    if summary.get("pairs"):
        lines += ["", "| recipe against recipe | seeds | dev, points (paired t p) | test, points (paired t p) "
                      "| test: paired bootstrap p |", "|---|---|---|---|---|"]  # fmt: skip
        for pair in summary["pairs"]:
            label = f"{pair['arm']} against {pair['against']}"
            lines += [_difference_row(f"{label}: {name}", pair["versus"][path])
                      for path, name in labels.items() if pair["versus"][path]["seeds"]]  # fmt: skip
    return "\n".join(lines)


def _difference_row(label: str, entry: dict) -> str:
    dev, test = entry["validation"], entry["test"]
    return (
        f"| {label} | {len(entry['seeds'])} | {dev['points']:+.2f} ({_p(dev['paired_t_p'])}) "
        f"| {test['points']:+.2f} ({_p(test['paired_t_p'])}) | {_p(test['paired_bootstrap_p'])} |"
    )


def teacher_accuracy(runs: dict[str, list[dict]]) -> dict[str, float]:
    """The teacher's dev and test accuracy as its students' runs measured it: one teacher per summary."""
    seen = {tuple(r["student"]["teacher_accuracy"][s] for s in SPLITS) for rows in runs.values() for r in rows}
    if len(seen) != 1:
        raise SystemExit(f"the runs name {len(seen)} teachers' accuracies, not one")
    return dict(zip(SPLITS, seen.pop()))


def teacher_gap(runs: dict[str, list[dict]], arm: str) -> dict:
    """How much of the teacher's test lead on the first arm's integer model (its mean over its seeds) `arm`'s
    paired gain on that arm closes."""
    stats, path = summarize(runs), f"board:{INTEGER}"
    first = stats["against"]
    gain = stats["differences"][arm][path]
    teacher = teacher_accuracy(runs)
    lead = teacher["test"] - stats["arms"][first][path]["test"]["mean"]
    return {
        "teacher": teacher,
        "against": first,
        "reference": stats["arms"][first][path]["test"],
        "arm": stats["arms"][arm][path]["test"],
        "gain": gain["test"],
        "seeds": gain["seeds"],
        "lead": lead,
        "closed": gain["test"]["points"] / lead,
    }


def tasks_markdown(rows: list[tuple[str, str, dict, str]]) -> str:
    """One line per (task, student and board, committed summary, arm): the teacher, the first arm's and
    `arm`'s integer models on test, the paired gain and the share of the teacher's lead it closes; every
    figure from the runs' bits."""
    lines = [
        "| task | student, board | teacher dev / test | recipes | first: integer model test "
        "| second: integer model test | seeds | test, points (paired t p; bootstrap p) | of the teacher's lead |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for task, student, summary, arm in rows:
        gap = teacher_gap(summary["runs"], arm)
        teacher, gain = gap["teacher"], gap["gain"]
        lines.append(
            f"| {task} | {student} | {teacher['validation']:.2f} / {teacher['test']:.2f} | {gap['against']}, {arm} "
            f"| {_cell(gap['reference'])} | {_cell(gap['arm'])} | {len(gap['seeds'])} "
            f"| {gain['points']:+.2f} ({_p(gain['paired_t_p'])}; {_p(gain['paired_bootstrap_p'])}) "
            f"| {gain['points']:.2f} of {gap['lead']:.2f} ({100 * gap['closed']:.0f}%) |"
        )
    return "\n".join(lines)


def markdown_table(summary: dict) -> str:
    """`markdown` of a committed summary, every figure and p-value recomputed from its runs' bits."""
    return markdown(summarize(summary["runs"]), board_name(summary.get("settings", {})))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=Path, required=True, help="the runs' folder (OUT)")
    parser.add_argument("--teacher", type=Path, help="the fine-tuned teacher (distill --teacher); needed with --run")
    parser.add_argument(
        "--arms",
        default="base,aug1",
        help="comma-separated arms: base (logits-only KD), aug<N>, epochs<E>, layers-q<4|8>[-i<E>][-aug<N>], ikd, ...",
    )
    parser.add_argument("--seeds", default="0,1,2,3,4")
    parser.add_argument("--task", default="rotten_tomatoes")
    parser.add_argument("--max-seq-len", type=int, default=64)
    parser.add_argument("--preset", help="the student's distill --preset (default: distill's, bert-tiny)")
    parser.add_argument(
        "--board-config",
        choices=tuple(board_accuracy.CONFIGS),
        default=BOARD_CONFIG,
        help=f"the board path, as bench/board_accuracy.py names it (default {BOARD_CONFIG})",
    )
    parser.add_argument("--search-epochs", type=float, default=0.5, help="board path: search --epochs")
    parser.add_argument("--search-finetune-epochs", type=float, default=1.0, help="board path: --finetune-epochs")
    parser.add_argument("--run", action="store_true", help="run the missing steps first")
    parser.add_argument("--stages", default="student,board", help="with --run: of student,board, in this order")
    start_before.add_argument(parser)
    parser.add_argument("--out", type=Path, help="summary JSON (default RUNS/summary.json)")
    args = parser.parse_args(argv)
    seeds, arms = [int(s) for s in args.seeds.split(",")], args.arms.split(",")
    args.stages = [s for s in args.stages.split(",") if s]
    if set(args.stages) - set(STAGES):
        parser.error(f"--stages: of {', '.join(STAGES)}")
    if args.run:
        if not args.teacher:
            parser.error("--run needs --teacher")
        args.runs.mkdir(parents=True, exist_ok=True)
        run(args, arms, seeds)
    runs = collect(args, arms, seeds)
    summary = {
        "command": "python bench/distill_augment.py " + shlex.join(argv if argv is not None else sys.argv[1:]),
        "settings": {
            "task": args.task,
            "max_seq_len": args.max_seq_len,
            "preset": args.preset,
            "board_config": args.board_config,
            "search_epochs": args.search_epochs,
            "search_finetune_epochs": args.search_finetune_epochs,
            "board_search_args": board_accuracy.CONFIGS[args.board_config].search_args(args.task),
            "distill_args": {arm: arm_args(arm) for arm in arms},
        },
        "provenance": provenance(
            {
                "teacher": args.teacher,
                **{
                    f"{arm}-s{r['seed']}{suffix}": path
                    for arm, rows in runs.items()
                    for r in rows
                    for suffix, path in (
                        ("", args.runs / f"{arm}-s{r['seed']}"),
                        ("-board", args.runs / "board" / f"{arm}-s{r['seed']}" / "model" if r["board"] else None),
                    )
                },
            }
        ),
        "runs": runs,
    }
    stats = summarize(runs)
    summary["statistics"] = stats
    print(markdown(stats, board_name(summary["settings"])))
    out = args.out or args.runs / "summary.json"
    out.write_text(json.dumps(summary, indent=1, default=float) + "\n")
    print(f"summary {out} ({out.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
