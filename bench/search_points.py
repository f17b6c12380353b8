"""search-then-train.md's points side by side: `search`'s default (select) flow against adaptive embedding at
2%, 4% and 318,420 embedding parameters and at equal int4 Flash, on each offline task, from the committed
summaries (`nas_vs_adaptive_select_<task>.json`, `equal_flash_select_<task>.json`), every mean and p-value
recomputed from the runs' per-example bits as the per-point tables are. Read by bench/report.py (the table)
and bench/report_figures.py (the counts the page's sentences quote); not a script."""

from __future__ import annotations

from typing import Callable

import numpy as np

import compare_nas_runs
import equal_flash
import nas_vs_adaptive
from bench_stats import format_p

TASKS = (("rotten tomatoes", "rotten_tomatoes"), ("party speeches", "party_speeches"))
BUDGETS = (("2%", "2pct"), ("4%", "4pct"), ("318,420", "318420"))
EQUAL_FLASH = "equal Flash int4"
PAIR = ("nas-int4", "adaptive-int4")
SPLITS = ("validation", "test")


def points(load: Callable[[str], dict]) -> list[dict]:
    """One record per (task, point): NAS's and adaptive embedding's method summaries and their comparison.
    `load(file name)` gives a committed summary."""
    rows = []
    for task_name, task in TASKS:
        budgets = {b["label"]: b for b in load(f"nas_vs_adaptive_select_{task}.json")["budgets"]}
        for point, label in BUDGETS:
            budget = nas_vs_adaptive.recomputed(budgets[label])
            methods = budget["methods"]
            rows.append(_record(task_name, point, methods["nas"], methods["adaptive"], budget["comparison"]))
        flash = equal_flash.summarize(load(f"equal_flash_select_{task}.json")["runs"])
        nas, adaptive = (flash["methods"][m] for m in PAIR)
        rows.append(_record(task_name, EQUAL_FLASH, nas, adaptive, flash["comparisons"][" vs ".join(PAIR)]))
    return rows


def flow_rows(load: Callable[[str], dict]) -> list[tuple[str, dict, dict]]:
    """(point, select's NAS runs, continue's NAS runs) for the select-against-continue table: the points where
    both flows ran from the same student (compare_nas_runs.flows_table pairs them by seed)."""

    def runs(name: str, method: str, label: str) -> dict:
        return {k: run for k, run in compare_nas_runs.runs_of(load(name), method).items() if k[0] == label}

    select_rt, select_ps = (f"nas_vs_adaptive_select_{task}.json" for task in ("rotten_tomatoes", "party_speeches"))
    rows = [
        (f"rotten tomatoes {point}", runs(select_rt, "nas", label), runs("nas_vs_adaptive.json", "nas", label))
        for point, label in BUDGETS
    ]
    continue_ps = runs("nas_vs_adaptive_continue_party_speeches.json", "nas", "4pct")
    rows.append(("party speeches 4%", runs(select_ps, "nas", "4pct"), continue_ps))
    select_int4, continue_int4 = (
        runs(name, PAIR[0], "equal Flash") for name in ("equal_flash_select_rotten_tomatoes.json", "equal_flash.json")
    )
    rows.append((f"rotten tomatoes {EQUAL_FLASH}", select_int4, continue_int4))
    return rows


def flows_mean_difference(rows: list[tuple[str, dict, dict]]) -> str:
    """select − continue, dev / test, averaged over the points (each point's paired runs' difference)."""
    means = [
        np.mean([compare_nas_runs.difference(*compare_nas_runs.paired(a, b), s) for _, a, b in rows]) for s in SPLITS
    ]
    return " / ".join(f"{m:+.2f}" for m in means).replace("-", "−")


def _record(task: str, point: str, nas: dict, adaptive: dict, comparison: dict) -> dict:
    return {"task": task, "point": point, "nas": nas, "adaptive": adaptive, "comparison": comparison}


def _accuracy(method: dict) -> str:
    return " / ".join(f"{method[s]['mean']:.2f} ± {method[s]['sd']:.2f}" for s in SPLITS)


def searched_written(method: dict) -> int:
    """NAS runs whose written model is not adaptive embedding's candidate."""
    return sum(n for name, n in method["chosen"].items() if name != "adaptive")


def run_seconds(method: dict) -> float:
    """The method's runs' wall seconds, summed."""
    return method["seconds"]["mean"] * len(method["seeds"])


def markdown_table(rows: list[dict]) -> str:
    header = [
        "task, point", "seeds", "NAS dev / test", "adaptive dev / test", "NAS − adaptive dev / test",
        "bootstrap p dev / test (seeds × examples)", "searched architecture written", "smallest McNemar p (test)",
        "extra steps", "search stages s (mean)", "run s, NAS / adaptive (mean)", "runs' s summed",
    ]  # fmt: skip
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        nas, adaptive, comparison = row["nas"], row["adaptive"], row["comparison"]
        d, p = comparison["difference"], comparison["bootstrap_p"]
        cells = [f"{row['task']} {row['point']}", str(len(comparison["seeds"])), _accuracy(nas), _accuracy(adaptive)]
        cells += [f"{d['validation']:+.2f} / {d['test']:+.2f}", f"{format_p(p['validation'])} / {format_p(p['test'])}"]
        cells += [
            f"{searched_written(nas)} of {len(nas['seeds'])}",
            format_p(min(comparison["mcnemar_test_p"].values())),
        ]
        cells += [",".join(map(str, nas["extra_steps"])), f"{nas['search_seconds']['mean']:.0f}"]
        cells += [f"{nas['seconds']['mean']:.0f} / {adaptive['seconds']['mean']:.0f}"]
        cells.append(f"{run_seconds(nas) + run_seconds(adaptive):,.0f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# ---- the counts the page's sentences quote ----


def _of(count: int, total: int) -> str:
    return f"{count} of {total}"


def dev_not_below(rows: list[dict]) -> str:
    return _of(sum(r["comparison"]["difference"]["validation"] >= 0 for r in rows), len(rows))


def test_sides(rows: list[dict]) -> str:
    """ "ahead at A, level at L and behind at B" of the points, NAS − adaptive on test in the mean."""
    tests = [r["comparison"]["difference"]["test"] for r in rows]
    ahead, level = sum(t > 0 for t in tests), sum(t == 0 for t in tests)
    return f"ahead at {ahead}, level at {level} and behind at {len(tests) - ahead - level}"


def significant(rows: list[dict], split: str) -> str:
    """The points where NAS − adaptive has bootstrap p < 0.05 on `split`, of all."""
    return _of(sum(r["comparison"]["bootstrap_p"][split] < 0.05 for r in rows), len(rows))


def written(rows: list[dict]) -> str:
    """NAS runs, over every point, that wrote an architecture other than adaptive embedding's."""
    return _of(sum(searched_written(r["nas"]) for r in rows), sum(len(r["nas"]["seeds"]) for r in rows))


def mcnemar_below(rows: list[dict]) -> str:
    """Per-seed McNemar tests on test below 0.05, of all, at the points where NAS and adaptive can differ."""
    ps = [p for r in rows if r["point"] != "318,420" for p in r["comparison"]["mcnemar_test_p"].values()]
    return _of(sum(p < 0.05 for p in ps), len(ps))


def cost_ratio(rows: list[dict]) -> str:
    """The span over the points of a NAS run's mean wall seconds over adaptive embedding's, as "1.9-2.9"."""
    ratios = [r["nas"]["seconds"]["mean"] / r["adaptive"]["seconds"]["mean"] for r in rows]
    return f"{min(ratios):.1f}-{max(ratios):.1f}"


def flash_architecture(summary: dict, method: str, key: str = "ranks") -> str:
    """`method`'s written architectures at equal Flash: their "ranks" or "clusters", each position "a" or
    "min-max" across the seeds."""
    shapes = [a[key] for a in equal_flash.summarize(summary["runs"])["methods"][method]["architectures"]]
    return "/".join(compare_nas_runs.spans(shapes))


# ---- the `projected` candidate at one point (nas_vs_adaptive_projected_candidate_<task>.json) ----


def _nas(runs: list[dict]) -> list[dict]:
    return sorted((r for r in runs if r["method"] == "nas" and "failed" not in r), key=lambda r: r["seed"])


def candidate_wins(runs: list[dict], candidate: str) -> str:
    """ "2 of 5 seeds (seeds 1 and 2, by 1.25 and 0.63 dev points over the best other)"."""
    nas = _nas(runs)
    won = [r for r in nas if r["chosen"] == candidate]
    margins = [
        100 * (r["candidates_dev"][candidate] - max(v for c, v in r["candidates_dev"].items() if c != candidate))
        for r in won
    ]
    text = f"{len(won)} of {len(nas)} seeds"
    if won:
        seeds = " and ".join(", ".join(str(r["seed"]) for r in won).rsplit(", ", 1))
        by = " and ".join(", ".join(f"{m:.2f}" for m in margins).rsplit(", ", 1))
        text += f" (seed{'s' if len(won) > 1 else ''} {seeds}, by {by} dev points over the best other)"
    return text


def without_candidate(runs: list[dict], candidate: str) -> str:
    """ "77.99 dev mean, so `projected` adds +0.38": the written model's dev had `candidate` not been among the
    candidates (the best of the others, which the runs also trained), and what the candidate adds."""
    nas = _nas(runs)
    others = [max(v for c, v in r["candidates_dev"].items() if c != candidate) for r in nas]
    written = [r["candidates_dev"][r["chosen"]] for r in nas]
    gain = 100 * (np.mean(written) - np.mean(others))
    return f"{100 * np.mean(others):.2f} dev mean, so `{candidate}` adds {gain:+.2f}".replace("-", "−")


def candidate_cost(runs: list[dict]) -> str:
    """ "1,918 extra steps, search stages 271 s, a NAS run 677 s mean against adaptive's 63 s (the NAS runs,
    3,386 s in all; the adaptive runs, 317 s)"."""
    nas = _nas(runs)
    adaptive = [r for r in runs if r["method"] == "adaptive" and "failed" not in r]
    steps = ",".join(f"{s:,}" for s in sorted({r["extra_steps"] for r in nas}))
    mean = {name: np.mean([r["seconds"] for r in rows]) for name, rows in (("nas", nas), ("adaptive", adaptive))}
    total = {name: sum(r["seconds"] for r in rows) for name, rows in (("nas", nas), ("adaptive", adaptive))}
    return (
        f"{steps} extra steps, search stages {np.mean([r['search_seconds'] for r in nas]):.0f} s, a NAS run "
        f"{mean['nas']:.0f} s mean against adaptive's {mean['adaptive']:.0f} s (the NAS runs, {total['nas']:,.0f} s "
        f"in all; the adaptive runs, {total['adaptive']:,.0f} s)"
    )
