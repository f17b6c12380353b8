"""The teacher's own recipe: `finetune` of all-MiniLM-L6-v2 at several epochs and sequence lengths, over seeds,
on one task. A script, not a test.

A student cannot beat its teacher, so the teacher's recipe bounds every student. Each arm `e<E>-l<L>` and seed S
is one teacher (OUT/e<E>-l<L>-s<S>/, `finetune`'s output):

    python -m tflm_mcubert finetune --checkpoint sentence-transformers/all-MiniLM-L6-v2 --task T \\
        --epochs E --max-seq-len L --seed S --out OUT/eE-lL-sS

`--run` runs what is missing (resumable: a finished teacher is read back; `--start-before HH:MM` starts none
at or after that UTC time); without it the finished runs are only summarized. The summary (`--out`, e.g.
bench/results/teacher_recipe_debate_speakers.json) keeps per arm and seed the teacher's dev/test accuracy,
which examples it got right (packed bits, results_bits.py), steps and wall seconds; per arm mean ± sd; the arm
dev selects; and each arm against the first: the paired t over seeds and the paired bootstrap over examples
and seeds (bench_stats.py), recomputed from the bits by `markdown_table` (bench/report.py). `--earlier SUMMARY`
takes the teachers a committed summary of the same task holds and fine-tunes only the missing ones (earlier.py).

    python bench/teacher_recipe.py --task debate_speakers --runs /work/runs/teachers \\
        --arms e1-l64,e2-l64,e3-l64,e3-l128 --seeds 0,1,2,3,4 --run \\
        --out bench/results/teacher_recipe_debate_speakers.json
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import steps  # noqa: E402
from bench_stats import paired_bootstrap, paired_t, statistics  # noqa: E402
from distill_augment import SPLITS, predicted_correct, seconds_of  # noqa: E402
import earlier  # noqa: E402
from provenance import provenance  # noqa: E402
import start_before  # noqa: E402
from results_bits import pack, unpack  # noqa: E402

CHECKPOINT = "sentence-transformers/all-MiniLM-L6-v2"


def parse_arm(arm: str) -> tuple[float, int]:
    """(epochs, sequence length) of an arm `e<E>-l<L>` (E may be fractional: `e0.5-l64`)."""
    match = re.fullmatch(r"e(\d+(?:\.\d+)?)-l(\d+)", arm)
    if not match:
        raise SystemExit(f"unknown arm {arm!r}: e<epochs>-l<sequence length>, e.g. e2-l64")
    return float(match[1]), int(match[2])


def arm_label(arm: str) -> str:
    """ "3 epochs at 64 tokens" for e3-l64."""
    epochs, seq_len = parse_arm(arm)
    return f"{epochs:g} epoch{'' if epochs == 1 else 's'} at {seq_len} tokens"


def teacher_command(opts, arm: str, seed: int) -> list[str]:
    epochs, seq_len = parse_arm(arm)
    return [
        "finetune", "--checkpoint", CHECKPOINT, "--task", opts.task, "--epochs", f"{epochs:g}",
        "--max-seq-len", str(seq_len), "--seed", str(seed), "--out", str(opts.runs / f"{arm}-s{seed}"),
        "--resume", "--quiet",
    ]  # fmt: skip


def run(opts, arms: list[str], seeds: list[int]) -> None:
    """The missing teachers, seed by seed (every arm of a seed before the next seed: paired arms first)."""
    for seed in seeds:
        for arm in arms:
            if start_before.reached(opts.start_before):
                steps.log(f"not starting {arm}-s{seed}: {start_before.name(opts.start_before)} reached", opts.runs)
                return
            done = opts.runs / f"{arm}-s{seed}" / "metrics.json"
            if earlier.holds(opts.earlier_summary, arm, seed) and not done.is_file():  # fine-tuned elsewhere
                continue
            steps.run_step(teacher_command(opts, arm, seed), done, f"[{arm} seed {seed}] finetune", opts.runs)


def teacher_record(folder: Path, opts, arm: str, seed: int) -> dict:
    """One teacher: which dev/test examples it got right (re-predicted, checked against its metrics.json)."""
    metrics = json.loads((folder / "metrics.json").read_text())
    bits = predicted_correct(folder, opts.task, parse_arm(arm)[1])
    for split in SPLITS:
        if abs(bits[split].mean() - metrics[f"{split}_accuracy"]) > 1e-9:
            raise SystemExit(f"{folder}: {split} re-predicted {bits[split].mean():.6f}, not its metrics.json's")
    return {
        "seed": seed,
        "steps": sum(stage["steps"] for stage in metrics["stages"]),
        "seconds": seconds_of(folder / "metrics.json") or metrics["seconds"],
        "correct": {split: pack(bits[split]) for split in SPLITS},
    }


def collect(opts, arms: list[str], seeds: list[int]) -> dict[str, list[dict]]:
    return {
        arm: [
            teacher_record(opts.runs / f"{arm}-s{seed}", opts, arm, seed)
            for seed in seeds
            if (opts.runs / f"{arm}-s{seed}" / "metrics.json").is_file()
        ]
        for arm in arms
    }


def summarize(runs: dict[str, list[dict]]) -> dict:
    """Per arm mean ± sd and minutes; the arm with the best mean dev accuracy; each arm against the first."""
    accuracy = {arm: {s: [unpack(r["correct"][s]).mean() for r in rs] for s in SPLITS} for arm, rs in runs.items()}
    arms = {
        arm: {
            "seeds": [r["seed"] for r in rs],
            "steps": sorted({r["steps"] for r in rs}),
            "minutes": statistics([r["seconds"] for r in rs], 1 / 60),
            **{split: statistics(accuracy[arm][split]) for split in SPLITS},
        }
        for arm, rs in runs.items()
        if rs
    }
    first = next(iter(arms))
    return {
        "arms": arms,
        "selected_on_dev": max(arms, key=lambda arm: arms[arm]["validation"]["mean"]),
        "against": first,
        "differences": {arm: versus(runs[arm], runs[first]) for arm in arms if arm != first},
    }


def versus(arm_runs: list[dict], reference_runs: list[dict]) -> dict:
    """On the seeds both ran: the difference in points, paired t over seeds, paired bootstrap (test)."""
    base, other = ({r["seed"]: r for r in rs} for rs in (reference_runs, arm_runs))
    seeds = sorted(set(base) & set(other))
    entry = {"seeds": seeds}
    for split in SPLITS:
        a, b = (np.array([unpack(rs[s]["correct"][split]) for s in seeds]) for rs in (other, base))
        _, p = paired_t(a.mean(axis=1), b.mean(axis=1))
        entry[split] = {"points": float(100 * (a.mean() - b.mean())), "paired_t_p": p}
    entry["test"]["paired_bootstrap_p"] = paired_bootstrap(a, b)
    return entry


def markdown(summary: dict) -> str:
    """Per arm the teacher's accuracy and cost, then each arm against the first."""
    from distill_augment import _p

    lines = ["| teacher recipe | seeds | steps | dev | test | minutes |", "|---|---|---|---|---|---|"]
    for arm, s in summary["arms"].items():
        chosen = " (chosen on dev)" if arm == summary["selected_on_dev"] else ""
        cells = [f"{s[split]['mean']:.2f} ± {s[split]['sd']:.2f}" for split in SPLITS]
        steps = ", ".join(f"{n:,}" for n in s["steps"])
        label = f"{arm_label(arm)}{chosen}"
        lines.append(f"| {label} | {len(s['seeds'])} | {steps} | {' | '.join(cells)} | {s['minutes']['mean']:.1f} |")
    lines += [
        "",
        f"| against {summary['against']} | seeds | dev, points (paired t p) | test, points (paired t p) "
        "| test: paired bootstrap p |",
        "|---|---|---|---|---|",
    ]
    for arm, d in summary["differences"].items():
        dev, test = d["validation"], d["test"]
        lines.append(
            f"| {arm} | {len(d['seeds'])} | {dev['points']:+.2f} ({_p(dev['paired_t_p'])}) "
            f"| {test['points']:+.2f} ({_p(test['paired_t_p'])}) | {_p(test['paired_bootstrap_p'])} |"
        )
    return "\n".join(lines)


def markdown_table(summary: dict) -> str:
    """`markdown` of a committed summary, every figure and p-value recomputed from its runs' bits."""
    return markdown(summarize(summary["runs"]))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=Path, required=True, help="the teachers' folder (OUT)")
    parser.add_argument("--task", default="rotten_tomatoes", help="the task the teachers are fine-tuned on")
    parser.add_argument("--arms", default="e1-l64,e2-l64,e3-l64", help="e<epochs>-l<sequence length>, comma-separated")
    parser.add_argument("--seeds", default="0,1,2,3,4", help="comma-separated")
    parser.add_argument("--run", action="store_true", help="fine-tune the missing teachers first")
    start_before.add_argument(parser)
    earlier.add_argument(parser)
    parser.add_argument("--out", type=Path, help="summary JSON (default RUNS/summary.json)")
    opts = parser.parse_args(argv)
    arms, seeds = opts.arms.split(","), [int(s) for s in opts.seeds.split(",")]
    for arm in arms:
        parse_arm(arm)
    settings = {"task": opts.task, "checkpoint": CHECKPOINT}
    opts.earlier_summary = earlier.load(opts.earlier, settings, where=None)
    if opts.run:
        steps.claim(opts.runs, settings)
        run(opts, arms, seeds)
    local = collect(opts, arms, seeds)
    runs = earlier.merge_runs(local, opts.earlier_summary, seeds)
    if not any(runs.values()):
        raise SystemExit(f"{opts.runs}: no finished teacher (run with --run)")
    checkpoints = {f"{arm}-s{r['seed']}": opts.runs / f"{arm}-s{r['seed']}" for arm, rs in local.items() for r in rs}
    taken = earlier.taken_roles(local, runs)
    summary = {
        "command": "python bench/teacher_recipe.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        **settings,
        "provenance": earlier.merge_provenance(provenance(checkpoints), opts.earlier_summary, taken, shared=()),
        "runs": runs,
        "summary": summarize(runs),
    }
    out = opts.out or opts.runs / "summary.json"
    out.write_text(json.dumps(summary, indent=1) + "\n")
    print(markdown(summary["summary"]))
    print(f"wrote {out} ({out.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
