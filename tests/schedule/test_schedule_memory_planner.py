"""Memory model and planner: targets, exactness of the plan, tile choice, baselines."""

import dataclasses

import pytest

from tflm_mcubert.boards import get_board
from tflm_mcubert.model.config import PRESETS
from tflm_mcubert.ops import attention, contract
from tflm_mcubert.schedule import memory, planner
from tflm_mcubert.schedule.cost import OpShape
from tflm_mcubert.schedule.kernel_cost import KernelCostModel
from tflm_mcubert.schedule.memory import Dims
from tflm_mcubert.schedule.planner import KIB

TINY, MINI = Dims.of(PRESETS["bert-tiny"]), Dims.of(PRESETS["bert-mini"])


TARGETS = [(TINY, 128, 44 * KIB), (TINY, 512, 170 * KIB), (MINI, 512, 298 * KIB)]


@pytest.mark.parametrize("dims,s,aim", TARGETS)
def test_planned_bytes_meet_the_targets(dims, s, aim):
    plan = planner.plan_model(dims, s, aim)
    assert plan.planned_bytes <= aim
    assert plan.tiles["attention"] >= 4 and plan.tiles["mlp"] >= 4  # no micro-kernel starvation


@pytest.mark.parametrize("dims,s", [(TINY, 128), (TINY, 512), (MINI, 512), (MINI, 77), (TINY, 1)])
@pytest.mark.parametrize("budget", [44 * KIB, 300 * KIB, 2048 * KIB])
def test_plan_is_exact_and_valid(dims, s, budget):
    try:
        plan = planner.plan_model(dims, s, budget)
    except planner.BudgetExceededError as exc:
        assert exc.minimum_bytes > budget
        return
    # Brute force: the arena size equals the largest set of simultaneously live buffers ...
    assert plan.planned_bytes == planner.live_peak(plan.buffers)
    # ... no two live-at-once buffers share a byte, and everything is aligned.
    for i, a in enumerate(plan.buffers):
        assert a.offset % 16 == 0 and a.nbytes % 16 == 0
        for b in plan.buffers[i + 1 :]:
            assert not (a.overlaps_in_time(b) and a.overlaps_in_space(b)), (a, b)
    # ... each op's live bytes are what the memory model says for that op.
    for op in plan.ops:
        assert op.live_bytes <= plan.planned_bytes <= plan.budget
        assert plan.buffer(op.scratch).nbytes >= op.scratch_bytes
    steps = memory.model_steps("mcubert", s, dims, plan.tiles["attention"], plan.tiles["mlp"])
    assert max(st.bytes for st in steps) == plan.planned_bytes


def test_the_chosen_tile_is_within_the_resolution_of_the_cheapest_that_fits():
    budget = 170 * KIB
    plan = planner.plan_model(TINY, 512, budget)
    cost = KernelCostModel()
    for kind, other in (("attention", "mlp"), ("mlp", "attention")):
        fitting = [
            t
            for t in range(1, 513)
            if planner.plan_model(TINY, 512, 10**9, tiles={kind: t, other: 1}).planned_bytes <= budget
        ]
        costs = {t: cost.cost(OpShape(kind, 512, TINY, t)) for t in fitting}
        assert costs[plan.tiles[kind]] <= min(costs.values()) * (1 + cost.resolution)
        exact = planner.plan_model(TINY, 512, budget, cost_model=KernelCostModel(resolution=0))
        assert costs[exact.tiles[kind]] == min(costs.values())


def test_cost_model_is_pluggable():
    class PreferSmallTiles:
        def cost(self, shape):
            return shape.tile

    plan = planner.plan_model(TINY, 128, 300 * KIB, cost_model=PreferSmallTiles())
    assert plan.tiles == {"attention": 1, "mlp": 1}


def test_budget_too_small_reports_the_minimum():
    minimum = planner.plan_model(MINI, 512, 10**9, tiles={"attention": 1, "mlp": 1}).planned_bytes
    with pytest.raises(planner.BudgetExceededError, match="attention at seq_len 512 needs") as info:
        planner.plan_model(MINI, 512, 200 * KIB)
    assert info.value.minimum_bytes <= minimum


def test_board_budgets():
    assert get_board("nucleo-f746zg").arena_budget() == 304 * KIB
    assert get_board("nucleo-f746zg").arena_budget(reserve=1 << 30) == 0
    plan = planner.plan_model(PRESETS["bert-tiny"], 512, get_board("nucleo-f746zg").arena_budget())
    assert plan.planned_bytes <= 304 * KIB  # the paper's headline: BERT-tiny, 512 tokens, F746
    with pytest.raises(Exception, match="unknown board"):
        get_board("esp32")


@pytest.mark.parametrize("dims", [TINY, MINI, Dims(96, 3, 384, 1), Dims(64, 1, 128, 1)])
@pytest.mark.parametrize("s,t", [(128, 4), (77, 5), (512, 8), (3, 3)])
def test_attention_scratch_is_tight_and_follows_the_formula(dims, s, t):
    scratch = attention.scratch_bytes(s, dims.hidden, dims.heads, t)
    # Tight: some phase of the op has every byte of the layout live at once.
    assert max(ph.bytes for ph in memory.attention_phases(s, dims, t)) == scratch
    # (2 + 1/h) s d + tile terms, up to per-region alignment.
    resident = s * dims.hidden + s
    formula = memory.attention_formula_bytes(s, dims, t)
    assert 0 <= (scratch + resident) - formula <= 16 * 10


def test_peak_is_two_plus_one_over_h_times_sd_plus_linear_terms():
    for dims in (TINY, MINI):
        for s in (128, 256, 512):
            big = (2 + 1 / dims.heads) * s * dims.hidden
            assert big < memory.model_peak("mcubert", s, dims, 4, 4) < big + 20 * s + 8 * KIB


def test_baseline_schedules_by_hand():
    s, d, h, f = 128, 128, 2, 512
    sd, m = s * d, s
    cmsis = max(5 * sd, 4 * sd + h * s * s, 2 * sd + 2 * h * s * s, 2 * sd + s * f) + m
    assert memory.model_peak("cmsis-nn", s, TINY) == cmsis
    burrello = max(2 * sd + 3 * s * (d // h) + s * s, 3 * sd, 2 * sd + s * f) + m
    assert memory.model_peak("burrello", s, TINY) == burrello
    flash = 8 * sd + 8 * s + 4 * 16 * 16 + m
    assert memory.model_peak("flash", s, TINY, t_attention=16) == flash


@pytest.mark.parametrize("dims", [TINY, MINI])
def test_mcubert_beats_every_baseline_and_scales_linearly(dims):
    peaks = {sch: [memory.model_peak(sch, s, dims, 4, 4) for s in (64, 128, 256, 512)] for sch in memory.SCHEDULES}
    for sch in ("cmsis-nn", "burrello", "flash"):
        assert all(ours * 1.6 < theirs for ours, theirs in zip(peaks["mcubert"], peaks[sch])), sch
    ours = peaks["mcubert"]
    assert ours[3] - ours[2] == pytest.approx(2 * (ours[2] - ours[1]), rel=0.05)  # linear in s


def test_mask_mode_and_limits_are_enforced():
    with pytest.raises(Exception, match="seq_len 2000"):
        planner.plan_model(TINY, 2000, 10**9)
    with pytest.raises(Exception, match="not a multiple"):
        planner.plan_model(dataclasses.replace(TINY, heads=3), 128, 10**9)
    assert contract.MAX_SEQ_LEN == 1024


def test_plan_op_kinds_are_the_contracts_kinds():
    from tflm_mcubert.ops.topology import ENCODER

    plan = planner.plan_model(TINY, 64, 10**9, output_bytes=2)
    assert {op.kind for op in plan.ops} == {d.kind for d in ENCODER.ops(TINY.layers, 1)}
    assert {op.kind for op in plan.ops} <= set(contract.KINDS.values())
    assert set(plan.tiles) == set(contract.TILED_KINDS)
    assert all(contract.CUSTOM_CODES[contract.KINDS[code]] == code for code in contract.KINDS)


def test_a_tile_for_an_unknown_kind_is_an_error():
    with pytest.raises(planner.UserError, match=r"no tile for op kind\(s\) \['embedding'\]"):
        planner.plan_model(TINY, 64, 10**9, tiles={"embedding": 2})


def test_one_planner_plans_an_exported_model_of_either_topology_from_its_nodes():
    """plan_of(model) of a read-back export reproduces the export's own plan: the encoder's (planned from its
    configuration before it had parameters) and the decoder's (its KV caches as state)."""
    from tests.export.mcubert_models import small_decoder_export, small_export
    from tflm_mcubert.ops.topology import DECODER
    from tflm_mcubert.tflite.mcubert_reader import read_model

    exported = small_export(16)
    encoder = read_model(exported.tflite).quantized
    assert planner.plan_of(encoder, exported.plan.budget) == exported.plan
    decoder = read_model(small_decoder_export(), DECODER).quantized
    plan = planner.plan_of(decoder, 1 << 20)
    caches = [b for b in plan.buffers if DECODER.is_state(b.name)]
    assert len(caches) == len(decoder.layers) and all(b.first_step == 0 for b in caches)
    assert all(b.last_step == len(plan.ops) - 1 for b in caches)
    assert plan.planned_bytes == read_model(small_decoder_export(), DECODER).planned_bytes
