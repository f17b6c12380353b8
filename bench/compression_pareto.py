"""Accuracy vs embedding parameters of MCUBERT's NAS, its ablations and the baselines. A script, not a test.

Model: a distilled BERT-tiny student (the `distill` command's output; the model that deploys, and ~20x
cheaper to search than its MiniLM teacher). Task: rotten tomatoes by default. Every point is one
`search` run (KD from the uncompressed student, 1 epoch per search stage, 1 epoch of KD fine-tune):

- uncompressed: the student itself (reference);
- adaptive embedding (Baevski & Auli cut-offs, ranks d/4^i: 0.318M for BERT-tiny);
- svd and fwsvd at the budget; NAS two-stage at the budget and at two fixed λ;
- the ablations at the budget: one-stage, ratio-then-clustering, clustering-only.

The budget defaults to the paper's BERT-tiny point, 307k parameters (7.9% of the 3.907M dense table),
below adaptive embedding's size. Validation accuracy is the selection metric (the summary compares
methods by the point each would pick on dev); test accuracy is what the table and the plot report.

Resumable: each point lives in OUT/<point>/ with its run checkpoints; a finished point (metrics.json)
is read back, an interrupted one continues with `search --resume`. Rerun the same command to finish.

    python bench/compression_pareto.py --student /work/runs/pipeline/student-tiny --out /work/runs/pareto
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import steps  # noqa: E402
from figures import pyplot, save_figure  # noqa: E402
from steps import log  # noqa: E402

LAMBDAS = (0.01, 0.1)
BUDGET = 307_000


def points(budget: int, lambdas) -> list[tuple[str, list[str]]]:
    """(name, search arguments) of every point, cheapest first."""
    target = ["--target-embedding-params", str(budget)]
    out = [
        ("adaptive", ["--mode", "adaptive"]),
        ("svd", ["--mode", "svd", *target]),
        ("fwsvd", ["--mode", "fwsvd", *target]),
        ("nas-two-stage", ["--mode", "two-stage", *target]),
    ]
    out += [(f"nas-two-stage-lambda-{lam:g}", ["--mode", "two-stage", "--lambda", str(lam)]) for lam in lambdas]
    out += [
        (f"ablation-{mode}", ["--mode", mode, *target])
        for mode in ("one-stage", "ratio-then-clustering", "clustering-only")
    ]
    return out


def run_point(name: str, args: list[str], opts, log) -> dict:
    out = opts.out / name
    metrics_file = out / "metrics.json"
    if not metrics_file.is_file():
        command = [
            sys.executable,
            "-m",
            "tflm_mcubert",
            "search",
            "--checkpoint",
            str(opts.student),
            "--task",
            opts.task,
            "--out",
            str(out),
            "--resume",
            "--quiet",
            "--seed",
            str(opts.seed),
            *args,
            *opts.search_args,
        ]
        log(f"[{name}] {' '.join(command[2:])}")
        began = time.monotonic()
        done = subprocess.run(command, capture_output=True, text=True, env=steps.package_env())
        if done.returncode != 0:
            log(f"[{name}] failed ({done.returncode}): {done.stderr.strip().splitlines()[-1:]}")
            return {"name": name, "failed": done.stderr.strip().splitlines()[-1:]}
        log(f"[{name}] done in {time.monotonic() - began:.0f} s")
    metrics = json.loads(metrics_file.read_text())
    return {
        "name": name,
        "mode": metrics["mode"],
        "embedding_params": metrics["embedding_params"],
        "embedding_fraction": metrics["embedding_fraction"],
        "validation_accuracy": metrics["validation_accuracy"],
        "test_accuracy": metrics["test_accuracy"],
        "seconds": metrics["seconds"],
        "ranks": metrics["details"].get("stage2", metrics["details"].get("joint", {})).get("ranks"),
        "uncompressed": {k: metrics[f"uncompressed_{k}"] for k in ("validation_accuracy", "test_accuracy")},
        "dense_embedding_params": metrics["dense_embedding_params"],
    }


def plot(results: list[dict], reference: dict, path: Path) -> None:
    plt = pyplot()
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(7, 4.5))
    styles = {
        "nas": ("tab:red", "o"),
        "ablation": ("tab:orange", "s"),
        "adaptive": ("tab:blue", "^"),
        "svd": ("tab:gray", "v"),
        "fwsvd": ("tab:green", "D"),
    }
    for point in results:
        family = point["name"].split("-")[0]
        color, marker = styles.get(family, ("black", "x"))
        x, y = point["embedding_params"] / 1e6, 100 * point["test_accuracy"]
        ax.scatter(x, y, color=color, marker=marker, s=50)
        ax.annotate(
            point["name"].replace("nas-two-stage", "NAS").replace("ablation-", ""),
            (x, y),
            fontsize=7,
            xytext=(4, 3),
            textcoords="offset points",
        )
    ax.axhline(
        100 * reference["test_accuracy"],
        color="black",
        linestyle="--",
        linewidth=1,
        label=f"uncompressed ({reference['dense_embedding_params'] / 1e6:.2f}M emb. params)",
    )
    ax.set_xlabel("embedding parameters (M)")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title("Embedding compression of a distilled BERT-tiny (rotten tomatoes)")
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(alpha=0.3)
    save_figure(plt, fig, path, dpi=150)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Any other option goes to every `search` run (e.g. --hidden-kd 1): "
        "see python -m tflm_mcubert search --help.",
    )
    parser.add_argument("--student", type=Path, required=True, help="distilled classifier checkpoint (distill --out)")
    parser.add_argument("--task", default="rotten_tomatoes")
    parser.add_argument("--out", type=Path, default=Path("/work/runs/pareto"))
    parser.add_argument("--budget", type=int, default=BUDGET, help=f"embedding parameters (default {BUDGET})")
    parser.add_argument("--lambdas", default=",".join(f"{lam:g}" for lam in LAMBDAS), help="two fixed λ for NAS")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", help="comma-separated point names to run (default: all)")
    opts, search_args = parser.parse_known_args()
    opts.search_args = search_args  # anything else goes to every `search` (e.g. --hidden-kd 1)
    opts.out.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()

    chosen = points(opts.budget, [float(v) for v in opts.lambdas.split(",")])
    if opts.only:
        wanted = set(opts.only.split(","))
        chosen = [p for p in chosen if p[0] in wanted]
    results = [run_point(name, args, opts, log) for name, args in chosen]
    finished = [r for r in results if "failed" not in r]
    if not finished:
        log("no point finished")
        return 1
    reference = {**finished[0]["uncompressed"], "dense_embedding_params": finished[0]["dense_embedding_params"]}
    summary = {
        "task": opts.task,
        "student": str(opts.student),
        "budget": opts.budget,
        "reference": reference,
        "points": results,
        "seconds": round(time.monotonic() - began, 1),
    }
    by_dev = {}  # the point each method would pick on dev
    for r in finished:
        family = "nas-two-stage" if r["name"].startswith("nas-two-stage") else r["name"]
        if family not in by_dev or r["validation_accuracy"] > by_dev[family]["validation_accuracy"]:
            by_dev[family] = r
    summary["selected_on_dev"] = {k: v["name"] for k, v in by_dev.items()}
    (opts.out / "pareto.json").write_text(json.dumps(summary, indent=2) + "\n")
    plot(finished, reference, opts.out / "pareto.png")

    print(f"{'point':36s} {'emb params':>10s} {'% dense':>8s} {'dev acc':>8s} {'test acc':>8s} {'time s':>7s}")
    print(
        f"{'uncompressed student':36s} {reference['dense_embedding_params']:>10,d} {100.0:>8.2f} "
        f"{100 * reference['validation_accuracy']:>8.2f} {100 * reference['test_accuracy']:>8.2f} {'':>7s}"
    )
    for r in results:
        if "failed" in r:
            print(f"{r['name']:36s} failed: {r['failed']}")
            continue
        print(
            f"{r['name']:36s} {r['embedding_params']:>10,d} {100 * r['embedding_fraction']:>8.2f} "
            f"{100 * r['validation_accuracy']:>8.2f} {100 * r['test_accuracy']:>8.2f} {r['seconds']:>7.0f}"
        )
    print(f"selected on dev: {summary['selected_on_dev']}")
    print(
        f"wrote {opts.out / 'pareto.json'} and {opts.out / 'pareto.png'}; took {summary['seconds']:.0f} s "
        f"(this invocation; finished points are read back)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
