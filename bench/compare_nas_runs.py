"""NAS in one `nas_vs_adaptive.py` summary against NAS in another, paired by budget and seed (e.g. `search
--final-training select` against the older `continue` runs in bench/results/nas_vs_adaptive.json, made from
the same student and seeds). A script, not a test.

Prints per budget: the seeds both have, mean ± sd dev and test of each, the paired difference (A − B) and
its paired bootstrap p over seeds and examples (`bench_stats.py`). `--method-b adaptive` compares A's NAS with
B's adaptive embedding (e.g. NAS run with `--candidates searched,adaptive,projected` against the recorded
adaptive runs of the same seeds).

    python bench/compare_nas_runs.py runs/bench/rotten_tomatoes/summary.json bench/results/nas_vs_adaptive.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_stats import format_p, mean_sd, paired_bootstrap  # noqa: E402
from results_bits import correct  # noqa: E402

SPLITS = ("validation", "test")


def nas_runs(summary_file: Path, method: str) -> dict[tuple[str, int], dict]:
    """{(budget label, seed): run} of `method`'s finished runs in a nas_vs_adaptive summary.json."""
    summary = json.loads(summary_file.read_text())
    return {
        (budget["label"], run["seed"]): run
        for budget in summary["budgets"]
        for run in budget["runs"]
        if run["method"] == method and "failed" not in run
    }


def same_student(a: list[dict], b: list[dict]) -> None:
    """Refuse to pair runs made from different students: each run records its student's uncompressed dev and
    test accuracy (`uncompressed`), and a pair whose two runs both record one must agree."""
    for x, y in zip(a, b):
        if "uncompressed" in x and "uncompressed" in y and x["uncompressed"] != y["uncompressed"]:
            raise SystemExit(
                f"seed {x.get('seed')}: the runs are of different students (uncompressed dev / test "
                f"{_uncompressed(x)} against {_uncompressed(y)}): not paired"
            )


def _uncompressed(run: dict) -> str:
    return " / ".join(f"{100 * run['uncompressed'][s]:.2f}" for s in SPLITS)


def compare_budget(a: list[dict], b: list[dict]) -> list[str]:
    """The table cells of one budget: seeds, A and B dev/test, A − B dev/test, bootstrap p dev/test (the runs
    paired, each pair of the same student)."""
    same_student(a, b)
    cells = [str(len(a))]
    cells += [" / ".join(mean_sd([r[f"{s}_accuracy"] for r in runs]) for s in SPLITS) for runs in (a, b)]
    differences, p_values = [], []
    for split in SPLITS:
        a_correct, b_correct = (np.array([correct(r, split) for r in runs]) for runs in (a, b))
        differences.append(f"{100 * (a_correct.mean() - b_correct.mean()):+.2f}")
        p_values.append(format_p(paired_bootstrap(a_correct, b_correct)))
    return cells + [" / ".join(differences), " / ".join(p_values)]


def difference(a: list[dict], b: list[dict], split: str) -> float:
    """A's accuracy − B's on `split`, in points, over the paired runs' examples."""
    a_correct, b_correct = (np.array([correct(r, split) for r in runs]) for runs in (a, b))
    return 100 * (a_correct.mean() - b_correct.mean())


def paired(a: dict, b: dict) -> tuple[list[dict], list[dict]]:
    """The runs of the (budget, seed)s both {key: run} have, in the same order."""
    shared = sorted(set(a) & set(b))
    return [a[k] for k in shared], [b[k] for k in shared]


def runs_of(summary: dict, method: str) -> dict[tuple[str, int], dict]:
    """{(budget label, seed): run} of `method`'s finished runs in a nas_vs_adaptive or equal_flash summary (an
    equal_flash summary's runs under the label "equal Flash")."""
    budgets = summary.get("budgets") or [{"label": "equal Flash", "runs": summary["runs"]}]
    return {
        (budget["label"], run["seed"]): run
        for budget in budgets
        for run in budget["runs"]
        if run["method"] == method and "failed" not in run
    }


def flows_table(
    rows: list[tuple[str, dict, dict]], a: str = "select", b: str = "continue", first: str = "task, budget"
) -> str:
    """One row per (name, A's runs, B's runs), paired on the (budget, seed)s both have: by default `search`'s
    default flow (A) against the earlier `continue` flow (B), as docs/benchmarks/search-then-train.md shows it."""
    header = [first, "seeds", f"{a} dev / test", f"{b} dev / test", f"{a} − {b} dev / test"]
    header.append("bootstrap p dev / test (seeds × examples)")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, a, b in rows:
        lines.append(f"| {name} | " + " | ".join(compare_budget(*paired(a, b))) + " |")
    return "\n".join(lines)


def spans(lists: list[list[int]]) -> list[str]:
    """Each position's value across runs: "a" when every run has it, else "min-max"."""
    return [f"{min(v):,}" if min(v) == max(v) else f"{min(v):,}-{max(v):,}" for v in zip(*lists)]


def stages_table(summary: dict) -> str:
    """Per budget and stage of the exact search, NAS dev accuracy (mean ± sd over seeds) of the model as
    trained, as the soft relaxation of the same weights and as written, with each run's clusters and ranks
    (compression.md's per-stage table, from a nas_vs_adaptive summary's runs)."""
    out = ["| budget | stage | seeds | as trained | soft relaxation | as written | clusters (dense first) | ranks |"]
    out.append("|---|---|---|---|---|---|---|---|")
    for budget in sorted(summary["budgets"], key=lambda b: b["fraction_of_table"]):
        runs = [r for r in budget["runs"] if r["method"] == "nas" and "failed" not in r]
        label = f"{100 * budget['fraction_of_table']:.2f}%".replace(".00%", "%")
        for stage, name in (("stage1", "1 (clustering)"), ("stage2", "2 (ranks)")):
            rows = [r["stages"][stage] for r in runs if "hard_dev" in r["stages"].get(stage, {})]
            if not rows:
                continue
            cells = [mean_sd([x[key] for x in rows]) for key in ("trained_dev", "soft_dev", "hard_dev")]
            clusters = " / ".join(spans([x["clusters"] for x in rows]))
            if stage == "stage2" and all(
                r["stages"][stage]["clusters"] == r["stages"]["stage1"]["clusters"] for r in runs
            ):
                clusters = "as stage 1"
            ranks = ", ".join(spans([x["ranks"] for x in rows]))
            out.append(f"| {label} | {name} | {len(rows)} | " + " | ".join(cells) + f" | {clusters} | {ranks} |")
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a", type=Path, help="summary.json of nas_vs_adaptive.py (A)")
    parser.add_argument("b", type=Path, help="summary.json of nas_vs_adaptive.py (B)")
    parser.add_argument("--method", default="nas", help="the method compared (default nas)")
    parser.add_argument("--method-b", help="B's method, when not --method's (e.g. adaptive)")
    opts = parser.parse_args()
    a, b = nas_runs(opts.a, opts.method), nas_runs(opts.b, opts.method_b or opts.method)
    shared = sorted(set(a) & set(b))
    if not shared:
        raise SystemExit(
            f"{opts.a} and {opts.b} share no (budget, seed) of {opts.method}/{opts.method_b or opts.method}"
        )
    print("| budget | seeds | A dev / test | B dev / test | A − B dev / test | bootstrap p dev / test |")
    print("|---|---|---|---|---|---|")
    for label in sorted({budget for budget, _ in shared}):
        keys = [k for k in shared if k[0] == label]
        print(f"| {label} | " + " | ".join(compare_budget([a[k] for k in keys], [b[k] for k in keys])) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
