"""bench/board_shapes.py's cheap logic: one policy for every board (the distill and its board path at the
chosen shape's weight width), the per-board table and reference shapes made from the runs' bits, and the
package's data/board_shapes.json, which `boards` prints, kept equal to the committed summary's (the runs
themselves are the benchmark's, not CI's)."""

import json
import sys
from importlib import resources
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
import board_shapes as bench  # noqa: E402
from results_bits import pack  # noqa: E402

from tflm_mcubert.boards import BOARDS  # noqa: E402
from tflm_mcubert.schedule.latency import FITTED_CORE  # noqa: E402

SUMMARY = BENCH / "results" / "board_shapes.json"


def opts(tmp_path):
    return SimpleNamespace(
        teacher=tmp_path / "teacher",
        runs=tmp_path,
        task="rotten_tomatoes",
        max_seq_len=64,
        export_seq_len=128,
        max_latency_ms=100.0,
        shape_candidates=3,
        search_epochs=0.5,
        search_finetune_epochs=1.0,
        recipe="logits",
        rank_by="student",
    )


def test_the_boards_are_those_the_shape_search_prices():
    assert set(bench.BOARDS) == {name for name, board in BOARDS.items() if board.core == FITTED_CORE}


def test_every_board_gets_the_same_search_and_its_choice_the_board_path_at_its_weight_width(tmp_path):
    o = opts(tmp_path)
    for board in bench.BOARDS:
        distill = bench.distill_command(o, board)
        assert distill[distill.index("--board") + 1] == board and distill[distill.index("--preset") + 1] == "auto"
        assert distill[distill.index("--max-latency-ms") + 1] == "100"
        assert distill[distill.index("--export-seq-len") + 1] == "128" and distill[distill.index("--seed") + 1] == "0"
        assert distill[distill.index("--out") + 1] == str(tmp_path / board / "student")
        assert distill[distill.index("--rank-by") + 1] == "student"  # the policy the published table ranked with
    assert bench.chosen(o, "nucleo-h7a3zi-q") is None
    student = tmp_path / "nucleo-h7a3zi-q" / "student"
    student.mkdir(parents=True)
    (student / "metrics.json").write_text(json.dumps({"shape_search": {"chosen": "L2-H96-A3-F384-w4"}}))
    assert bench.chosen(o, "nucleo-h7a3zi-q") == ("L2-H96-A3-F384", 4)
    (search, _), (evaluate, _), (export, done) = bench.board_commands(o, "nucleo-h7a3zi-q")
    assert search[search.index("--board") + 1] == "nucleo-h7a3zi-q" == export[export.index("--board") + 1]
    assert search[search.index("--weight-bits") + 1] == "4" == search[search.index("--qat-weight-bits") + 1]
    assert evaluate[evaluate.index("--weight-bits") + 1] == "4" == export[export.index("--weight-bits") + 1]
    assert search[search.index("--checkpoint") + 1] == str(student)
    assert evaluate[evaluate.index("--seq-len") + 1] == "128" == export[export.index("--seq-len") + 1]
    assert done == tmp_path / "nucleo-h7a3zi-q" / "board" / "export" / "report.json"


def synthetic_summary() -> dict:
    rng = np.random.default_rng(0)
    candidates = [
        {"shape": "L1-H96-A3-F192-w4", "validation_accuracy": 0.78, "chosen": False},
        {"shape": "L2-H96-A3-F384-w4", "validation_accuracy": 0.79, "chosen": True},
    ]
    entry = {
        "shape": "L2-H96-A3-F384",
        "weight_bits": 4,
        "search": {"wall_seconds": 600.0, "candidates": candidates},
        "integer_model": {"correct": {split: pack(rng.random(400) < 0.75) for split in bench.SPLITS}},
        "export": {"latency_ms": 96.84, "arena_bytes": 2048, "flash_bytes": 1024 * 1024},
    }
    settings = {"task": "rotten_tomatoes", "seq_len": 128, "max_latency_ms": 100.0, "seed": 0}
    return {"settings": settings, "boards": {"nucleo-h7a3zi-q": entry, "nucleo-f767zi": None}}


def test_the_table_and_the_reference_shapes_are_recomputed_from_bits():
    summary = synthetic_summary()
    entry = summary["boards"]["nucleo-h7a3zi-q"]
    dev = bench.accuracy_of(entry, "validation")
    table = bench.markdown_table(summary)
    assert f"| nucleo-h7a3zi-q | L2-H96-A3-F384-w4 | {dev:.2f} |" in table
    assert "| 96.8 | 2.0 KB | 1,024.0 KB | L1-H96-A3-F192-w4 78.00, **L2-H96-A3-F384-w4** 79.00 | 10.0 |" in table
    assert "| nucleo-f767zi | – |" in table
    reference = bench.reference(summary)
    assert set(reference["boards"]) == {"nucleo-h7a3zi-q"}  # only the boards whose board path finished
    shape = reference["boards"]["nucleo-h7a3zi-q"]
    assert shape["shape"] == "L2-H96-A3-F384-w4" and shape["dev_accuracy"] == pytest.approx(dev, abs=0.005)
    assert shape["latency_ms"] == 96.8 and shape["candidates"] == {"L1-H96-A3-F192-w4": 78.0, "L2-H96-A3-F384-w4": 79.0}


def test_the_package_ships_the_committed_summarys_reference_shapes():
    """`boards` reads data/board_shapes.json, never bench/: it must say what the summary says."""
    summary = json.loads(SUMMARY.read_text())
    shipped = json.loads(resources.files("tflm_mcubert.data").joinpath("board_shapes.json").read_text())
    assert shipped == bench.reference(summary)
    assert set(shipped["boards"]) <= set(bench.BOARDS)
    assert "+changes" not in summary["provenance"]["commit"]


def test_each_board_of_the_committed_summary_is_drawn_as_distill_draws_it(tmp_path):
    summary = json.loads(SUMMARY.read_text())
    paths = bench.figures(summary, tmp_path)
    assert [p.name for p in paths] == [f"board_shapes_{board}.png" for board, e in summary["boards"].items() if e]
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in paths)
