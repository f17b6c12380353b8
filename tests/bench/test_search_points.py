"""search-then-train.md's counts: which points NAS leads, ties or trails, and which differences are significant."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import search_points  # noqa: E402


def _row(point: str, dev: float, test: float, p_test: float, mcnemar: list[float], chosen: dict) -> dict:
    method = {"seeds": list(range(sum(chosen.values()))), "chosen": chosen, "seconds": {"mean": 10.0}}
    comparison = {
        "difference": {"validation": dev, "test": test},
        "bootstrap_p": {"validation": 0.5, "test": p_test},
        "mcnemar_test_p": dict(enumerate(mcnemar)),
    }
    return {"point": point, "nas": method, "adaptive": method | {"chosen": {"adaptive": 5}}, "comparison": comparison}


def test_counts_read_each_point_once():
    rows = [
        _row("2%", 0.4, 0.3, 0.04, [0.01, 0.5], {"adaptive": 1, "searched": 1}),
        _row("318,420", 0.0, 0.0, 1.0, [0.01, 0.01], {"adaptive": 2}),
        _row("equal Flash int4", 1.0, -0.2, 0.6, [0.9, 0.2], {"searched": 1, "projected": 1}),
    ]
    assert search_points.dev_not_below(rows) == "3 of 3"
    assert search_points.test_sides(rows) == "ahead at 1, level at 1 and behind at 1"
    assert search_points.significant(rows, "test") == "1 of 3"
    assert search_points.significant(rows, "validation") == "0 of 3"
    assert search_points.written(rows) == "3 of 6"  # every written model but adaptive embedding's own
    assert search_points.mcnemar_below(rows) == "1 of 4"  # 318,420's runs are the same on both sides: not counted


def _candidate_run(seed: int, chosen: str, dev: dict, seconds: float = 10.0) -> dict:
    run = {"method": "nas", "seed": seed, "chosen": chosen, "candidates_dev": dev, "extra_steps": 1918}
    return run | {"seconds": seconds, "search_seconds": 4.0}


def test_the_projected_candidate_is_read_from_each_seeds_candidates():
    runs = [
        _candidate_run(0, "searched", {"adaptive": 0.70, "searched": 0.75, "projected": 0.72}),
        _candidate_run(1, "projected", {"adaptive": 0.70, "searched": 0.71, "projected": 0.74}, seconds=20.0),
        {"method": "adaptive", "seed": 0, "seconds": 3.0},
        {"method": "nas", "seed": 2, "failed": "boom"},
    ]
    assert (
        search_points.candidate_wins(runs, "projected")
        == "1 of 2 seeds (seed 1, by 3.00 dev points over the best other)"
    )
    assert search_points.candidate_wins(runs, "adaptive") == "0 of 2 seeds"
    assert search_points.without_candidate(runs, "projected") == "73.00 dev mean, so `projected` adds +1.50"
    assert search_points.candidate_cost(runs).startswith("1,918 extra steps, search stages 4 s, a NAS run 15 s mean")
