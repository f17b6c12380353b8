"""bench/board_shape_latency.py's cheap logic: the commands it runs per arm (the search at seed 0, its shape
at the other seeds, BERT-tiny with the candidates' recipe, one board path at the export's tokens) and the
runs' folders (the runs themselves are the benchmark's, not CI's)."""

import json
import sys
from pathlib import Path
from types import SimpleNamespace


sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import board_shape_latency as bench  # noqa: E402


def opts(tmp_path):
    return SimpleNamespace(
        teacher=tmp_path / "teacher",
        runs=tmp_path,
        task="rotten_tomatoes",
        max_seq_len=64,
        export_seq_len=128,
        max_latency_ms=97.4,
        shape_candidates=3,
        search_epochs=0.5,
        search_finetune_epochs=1.0,
        board="nucleo-f746zg",
        recipe="logits",
        rank_by="board",
        tiny_from=None,
        earlier_summary=None,
        embedding_bits=None,
        search_summary=None,
        seeds=[0],
    )


def searched(tmp_path, chosen="L1-H128-A2-F512-w4"):
    (tmp_path / "auto-s0").mkdir()
    (tmp_path / "auto-s0" / "metrics.json").write_text(json.dumps({"shape_search": {"chosen": chosen}}))


def test_seed_0_searches_the_other_seeds_distill_its_shape_and_bert_tiny_gets_the_candidates_recipe(tmp_path):
    o = opts(tmp_path)
    auto = bench.student_command(o, bench.CHOSEN, 0)
    assert auto[auto.index("--preset") + 1] == "auto" and auto[auto.index("--max-latency-ms") + 1] == "97.4"
    assert auto[auto.index("--export-seq-len") + 1] == "128" and auto[auto.index("--out") + 1] == str(
        tmp_path / "auto-s0"
    )
    assert auto[auto.index("--rank-by") + 1] == "board"
    assert bench.student_command(o, bench.CHOSEN, 2) is None  # the shape is not known before the search ends
    searched(tmp_path)
    again = bench.student_command(o, bench.CHOSEN, 2)
    assert (
        again[again.index("--preset") + 1] == "L1-H128-A2-F512" and again[again.index("--qat-weight-bits") + 1] == "4"
    )
    assert again[again.index("--seed") + 1] == "2" and "--board" not in again
    assert again[again.index("--recipe") + 1] == "logits"  # auto's recipe, not a named shape's default
    tiny = bench.student_command(o, bench.TINY, 2)
    assert tiny[tiny.index("--recipe") + 1] == "logits" and tiny[tiny.index("--qat-weight-bits") + 1] == "8"
    assert tiny[:9] == again[:9]
    (search_a, evaluate_a), (search_b, evaluate_b) = ([c for c, _ in bench.board_commands(o, arm, 2)]
                                                      for arm in (bench.CHOSEN, bench.TINY))  # fmt: skip
    assert search_a[search_a.index("--export-seq-len") + 1] == "128" == evaluate_a[evaluate_a.index("--seq-len") + 1]
    assert search_a[search_a.index("--weight-bits") + 1] == "4" == evaluate_a[evaluate_a.index("--weight-bits") + 1]
    assert search_b[search_b.index("--weight-bits") + 1] == "8" == search_b[search_b.index("--qat-weight-bits") + 1]
    assert search_a[search_a.index("--checkpoint") + 1] == str(tmp_path / "chosen-s2")
    assert (
        len(bench.board_commands(o, bench.TINY, 0)) == 3 and bench.board_commands(o, bench.TINY, 0)[2][0][0] == "export"
    )


def test_another_board_recipe_and_no_cap_reach_every_command_of_both_arms(tmp_path):
    o = opts(tmp_path)
    o.board, o.recipe, o.max_latency_ms = "nucleo-f767zi", "layers", 0
    auto = bench.student_command(o, bench.CHOSEN, 0)
    assert auto[auto.index("--board") + 1] == "nucleo-f767zi" and "--max-latency-ms" not in auto
    searched(tmp_path)
    for arm in (bench.CHOSEN, bench.TINY):
        student = bench.student_command(o, arm, 1)
        assert student[student.index("--recipe") + 1] == "layers"
        for command, _ in bench.board_commands(o, arm, 0):
            assert "--board" not in command or command[command.index("--board") + 1] == "nucleo-f767zi"


def test_a_search_ranked_on_the_board_path_lends_its_chosen_candidates_board_path_to_seed_0(tmp_path):
    o = opts(tmp_path)
    searched(tmp_path)
    assert bench.board_folder(o, bench.CHOSEN, 0) == tmp_path / "board" / "chosen-s0"  # ranked on the students
    ranked = tmp_path / "auto-s0" / "shapes" / "L1-H128-A2-F512-w4" / "board"
    (ranked / "model").mkdir(parents=True)
    (ranked / "model" / "metrics.json").write_text(json.dumps({"stages": [{"steps": 7}]}))
    labels = [1, 0, 1]
    split = {"labels": labels, "predictions": {"int8+w4": [1, 1, 1], "float": labels}}
    evaluation = {"by_split": {"validation": split, "test": split}, "seconds": 95.0}
    (ranked / "evaluate.json").write_text(json.dumps(evaluation))
    assert bench.board_folder(o, bench.CHOSEN, 0) == ranked
    assert bench.board_folder(o, bench.CHOSEN, 1) == tmp_path / "board" / "chosen-s1"
    assert bench.board_folder(o, bench.TINY, 0) == tmp_path / "board" / "bert-tiny-s0"
    steps = bench.board_commands(o, bench.CHOSEN, 0)
    assert [done for _, done in steps][:2] == [ranked / "model" / "metrics.json", ranked / "evaluate.json"]
    assert steps[2][1] == ranked / "export" / "report.json"  # only the export is left to run
    record = bench.board_record(ranked, 4)
    assert (record["search_seconds"], record["evaluate_seconds"], record["steps"]) == (95.0, 0.0, 7)


def test_another_boards_bert_tiny_students_take_this_boards_path_untrained(tmp_path, monkeypatch):
    o = opts(tmp_path / "f767zi")
    o.tiny_from = tmp_path / "f746zg"
    o.runs.mkdir()
    searched(o.runs)
    (o.tiny_from / "bert-tiny-s1").mkdir(parents=True)
    (o.tiny_from / "bert-tiny-s1" / "metrics.json").touch()  # seed 1's student done there, seed 2's not yet
    ran = []
    monkeypatch.setattr(bench, "chosen_shape", lambda _: ("L1-H128-A2-F512", 4))
    monkeypatch.setattr(bench.steps, "run_step", lambda command, done, *_: ran.append((command, done)) or 1.0)
    o.start_before = None
    bench.run(o, [1, 2])
    students = [c for c, _ in ran if c[0] == "distill"]
    assert [c[c.index("--preset") + 1] for c in students] == ["L1-H128-A2-F512"] * 2  # no BERT-tiny trained
    searches = [c for c, _ in ran if c[0] == "search"]
    checkpoints = [c[c.index("--checkpoint") + 1] for c in searches]
    assert str(o.tiny_from / "bert-tiny-s1") in checkpoints and str(o.tiny_from / "bert-tiny-s2") not in checkpoints
    tiny_search = searches[checkpoints.index(str(o.tiny_from / "bert-tiny-s1"))]
    assert tiny_search[tiny_search.index("--out") + 1] == str(o.runs / "board" / "bert-tiny-s1" / "model")


def test_a_search_that_chose_bert_tiny_at_int8_takes_the_baselines_runs_past_seed_0(tmp_path, monkeypatch):
    from tflm_mcubert.export.shape_search import ANCHOR
    from tflm_mcubert.model.config import preset, shape_name

    assert bench.TINY_SHAPE == (shape_name(preset(ANCHOR)), 8)  # the search's anchor at int8
    o = opts(tmp_path)
    searched(tmp_path, chosen="L2-H128-A2-F512-w8")
    assert bench.student_folder(o, bench.CHOSEN, 0) == tmp_path / "auto-s0"  # the search's own
    assert (
        bench.student_folder(o, bench.CHOSEN, 2) == bench.student_folder(o, bench.TINY, 2) == tmp_path / "bert-tiny-s2"
    )
    assert bench.board_folder(o, bench.CHOSEN, 2) == tmp_path / "board" / "bert-tiny-s2"
    ranked = tmp_path / "auto-s0" / "shapes" / "L2-H128-A2-F512-w8" / "board"
    ranked.mkdir(parents=True)
    (ranked / "evaluate.json").write_text("{}")
    assert bench.board_folder(o, bench.TINY, 0) == bench.board_folder(o, bench.CHOSEN, 0) == ranked  # one path
    ran = []
    monkeypatch.setattr(bench.steps, "run_step", lambda command, done, name, *_: ran.append(name) or 1.0)
    o.start_before = None
    bench.run(o, [1])
    assert ran == ["[bert-tiny seed 1] distill"]  # trained once, for both arms
    (tmp_path / "w4").mkdir()
    searched(tmp_path / "w4", chosen="L2-H128-A2-F512-w4")
    o.runs = tmp_path / "w4"
    assert bench.student_folder(o, bench.CHOSEN, 2) == tmp_path / "w4" / "chosen-s2"  # int4: another model


def test_bert_tiny_at_seed_0_is_the_searchs_anchor_candidate_once_trained(tmp_path):
    o = opts(tmp_path)
    assert bench.student_folder(o, bench.TINY, 0) == tmp_path / "bert-tiny-s0"
    anchor = tmp_path / "auto-s0" / "shapes" / "L2-H128-A2-F512-w8"
    anchor.mkdir(parents=True)
    (anchor / "metrics.json").write_text("{}")
    assert bench.student_folder(o, bench.TINY, 0) == anchor  # the same distill: not trained again
    assert bench.student_folder(o, bench.TINY, 1) == tmp_path / "bert-tiny-s1"
    assert bench.board_folder(o, bench.TINY, 0) == tmp_path / "board" / "bert-tiny-s0"  # this board's path
    (tmp_path / "bert-tiny-s0").mkdir()
    (tmp_path / "bert-tiny-s0" / "metrics.json").write_text("{}")
    assert bench.student_folder(o, bench.TINY, 0) == tmp_path / "bert-tiny-s0"  # one trained apart stays


def earlier_summary(tmp_path, o, seeds=(0, 1)):
    """A committed summary of `o`'s settings holding `seeds` of both arms and the search (chose int4 L1)."""
    rows = {arm: [{"seed": s, "arm": arm} for s in seeds] for arm in (bench.CHOSEN, bench.TINY)}
    checkpoints = {f"{arm}-s{s}": {"path": "x", "sha256": f"{arm}{s}"} for arm in rows for s in seeds}
    summary = {
        "settings": {**bench.settings(o), "commands": {}},
        "search": {"chosen": "L1-H128-A2-F512-w4", "candidates": []},
        "exports": {bench.CHOSEN: {"flash_bytes": 1}, bench.TINY: {"flash_bytes": 2}},
        "runs": rows,
        "provenance": {"commit": "abc", "environment": {}, "checkpoints": {"teacher": {}, **checkpoints}},
    }
    path = tmp_path / "earlier.json"
    path.write_text(json.dumps(summary))
    return path


def test_an_earlier_summarys_seeds_are_not_run_again_and_its_search_names_the_shape(tmp_path, monkeypatch):
    o = opts(tmp_path / "runs")
    o.earlier_summary = bench.earlier.load(earlier_summary(tmp_path, o), bench.settings(o))
    assert bench.chosen_shape(o) == ("L1-H128-A2-F512", 4)  # no auto-s0 here: the earlier search's choice
    ran = []
    monkeypatch.setattr(bench.steps, "run_step", lambda command, done, name, *_: ran.append(name) or 1.0)
    o.start_before = None
    bench.run(o, [0, 1, 2])
    assert ran == ["[chosen seed 2] distill", "[bert-tiny seed 2] distill"]  # seeds 0 and 1 ran elsewhere
    assert bench.exports_record(o, {bench.CHOSEN: [], bench.TINY: []})[bench.TINY] == {"flash_bytes": 2}


def test_merged_runs_keep_the_local_ones_and_the_provenance_of_what_they_took(tmp_path):
    import earlier

    o = opts(tmp_path)
    previous = earlier.load(earlier_summary(tmp_path, o, seeds=(0, 1, 2)), bench.settings(o))
    local = {bench.CHOSEN: [{"seed": 1, "arm": "here"}, {"seed": 3, "arm": "here"}], bench.TINY: []}
    merged = earlier.merge_runs(local, previous, [0, 1, 3])
    assert [(r["seed"], r["arm"]) for r in merged[bench.CHOSEN]] == [(0, bench.CHOSEN), (1, "here"), (3, "here")]
    assert [r["seed"] for r in merged[bench.TINY]] == [0, 1]  # seed 2 was not asked for
    roles = earlier.taken_roles(local, merged)
    assert roles == {"chosen-s0", "bert-tiny-s0", "bert-tiny-s1"}
    kept = earlier.merge_provenance({"commit": "here"}, previous, roles)["earlier"]
    assert [e["commit"] for e in kept] == ["abc"]
    assert set(kept[0]["checkpoints"]) == roles | {"teacher"}
    again = earlier.merge_provenance(
        {"commit": "later"}, {"provenance": {"commit": "here", "checkpoints": {}, "earlier": kept}}, {"chosen-s0"}
    )
    assert [(e["commit"], set(e["checkpoints"])) for e in again["earlier"]] == [("abc", {"chosen-s0", "teacher"})]
    assert earlier.merge_provenance({"commit": "here"}, previous, set()) == {"commit": "here"}  # nothing taken


def test_an_earlier_summary_with_other_settings_or_no_runs_is_refused(tmp_path):
    import earlier
    import pytest

    o = opts(tmp_path)
    path = earlier_summary(tmp_path, o)
    with pytest.raises(SystemExit, match="other settings.*'board': \\('nucleo-f746zg', 'nucleo-f767zi'\\)"):
        earlier.load(path, {**bench.settings(o), "board": "nucleo-f767zi"})
    path.write_text("{}")
    with pytest.raises(SystemExit, match="no 'runs'"):
        earlier.load(path, bench.settings(o))
    path.write_text("{not json")
    with pytest.raises(SystemExit, match="not a readable summary"):
        earlier.load(path, bench.settings(o))
    assert earlier.load(None, bench.settings(o)) is None


def test_int4_word_tables_take_every_board_path_command_and_their_own_folder_from_another_summarys_search(
    tmp_path, monkeypatch
):
    import pytest

    o = opts(tmp_path / "runs")
    committed = earlier_summary(tmp_path, o)  # made with search's default tables: its search names the shape
    argv = ["--runs", str(o.runs), "--seeds", "5,6", "--embedding-bits", "4", "--search-from", str(committed)]
    _, args = bench.parse_arguments(argv)
    assert bench.chosen_shape(args) == ("L1-H128-A2-F512", 4) and args.earlier_summary is None
    with pytest.raises(SystemExit, match="other settings.*'embedding_bits': \\(None, 4\\)"):
        bench.parse_arguments(argv + ["--earlier", str(committed)])  # its runs are another comparison's
    with pytest.raises(SystemExit, match="other settings.*'board'"):
        bench.parse_arguments(argv + ["--board", "nucleo-f767zi"])  # its search priced another board
    for arm, bits in ((bench.CHOSEN, "4"), (bench.TINY, "8")):
        assert bench.board_folder(args, arm, 5) == o.runs / "board-e4" / f"{arm}-s5"
        commands = [c for c, _ in bench.board_commands(args, arm, 5)]
        assert [c[0] for c in commands] == ["search", "evaluate", "export"]  # the first seed is exported
        for command in commands:
            assert command[command.index("--embedding-bits") + 1] == "4"
            assert command[command.index("--weight-bits") + 1] == bits
        assert [c[0] for c, _ in bench.board_commands(args, arm, 6)] == ["search", "evaluate"]
    monkeypatch.setattr(
        bench.distill_augment, "board_record", lambda folder, model: {"model": model, "search_seconds": 1}
    )
    assert (
        bench.board_record(tmp_path, 4, 4)["model"] == "int4+w4" and bench.board_record(tmp_path, 8)["model"] == "int8"
    )
    assert bench.settings(args)["embedding_bits"] == 4
