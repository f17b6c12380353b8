"""bench/board_shape_latency.py's cheap logic: the commands it runs per arm (the search at seed 0, its shape
at the other seeds, BERT-tiny with the candidates' recipe, one board path at the export's tokens) and the
summary's statistics and table made from the runs' bits (the runs themselves are the benchmark's, not CI's)."""

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import board_shape_latency as bench  # noqa: E402
from results_bits import pack  # noqa: E402


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
    assert bench.board_label("nucleo-h7a3zi-q") == "H7A3ZI-Q"


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


def test_the_ranking_table_marks_each_rankings_first_candidate_per_board():
    def row(shape, student, board, latency):
        accuracies = {"validation_accuracy": student, "test_accuracy": student - 0.02}
        on_board = {"validation_accuracy": board, "test_accuracy": board - 0.03, "seconds": 9.0}
        return {"shape": shape, "embedding_bytes": 2048, "latency_ms": latency, **accuracies, "board": on_board}

    def summary(board, rows, recipe="layers"):
        return {"command": "bench", "settings": {"board": board, "recipe": recipe}, "search": {"candidates": rows}}

    parted = summary("nucleo-f746zg", [row("L1-H96-A3-F192-w4", 0.78, 0.77, 46.8), row("L2-H256", 0.80, 0.73, 449)])
    agreed = summary("nucleo-f767zi", [row("L1-H96-A3-F192-w4", 0.79, 0.78, 46.8), row("L6-H192", 0.78, 0.70, 1131)])
    del agreed["settings"]["recipe"]  # searched before --recipe reached --preset auto: logits
    agreed["search"]["candidates"].append(row("L2-H128-A2-F512-w8", 0.77, 0.69, 194.8))
    lines = bench.ranking_table([parted, agreed]).splitlines()
    assert lines[2] == (
        "| nucleo-f746zg | layers | L1-H96-A3-F192-w4 | 2.0 KB | 78.00 | 76.00 | 77.00 | 74.00 | the board path |"
    )
    assert lines[4].startswith("| nucleo-f767zi | logits |") and "| L2-H128-A2-F512-w8 (BERT-tiny) |" in lines[6]
    assert lines[3].endswith("| 80.00 | 78.00 | 73.00 | 70.00 | the float students |")
    assert lines[4].endswith("| the float students and the board path |") and lines[5].endswith("| - |")
    del agreed["search"]["candidates"][1]["board"]  # a search ranked on the students has no board path
    with pytest.raises(ValueError, match="no board-path accuracy"):
        bench.ranking_table([parted, agreed])


def synthetic_runs(rng, better: float) -> list[dict]:
    def bits(rate):
        return {split: pack(rng.random(400) < rate) for split in bench.SPLITS}

    return [
        {
            "seed": seed,
            "student": {"accuracy": {s: 75.0 + seed for s in bench.SPLITS}, "steps": 10, "seconds": 60.0},
            "board": {
                "search_seconds": 30.0,
                "evaluate_seconds": 6.0,
                "correct": {bench.INTEGER: bits(0.74 + better), bench.FLOAT: bits(0.75 + better)},
            }
            if seed < 4
            else None,
        }
        for seed in range(5)
    ]


def test_the_summary_is_recomputed_from_bits_and_pairs_only_the_seeds_both_arms_have():
    rng = np.random.default_rng(0)
    runs = {bench.CHOSEN: synthetic_runs(rng, 0.1), bench.TINY: synthetic_runs(rng, 0.0)}
    stats = bench.summarize(runs)
    integer = stats["arms"][bench.CHOSEN][bench.INTEGER]["test"]
    expected = [bench.bits_of(r, bench.INTEGER, "test").mean() * 100 for r in runs[bench.CHOSEN][:4]]
    assert integer["n"] == 4 and integer["mean"] == pytest.approx(np.mean(expected))
    assert stats["arms"][bench.TINY]["student"]["test"]["mean"] == pytest.approx(77.0)
    difference = stats["difference"][bench.INTEGER]
    assert difference["seeds"] == [0, 1, 2, 3] and difference["test"]["points"] > 5
    assert difference["test"]["paired_t_p"] < 0.05 and difference["test"]["paired_bootstrap_p"] < 0.05
    exports = {bench.CHOSEN: {"latency_ms": 93.8, "flash_bytes": 2048, "arena_bytes": 1024}, bench.TINY: None}
    table = bench.markdown(stats, exports, "L1-H128-A2-F512-w4")
    assert "| L1-H128-A2-F512-w4 (searched) | 93.8 | 2.0 KB | 1.0 KB | 5 |" in table and "| BERT-tiny | – |" in table
    settings = {"board": "nucleo-f746zg", "export_seq_len": 128}
    summary = {"runs": runs, "exports": exports, "search": {"chosen": "L1-H128-A2-F512-w4"}, "settings": settings}
    assert bench.markdown_table(summary) == table


def test_the_seeds_table_pairs_each_boards_choice_with_bert_tiny_and_computes_no_difference_for_the_same_runs():
    rng = np.random.default_rng(1)
    exports = {bench.CHOSEN: {"latency_ms": 1078.0}, bench.TINY: {"latency_ms": 179.0}}
    chosen = {"runs": {bench.CHOSEN: synthetic_runs(rng, 0.1)[:3], bench.TINY: synthetic_runs(rng, 0.0)}}
    chosen |= {"exports": exports, "search": {"chosen": "L6-H192-A3-F768-w4"}, "settings": {"board": "nucleo-f767zi"}}
    tiny_runs = synthetic_runs(rng, 0.0)
    same_exports = {arm: {"latency_ms": 194.8} for arm in (bench.CHOSEN, bench.TINY)}
    same = {"runs": {bench.CHOSEN: tiny_runs, bench.TINY: tiny_runs}, "exports": same_exports}
    same |= {"search": {"chosen": "L2-H128-A2-F512-w8"}, "settings": {"board": "nucleo-f746zg"}}
    rows = bench.seeds_table([chosen, same]).splitlines()
    assert len(rows) == 4 and rows[2].startswith("| nucleo-f767zi | L6-H192-A3-F768-w4 | 1,078 / 179 | 3 |")
    # BERT-tiny's cells count only the seeds the chosen shape has, and the difference is theirs
    paired = [bench.bits_of(r, bench.INTEGER, "test").mean() * 100 for r in chosen["runs"][bench.TINY][:3]]
    assert f"| {np.mean(paired):.2f} ± {np.std(paired, ddof=1):.2f} |" in rows[2]
    difference = bench.summarize(chosen["runs"])["difference"][bench.INTEGER]["test"]
    assert f"| {difference['points']:+.2f} (" in rows[2] and "(BERT-tiny)" not in rows[2]
    assert rows[3].startswith("| nucleo-f746zg | L2-H128-A2-F512-w8 (BERT-tiny) | 195 / 195 | 4 |")
    assert rows[3].endswith("| 0 (the same runs) | – |")
