"""tflm_mcubert/schedule/kernel_cost.py: the fitted instruction formulas against fresh measurements
on the emulated Cortex-M7 (the check that they still describe the kernels: a kernel change that
moves the counts fails here until `python bench/kernel_cost.py --fit` is rerun), the planner
with the model, and the latency per board."""

from __future__ import annotations

import math

import pytest

from kernel_cases import attention_case, mlp_case
from tflm_mcubert.boards import BOARDS
from tflm_mcubert.ops import kernel_abi
from tflm_mcubert.schedule import kernel_cost, latency, planner
from tflm_mcubert.schedule.memory import Dims
from tflm_mcubert.schedule.cost import OpShape

TINY = Dims(hidden=128, heads=2, ffn=512, layers=2)
# The fit's own held-out error is below 0.25% (instructions); fresh shapes get 2x that.
TOLERANCE = 2 * kernel_cost.FIT_MAX_RELATIVE_ERROR["instructions"]


@pytest.fixture(scope="module")
def emulator(arm_images):
    pytest.importorskip("unicorn", reason="the `unicorn` package runs the Cortex-M builds")
    from tflm_mcubert.measure.arm_emulator import ArmEmulator

    return ArmEmulator(arm_images("cortex-m7"), "cortex-m7")


@pytest.mark.parametrize("s,d,h,t", [(40, 64, 2, 8), (33, 96, 3, 5), (64, 128, 2, 4)])
def test_attention_formula_matches_a_measurement(emulator, s, d, h, t):
    from tflm_mcubert.measure.arm_emulator import run_kernel

    case = attention_case(s, d, h, t, kind="realistic", mask="all", seed=9)
    run = run_kernel(emulator, case.call, count_instructions=True)
    assert run.status == kernel_abi.OK, run.message
    predicted = kernel_cost.predict(OpShape("attention", s, Dims(d, h, 4 * d, 1), t))
    assert abs(predicted / run.instructions - 1) < TOLERANCE, (predicted, run.instructions)


@pytest.mark.parametrize("s,d,f,t", [(40, 64, 256, 8), (33, 96, 384, 5), (64, 128, 512, 28)])
def test_mlp_formula_matches_a_measurement(emulator, s, d, f, t):
    from tflm_mcubert.measure.arm_emulator import run_kernel

    case = mlp_case(s, d, f, t, kind="realistic", seed=9)
    run = run_kernel(emulator, case.call, count_instructions=True)
    assert run.status == kernel_abi.OK, run.message
    predicted = kernel_cost.predict(OpShape("mlp", s, Dims(d, 1, f, 1), t))
    assert abs(predicted / run.instructions - 1) < TOLERANCE, (predicted, run.instructions)


def test_micro_kernel_events_cover_every_multiply_accumulate():
    """Each swept group is 4 K values of 4 rows: 16 MAC slots. So the formulas' main term is
    exactly the op's matmuls with rows padded to blocks of 4 and K to whole groups
    (s = 50 leaves a K tail of 2 in P.V, which the tail term counts)."""
    s, d, h, t, f = 50, 64, 2, 7, 256
    dh = d // h
    padded = sum(4 * math.ceil(n / 4) for n in [t] * (s // t) + [s % t])  # query rows
    key_rows = 4 * math.ceil(s / 4)
    attention = kernel_cost.attention_features(s, d, h, t)
    assert attention["micro_groups"] * 16 == (
        h * key_rows * 2 * dh * d  # K and V projections
        + h * padded * dh * d  # Q
        + h * padded * s * dh  # scores
        + h * padded * dh * (s // 4 * 4)  # P.V (whole groups)
        + padded * d * d
    )  # output projection
    assert attention["tail_macs"] == h * s * dh * (s % 4)
    mlp = kernel_cost.mlp_features(s, d, f, t)
    assert mlp["micro_groups"] * 16 == padded * 2 * d * f


def test_planner_takes_the_smallest_tile_among_the_equally_fast():
    budget = BOARDS["nucleo-f746zg"].arena_budget()
    plan = planner.plan_model(TINY, 128, budget, cost_model=kernel_cost.KernelCostModel())
    assert plan.tiles == {"attention": 4, "mlp": 4}
    exact = planner.plan_model(TINY, 128, budget, cost_model=kernel_cost.KernelCostModel(resolution=0))
    assert exact.planned_bytes > plan.planned_bytes  # larger tiles for a sub-0.5% gain
    for kind, t in exact.tiles.items():
        fast, small = (kernel_cost.predict(OpShape(kind, 128, TINY, x)) for x in (t, 4))
        assert fast <= small < fast * 1.005


def test_ragged_tiles_cost_more_than_multiples_of_four():
    costs = {t: kernel_cost.predict(OpShape("mlp", 128, TINY, t)) for t in (1, 2, 3, 4, 5, 8)}
    assert costs[1] > costs[2] > costs[3] > costs[4]
    assert costs[5] > costs[4] and abs(costs[8] / costs[4] - 1) < 0.005


def test_latency_per_board():
    tiles = {"attention": 4, "mlp": 4}
    estimates = {
        name: latency.predict_latency(TINY, 128, name, tiles=tiles)
        for name in BOARDS
        if BOARDS[name].core == "cortex-m7"
    }
    f746, f767, h7 = (estimates[n] for n in ("nucleo-f746zg", "nucleo-f767zi", "nucleo-h7a3zi-q"))
    assert f746.encoder_seconds == f767.encoder_seconds  # same core and clock
    assert math.isclose(h7.encoder_seconds * 280, f746.encoder_seconds * 216)
    report = f746.to_json()
    assert report["board"] == "nucleo-f746zg" and report["clock_hz"] == 216_000_000
    assert math.isclose(
        report["encoder_ms"], 2 * (report["per_layer"]["attention"]["ms"] + report["per_layer"]["mlp"]["ms"])
    )
    assert 0.05 < f746.encoder_seconds < 1.0
    with pytest.raises(ValueError, match="Cortex-M7"):
        from tflm_mcubert.boards import Board, MemoryRegion

        m4 = Board("m4", "x", "cortex-m4", 100_000_000, 1 << 20, (MemoryRegion("SRAM", 0, 1 << 17),))
        latency.predict_latency(TINY, 128, m4, tiles=tiles)
