"""The shape search's figure: its Pareto front of dev accuracy against cost, and a PNG from a report."""

from __future__ import annotations

import pytest

from tflm_mcubert.export.shape_figure import accuracy_front, draw_shape_search


@pytest.mark.parametrize(
    "points, front",
    [
        ([(10, 70), (20, 75), (30, 80)], [(10, 70), (20, 75), (30, 80)]),  # each costlier one scores better
        ([(10, 78), (20, 75), (30, 80)], [(10, 78), (30, 80)]),  # the middle one is beaten on both
        ([(30, 80), (10, 80), (20, 70)], [(10, 80)]),  # equal accuracy: the cheaper wins
        ([(10, 70), (10, 75)], [(10, 75)]),  # equal cost: the more accurate
        ([(5, 60)], [(5, 60)]),
    ],
)
def test_the_front_keeps_what_no_other_candidate_beats_on_both(points, front):
    assert accuracy_front(points) == front


def candidate(shape, latency, flash, dev, chosen=False):
    return {"shape": shape, "latency_ms": latency, "flash_bytes": flash, "validation_accuracy": dev, "chosen": chosen}


@pytest.mark.parametrize("cap", [None, 100.0])
def test_a_report_draws_a_png(tmp_path, cap):
    report = {
        "board": "nucleo-f746zg",
        "seq_len": 128,
        "max_latency_ms": cap,
        "shapes_fitting": 13,
        "chosen": "L1-H96-A3-F192-w4",
        "candidates": [
            candidate("L1-H96-A3-F192-w4", 46.8, 148_316, 0.785, chosen=True),
            candidate("L1-H128-A2-F256-w4", 69.6, 194_396, 0.780),
        ],
    }
    path = draw_shape_search(report, tmp_path / "deep" / "figure.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000
