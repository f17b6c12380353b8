"""`search --final-training select`: the candidates are trained as adaptive embedding is and chosen on dev."""

import json

import numpy as np
import pytest

from .cli_helpers import run_cli
from .test_cli_compress import write_reviews

BUDGET = 30 * 32 // 2  # half the tiny classifier's dense table: adaptive embedding fits, the search can move


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The tiny classifier, its data, and `search --mode adaptive` on them (the baseline's metrics)."""
    from tests.conftest import build_hf_checkpoint

    tmp_path = tmp_path_factory.mktemp("final-training")
    checkpoint = build_hf_checkpoint(tmp_path, classifier=True, vocab_size=30, num_labels=2)
    data = write_reviews(tmp_path / "reviews.csv", count=80)
    common = ["--checkpoint", checkpoint, "--task", data, "--target-embedding-params", BUDGET, "--quiet"]
    common += ["--epochs", 0.5, "--finetune-epochs", 0.5, "--batch-size", 16]
    baseline = _search(tmp_path / "adaptive", common, "--mode", "adaptive")
    return tmp_path, common, baseline


def _search(out, common, *extra):
    from tflm_mcubert.cli import main

    code = main([str(a) for a in ["search", *common, "--out", out, *extra]])
    assert code == 0
    return json.loads((out / "metrics.json").read_text())


def _clusters_of_tokens(checkpoint):
    from tflm_mcubert.compress.final_training import cluster_of_tokens
    from tflm_mcubert.model.hf_import import load_checkpoint

    lookup = load_checkpoint(checkpoint).model.embeddings.word_lookup
    return cluster_of_tokens(lookup), tuple(lookup.ranks)


def test_select_trains_every_candidate_as_adaptive_and_writes_the_best_on_dev(capsys, runs, monkeypatch):
    """Real training; the searched candidate's dev score is lowered by 10 points, so adaptive embedding wins
    (unless the search found its very architecture): the checkpoint then holds adaptive's clusters and ranks."""
    from tflm_mcubert.compress import final_training

    tmp_path, common, baseline = runs
    real_dev_accuracy = final_training.dev_accuracy

    def searched_handicapped(job, model, permutation):
        handicap = 0.1 if model.embeddings.word_lookup.origin == "searched-retrained" else 0.0
        return real_dev_accuracy(job, model, permutation) - handicap

    monkeypatch.setattr(final_training, "dev_accuracy", searched_handicapped)
    code, printed, err = run_cli(capsys, "search", *common, "--out", tmp_path / "select")
    assert code == 0, err
    metrics = json.loads((tmp_path / "select" / "metrics.json").read_text())
    report = metrics["final_training"]
    assert [c["name"] for c in report["candidates"]] == ["adaptive", "searched"] and report["skipped"] == {}
    # equal steps: every candidate's fine-tune is exactly the baseline's
    baseline_steps = [s["steps"] for s in baseline["stages"]]
    assert report["final_steps"] == baseline_steps and len(baseline_steps) == 1
    assert all(c["steps"] == baseline_steps[0] for c in report["candidates"] if c["same_architecture_as"] is None)
    # the adaptive candidate is the baseline run itself: same start, recipe, batches and result
    adaptive, searched = report["candidates"]
    assert adaptive["validation_accuracy"] == baseline["validation_accuracy"]
    chosen = next(c for c in report["candidates"] if c["name"] == report["chosen"])
    assert chosen["validation_accuracy"] == max(c["validation_accuracy"] for c in report["candidates"])
    assert report["chosen"] == "adaptive" and metrics["validation_accuracy"] == adaptive["validation_accuracy"]
    if searched["same_architecture_as"] is None:
        margin = 100 * (adaptive["validation_accuracy"] - searched["validation_accuracy"])
        assert report["dev_margin"] == pytest.approx(margin, abs=1e-3) and margin >= 10 - 1e-9
    written, expected = _clusters_of_tokens(tmp_path / "select"), _clusters_of_tokens(tmp_path / "adaptive")
    assert np.array_equal(written[0], expected[0]) and written[1] == expected[1]
    assert metrics["search_cost"]["steps"] == sum(s["steps"] for s in metrics["stages"][:2]) > 0
    assert "chosen adaptive (" in printed


def test_one_unknown_candidate_is_one_clear_line(capsys, runs):
    tmp_path, common, _ = runs
    code, _, err = run_cli(capsys, "search", *common, "--out", tmp_path / "bad", "--candidates", "searched,best")
    assert code != 0 and err.strip().splitlines()[-1].startswith("error: --candidates: 'best'")
