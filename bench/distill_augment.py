"""Issue 41: today's distill recipe against teacher-labelled augmentation (`distill --augment N`), over seeds.
A script, not a test: it reads finished runs (OUT/<arm>-s<seed>/metrics.json, from e.g.

    python -m tflm_mcubert distill --teacher T --task rotten_tomatoes --max-seq-len 64 --seed S --out OUT/base-sS
    python -m tflm_mcubert distill ... --seed S --augment 1 --out OUT/aug1-sS

), re-predicts each student's test split for per-example correctness, and reports per arm the per-seed and
mean ± sd dev/test accuracy, steps and seconds; against the first arm, the paired t-test over seeds (the
training seed's variation) and the paired bootstrap over examples and seeds (bench_stats.py).

    python bench/distill_augment.py --runs /work/runs/distill --arms base,aug1 --seeds 0,1,2,3,4 --task rotten_tomatoes
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_stats import format_p, mean_sd, paired_bootstrap  # noqa: E402


def student_t_two_sided_p(t: float, dof: int) -> float:
    """Two-sided p of Student's t with `dof` degrees of freedom (Simpson's rule on the density: no scipy)."""
    if not math.isfinite(t):
        return 0.0
    log_norm = math.lgamma((dof + 1) / 2) - math.lgamma(dof / 2) - 0.5 * math.log(dof * math.pi)
    steps, upper = 20_000, abs(t)
    width = upper / steps
    density = [math.exp(log_norm - (dof + 1) / 2 * math.log1p((k * width) ** 2 / dof)) for k in range(steps + 1)]
    area = width / 3 * (density[0] + density[-1] + 4 * sum(density[1:-1:2]) + 2 * sum(density[2:-1:2]))
    return max(0.0, min(1.0, 1.0 - 2.0 * area))


def paired_t(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """(t, two-sided p) of mean(a - b) = 0 over paired seeds."""
    diff = np.asarray(a, np.float64) - np.asarray(b, np.float64)
    if diff.size < 2:
        return float("nan"), float("nan")
    sd = diff.std(ddof=1)
    t = math.inf if sd == 0 else diff.mean() / (sd / math.sqrt(diff.size))
    return float(t), student_t_two_sided_p(t, diff.size - 1)


def test_correctness(run: Path, task: str, max_seq_len: int) -> np.ndarray:
    """Per-example correctness of the student in `run` on the task's test split."""
    from tflm_mcubert.train.trainer import predict_logits
    from tflm_mcubert.train.workflows import DataOptions, load_classifier, load_task_data

    model, tokenizer, _ = load_classifier(str(run))
    split = load_task_data(DataOptions(task, max_seq_len=max_seq_len), tokenizer, model.config.vocab_size).splits[
        "test"
    ]
    return np.argmax(predict_logits(model, split, 64), axis=-1) == split.labels


def arm_record(runs: Path, arm: str, seeds: list[int], task: str, max_seq_len: int) -> dict:
    rows = {}
    for seed in seeds:
        run = runs / f"{arm}-s{seed}"
        if not (run / "metrics.json").is_file():
            continue
        metrics = json.loads((run / "metrics.json").read_text())
        stage = metrics["stages"][0]
        rows[seed] = {
            "validation": metrics["validation_accuracy"],
            "test": metrics["test_accuracy"],
            "steps": stage["steps"],
            "train_seconds": stage["seconds"],
            "seconds": metrics["seconds"],
            "labelling_seconds": metrics.get("teacher_labelled", {}).get("seconds", 0.0),
            "train_examples": metrics.get("train_examples"),
            "correct": test_correctness(run, task, max_seq_len),
        }
    return rows


def compare(base: dict, other: dict) -> dict:
    seeds = sorted(set(base) & set(other))
    if not seeds:
        return {"seeds": []}
    out = {"seeds": seeds}
    for split in ("validation", "test"):
        a = np.array([other[s][split] for s in seeds])
        b = np.array([base[s][split] for s in seeds])
        t, p = paired_t(a, b)
        out[split] = {"mean_difference_points": float(100 * (a - b).mean()), "t": t, "paired_t_p": p}
    correct = np.array([other[s]["correct"] for s in seeds]), np.array([base[s]["correct"] for s in seeds])
    out["test"]["paired_bootstrap_p"] = paired_bootstrap(*correct)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=Path, required=True)
    parser.add_argument("--arms", default="base,aug1")
    parser.add_argument("--seeds", default="0,1,2,3,4")
    parser.add_argument("--task", default="rotten_tomatoes")
    parser.add_argument("--max-seq-len", type=int, default=64)
    parser.add_argument("--out", type=Path, help="summary JSON (default RUNS/summary.json)")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    arms = {arm: arm_record(args.runs, arm, seeds, args.task, args.max_seq_len) for arm in args.arms.split(",")}
    first = next(iter(arms))
    summary = {"arms": {}, "against_" + first: {}}
    for arm, rows in arms.items():
        table = {s: {k: v for k, v in r.items() if k != "correct"} for s, r in rows.items()}
        summary["arms"][arm] = {"n": len(rows), "per_seed": table}
        print(f"{arm} (n={len(rows)})")
        for seed, r in table.items():
            print(
                f"  seed {seed}: dev {100 * r['validation']:.2f} test {100 * r['test']:.2f}  steps {r['steps']}  "
                f"train {r['train_seconds']:.0f} s, labelling {r['labelling_seconds']:.0f} s, all {r['seconds']:.0f} s"
            )
        if rows:
            dev, test = ([r[split] for r in rows.values()] for split in ("validation", "test"))
            print(f"  dev {mean_sd(dev)}  test {mean_sd(test)}")
        if arm != first:
            versus = compare(arms[first], rows)
            summary["against_" + first][arm] = versus
            if versus["seeds"]:
                for split in ("validation", "test"):
                    v = versus[split]
                    points, p = v["mean_difference_points"], format_p(v["paired_t_p"])
                    print(f"  vs {first} {split}: {points:+.2f} points, paired t p {p}")
                print(f"  vs {first} test: paired bootstrap p {format_p(versus['test']['paired_bootstrap_p'])}")
    out = args.out or args.runs / "summary.json"
    out.write_text(json.dumps(summary, indent=2, default=float) + "\n")
    print(f"summary {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
