"""Exact two-stage NAS vs adaptive embedding at equal embedding parameters, over seeds. A script, not a test.

Model: a distilled BERT-tiny (`distill --out`). Each seed runs two `search`es with the same total number of
training steps: NAS = 2 search stages of --epochs + --finetune-epochs of KD fine-tune; adaptive embedding
(Baevski & Auli cut-offs, ranks d/4^i: 318,420 parameters for BERT-tiny, the NAS budget) fine-tunes for
all of them (`search`'s equal-steps default). Both fine-tunes: 6% warm-up, linear decay.

Reported: mean ± sd over seeds of dev and test accuracy (selection on dev, accuracy on test); per seed, an
exact McNemar test of NAS vs adaptive on the per-example test predictions; over all seeds, a paired
bootstrap over test (and dev) examples of the seed-averaged accuracy difference; for NAS, each stage's dev
accuracy as trained, as the soft relaxation and as written (hard). OUT/summary.json keeps everything,
per-example predictions included.

Resumable: each run lives in OUT/<method>-seed<k>/; a finished one (metrics.json) is read back, an
interrupted one continues with `search --resume`. Rerun the same command to finish.

    python bench/nas_vs_adaptive.py --student runs/student-tiny --out runs/nas-vs-adaptive --jobs 2
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

BUDGET = 318_420  # adaptive embedding's size for BERT-tiny (1000/4000/10000 cut-offs, ranks 128/32/8/2)
METHODS = {
    "nas": ["--mode", "two-stage", "--target-embedding-params", str(BUDGET)],
    "adaptive": ["--mode", "adaptive"],
}


def run_one(method: str, seed: int, opts, log) -> dict:
    out = opts.out / f"{method}-seed{seed}"
    metrics_file = out / "metrics.json"
    if not metrics_file.is_file():
        command = [sys.executable, "-m", "tflm_mcubert", "search", "--checkpoint", str(opts.student)]
        command += ["--task", opts.task, "--out", str(out), "--resume", "--quiet", "--seed", str(seed)]
        command += ["--epochs", str(opts.epochs), "--finetune-epochs", str(opts.finetune_epochs)]
        command += [*METHODS[method], *opts.search_args]
        log(f"[{method} seed {seed}] {' '.join(command[2:])}")
        began = time.monotonic()
        done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
        if done.returncode != 0:
            log(f"[{method} seed {seed}] failed ({done.returncode}): {done.stderr.strip().splitlines()[-3:]}")
            return {"method": method, "seed": seed, "failed": done.stderr.strip().splitlines()[-3:]}
        log(f"[{method} seed {seed}] done in {time.monotonic() - began:.0f} s")
    metrics = json.loads(metrics_file.read_text())
    return {
        "method": method,
        "seed": seed,
        "embedding_params": metrics["embedding_params"],
        "validation_accuracy": metrics["validation_accuracy"],
        "test_accuracy": metrics["test_accuracy"],
        "steps": sum(stage["steps"] for stage in metrics["stages"]),
        "seconds": metrics["seconds"],
        "stages": {k: v for k, v in metrics["details"].items() if k in ("stage1", "stage2")},
        "predictions": metrics["predictions"],
        "labels": metrics["labels"],
        "uncompressed": {s: metrics[f"uncompressed_{s}_accuracy"] for s in ("validation", "test")},
    }


def mcnemar(a_correct: np.ndarray, b_correct: np.ndarray) -> float:
    """Exact two-sided McNemar p-value (binomial on the discordant pairs)."""
    b, c = int(np.sum(a_correct & ~b_correct)), int(np.sum(~a_correct & b_correct))
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(b, c) + 1)) / 2.0**n
    return min(1.0, 2.0 * tail)


def paired_bootstrap(a_correct: np.ndarray, b_correct: np.ndarray, samples: int = 10_000, seed: int = 0) -> float:
    """Two-sided p-value of mean(a) - mean(b) = 0: `*_correct` are [seeds, examples]; examples resampled
    (the same ones for both methods), accuracy averaged over seeds."""
    diff = (a_correct.astype(np.float64) - b_correct.astype(np.float64)).mean(axis=0)  # per example
    rng = np.random.default_rng(seed)
    means = np.array([diff[rng.integers(0, diff.size, diff.size)].mean() for _ in range(samples)])
    return float(min(1.0, 2.0 * min(np.mean(means <= 0.0), np.mean(means >= 0.0))))


def mean_sd(values) -> str:
    values = 100 * np.asarray(values, np.float64)
    sd = values.std(ddof=1) if values.size > 1 else 0.0
    return f"{values.mean():.2f} ± {sd:.2f}"


def compare(runs: dict[str, list[dict]]) -> dict:
    nas, adaptive = runs["nas"], runs["adaptive"]
    paired = sorted({r["seed"] for r in nas} & {r["seed"] for r in adaptive})
    by_seed = {m: {r["seed"]: r for r in runs[m]} for m in runs}
    result = {"seeds": paired, "mcnemar_test_p": {}, "bootstrap_p": {}}
    correct = {}
    for split in ("validation", "test"):
        for method in ("nas", "adaptive"):
            correct[method, split] = np.array(
                [
                    np.asarray(by_seed[method][s]["predictions"][split])
                    == np.asarray(by_seed[method][s]["labels"][split])
                    for s in paired
                ]
            )
        if paired:
            result["bootstrap_p"][split] = paired_bootstrap(correct["nas", split], correct["adaptive", split])
    for k, s in enumerate(paired):
        result["mcnemar_test_p"][s] = mcnemar(correct["nas", "test"][k], correct["adaptive", "test"][k])
    return result


def print_table(runs: dict[str, list[dict]], comparison: dict, wall: float) -> None:
    print(f"{'method':10s} {'seeds':>5s} {'emb params':>10s} {'steps':>6s} {'dev %':>14s} {'test %':>14s}")
    for method, rows in runs.items():
        if rows:
            print(
                f"{method:10s} {len(rows):>5d} {rows[0]['embedding_params']:>10,d} {rows[0]['steps']:>6d} "
                f"{mean_sd([r['validation_accuracy'] for r in rows]):>14s} "
                f"{mean_sd([r['test_accuracy'] for r in rows]):>14s}"
            )
    for stage in ("stage1", "stage2"):
        rows = [r["stages"][stage] for r in runs["nas"] if "hard_dev" in r["stages"].get(stage, {})]
        if rows:
            cells = "  ".join(
                f"{key} {mean_sd([x[key] for x in rows])}" for key in ("trained_dev", "soft_dev", "hard_dev")
            )
            gap = mean_sd([x["trained_dev"] - x["hard_dev"] for x in rows])
            print(f"NAS {stage}: {cells}  trained-hard {gap}  ranks {[x['ranks'] for x in rows]}")
    print(f"paired bootstrap p (NAS vs adaptive, seed-averaged): {comparison['bootstrap_p']}")
    print(f"McNemar p on test, per seed: {comparison['mcnemar_test_p']}")
    summed = sum(r["seconds"] for rows in runs.values() for r in rows)
    print(f"wall time {wall:.0f} s (this invocation); run seconds summed: {summed:.0f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--student", type=Path, required=True, help="distilled classifier checkpoint (distill --out)")
    parser.add_argument("--task", default="rotten_tomatoes")
    parser.add_argument("--out", type=Path, default=Path("/work/runs/nas-vs-adaptive"))
    parser.add_argument("--seeds", default="0,1,2,3,4")
    parser.add_argument("--epochs", type=float, default=1.0, help="per NAS search stage (default 1)")
    parser.add_argument("--finetune-epochs", type=float, default=1.0, help="default 1")
    parser.add_argument("--jobs", type=int, default=1, help="searches run at once (default 1)")
    parser.add_argument(
        "--methods",
        default="nas,adaptive",
        help="run only these (a finished run of the other, e.g. linked from another --out, is still read back)",
    )
    opts, search_args = parser.parse_known_args()
    opts.search_args = search_args  # anything else goes to every `search` (e.g. --max-seq-len 64)
    opts.out.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()

    def log(message):
        print(f"{time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)

    seeds = [int(s) for s in opts.seeds.split(",")]
    wanted = opts.methods.split(",")
    jobs = [
        (method, seed)
        for seed in seeds
        for method in METHODS
        if method in wanted or (opts.out / f"{method}-seed{seed}" / "metrics.json").is_file()
    ]
    with concurrent.futures.ThreadPoolExecutor(max(1, opts.jobs)) as pool:
        results = list(pool.map(lambda job: run_one(*job, opts, log), jobs))
    runs = {m: [r for r in results if r["method"] == m and "failed" not in r] for m in METHODS}
    comparison = compare(runs)
    wall = time.monotonic() - began
    summary = {
        "task": opts.task,
        "student": str(opts.student),
        "budget": BUDGET,
        "epochs_per_search_stage": opts.epochs,
        "finetune_epochs": opts.finetune_epochs,
        "search_args": opts.search_args,
        "comparison": comparison,
        "runs": results,
        "wall_seconds_this_invocation": round(wall, 1),
    }
    (opts.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print_table(runs, comparison, wall)
    print(f"wrote {opts.out / 'summary.json'}")
    return 0 if all("failed" not in r for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
