"""bench/compare_nas_runs.py: NAS of one summary against a method of another, paired by budget and seed."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import compare_nas_runs  # noqa: E402


def _run(method, seed, right):
    predictions = [1] * right + [0] * (4 - right)
    return {
        "method": method,
        "seed": seed,
        "validation_accuracy": right / 4,
        "test_accuracy": right / 4,
        "predictions": {"validation": predictions, "test": predictions},
        "labels": {"validation": [1] * 4, "test": [1] * 4},
    }


def test_method_b_pairs_as_nas_with_bs_adaptive_runs_by_budget_and_seed(tmp_path, monkeypatch, capsys):
    a = {"budgets": [{"label": "4pct", "runs": [_run("nas", 0, 4), _run("nas", 1, 4)]}]}
    b = {"budgets": [{"label": "4pct", "runs": [_run("nas", 0, 1), _run("adaptive", 0, 2), _run("adaptive", 7, 0)]}]}
    for name, summary in (("a.json", a), ("b.json", b)):
        (tmp_path / name).write_text(json.dumps(summary))
    argv = ["compare_nas_runs.py", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--method-b", "adaptive"]
    monkeypatch.setattr(sys, "argv", argv)
    assert compare_nas_runs.main() == 0
    row = capsys.readouterr().out.strip().splitlines()[-1]
    assert row.startswith("| 4pct | 1 |") and "+50.00 / +50.00" in row  # seed 0 only: 4 of 4 against 2 of 4
    monkeypatch.setattr(sys, "argv", argv[:3])  # without it, B's NAS: seed 0, 4 of 4 against 1 of 4
    compare_nas_runs.main()
    assert "+75.00 / +75.00" in capsys.readouterr().out


def test_runs_of_different_students_are_not_paired():
    a, b = _run("nas", 0, 4), _run("nas", 0, 2)
    a["uncompressed"], b["uncompressed"] = {"validation": 0.5, "test": 0.5}, {"validation": 0.5, "test": 0.75}
    try:
        compare_nas_runs.compare_budget([a], [b])
    except SystemExit as error:
        assert "different students" in str(error) and "50.00 / 75.00" in str(error)
    else:
        raise AssertionError("runs of different students were paired")
    b["uncompressed"] = dict(a["uncompressed"])
    assert compare_nas_runs.compare_budget([a], [b])[0] == "1"
