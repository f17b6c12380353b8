"""The accuracy benchmarks' statistics (bench/bench_stats.py) and budget plumbing (bench/nas_vs_adaptive.py,
bench/equal_flash.py)."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import equal_flash  # noqa: E402
from bench_stats import paired_difference, paired_t  # noqa: E402
from nas_vs_adaptive import mcnemar, paired_bootstrap  # noqa: E402


def test_mcnemar_is_the_exact_binomial_on_the_discordant_pairs():
    a = np.array([True] * 5 + [False] * 3 + [True] * 10)
    b = np.array([False] * 5 + [False] * 3 + [True] * 10)
    assert mcnemar(a, b) == pytest.approx(2 / 2**5)  # 5 discordant, all one way
    assert mcnemar(a, a) == 1.0


def test_the_paired_bootstrap_sees_a_consistent_gain_and_not_a_tie():
    rng = np.random.default_rng(0)
    base = rng.random((5, 400)) < 0.7
    better = base | (rng.random((5, 400)) < 0.15)
    assert paired_bootstrap(better, base) < 0.01
    assert paired_bootstrap(base, base) == 1.0


def _row(method, seed, validation, test):
    labels = {"validation": [1] * 4, "test": [1] * 4}
    predictions = {s: [1] * k + [0] * (4 - k) for s, k in (("validation", validation), ("test", test))}
    return {"method": method, "seed": seed, "predictions": predictions, "labels": labels}


def test_paired_t_matches_the_textbook_value():
    a, b = np.array([0.80, 0.82, 0.81, 0.83, 0.80]), np.array([0.79, 0.80, 0.81, 0.80, 0.78])
    t, p = paired_t(a, b)
    assert t == pytest.approx(0.016 / (0.011402 / 5**0.5), rel=1e-4)  # differences' mean 0.016, sd 0.011402
    x = t * t / 4  # 4 degrees of freedom: the t distribution's closed form
    assert p == pytest.approx(1 - 0.75 * t / (1 + x) ** 0.5 * (1 - x / (3 * (1 + x))), abs=1e-6)
    assert paired_t(a, a) == (0.0, 1.0)


def test_a_paired_difference_is_the_mean_difference_with_its_t_over_seeds_and_its_bootstrap():
    rng = np.random.default_rng(2)
    base = rng.random((5, 400)) < 0.7
    better = base | (rng.random((5, 400)) < 0.1)
    difference = paired_difference(better, base)
    assert difference["points"] == pytest.approx(100 * (better.mean() - base.mean()))
    assert (difference["t"], difference["paired_t_p"]) == paired_t(better.mean(axis=1), base.mean(axis=1))
    assert difference["paired_bootstrap_p"] == paired_bootstrap(better, base) < 0.01
    assert paired_difference(base, base)["points"] == 0.0 and paired_difference(base, base)["paired_t_p"] == 1.0


def test_equal_flash_compares_over_the_seeds_both_methods_have():
    a = [_row("nas-int4", 0, 4, 3), _row("nas-int4", 1, 4, 4), _row("nas-int4", 2, 0, 0)]
    b = [_row("adaptive-int8", 0, 2, 3), _row("adaptive-int8", 1, 2, 2)]
    result = equal_flash.compare(a, b)
    assert result["seeds"] == [0, 1]
    assert result["difference"] == {"validation": pytest.approx(50.0), "test": pytest.approx(25.0)}
    assert set(result["mcnemar_test_p"]) == {0, 1}


def test_equal_flash_holds_nas_to_adaptives_stored_bytes_at_its_width():
    vocab_size, dim, budget = 30_522, 128, 319_996
    for method, (mode, bits) in equal_flash.METHODS.items():
        args = equal_flash.method_args(method, budget, vocab_size, dim)
        target = int(args[args.index("--target-embedding-bytes") + 1])
        assert args[args.index("--embedding-bits") + 1] == str(bits) and args[1] == mode
        if mode == "adaptive":
            assert target == budget
        else:
            assert target == equal_flash.adaptive_stored_bytes(vocab_size, dim, budget, bits)[2] <= budget
    # int4 buys adaptive embedding about twice the parameters in the same bytes
    int8, int4 = (equal_flash.adaptive_stored_bytes(vocab_size, dim, budget, bits) for bits in (8, 4))
    assert int4[1][0] > 1.4 * int8[1][0] and int4[0][0] > 1.4 * int8[0][0]


def test_resampling_seeds_too_does_not_call_one_lucky_seed_a_consistent_gain():
    rng = np.random.default_rng(1)
    base = rng.random((5, 400)) < 0.7
    one_lucky = base.copy()
    one_lucky[0] |= rng.random(400) < 0.5  # a large gain in seed 0 only
    assert paired_bootstrap(one_lucky, base, samples=2000, resample_seeds=False) < 0.01
    assert paired_bootstrap(one_lucky, base, samples=2000) > 0.05


def test_tasks_each_get_their_own_student_and_directory_and_a_bad_item_is_refused(tmp_path):
    import argparse

    from nas_vs_adaptive import task_options

    opts = argparse.Namespace(tasks="rotten_tomatoes=a/student,party_speeches=b", out=tmp_path, student=None)
    tasks = task_options(opts)
    assert [(t.task, t.student, t.out) for t in tasks] == [
        ("rotten_tomatoes", Path("a/student"), tmp_path / "rotten_tomatoes"),
        ("party_speeches", Path("b"), tmp_path / "party_speeches"),
    ]
    with pytest.raises(SystemExit, match="is not NAME=STUDENT"):
        task_options(argparse.Namespace(tasks="rotten_tomatoes", out=tmp_path, student=None))


def test_the_written_candidates_steps_are_the_final_ones_and_the_rest_is_search_cost():
    from nas_vs_adaptive import training_cost

    candidates = [
        {"name": "adaptive", "steps": 639, "same_architecture_as": None, "validation_accuracy": 0.77},
        {"name": "searched", "steps": None, "same_architecture_as": "adaptive", "validation_accuracy": 0.77},
    ]
    metrics = {
        "stages": [{"steps": 160}, {"steps": 160}, {"steps": 639}],
        "final_training": {"mode": "select", "chosen": "searched", "candidates": candidates},
        "search_cost": {"steps": 320, "seconds": 80.0},
        "seconds": 200.0,
    }
    cost = training_cost(metrics)
    assert (cost["steps"], cost["extra_steps"], cost["search_steps"], cost["chosen"]) == (639, 320, 320, "searched")


def test_a_continue_runs_table_has_no_written_column_though_each_run_names_its_mode():
    from nas_vs_adaptive import markdown_table, method_summary, training_cost

    def run(method: str, mode: str, flow: dict) -> dict:
        metrics = {"stages": [{"steps": 639}], "final_training": flow, "mode": mode, "seconds": 9.0}
        row = {"method": method, "seed": 0, "embedding_params": 10, "embedding_bytes": 12}
        return row | training_cost(metrics) | {"validation_accuracy": 0.7, "test_accuracy": 0.6, "architecture": {}}

    def table(nas_flow: dict) -> str:
        runs = [run("nas", "two-stage", nas_flow), run("adaptive", "adaptive", {"mode": "continue"})]
        budget = {"fraction_of_table": 0.04, "nas_target": 10, "unit": "params", "runs": runs}
        budget["adaptive"] = {"cutoffs": [1, 2, 3], "ranks": [3, 2, 1]}
        budget["comparison"] = {"seeds": []}
        budget["methods"] = {r["method"]: method_summary([r]) for r in runs}
        return markdown_table([budget])

    assert "written" not in table({"mode": "continue"}).splitlines()[0]
    candidates = [{"name": "adaptive", "steps": 639, "same_architecture_as": None, "validation_accuracy": 0.7}]
    assert "written" in table({"mode": "select", "chosen": "adaptive", "candidates": candidates}).splitlines()[0]


def test_merge_reads_back_the_earlier_runs_of_the_same_task_settings_and_student_only(tmp_path):
    import argparse
    import json

    from merge_runs import with_earlier_runs
    from nas_vs_adaptive import earlier_budgets

    settings = {"task": "rt", "student": "new/student", "epochs_per_search_stage": 0.5, "finetune_epochs": 1.0}
    settings["search_args"] = ["--max-seq-len", "64"]

    def run(seed, student=(0.7898, 0.749)):
        return {"method": "nas", "seed": seed, "uncompressed": {"validation": student[0], "test": student[1]}}

    def earlier(name, budgets, **changed):
        path = tmp_path / name
        path.write_text(json.dumps(settings | {"student": "old/student", "budgets": budgets} | changed))
        return str(path)

    ours = [run(5) | {"budget": "4pct"}]
    same = earlier("same.json", [{"label": "4pct", "runs": [run(0), run(5)]}, {"label": "2pct", "runs": [run(0)]}])
    other_task = earlier("other.json", [{"label": "1pct", "runs": [run(0)]}], task="party")
    found = earlier_budgets(argparse.Namespace(task="rt", merge=f"{same},{other_task}"), settings, ours)
    assert sorted(found) == ["2pct", "4pct"] and found["2pct"]["merged_from"] == same
    assert [r["seed"] for r in with_earlier_runs(ours, found["4pct"])] == [5, 0]  # seed 5 is this command's
    student = earlier("student.json", [{"label": "2pct", "runs": [run(0, student=(0.78, 0.749))]}])
    with pytest.raises(SystemExit, match="another student"):
        earlier_budgets(argparse.Namespace(task="rt", merge=student), settings, ours)
    epochs = earlier("epochs.json", [{"label": "2pct", "runs": [run(0)]}], finetune_epochs=2.0)
    with pytest.raises(SystemExit, match="other settings"):
        earlier_budgets(argparse.Namespace(task="rt", merge=epochs), settings, ours)


def _merge_files(tmp_path, settings, runs, **changed):
    import json

    path = tmp_path / f"earlier{len(list(tmp_path.iterdir()))}.json"
    path.write_text(json.dumps(settings | {"student": "old/student", "runs": runs} | changed))
    return str(path)


def _flash_run(method, seed, predictions=(1, 0, 1, 1)):
    return {
        "method": method,
        "seed": seed,
        "predictions": {"validation": list(predictions), "test": list(predictions)},
        "labels": {"validation": [1] * 4, "test": [1] * 4},
        "uncompressed": {"validation": 0.6555, "test": 0.6891},
    }


def test_equal_flash_merges_the_earlier_seeds_through_nas_vs_adaptives_merge(tmp_path):
    import argparse

    settings = {"task": "party", "student": "new/student", "epochs_per_search_stage": 0.5, "finetune_epochs": 1.0}
    settings |= {"search_args": ["--max-seq-len", "64"], "bytes": 319_996}
    earlier = [_flash_run(m, s) for m in ("nas-int4", "adaptive-int4") for s in (0, 1)]
    ours = [_flash_run("nas-int4", 5), _flash_run("adaptive-int4", 5), _flash_run("adaptive-int4", 0)]
    same = _merge_files(tmp_path, settings, earlier)
    rows = equal_flash.merged(ours, argparse.Namespace(task="party", merge=same), settings)
    # this command's runs and the earlier ones it lacks, by method then seed; adaptive seed 0 is this command's
    assert [(r["method"], r["seed"]) for r in rows] == [
        ("adaptive-int4", 0),
        ("adaptive-int4", 1),
        ("adaptive-int4", 5),
        ("nas-int4", 0),
        ("nas-int4", 1),
        ("nas-int4", 5),
    ]
    by_method = {m: [r for r in rows if r["method"] == m] for m in ("nas-int4", "adaptive-int4")}
    assert equal_flash.compare(by_method["nas-int4"], by_method["adaptive-int4"])["seeds"] == [0, 1, 5]
    assert equal_flash.merged(ours, argparse.Namespace(task="other", merge=same), settings) == sorted(
        ours, key=lambda r: (list(equal_flash.METHODS).index(r["method"]), r["seed"])
    )  # another task's summary is not this one's
    other_bytes = _merge_files(tmp_path, settings, earlier, bytes=320_000)
    with pytest.raises(SystemExit, match="other settings"):
        equal_flash.merged(ours, argparse.Namespace(task="party", merge=other_bytes), settings)


def test_a_rerun_that_does_not_reproduce_the_recorded_run_is_not_merged(tmp_path):
    import argparse

    from nas_vs_adaptive import earlier_budgets

    settings = {"task": "party", "student": "new/student", "epochs_per_search_stage": 0.5, "finetune_epochs": 1.0}
    settings |= {"search_args": ["--max-seq-len", "64"], "bytes": 319_996}
    recorded = _merge_files(tmp_path, settings, [_flash_run("adaptive-int4", 0)])
    rerun = [_flash_run("adaptive-int4", 0, predictions=(1, 1, 1, 1))]
    with pytest.raises(SystemExit, match="predicts differently"):
        equal_flash.merged(rerun, argparse.Namespace(task="party", merge=recorded), settings)
    # nas_vs_adaptive's budgets: the same check, per (budget, method, seed)
    del settings["bytes"]
    budgets = [{"label": "2pct", "runs": [_flash_run("adaptive", 0) | {"budget": "2pct"}]}]
    path = _merge_files(tmp_path, settings, [], budgets=budgets)
    opts = argparse.Namespace(task="party", merge=path)
    reproduced = [_flash_run("adaptive", 0) | {"budget": "2pct"}]
    assert list(earlier_budgets(opts, settings, reproduced)) == ["2pct"]
    other_budget = [_flash_run("adaptive", 0, predictions=(0, 0, 0, 0)) | {"budget": "4pct"}]
    assert list(earlier_budgets(opts, settings, other_budget)) == ["2pct"]  # not the same run
    with pytest.raises(SystemExit, match="predicts differently"):
        earlier_budgets(opts, settings, [other_budget[0] | {"budget": "2pct"}])


def test_summaries_are_written_compact(tmp_path):
    import json

    from results_bits import write_json

    record = {"runs": [{"predictions": {"test": [0, 1, 1]}}]}
    write_json(tmp_path / "summary.json", record)
    text = (tmp_path / "summary.json").read_text()
    assert text == '{"runs":[{"predictions":{"test":[0,1,1]}}]}\n' and json.loads(text) == record
