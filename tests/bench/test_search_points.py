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
