"""bench/board_accuracy.py's cheap logic: its arguments, settings check, resume, selection on dev and statistics
(the runs themselves are the benchmark's, not CI's)."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import board_accuracy as bench  # noqa: E402
import steps  # noqa: E402

ARGS = ["--tiny-student", "t", "--mini-student", "m"]


def test_bad_arguments_are_refused_in_one_line(capsys):
    for argv, message in (
        (["--configs", "tiny-f767-w8e8p,nope"], "unknown ['nope']"),
        (["--seeds", "0,x"], "not a comma-separated list"),
        (["--seeds", "-1"], "each 0 or more"),
        (["--epochs", "0"], "must be positive"),
        (["--start-before", "25:00"], "not a time HH:MM"),
    ):
        with pytest.raises(SystemExit):
            bench.parse(ARGS + argv)
        assert message in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench.parse(["--mini-student", "m"])  # --tiny-student is required by the default configurations
    assert "--tiny-student is required" in capsys.readouterr().err


def test_only_the_students_the_configurations_use_are_required(capsys):
    opts = bench.parse(["--tiny-student", "t", "--configs", "tiny-f746-w4e4p"])
    assert opts.mini_student is None and bench.settings_of(opts)["mini_student"] is None
    with pytest.raises(SystemExit):
        bench.parse(["--tiny-student", "t", "--configs", "tiny-f746-w4e4p,mini-f767-w4e4p"])
    assert "--mini-student is required" in capsys.readouterr().err


def test_every_configuration_searches_for_its_board_at_its_widths():
    args = bench.CONFIGS["mini-f767-w4e4p"].search_args("rotten_tomatoes")
    assert args == ["--mode", "adaptive", "--board", "nucleo-f767zi", "--weight-bits", "4", "--embedding-bits", "4"] + [
        "--prune-vocab",
        "rotten_tomatoes",
    ]
    default = bench.CONFIGS["tiny-f746-default"].search_args("rotten_tomatoes")
    assert "--embedding-bits" not in default and "--prune-vocab" not in default and "nucleo-f746zg" in default
    for name, config in bench.CONFIGS.items():
        assert config.evaluate_bits[0] == config.weight_bits, name  # its own width is measured first


def test_a_seed_template_gives_each_seed_its_own_student_and_evaluate_takes_its_own_length(tmp_path, monkeypatch):
    argv = ["--tiny-student", str(tmp_path / "tiny-s{seed}"), "--configs", "tiny-f746-w4e4p-q4", "--out", str(tmp_path)]
    opts = bench.parse(argv + ["--export-seq-len", "128", "--evaluate-seq-len", "128", "--export-seeds", "9"])
    assert bench.student_of(opts, "tiny", 3) == tmp_path / "tiny-s3" and bench.student_of(opts, "mini", 3) is None
    assert bench.settings_of(opts)["evaluate_seq_len"] == 128
    assert "evaluate_seq_len" not in bench.settings_of(bench.parse(ARGS))  # earlier OUTs' settings still match
    assert list(bench.students_read(opts)) == [f"tiny_student_seed{s}" for s in range(5)]  # hashed per seed
    assert list(bench.students_read(bench.parse(ARGS))) == ["mini_student", "tiny_student"]
    commands = []
    monkeypatch.setattr(bench, "run_step", lambda command, *a: commands.append(command))
    assert bench.run_one("tiny-f746-w4e4p-q4", 3, opts)["failed"] == "search"
    search = commands[0]
    assert search[search.index("--checkpoint") + 1] == str(tmp_path / "tiny-s3")
    assert search[search.index("--max-seq-len") + 1] == "64" and search[search.index("--qat-weight-bits") + 1] == "4"
    monkeypatch.setattr(
        bench, "run_step", lambda command, *a: commands.append(command) or (1.0 if command[0] == "search" else None)
    )
    assert bench.run_one("tiny-f746-w4e4p-q4", 4, opts)["failed"] == "evaluate"
    evaluate = commands[-1]
    assert evaluate[evaluate.index("--seq-len") + 1] == "128"
    with pytest.raises(SystemExit, match="tiny-s0: no config.json"):
        bench.main(argv + ["--seeds", "0"])


def test_a_rerun_with_other_settings_is_refused(tmp_path):
    settings = bench.settings_of(bench.parse(ARGS + ["--out", str(tmp_path)]))
    bench.claim(tmp_path, settings)
    bench.claim(tmp_path, settings)  # the same settings: fine
    with pytest.raises(SystemExit, match="other settings"):
        bench.claim(tmp_path, settings | {"epochs": 1.0})


def _record(name, seed, dev_correct, test_correct, float_correct=None, size=20, export=None, trained=None):
    """A run.json whose integer model gets the first `*_correct` examples right (labels all 1)."""
    config = bench.CONFIGS[name]
    labels = {"validation": [1] * size, "test": [1] * size}

    def predicted(k):
        return [1] * k + [0] * (size - k)

    keys = {bench.variant(name, b): (dev_correct, test_correct) for b in config.evaluate_bits}
    keys["float"] = float_correct or (dev_correct, test_correct)
    if trained:
        keys["trained"] = trained
    predictions = {k: {"validation": predicted(d), "test": predicted(t)} for k, (d, t) in keys.items()}
    return {
        "config": name,
        "seed": seed,
        "labels": labels,
        "predictions": predictions,
        "accuracy": {k: {s: np.mean(np.asarray(p[s]) == 1) for s in p} for k, p in predictions.items()},
        "steps": 639,
        "embedding_params": 1000,
        "embedding_bytes": 900,
        "seconds": {"search": 10.0, "evaluate": 5.0},
        "export": export,
    }


def test_sides_are_chosen_on_dev_and_compared_on_the_seeds_both_have():
    records = []
    for seed in range(3):
        records.append(_record("tiny-f746-default", seed, 10, 10))
        records.append(_record("tiny-f746-w4e4p", seed, 12, 15))
        records.append(_record("tiny-f746-w8e8p", seed, 11, 19))  # better on test, worse on dev: not chosen
    records.append(_record("tiny-f746-w4e4p", 3, 12, 15))  # no default for seed 3: not paired
    summary = bench.summarize(records)
    c = summary["points"]["C"]
    assert (c["a"], c["b"]) == ("tiny-f746-w4e4p@w4", "tiny-f746-default@w8")
    assert c["seeds"] == [0, 1, 2]
    assert c["difference"]["test"] == pytest.approx(25.0) and c["difference"]["validation"] == pytest.approx(10.0)
    assert c["met"] is True and set(c["mcnemar_test_p"]) == {0, 1, 2}
    assert summary["points"]["A"] == {**summary["points"]["A"], "a": None, "b": None}  # not run: no comparison
    assert "| C |" in bench.markdown(summary) and "| A |" in bench.markdown(summary)


def test_a_variant_that_does_not_fit_is_never_a_candidate_and_b_compares_int4_with_float():
    records = []
    for seed in range(5):
        records.append(_record("mini-f767-w4e4p", seed, 15, 14, float_correct=(16, 15), trained=(15, 13)))
        records.append(_record("tiny-f767-w8e8p", seed, 14, 13))
    records.append(_record("tiny-f767-w8e8", 0, 20, 20, export={"fits": False, "model_bytes": 3, "budget_bytes": 2}))
    summary = bench.summarize(records)
    assert not summary["variants"]["mini-f767-w4e4p@float"]["fits"]  # float is a reference, not a candidate
    assert not summary["variants"]["tiny-f767-w8e8@w8"]["fits"]  # its export did not fit
    a = summary["points"]["A"]
    assert (a["a"], a["b"]) == ("mini-f767-w4e4p@w4", "tiny-f767-w8e8p@w8")
    assert a["difference"]["test"] == pytest.approx(5.0) and a["met"] is False  # p: 5 identical seeds of 20 examples
    b, b_float = summary["points"]["B"], summary["points"]["B-float"]
    assert b["b"] == "mini-f767-w4e4p@trained" and b["difference"]["test"] == pytest.approx(5.0) and b["met"]
    assert b_float["b"] == "mini-f767-w4e4p@float" and b_float["difference"]["test"] == pytest.approx(-5.0)
    assert b_float["met"] is False
    assert "tiny-f767-w8e8p@trained" not in summary["variants"]  # its runs have no trained predictions


def test_finished_runs_are_read_back_not_rerun(tmp_path, monkeypatch):
    opts = bench.parse(ARGS + ["--out", str(tmp_path)])
    folder = tmp_path / "tiny-f767-w8e8p-seed0"
    folder.mkdir()
    record = _record("tiny-f767-w8e8p", 0, 1, 1)
    (folder / "run.json").write_text(json.dumps(record))
    monkeypatch.setattr(steps.subprocess, "run", lambda *a, **k: pytest.fail("a finished run was started again"))
    assert bench.run_one("tiny-f767-w8e8p", 0, opts)["seed"] == 0
    # an interrupted run resumes its steps: a finished search is not started again, its seconds read back
    model = tmp_path / "tiny-f746-w4e4p-seed1" / "model"
    model.mkdir(parents=True)
    (model / "metrics.json").write_text("{}")
    (model / "metrics.json.seconds").write_text("12.5\n")
    assert bench.run_step(["search"], model / "metrics.json", "x", tmp_path) == 12.5


def test_compare_finds_a_consistent_gain_and_not_a_tie():
    rng = np.random.default_rng(0)
    base = {s: {k: rng.random(400) < 0.7 for k in range(5)} for s in ("validation", "test")}
    better = {s: {k: v | (rng.random(400) < 0.2) for k, v in base[s].items()} for s in base}
    gain = bench.compare(better, base, samples=2000)
    assert gain["bootstrap_p"]["test"] < 0.01 and gain["difference"]["test"] > 0
    assert bench.compare(base, base, samples=500)["bootstrap_p"]["test"] == 1.0


def test_the_f767zi_points_run_first_seed_by_seed():
    order = bench.job_order(["tiny-f746-default", "tiny-f767-w8e8p", "mini-f767-w4e4p"], [0, 1])
    assert order == [
        ("tiny-f767-w8e8p", 0),
        ("mini-f767-w4e4p", 0),
        ("tiny-f767-w8e8p", 1),
        ("mini-f767-w4e4p", 1),
        ("tiny-f746-default", 0),
        ("tiny-f746-default", 1),
    ]


def test_the_summary_file_is_json_with_one_line_per_run():
    record = {"task": "t", "points": {"A": {"seeds": [0]}}, "runs": [{"seed": 0, "p": [1, 0]}, {"seed": 1}]}
    text = bench.summary_text(record)
    assert json.loads(text) == record
    assert '{"seed": 0, "p": [1, 0]},' in text.splitlines()


def test_no_run_starts_after_the_deadline(tmp_path, monkeypatch):
    for student in ("t", "m"):
        (tmp_path / student).mkdir()
        (tmp_path / student / "config.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(bench, "run_one", lambda *a: pytest.fail("a run started after the deadline"))
    monkeypatch.setattr(bench.start_before, "reached", lambda deadline, now=None: deadline is not None)
    assert bench.main(ARGS + ["--out", str(tmp_path / "o"), "--start-before", "06:45"]) == 0
    assert "runs not started" in (tmp_path / "o" / "progress.log").read_text()


def test_a_record_is_made_from_the_runs_files(tmp_path):
    labels = {"validation": [1, 0, 1], "test": [0, 0, 1]}
    metrics = {"validation_accuracy": 1.0, "test_accuracy": 1.0, "stages": [{"steps": 600}, {"steps": 39}]}
    metrics |= {"labels": labels, "predictions": labels, "embedding_params": 7, "embedding_bytes": 9}
    split = {s: {"labels": labels[s], "predictions": {"float": [1, 1, 1], "int4+w4": labels[s]}} for s in labels}
    folder = tmp_path / "mini-f767-w4e4p-seed3"
    (folder / "model").mkdir(parents=True)
    (folder / "model" / "metrics.json").write_text(json.dumps(metrics))
    (folder / "model" / "metrics.json.seconds").write_text("300.5\n")
    (folder / "evaluate.json").write_text(json.dumps({"by_split": split}))
    record = bench.record_from_files("mini-f767-w4e4p", 3, folder)
    assert record["steps"] == 639 and record["seconds"] == {"search": 300.5, "evaluate": 0.0}
    assert record["accuracy"]["mini-f767-w4e4p@w4"] == {"validation": 1.0, "test": 1.0}
    assert record["accuracy"]["float"]["test"] == pytest.approx(1 / 3) and record["export"] is None
    assert record["predictions"]["trained"] == labels  # search's own predictions: the model as trained


def test_a_qat_evaluation_becomes_a_variant_compared_with_its_ptq_by_seed(tmp_path):
    labels = {"validation": [1, 0, 1], "test": [0, 0, 1]}
    metrics = {"validation_accuracy": 1.0, "test_accuracy": 1.0, "stages": [{"steps": 639}]}
    metrics |= {"labels": labels, "predictions": labels, "embedding_params": 7, "embedding_bytes": 9}
    ptq = {s: {"labels": labels[s], "predictions": {"float": [1, 1, 1], "int4+w4": [1, 1, 1]}} for s in labels}
    qat = {s: {"labels": labels[s], "predictions": {"float": [1, 1, 1], "int4+w4": labels[s]}} for s in labels}
    source = tmp_path / "earlier" / "mini-f767-w4e4p-seed0"
    (source / "model").mkdir(parents=True)
    (source / "model" / "metrics.json").write_text(json.dumps(metrics))
    (source / "evaluate.json").write_text(json.dumps({"by_split": ptq}))
    folder = tmp_path / "now" / source.name
    folder.mkdir(parents=True)
    bench.reuse_search(source, folder)  # the search and its PTQ evaluation reused: only the QAT one is new
    assert (folder / "model").is_symlink() and (folder / "evaluate.json").read_text() == json.dumps({"by_split": ptq})
    (folder / "evaluate-qat.json").write_text(json.dumps({"by_split": qat}))
    (folder / "evaluate-qat.json.seconds").write_text("150\n")
    record = bench.record_from_files("mini-f767-w4e4p", 0, folder)
    assert record["accuracy"]["mini-f767-w4e4p@w4+qat"] == {"validation": 1.0, "test": 1.0}
    assert record["seconds"]["evaluate_qat"] == 150.0
    summary = bench.summarize([record | {"seed": s} for s in range(3)])
    q = summary["points"]["Q mini-f767-w4e4p"]
    assert (q["a"], q["b"]) == ("mini-f767-w4e4p@w4+qat", "mini-f767-w4e4p@w4") and q["seeds"] == [0, 1, 2]
    assert q["difference"]["test"] == pytest.approx(100 * (1 - 1 / 3))
    assert summary["variants"]["mini-f767-w4e4p@w4+qat"]["fits"]
    assert "QAT 100 steps" in bench.markdown(summary, 100)
    shuffled = {s: {**qat[s], "labels": labels[s][::-1]} for s in qat}  # e.g. evaluate --seed reshuffled the rows
    (folder / "evaluate-qat.json").write_text(json.dumps({"by_split": shuffled}))
    with pytest.raises(ValueError, match="not the PTQ one's"):
        bench.record_from_files("mini-f767-w4e4p", 0, folder)


def test_an_earlier_summarys_runs_are_taken_and_only_the_seeds_it_lacks_run(tmp_path, monkeypatch):
    committed = Path(__file__).resolve().parents[2] / "bench" / "results" / "board_accuracy_layers_f746zg.json"
    summary = json.loads(committed.read_text())
    configs = sorted({r["config"] for r in summary["runs"]})
    held = sorted({r["seed"] for r in summary["runs"]})
    new = max(held) + 1  # the seed this machine adds
    argv = ["--tiny-student", str(tmp_path / "tiny-s{seed}"), "--configs", ",".join(configs), "--out", str(tmp_path)]
    argv += ["--export-seq-len", "128", "--evaluate-seq-len", "128", "--seeds", ",".join(map(str, held + [new]))]
    with pytest.raises(SystemExit, match=f"tiny-s{new}: no config.json"):  # the seed that runs needs its student
        bench.main(argv + ["--earlier", str(committed)])
    (tmp_path / f"tiny-s{new}").mkdir()  # the earlier summary's seeds need none on this machine
    (tmp_path / f"tiny-s{new}" / "config.json").write_text("{}")
    ran = []
    failed = {"failed": "search"}
    monkeypatch.setattr(
        bench, "run_one", lambda name, seed, _: ran.append((name, seed)) or failed | dict(config=name, seed=seed)
    )
    assert bench.main(argv + ["--earlier", str(committed)]) == 1  # the new seed's runs "failed" here
    assert sorted(ran) == [(c, new) for c in configs]  # the others are the earlier summary's
    grown = json.loads((tmp_path / "summary.json").read_text())
    assert grown["variants"] == summary["variants"] and grown["runs"] == summary["runs"]
    earlier = grown["provenance"]["earlier"]  # the summary's own hashes first, then those it took itself
    assert earlier[0]["commit"] == summary["provenance"]["commit"]
    assert [e["commit"] for e in earlier[1:]] == [e["commit"] for e in summary["provenance"].get("earlier", [])]
    assert {role for e in earlier for role in e["checkpoints"]} == {f"tiny_student_seed{s}" for s in held}
    with pytest.raises(SystemExit, match="other settings.*'finetune_epochs': \\(1.0, 2.0\\)"):
        bench.main(argv + ["--earlier", str(committed), "--finetune-epochs", "2", "--out", str(tmp_path / "o")])
    # an earlier summary whose runs all read one student keeps that student's hash too
    single = {"path": "/elsewhere/tiny", "sha256": "0" * 64}
    summary["provenance"] = {"commit": "c0ffee", "environment": {}, "checkpoints": {"tiny_student": single}}
    (tmp_path / "single.json").write_text(json.dumps(summary))
    bench.main(argv + ["--earlier", str(tmp_path / "single.json"), "--out", str(tmp_path / "s")])
    (earlier,) = json.loads((tmp_path / "s" / "summary.json").read_text())["provenance"]["earlier"]
    assert earlier["checkpoints"] == {"tiny_student": single}
