"""bench/teacher_recipe.py's cheap logic: the finetune command of an arm, and the summary's statistics and
table made from the teachers' bits (the teachers themselves are the benchmark's, not CI's)."""

import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import teacher_recipe as bench  # noqa: E402
from results_bits import pack  # noqa: E402


def test_an_arm_names_the_epochs_and_sequence_length_finetune_runs_with(tmp_path):
    command = bench.teacher_command(SimpleNamespace(task="debate_speakers", runs=tmp_path), "e2.5-l128", 3)
    assert command[0] == "finetune" and command[command.index("--task") + 1] == "debate_speakers"
    assert command[command.index("--epochs") + 1] == "2.5" and command[command.index("--max-seq-len") + 1] == "128"
    assert command[command.index("--seed") + 1] == "3" and command[command.index("--out") + 1] == str(
        tmp_path / "e2.5-l128-s3"
    )
    for unknown in ("e2", "l64", "e2-l", "epochs2-l64"):
        with pytest.raises(SystemExit, match="e<epochs>-l<sequence length>"):
            bench.parse_arm(unknown)


def runs_of(accuracies: dict[str, list[tuple[float, float]]], examples: int = 200) -> dict:
    """Runs whose dev/test bits give exactly these accuracies, seed by seed."""
    rng = np.random.default_rng(0)

    def bits(accuracy):
        correct = np.zeros(examples, bool)
        correct[rng.permutation(examples)[: round(accuracy * examples)]] = True
        return pack(correct)

    return {
        arm: [
            {"seed": seed, "steps": 100, "seconds": 60.0, "correct": {"validation": bits(dev), "test": bits(test)}}
            for seed, (dev, test) in enumerate(values)
        ]
        for arm, values in accuracies.items()
    }


def test_the_summary_selects_on_dev_and_compares_every_arm_with_the_first_from_the_bits():
    runs = runs_of(
        {
            "e1-l64": [(0.70, 0.60), (0.71, 0.62), (0.69, 0.61)],
            "e3-l64": [(0.80, 0.70), (0.81, 0.71), (0.79, 0.69)],
            "e2-l64": [(0.75, 0.90), (0.74, 0.90), (0.76, 0.90)],  # best on test, not on dev: not chosen
        }
    )
    summary = bench.summarize(runs)
    assert summary["selected_on_dev"] == "e3-l64" and summary["against"] == "e1-l64"
    assert summary["arms"]["e3-l64"]["test"]["mean"] == pytest.approx(70.0)
    later = summary["differences"]["e3-l64"]
    assert later["seeds"] == [0, 1, 2] and later["test"]["points"] == pytest.approx(9.0)
    assert later["test"]["paired_t_p"] < 0.05 and "e1-l64" not in summary["differences"]
    table = bench.markdown_table({"runs": runs})
    assert "| 3 epochs at 64 tokens (chosen on dev) | 3 | 100 | 80.00 ± 1.00 | 70.00 ± 1.00 | 1.0 |" in table
    assert "| e3-l64 | 3 | +10.00 (" in table and "| +9.00 (" in table


def test_an_earlier_summarys_teachers_are_taken_and_only_the_missing_ones_fine_tuned(tmp_path, monkeypatch):
    import json

    committed = Path(__file__).resolve().parents[2] / "bench" / "results" / "teacher_recipe_debate_speakers.json"
    summary = json.loads(committed.read_text())
    held = sorted({run["seed"] for run in summary["runs"]["e1-l64"]})
    new = max(held) + 1  # the seed this machine adds, whatever seeds the committed summary holds
    seeds = ",".join(map(str, held + [new]))
    argv = ["--task", "debate_speakers", "--runs", str(tmp_path), "--arms", "e1-l64,e3-l64", "--seeds", seeds]
    ran = []
    monkeypatch.setattr(bench.steps, "run_step", lambda command, done, name, *_: ran.append(name))
    out = tmp_path / "grown.json"
    assert bench.main(argv + ["--run", "--earlier", str(committed), "--out", str(out)]) == 0
    assert ran == [f"[e1-l64 seed {new}] finetune", f"[e3-l64 seed {new}] finetune"]  # the others are the summary's
    grown = json.loads(out.read_text())
    assert grown["runs"] == {arm: summary["runs"][arm] for arm in ("e1-l64", "e3-l64")}
    assert grown["summary"]["differences"]["e3-l64"] == summary["summary"]["differences"]["e3-l64"]
    assert {r for e in grown["provenance"]["earlier"] for r in e["checkpoints"]} == {
        f"{arm}-s{s}" for arm in ("e1-l64", "e3-l64") for s in held
    }
    with pytest.raises(SystemExit, match="other settings.*'task'"):
        bench.main(argv[2:] + ["--task", "rotten_tomatoes", "--earlier", str(committed)])
