"""The weights' learning rate over a search run (`compress/run_schedule.py`)."""

import dataclasses

import numpy as np
import pytest

from tflm_mcubert.compress.nas import SearchOptions
from tflm_mcubert.compress.run_schedule import RunSchedule
from tflm_mcubert.train.trainer import WarmupLinearDecay

TRAIN, BATCH = 1_000, 32  # 32 steps per epoch


def _rates(lr, steps: int) -> np.ndarray:
    return np.array([float(lr(k)) if callable(lr) else lr for k in range(steps)])


def _run(mode: str, schedule: str) -> tuple[RunSchedule, np.ndarray]:
    """The schedule and the learning rate of every weight update of the run, stage after stage."""
    opts = SearchOptions(mode=mode, epochs=0.5, finetune_epochs=1.0, lr=1e-3, lr_schedule=schedule)
    run = RunSchedule(opts, TRAIN, BATCH)
    stages = [run.search_stage_lr() for _ in range({"two-stage": 2, "adaptive": 0}[mode])]
    rates = [_rates(lr, run.stage_steps) for lr in stages] + [_rates(run.finetune_lr(), run.finetune_steps)]
    return run, np.concatenate(rates)


def test_the_default_runs_the_search_stages_at_the_peak_then_warms_up_and_decays_the_fine_tune():
    run, rates = _run("two-stage", "warmup-linear")
    assert (run.stage_steps, run.finetune_steps, run.total) == (16, 32, 64) and rates.size == 64
    assert np.all(rates[:32] == 1e-3)
    np.testing.assert_allclose(rates[32:], _rates(WarmupLinearDecay(1e-3, 32), 32))


def test_whole_run_is_one_curve_over_the_search_stages_and_the_fine_tune():
    run, rates = _run("two-stage", "whole-run")
    np.testing.assert_allclose(rates, _rates(WarmupLinearDecay(1e-3, 64), 64), rtol=1e-6)
    assert rates.argmax() < 8 and rates[-1] < rates[32] < rates[16]  # warm-up in stage 1, decay to the end


@pytest.mark.parametrize("schedule", ["warmup-linear", "whole-run"])
def test_a_baseline_fine_tunes_for_the_searchs_steps_on_the_fine_tunes_curve(schedule):
    run, rates = _run("adaptive", schedule)
    assert run.finetune_steps == run.total == 64 and np.ceil(run.finetune_epochs() * 32) == 64
    np.testing.assert_allclose(rates, _rates(WarmupLinearDecay(1e-3, 64), 64), rtol=1e-6)


def test_without_equal_steps_a_baseline_fine_tunes_for_its_own_epochs():
    opts = SearchOptions(mode="adaptive", epochs=0.5, finetune_epochs=1.0, equal_steps=False)
    run = RunSchedule(opts, TRAIN, BATCH)
    assert run.finetune_steps == 32 and run.finetune_epochs() == 1.0


def test_an_unknown_schedule_is_refused():
    from tflm_mcubert.errors import UserError

    opts = dataclasses.replace(SearchOptions(target_params=5_000), lr_schedule="cosine")
    with pytest.raises(UserError, match="whole-run"):
        opts.validate(100, 16)
