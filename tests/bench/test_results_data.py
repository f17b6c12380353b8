"""The committed results are data: small, without the data sets' labels or any raw predictions, and the
figures they state (accuracies, per-seed McNemar p-values) recomputed from their per-example bits."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
from bench_stats import mcnemar  # noqa: E402
from results_bits import compact, correct, models, pack, unpack  # noqa: E402

RESULTS = sorted((BENCH / "results").glob("*.json"))
# A summary keeps bits, not predictions: one stays under 128 KiB. The total grows with every measurement
# (about 0.5 KB a model, split and seed), so its cap is a backstop against a summary that keeps too much.
MAX_FILE_BYTES, MAX_BYTES = 128 << 10, 2 << 20


def load(path: Path) -> dict:
    return json.loads(path.read_text())


def keys_anywhere(value) -> set[str]:
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in keys_anywhere(v)}
    if isinstance(value, list):
        return {k for v in value for k in keys_anywhere(v)}
    return set()


def test_the_committed_results_are_small_and_hold_no_labels_or_predictions():
    assert sum(p.stat().st_size for p in RESULTS) <= MAX_BYTES
    assert not {p.name: n for p in RESULTS if (n := p.stat().st_size) > MAX_FILE_BYTES}
    for path in RESULTS:
        assert not keys_anywhere(load(path)) & {"labels", "predictions"}, path.name


@pytest.mark.parametrize("count", [0, 1, 7, 8, 9, 1275])
def test_bits_round_trip(count):
    bits = np.random.default_rng(count).random(count) < 0.5
    assert np.array_equal(unpack(pack(bits)), bits)


def test_compact_keeps_which_examples_were_right_and_both_readers_agree():
    run = {"seed": 3, "predictions": {"test": [1, 0, 2, 2]}, "labels": {"test": [1, 1, 2, 0]}}
    several = {"predictions": {"int8": {"test": [0, 1]}}, "labels": {"test": [0, 0]}}
    for record, model in ((run, None), (several, "int8")):
        packed = compact(record)
        assert "labels" not in packed and "predictions" not in packed
        assert np.array_equal(correct(packed, "test", model), correct(record, "test", model))
    assert models(compact(several)) == models(several) == {"int8"}


def nas_runs():
    for path in RESULTS:
        summary = load(path)
        for budget in summary.get("budgets", []):
            yield path.name, budget


@pytest.mark.parametrize("name,budget", list(nas_runs()), ids=lambda v: v if isinstance(v, str) else v["label"])
def test_search_runs_state_what_their_bits_say(name, budget):
    by_seed = {(r["method"], r["seed"]): r for r in budget["runs"] if "correct" in r}
    for run in by_seed.values():
        for split in ("validation", "test"):
            assert correct(run, split).mean() == pytest.approx(run[f"{split}_accuracy"], abs=1e-12)
    stated = (budget.get("comparison") or {}).get("mcnemar_test_p", {})
    for seed, p in stated.items():
        nas, adaptive = by_seed[("nas", int(seed))], by_seed[("adaptive", int(seed))]
        assert mcnemar(correct(nas, "test"), correct(adaptive, "test")) == pytest.approx(p, rel=1e-9)


@pytest.mark.parametrize("path", [p for p in RESULTS if p.name.startswith("board_accuracy")], ids=lambda p: p.name)
def test_board_accuracy_runs_state_what_their_bits_say(path):
    for run in load(path)["runs"]:
        for model in models(run):
            for split in ("validation", "test"):
                assert correct(run, split, model).mean() == pytest.approx(run["accuracy"][model][split], abs=1e-12)


def test_the_int4_table_comparison_is_recomputed_from_its_bits():
    evaluations = load(BENCH / "results" / "embedding_int4.json")["evaluate"]
    for entry in evaluations.values():
        int8, int4 = correct(entry, None, "int8"), correct(entry, None, "int4")
        assert int(np.sum(int8 & ~int4)) == entry["int8_vs_int4_mcnemar"]["int8_only_right"]
        assert mcnemar(int8, int4) == pytest.approx(entry["int8_vs_int4_mcnemar"]["exact_p"], abs=5e-5)


def test_the_vocab_pruning_figures_are_recomputed_from_their_bits():
    summary = load(BENCH / "results" / "vocab_pruning_accuracy.json")
    for run, difference, p in zip(
        summary["runs"], summary["difference_points"], summary["mcnemar_exact_p"], strict=True
    ):
        full, pruned = correct(run, "full"), correct(run, "pruned")
        assert 100 * full.mean() == pytest.approx(run["accuracy"]["full"], abs=5e-3)
        assert 100 * (pruned.mean() - full.mean()) == pytest.approx(difference, abs=5e-3)
        assert mcnemar(full, pruned) == pytest.approx(p, abs=5e-4)
    for which in ("full", "pruned"):
        accuracies = [100 * correct(run, which).mean() for run in summary["runs"]]
        assert np.mean(accuracies) == pytest.approx(summary["accuracy"][which]["mean"], abs=5e-3)
