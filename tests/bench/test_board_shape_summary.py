"""bench/board_shape_summary.py: the statistics and tables of the board-shape benchmark's summaries, made
from the runs' bits (synthetic here; the runs themselves are the benchmark's, not CI's)."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import board_shape_summary as tables  # noqa: E402
from results_bits import pack  # noqa: E402


def test_boards_are_named_by_their_part_number():
    assert tables.board_label("nucleo-h7a3zi-q") == "H7A3ZI-Q"


def test_the_ranking_table_marks_each_rankings_first_candidate_per_board():
    def row(shape, student, board, latency):
        accuracies = {"validation_accuracy": student, "test_accuracy": student - 0.02}
        on_board = {"validation_accuracy": board, "test_accuracy": board - 0.03, "seconds": 9.0}
        return {"shape": shape, "embedding_bytes": 2048, "latency_ms": latency, **accuracies, "board": on_board}

    def summary(board, rows, recipe="layers", task="rotten_tomatoes"):
        settings = {"task": task, "board": board, "recipe": recipe}
        return {"command": "bench", "settings": settings, "search": {"candidates": rows}}

    parted = summary("nucleo-f746zg", [row("L1-H96-A3-F192-w4", 0.78, 0.77, 46.8), row("L2-H256", 0.80, 0.73, 449)])
    agreed = summary(
        "nucleo-f767zi",
        task="party_speeches",
        rows=[row("L1-H96-A3-F192-w4", 0.79, 0.78, 46.8), row("L6-H192", 0.78, 0.70, 1131)],
    )
    del agreed["settings"]["recipe"]  # searched before --recipe reached --preset auto: logits
    agreed["search"]["candidates"].append(row("L2-H128-A2-F512-w8", 0.77, 0.69, 194.8))
    lines = tables.ranking_table([parted, agreed]).splitlines()
    assert lines[2] == (
        "| rotten_tomatoes | nucleo-f746zg | layers | L1-H96-A3-F192-w4 | 2.0 KB | 78.00 | 76.00 | 77.00 | 74.00 "
        "| the board path |"
    )
    assert (
        lines[4].startswith("| party_speeches | nucleo-f767zi | logits |")
        and "| L2-H128-A2-F512-w8 (BERT-tiny) |" in lines[6]
    )
    assert lines[3].endswith("| 80.00 | 78.00 | 73.00 | 70.00 | the float students |")
    assert lines[4].endswith("| the float students and the board path |") and lines[5].endswith("| - |")
    del agreed["search"]["candidates"][1]["board"]  # a search ranked on the students has no board path
    with pytest.raises(ValueError, match="no board-path accuracy"):
        tables.ranking_table([parted, agreed])


def synthetic_runs(rng, better: float) -> list[dict]:
    def bits(rate):
        return {split: pack(rng.random(400) < rate) for split in tables.SPLITS}

    return [
        {
            "seed": seed,
            "student": {"accuracy": {s: 75.0 + seed for s in tables.SPLITS}, "steps": 10, "seconds": 60.0},
            "board": {
                "search_seconds": 30.0,
                "evaluate_seconds": 6.0,
                "correct": {tables.INTEGER: bits(0.74 + better), tables.FLOAT: bits(0.75 + better)},
            }
            if seed < 4
            else None,
        }
        for seed in range(5)
    ]


def test_the_summary_is_recomputed_from_bits_and_pairs_only_the_seeds_both_arms_have():
    rng = np.random.default_rng(0)
    runs = {tables.CHOSEN: synthetic_runs(rng, 0.1), tables.TINY: synthetic_runs(rng, 0.0)}
    stats = tables.summarize(runs)
    integer = stats["arms"][tables.CHOSEN][tables.INTEGER]["test"]
    expected = [tables.bits_of(r, tables.INTEGER, "test").mean() * 100 for r in runs[tables.CHOSEN][:4]]
    assert integer["n"] == 4 and integer["mean"] == pytest.approx(np.mean(expected))
    assert stats["arms"][tables.TINY]["student"]["test"]["mean"] == pytest.approx(77.0)
    difference = stats["difference"][tables.INTEGER]
    assert difference["seeds"] == [0, 1, 2, 3] and difference["test"]["points"] > 5
    assert difference["test"]["paired_t_p"] < 0.05 and difference["test"]["paired_bootstrap_p"] < 0.05
    exports = {tables.CHOSEN: {"latency_ms": 93.8, "flash_bytes": 2048, "arena_bytes": 1024}, tables.TINY: None}
    table = tables.markdown(stats, exports, "L1-H128-A2-F512-w4")
    assert "| L1-H128-A2-F512-w4 (searched) | 93.8 | 2.0 KB | 1.0 KB | 5 |" in table and "| BERT-tiny | – |" in table
    settings = {"board": "nucleo-f746zg", "export_seq_len": 128}
    summary = {"runs": runs, "exports": exports, "search": {"chosen": "L1-H128-A2-F512-w4"}, "settings": settings}
    assert tables.markdown_table(summary) == table


def test_the_seeds_table_pairs_each_boards_choice_with_bert_tiny_and_computes_no_difference_for_the_same_runs():
    rng = np.random.default_rng(1)
    exports = {tables.CHOSEN: {"latency_ms": 1078.0}, tables.TINY: {"latency_ms": 179.0}}
    chosen = {"runs": {tables.CHOSEN: synthetic_runs(rng, 0.1)[:3], tables.TINY: synthetic_runs(rng, 0.0)}}
    chosen |= {
        "exports": exports,
        "search": {"chosen": "L6-H192-A3-F768-w4"},
        "settings": {"task": "party_speeches", "board": "nucleo-f767zi"},
    }
    tiny_runs = synthetic_runs(rng, 0.0)
    same_exports = {arm: {"latency_ms": 194.8} for arm in (tables.CHOSEN, tables.TINY)}
    same = {"runs": {tables.CHOSEN: tiny_runs, tables.TINY: tiny_runs}, "exports": same_exports}
    same |= {
        "search": {"chosen": "L2-H128-A2-F512-w8"},
        "settings": {"task": "rotten_tomatoes", "board": "nucleo-f746zg"},
    }
    rows = tables.seeds_table([chosen, same]).splitlines()
    assert len(rows) == 4 and rows[2].startswith(
        "| party_speeches | nucleo-f767zi | L6-H192-A3-F768-w4 | 1,078 / 179 | 3 |"
    )
    # BERT-tiny's cells count only the seeds the chosen shape has, and the difference is theirs
    paired = [tables.bits_of(r, tables.INTEGER, "test").mean() * 100 for r in chosen["runs"][tables.TINY][:3]]
    assert f"| {np.mean(paired):.2f} ± {np.std(paired, ddof=1):.2f} |" in rows[2]
    difference = tables.summarize(chosen["runs"])["difference"][tables.INTEGER]["test"]
    assert f"| {difference['points']:+.2f} (" in rows[2] and "(BERT-tiny)" not in rows[2]
    assert rows[3].startswith("| rotten_tomatoes | nucleo-f746zg | L2-H128-A2-F512-w8 (BERT-tiny) | 195 / 195 | 4 |")
    assert rows[3].endswith("| 0 (the same runs) | – |")


def test_the_teacher_is_quoted_from_its_recorded_accuracy():
    summary = {"teacher": {"checkpoint": "c", "seconds": 1.0, "accuracy": {"validation": 67.9104, "test": 69.0299}}}
    assert tables.teacher_accuracy(summary) == "67.91 dev / 69.03 test"


def test_the_tables_width_table_compares_both_widths_on_the_seeds_all_four_board_paths_have():
    rng = np.random.default_rng(2)

    def summary(chosen_gain, tiny_gain, chosen_seeds=5):
        runs = {
            tables.CHOSEN: synthetic_runs(rng, chosen_gain)[:chosen_seeds],
            tables.TINY: synthetic_runs(rng, tiny_gain),
        }
        # the students' hashes: seed 4's BERT-tiny was trained again for the int4 summary (another student)
        students = {f"{arm}-s{seed}": {"sha256": f"{arm}{seed}"} for arm in runs for seed in range(5)}
        provenance = {"checkpoints": {}, "earlier": [{"checkpoints": students}]}
        return {"runs": runs, "search": {"chosen": "L6-H192-A3-F768-w4"}, "provenance": provenance}

    narrow, wide = summary(0.15, 0.0), summary(0.0, 0.0, chosen_seeds=3)  # int4 tables help the searched shape
    narrow["provenance"]["checkpoints"]["bert-tiny-s4"] = {"sha256": "trained again"}
    assert tables.same_students(narrow, wide) == {0, 1, 2, 3}
    wide["provenance"]["earlier"][0]["checkpoints"].pop("chosen-s1")  # unknown: not taken for the same
    assert tables.same_students(narrow, wide) == {0, 2, 3}
    wide["provenance"]["earlier"][0]["checkpoints"]["chosen-s1"] = {"sha256": "chosen1"}
    lines = tables.tables_width_table(narrow, wide).splitlines()
    assert lines[2].startswith("| int4 tables | 3 |") and lines[3].startswith("| int8 tables | 3 |")  # seeds 0-2
    kept = {w: {arm: rows[:3] for arm, rows in s["runs"].items()} for w, s in (("int4", narrow), ("int8", wide))}
    test = tables.versus(kept["int4"][tables.CHOSEN], kept["int8"][tables.CHOSEN])[tables.INTEGER]["test"]
    assert lines[8].startswith("| L6-H192-A3-F768-w4 | 3 | ") and f"| {test['points']:+.2f} (" in lines[8]
    assert test["points"] > 10 and lines[9].startswith("| BERT-tiny | 3 |")
    at_int4 = tables.summarize(kept["int4"])["difference"][tables.INTEGER]["test"]
    assert f"| {at_int4['points']:+.2f} (" in lines[2]
    # per seed, the width whose integer model led on dev: int4 for the searched shape (15 points ahead)
    picked = {arm: tables.better_on_dev(kept, arm) for arm in (tables.CHOSEN, tables.TINY)}
    assert picked[tables.CHOSEN] == kept["int4"][tables.CHOSEN] and lines[4].startswith("| each arm's better on dev")
    for seed, run in enumerate(picked[tables.TINY]):
        dev = {w: tables.bits_of(kept[w][tables.TINY][seed], tables.INTEGER, "validation").mean() for w in kept}
        assert run is kept["int4" if dev["int4"] > dev["int8"] else "int8"][tables.TINY][seed]
    wide["search"]["chosen"] = "L2-H128-A2-F512-w8"
    with pytest.raises(ValueError, match="different shapes"):
        tables.tables_width_table(narrow, wide)
