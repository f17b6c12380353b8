"""`distill --preset auto`'s choice of survivors and of the winner, on made-up prices and metrics (no training)."""

from __future__ import annotations

import json

import pytest

from tflm_mcubert.errors import UserError
from tflm_mcubert.export import shape_search
from tflm_mcubert.export.shape_search import encoder_params, pareto_front, plan_search, run_shape_search, spread
from tflm_mcubert.export.shape_space import Priced, Shape


def priced(layers, hidden, latency, *, fits=True, bits=8) -> Priced:
    return Priced(
        Shape(layers, hidden, hidden // 32, 2 * hidden, bits), 1000, 500, 10 if fits else None, 100, True, latency
    )


SPACE = [
    priced(1, 96, 1.0),
    priced(1, 128, 2.0),
    priced(2, 96, 2.5),  # two layers of 96 hold more parameters than one of 128
    priced(1, 128, 3.0, bits=4),  # slower and no larger than L1-H128 at int8: off the front
    priced(2, 128, 4.0),
    priced(4, 128, 8.0),
    priced(6, 320, 9.0, fits=False),  # does not fit: never a candidate
]


def test_the_front_keeps_only_shapes_no_other_beats_on_latency_and_size():
    front = pareto_front([p for p in SPACE if p.fits])
    assert [p.shape.name for p in front] == [
        "L1-H96-A3-F192-w8",
        "L1-H128-A4-F256-w8",
        "L2-H96-A3-F192-w8",
        "L2-H128-A4-F256-w8",
        "L4-H128-A4-F256-w8",
    ]
    params = [encoder_params(p.shape) for p in front]
    assert params == sorted(params) and len(set(params)) == len(params)


def test_the_survivors_spread_from_the_fastest_to_the_largest():
    front = pareto_front([p for p in SPACE if p.fits])
    assert spread(front, 3) == [front[0], front[2], front[4]]
    assert spread(front, 2) == [front[0], front[4]]
    assert spread(front, 1) == [front[4]]
    assert spread(front, 9) == front


def test_the_plan_honours_the_latency_cap_and_counts_what_fits():
    plan = plan_search(SPACE, "b", 64, count=3, max_latency_ms=2.5, training={})
    assert [p.shape.name for p in plan.candidates] == ["L1-H96-A3-F192-w8", "L1-H128-A4-F256-w8", "L2-H96-A3-F192-w8"]
    assert (plan.priced, plan.fitting) == (7, 3)


def bert_tiny(latency, *, bits=8, fits=True) -> Priced:
    return Priced(Shape(2, 128, 2, 512, bits), 1000, 500, 10 if fits else None, 100, True, latency)


def names(plan) -> list[str]:
    return [p.shape.name for p in plan.candidates]


def test_the_default_student_joins_the_spread_where_the_board_admits_it():
    """BERT-tiny (distill's default preset) is slower than L4-H128 and smaller: off the front, yet a
    candidate, so the search never chooses below it unmeasured; at its export's default int8 weights."""
    space = [*SPACE, bert_tiny(8.5), bert_tiny(8.6, bits=4)]
    plan = plan_search(space, "b", 64, count=3, max_latency_ms=None, training={})
    spread_names = ["L1-H96-A3-F192-w8", "L2-H96-A3-F192-w8", "L4-H128-A4-F256-w8"]
    assert names(plan) == [*spread_names, "L2-H128-A2-F512-w8"]  # fastest first
    assert plan.to_json()["anchor"] == "L2-H128-A2-F512-w8" and plan.fitting == 8
    int4_only = [*SPACE, bert_tiny(8.5, fits=False), bert_tiny(8.6, bits=4)]
    assert names(plan_search(int4_only, "b", 64, count=3, max_latency_ms=None, training={}))[-1] == (
        "L2-H128-A2-F512-w4"
    )
    capped = plan_search(space, "b", 64, count=3, max_latency_ms=8.0, training={})
    assert names(capped) == spread_names and "anchor" not in capped.to_json()  # over the cap: as before
    on_front = plan_search([*SPACE, bert_tiny(3.5)], "b", 64, count=9, max_latency_ms=None, training={})
    assert names(on_front).count("L2-H128-A2-F512-w8") == 1


@pytest.mark.parametrize(
    "space, cap, fragment",
    [
        ([priced(1, 96, 1.0, fits=False)], None, "no student shape fits b at 64 tokens"),
        (SPACE, 0.5, "--max-latency-ms 0.5: no shape that fits b at 64 tokens is that fast (the fastest, "
         "L1-H96-A3-F192-w8, is estimated at 1.0 ms)"),
        (SPACE, -1.0, "--max-latency-ms must be positive"),
    ],
)  # fmt: skip
def test_a_plan_nothing_survives_is_refused_with_the_reason(space, cap, fragment):
    with pytest.raises(UserError) as caught:
        plan_search(space, "b", 64, count=3, max_latency_ms=cap, training={})
    assert fragment in str(caught.value)


def fake_training(accuracies: dict, calls: list):
    """A `train_at` writing a checkpoint-like folder whose dev accuracy is `accuracies[shape name]`, and
    checking that each candidate after the first finds the teacher logits an earlier one cached."""
    first = next(iter(accuracies))

    def train_at(shape, folder):
        shared = folder / "run" / "teacher-logits-train.npz"
        assert shared.exists() or shape.name == first, "an earlier candidate's teacher logits are not offered"
        calls.append(shape.name)
        shared.parent.mkdir(parents=True, exist_ok=True)
        shared.write_bytes(b"logits")
        (folder / "config.json").write_text(json.dumps({"shape": shape.name}))
        metrics = {"validation_accuracy": accuracies[shape.name], "test_accuracy": 0.5, "seconds": 1.0}
        metrics["stages"] = [{"steps": 7}]
        (folder / "metrics.json").write_text(json.dumps(metrics))
        return metrics

    return train_at


@pytest.mark.parametrize(
    "accuracies, chosen",
    [
        ({"L1-H96-A3-F192-w8": 0.6, "L1-H128-A4-F256-w8": 0.8, "L2-H96-A3-F192-w8": 0.7}, "L1-H128-A4-F256-w8"),
        ({"L1-H96-A3-F192-w8": 0.7, "L1-H128-A4-F256-w8": 0.6, "L2-H96-A3-F192-w8": 0.7}, "L1-H96-A3-F192-w8"),
    ],
    ids=["best dev", "tie: the faster"],
)
def test_the_best_on_dev_is_written_and_a_resumed_search_trains_nothing(tmp_path, accuracies, chosen):
    plan = plan_search(SPACE, "b", 64, count=3, max_latency_ms=2.5, training={"lr": 1})
    calls: list = []
    metrics = run_shape_search(plan, tmp_path, fake_training(accuracies, calls))
    assert calls == list(accuracies)
    report = metrics["shape_search"]
    assert report["chosen"] == chosen
    assert [c["shape"] for c in report["candidates"] if c["chosen"]] == [chosen]
    assert metrics["validation_accuracy"] == accuracies[chosen]
    assert json.loads((tmp_path / "config.json").read_text()) == {"shape": chosen}
    assert json.loads((tmp_path / "metrics.json").read_text())["shape_search"]["chosen"] == chosen

    with pytest.raises(UserError, match="holds an earlier shape search; pass --resume"):
        run_shape_search(plan, tmp_path, fake_training(accuracies, calls))
    calls.clear()
    again = run_shape_search(plan, tmp_path, fake_training(accuracies, calls), resume=True)
    assert calls == [] and again["shape_search"]["candidates"] == report["candidates"]

    (tmp_path / shape_search.SHAPES_DIR / chosen / "metrics.json").unlink()  # interrupted before it finished
    run_shape_search(plan, tmp_path, fake_training(accuracies, calls), resume=True)
    assert calls == [chosen]

    other = plan_search(SPACE, "b", 64, count=2, max_latency_ms=2.5, training={"lr": 1})
    with pytest.raises(UserError, match=r"different shape search \(candidates, count changed\)"):
        run_shape_search(other, tmp_path, fake_training(accuracies, calls), resume=True)
