"""compression.md's sentences, from the `search --final-training continue` summaries: the default search
(`nas_vs_adaptive.json`) and its variants (`_projected`, `_stage1_start_budget`, `_lr_whole_run`). Every
accuracy, difference and p is recomputed from the runs' per-example bits, as the page's tables are; what
the search did (tokens moved, ranks cut, dev lost between stages) is read from each NAS run's stage
records. Read by bench/report_figures.py; not a script."""

from __future__ import annotations

from typing import Callable

import numpy as np

import compare_nas_runs
import equal_flash
import nas_vs_adaptive
from bench_stats import format_p, p_words

Load = Callable[[str], dict]

DEFAULT, PROJECTED = "nas_vs_adaptive", "nas_vs_adaptive_projected"
START_BUDGET, WHOLE_RUN = "nas_vs_adaptive_stage1_start_budget", "nas_vs_adaptive_lr_whole_run"
ARCH_LR = "nas_vs_adaptive_arch_lr_1e-2"
SETTINGS = {DEFAULT: "the default search", PROJECTED: "`--stage1-start budget --budget-control projected`"}
SHORT = {DEFAULT: "the default search", PROJECTED: "`projected`"}
SPLITS = ("validation", "test")


_RECOMPUTED: dict[tuple[int, str], tuple[dict, dict]] = {}


def _budget_as_committed(summary: dict, label: str) -> dict:
    return next(b for b in summary["budgets"] if b["label"] == label)


def budget(summary: dict, label: str) -> dict:
    """One budget of a summary, made again from its runs (once per summary object: the bootstrap is slow)."""
    key = (id(summary), label)
    if key not in _RECOMPUTED or _RECOMPUTED[key][0] is not summary:
        _RECOMPUTED[key] = (summary, nas_vs_adaptive.recomputed(_budget_as_committed(summary, label)))
    return _RECOMPUTED[key][1]


def nas_runs(summary: dict, label: str) -> list[dict]:
    runs = _budget_as_committed(summary, label)["runs"]
    return [r for r in runs if r["method"] == "nas" and "failed" not in r]


def signed(value: float, digits: int = 2) -> str:
    return f"{value:+.{digits}f}".replace("-", "−")


def accuracy(method: dict) -> str:
    """ "77.22 ± 0.75 dev / 73.74 ± 0.58 test"."""
    dev, test = (f"{method[s]['mean']:.2f} ± {method[s]['sd']:.2f}" for s in SPLITS)
    return f"{dev} dev / {test} test"


def difference(comparison: dict) -> str:
    """ "+0.05 dev (bootstrap p = 0.94), +1.07 test (p = 0.25; McNemar per seed 0.35, ...)"."""
    d, p = comparison["difference"], comparison["bootstrap_p"]
    mcnemar = ", ".join(format_p(v) for _, v in sorted(comparison["mcnemar_test_p"].items(), key=lambda kv: int(kv[0])))
    return (
        f"{signed(d['validation'])} dev (bootstrap p = {p_words(p['validation'])}), "
        f"{signed(d['test'])} test (p = {p_words(p['test'])}; McNemar per seed {mcnemar})"
    )


def point(summary: dict, label: str) -> str:
    """NAS against adaptive embedding at one budget: both accuracies, then the difference."""
    b = budget(summary, label)
    nas, adaptive = b["methods"]["nas"], b["methods"]["adaptive"]
    return f"{accuracy(nas)} against adaptive embedding's {accuracy(adaptive)}: {difference(b['comparison'])}"


def against(a: dict, b: dict, label: str, b_name: str) -> str:
    """Summary A's NAS runs against summary B's (`b_name`) at one budget, paired by seed: both accuracies, A − B."""
    runs = {"nas": nas_runs(a, label), "adaptive": nas_runs(b, label)}
    compare_nas_runs.same_student(runs["nas"], runs["adaptive"])
    first, second = (nas_vs_adaptive.method_summary(rows) for rows in runs.values())
    return f"{accuracy(first)} against {b_name}'s {accuracy(second)}: {difference(nas_vs_adaptive.compare(runs))}"


# ---- which search setting dev chooses at a budget (the default or projected) ----


def _nas_dev(load: Load, label: str) -> dict[str, float]:
    """Each setting's NAS dev mean at one budget."""
    return {name: budget(load(name), label)["methods"]["nas"]["validation"]["mean"] for name in SETTINGS}


def _by_dev(load: Load, label: str) -> list[str]:
    """The two settings' summaries, the one with the higher NAS dev mean first."""
    dev = _nas_dev(load, label)
    return sorted(SETTINGS, key=lambda name: -dev[name])


def chosen_on_dev(load: Load, label: str) -> str:
    """ "<setting> (dev a against <other>'s b) scores <point>"."""
    dev = _nas_dev(load, label)
    best, other = sorted(SETTINGS, key=lambda name: -dev[name])
    return (
        f"{SETTINGS[best]} (dev {dev[best]:.2f} against {SETTINGS[other]}'s {dev[other]:.2f}), which scores "
        f"{point(load(best), label)}"
    )


def other_on_dev(load: Load, label: str) -> str:
    """The setting dev did not choose, and its point."""
    other = _by_dev(load, label)[1]
    return f"{SETTINGS[other]} scores {point(load(other), label)}"


def dev_choices(load: Load, labels: list[tuple[str, str]]) -> str:
    """ "projected at 2%, the default search at 4% and 318,420": the setting with the higher dev per budget."""
    parts = [f"{SHORT[_by_dev(load, label)[0]]} at {name}" for name, label in labels]
    return ", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else parts[0]


# ---- what the search did, from the NAS runs' stage records ----


def _stage(runs: list[dict], stage: str, key: str) -> list:
    return [r["stages"][stage][key] for r in runs]


def _span(values: list[int]) -> str:
    """ "a" when every value is a, else "min-max"."""
    return compare_nas_runs.spans([[v] for v in values])[0]


def moved(summary: dict, label: str) -> str:
    """Tokens that left their frequency cluster in Stage 1, across seeds ("653-682")."""
    return _span(_stage(nas_runs(summary, label), "stage1", "moved_from_frequency"))


def stage_clusters(summary: dict, label: str, stage: str = "stage1", position: int | None = None) -> str:
    """A stage's written cluster sizes across seeds ("318-347/3,004-3,012/..."), or one position's."""
    spans = compare_nas_runs.spans(_stage(nas_runs(summary, label), stage, "clusters"))
    return "/".join(spans) if position is None else spans[position]


def stage_ranks(summary: dict, label: str, stage: str = "stage2") -> str:
    return "/".join(compare_nas_runs.spans(_stage(nas_runs(summary, label), stage, "ranks")))


def start_to_written(summary: dict, label: str) -> str:
    """Stage 1's start clustering (sizes) → the mean written one: "293/879/1,758/27,592 → ~224/~2,000/..."."""
    runs = nas_runs(summary, label)
    start = runs[0]["stages"]["stage1"]["start_clusters"]
    written = np.mean(_stage(runs, "stage2", "clusters"), axis=0)
    return "/".join(f"{c:,}" for c in start) + " → " + "/".join(f"~{round(c, -1):,.0f}" for c in written)


def adaptive_clusters(summary: dict, label: str) -> str:
    """Adaptive embedding's cluster sizes at this budget ("1,000/3,000/6,000/20,522")."""
    vocab = sum(nas_runs(summary, label)[0]["architecture"]["clusters"])
    return "/".join(f"{n:,}" for n in np.diff([0, *_budget_as_committed(summary, label)["adaptive"]["cutoffs"], vocab]))


def dense_in_adaptive(summary: dict, label: str) -> str:
    """Adaptive embedding's dense cluster at this budget (its first cut-off)."""
    return f"{budget(summary, label)['adaptive']['cutoffs'][0]:,}"


def stage2_dev_cost(summary: dict, label: str) -> str:
    """Mean dev points lost from Stage 1's written model to Stage 2's, before the fine-tune."""
    runs = nas_runs(summary, label)
    lost = np.subtract(_stage(runs, "stage1", "hard_dev"), _stage(runs, "stage2", "hard_dev"))
    return f"{100 * lost.mean():.1f}"


def unused(summary: dict, labels: list[str]) -> str:
    """Parameters the budget-filling greedy leaves below NAS's target, across budgets and seeds."""
    gaps = [
        budget(summary, label)["nas_target"] - r["embedding_params"]
        for label in labels
        for r in nas_runs(summary, label)
    ]
    return _span(gaps)


def rare_tokens(summary: dict, label: str) -> str:
    return _span(_stage(nas_runs(summary, label), "stage1", "rare_tokens"))


def beta_floor(summary: dict, labels: list[str]) -> str:
    """The lowest β bin any run's Stage 2 reached ("0.8": every β in [0.8, 1]); the histogram has 10 bins."""
    histograms = [h for label in labels for h in _stage(nas_runs(summary, label), "stage2", "beta_histogram")]
    lowest = min(next(k for k, n in enumerate(h) if n) for h in histograms)
    return f"{lowest / len(histograms[0]):.1f}"


def written_as_adaptive(summary: dict, label: str) -> str:
    """ "5 of 5": NAS runs that wrote adaptive embedding's own architecture (its clusters and ranks)."""
    b = budget(summary, label)
    cutoffs, ranks = b["adaptive"]["cutoffs"], b["adaptive"]["ranks"]
    sizes = list(np.diff([0, *cutoffs]))
    runs = nas_runs(summary, label)
    same = sum(r["architecture"]["clusters"][:-1] == sizes and r["architecture"]["ranks"] == ranks for r in runs)
    return f"{same} of {len(runs)}"


def _largest_gap(summary: dict, key: str) -> float:
    """The largest |`key` − as written| dev over every budget, stage and seed, in points."""
    return 100 * max(
        abs(r["stages"][stage][key] - r["stages"][stage]["hard_dev"])
        for b in summary["budgets"]
        for r in nas_runs(summary, b["label"])
        for stage in ("stage1", "stage2")
    )


def soft_gap_max(summary: dict) -> str:
    """How far the soft relaxation's dev ever is from the written model's."""
    return f"{_largest_gap(summary, 'soft_dev'):.1f}"


def trained_gap_max(summary: dict) -> str:
    """How far the model as trained ever is from the model as written (0 by construction)."""
    return f"{_largest_gap(summary, 'trained_dev'):.2f}"


def uncompressed(summary: dict, short: bool = False) -> str:
    """The student's own dev / test, as every run recorded it ("79.06 dev, 74.90 test"; "79.06 / 74.90" short)."""
    scores = {tuple(r["uncompressed"][s] for s in SPLITS) for b in summary["budgets"] for r in b["runs"]}
    if len(scores) != 1:
        raise ValueError(f"the summary's runs name {len(scores)} different students")
    dev, test = next(iter(scores))
    return f"{100 * dev:.2f} / {100 * test:.2f}" if short else f"{100 * dev:.2f} dev, {100 * test:.2f} test"


def run_seconds(summary: dict, labels: list[str] | None = None, method: str = "nas") -> str:
    """`method`'s runs' wall seconds summed, over `labels` (default every budget)."""
    chosen = labels or [b["label"] for b in summary["budgets"]]
    seconds = [r["seconds"] for label in chosen for r in budget(summary, label)["runs"] if r["method"] == method]
    return f"{sum(seconds):,.0f}"


def ranks_kept(summary: dict, labels: list[str]) -> str:
    """ "10 of 10": NAS runs whose Stage 2 wrote the ranks Stage 1 started from."""
    runs = [r for label in labels for r in nas_runs(summary, label)]
    kept = sum(r["stages"]["stage2"]["ranks"] == r["stages"]["stage1"]["start_ranks"] for r in runs)
    return f"{kept} of {len(runs)}"


def equal_flash_pair(summary: dict, a: str, b: str, b_name: str) -> str:
    """An equal_flash summary's method A against B (`b_name`): both accuracies, then A − B."""
    flash = equal_flash.summarize(summary["runs"])
    first, second = flash["methods"][a], flash["methods"][b]
    return f"{accuracy(first)} against {b_name}'s {accuracy(second)}: {difference(flash['comparisons'][f'{a} vs {b}'])}"


# ---- a search that leaves its budget (`--arch-lr 1e-2` at 318,420) ----


def beta_below(summary: dict, label: str, bins: int = 1) -> str:
    """ "340-344 of 384": β values in the lowest `bins` of Stage 2's 10-bin histogram (below 0.1 for 1), per seed."""
    histograms = _stage(nas_runs(summary, label), "stage2", "beta_histogram")
    return f"{_span([sum(h[:bins]) for h in histograms])} of {sum(histograms[0]):,}"


def params_written(summary: dict, label: str) -> str:
    """ "193,720-220,931 parameters (mean 201,225, 63% of adaptive embedding's)"."""
    params = [r["embedding_params"] for r in nas_runs(summary, label)]
    share = np.mean(params) / budget(summary, label)["adaptive"]["params"]
    return f"{_span(params)} parameters (mean {np.mean(params):,.0f}, {100 * share:.0f}% of adaptive embedding's)"


def stage_dev(summary: dict, label: str, stage: str, key: str = "soft_dev") -> str:
    """A stage's mean dev accuracy over the seeds, as `key` measured it (the soft relaxation by default)."""
    return f"{100 * np.mean(_stage(nas_runs(summary, label), stage, key)):.2f}"
