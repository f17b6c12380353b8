"""compression.md's sentences: each point, the setting dev chooses, and what the search did, read from a summary's
runs (their per-example bits and stage records), never from its stored means."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import compression_points as cp  # noqa: E402
from results_bits import pack  # noqa: E402

EXAMPLES = 40
ADAPTIVE = {"cutoffs": [10, 30, 60], "ranks": [8, 4, 1], "params": 1000, "bytes": 1100}


def _bits(right: int, offset: int = 0) -> str:
    return pack(np.roll(np.arange(EXAMPLES) < right, offset))


def _run(method: str, seed: int, dev: int, test: int, *, moved: int = 0, clusters=(10, 20, 30, 40)) -> dict:
    stage = {"clusters": list(clusters), "ranks": [8, 4, 1], "trained_dev": 0.5, "hard_dev": 0.5}
    stages = {
        "stage1": stage | {"soft_dev": 0.45, "moved_from_frequency": moved, "rare_tokens": 7, "start_ranks": [8, 4, 1]},
        "stage2": stage
        | {"soft_dev": 0.52, "hard_dev": 0.48, "trained_dev": 0.48, "beta_histogram": [0] * 7 + [1, 3, 4]},
    }
    return {
        "method": method, "seed": seed, "embedding_params": 990 - seed, "embedding_bytes": 1100, "steps": 10,
        "seconds": 2.0, "validation_accuracy": dev / EXAMPLES, "test_accuracy": test / EXAMPLES,
        "architecture": {"clusters": list(clusters), "ranks": [8, 4, 1]},
        "stages": stages if method == "nas" else {},
        "uncompressed": {"validation": 0.9, "test": 0.85},
        "correct": {"validation": _bits(dev, seed), "test": _bits(test, seed)},
    }  # fmt: skip


def _summary(nas_dev: int, nas_test: int, **stage) -> dict:
    runs = [_run("nas", s, nas_dev, nas_test, **stage) for s in range(3)]
    runs += [_run("adaptive", s, 20, 20) for s in range(3)]
    return {"budgets": [{"label": "2pct", "nas_target": 1000, "adaptive": ADAPTIVE, "runs": runs}]}


def test_a_point_is_recomputed_from_the_bits():
    text = cp.point(_summary(30, 24), "2pct")
    assert text.startswith("75.00 ± 0.00 dev / 60.00 ± 0.00 test against adaptive embedding's 50.00 ± 0.00 dev")
    assert "+25.00 dev (bootstrap p = " in text and "+10.00 test (p = " in text
    assert text.count(",") == 2 + 1  # McNemar per seed: three seeds, and the comma after dev's p


def test_dev_chooses_the_setting_and_names_the_other():
    summaries = {cp.DEFAULT: _summary(22, 30), cp.PROJECTED: _summary(26, 21)}
    chosen = cp.chosen_on_dev(summaries.__getitem__, "2pct")
    assert chosen.startswith("`--stage1-start budget --budget-control projected` (dev 65.00 against the default")
    assert cp.other_on_dev(summaries.__getitem__, "2pct").startswith("the default search scores 55.00")
    assert cp.dev_choices(summaries.__getitem__, [("2%", "2pct")]) == "`projected` at 2%"


def test_what_the_search_did_is_read_from_the_stage_records():
    summary = _summary(20, 20, moved=5, clusters=(10, 20, 30, 40))
    assert cp.moved(summary, "2pct") == "5"
    assert cp.stage_ranks(summary, "2pct") == "8/4/1"
    assert cp.stage_clusters(summary, "2pct", position=0) == "10"
    assert cp.written_as_adaptive(summary, "2pct") == "3 of 3"  # cut-offs 10/30/60 are sizes 10/20/30
    assert cp.unused(summary, ["2pct"]) == "10-12"  # 1000 − (990 − seed)
    assert cp.stage2_dev_cost(summary, "2pct") == "2.0"
    assert cp.beta_floor(summary, ["2pct"]) == "0.7"
    assert cp.soft_gap_max(summary) == "5.0"
    assert cp.trained_gap_max(summary) == "0.00"
    assert cp.uncompressed(summary) == "90.00 dev, 85.00 test"
    assert cp.uncompressed(summary, short=True) == "90.00 / 85.00"
    assert cp.ranks_kept(summary, ["2pct"]) == "3 of 3"


def test_a_summary_of_two_students_is_refused():
    summary = _summary(20, 20)
    summary["budgets"][0]["runs"][0]["uncompressed"] = {"validation": 0.8, "test": 0.85}
    with pytest.raises(ValueError, match="2 different students"):
        cp.uncompressed(summary)


def test_a_search_that_leaves_its_budget_is_described_by_its_runs():
    summary = _summary(20, 20)
    assert cp.beta_below(summary, "2pct") == "0 of 8"
    assert cp.beta_below(summary, "2pct", bins=8) == "1 of 8"
    assert cp.params_written(summary, "2pct") == "988-990 parameters (mean 989, 99% of adaptive embedding's)"
    assert cp.stage_dev(summary, "2pct", "stage1") == "45.00"
    assert cp.stage_dev(summary, "2pct", "stage2", "hard_dev") == "48.00"
    # the adaptive shape the search is compared with: its cut-offs, the last cluster up to the vocabulary
    assert cp.adaptive_clusters(summary, "2pct") == "10/20/30/40"
