"""Instruction and cycle costs of the MCUBERT kernels (DSP path, Cortex-M7), fitted to measurements.

    from tflm_mcubert.schedule.kernel_cost import KernelCostModel
    plan = plan_model(config, seq_len, budget, cost_model=KernelCostModel())

Each op's cost is a linear formula over the counts of the events of its loop nest — row blocks,
micro-kernel calls, 4-value groups swept, loop iterations, widened groups, outputs stored by each
output stage (full blocks take a straight-line path, ragged ones a loop), softmax keys, LayerNorm
elements... `op_features` takes those counts from the op's OpDef.cost_features (ops/kernel_events.py,
derived from the shape as custom_ops/src iterates); the per-event coefficients below are
least-squares fits to counts measured on the emulated core (`python bench/kernel_cost.py --fit`
regenerates them and prints their error).
The formulas assume what realistic layers have: head size, hidden and ffn multiples of 4,
requantization shifts <= -2 (the fast output path), mask mode 0 with every key attending.

Cycles are the instruction-class ESTIMATE of measure/instruction_classes.py (a throughput model of
the Cortex-M7 pipeline, zero-wait-state memory) fitted the same way; `schedule.latency.predict_latency` divides them
by a board's clock, and reports the Flash stalls of the weight reads (schedule/flash_traffic.py: the
board's wait states and cache line) next to them.
"""

from __future__ import annotations

import dataclasses

from tflm_mcubert.ops.registry import BY_KIND
from tflm_mcubert.ops.topology import ENCODER
from tflm_mcubert.schedule.cost import OpShape


def op_features(shape: OpShape) -> dict[str, float]:
    op = BY_KIND.get(shape.kind)
    if op is None or op.cost_features is None:
        raise ValueError(f"no cost formula for op kind {shape.kind!r}")
    return op.cost_features(shape.seq_len, shape.dims, shape.tile)


# ---------------------------------------------------------------------------------------------
# Fitted coefficients (bench/kernel_cost.py --fit; Cortex-M7 image, arm-none-eabi-gcc 12.2 -O2)
# ---------------------------------------------------------------------------------------------

# Least squares over the event counts is not unique where events move together in every shape
# (e.g. softmax rows and widened int16 rows), so single coefficients can be negative; only the
# sums are meaningful. Fitted on 33 attention and 25 MLP shapes (s 8..77, d 32..256, 1..8 heads,
# tiles 1..48), checked on 64 others: the BERT-tiny/mini layers at s 64..512 and the tile sweep
# t = 1..128 at s 128 (bench/kernel_cost.py --fit).
# instructions per event
ATTENTION_INSTRUCTIONS: dict[str, float] = {
    "call": -4832.96,
    "heads": 1370.24,
    "tiles": -371.493,
    "last_tiles": 1708.13,
    "kv_blocks": 4380.79,
    "q_blocks": 1013.74,
    "out_blocks": -2853.01,
    "micro_calls": 297.238,
    "micro_groups": 12.9161,
    "micro_iterations": 2.58879,
    "tail_macs": 23.621,
    "widen8_rows": -90.2676,
    "widen8_groups": 6.76153,
    "widen16_rows": -371.218,
    "widen16_groups": 119.373,
    "store_s8": 205.581,
    "store_scores": -167.955,
    "store_context": -207.061,
    "store_residual": -207.061,
    "ragged_outputs": -2.36359,
    "ragged_channels": 26.0256,
    "softmax_rows": -371.218,
    "softmax_keys": 13.8102,
    "layernorm_rows": 1770.79,
    "layernorm_elements": 46.6168,
}
MLP_INSTRUCTIONS: dict[str, float] = {
    "call": 156.258,
    "tiles": 117.609,
    "blocks": 120.919,
    "micro_calls": 190.725,
    "micro_groups": 6.62572,
    "micro_iterations": 53.0058,
    "tail_macs": 9.60426e-10,
    "widen8_rows": 198.196,
    "widen8_groups": 41.5557,
    "store_s8_lut": 36.4971,
    "store_residual": 29.6191,
    "ragged_outputs": 30.9042,
    "ragged_channels": 36.5246,
    "layernorm_rows": 396.392,
    "layernorm_elements": 28.9154,
}
# estimated Cortex-M7 cycles per event (measure/instruction_classes.py)
ATTENTION_CYCLES_M7: dict[str, float] = {
    "call": -2304.04,
    "heads": 687.289,
    "tiles": -221.068,
    "last_tiles": 1123.02,
    "kv_blocks": 2558.67,
    "q_blocks": 637.994,
    "out_blocks": -1777.86,
    "micro_calls": 205.655,
    "micro_groups": 8.10714,
    "micro_iterations": 1.65805,
    "tail_macs": 15.3198,
    "widen8_rows": -43.292,
    "widen8_groups": 3.82318,
    "widen16_rows": -184.687,
    "widen16_groups": 71.2537,
    "store_s8": 123.166,
    "store_scores": -100.083,
    "store_context": -118.509,
    "store_residual": -118.509,
    "ragged_outputs": -2.99085,
    "ragged_channels": 20.8795,
    "softmax_rows": -184.687,
    "softmax_keys": 6.73121,
    "layernorm_rows": 1069.86,
    "layernorm_elements": 25.8859,
}
MLP_CYCLES_M7: dict[str, float] = {
    "call": 151.476,
    "tiles": 78.8651,
    "blocks": 112.56,
    "micro_calls": 144.379,
    "micro_groups": 4.15662,
    "micro_iterations": 33.253,
    "tail_macs": 6.25732e-10,
    "widen8_rows": 124.27,
    "widen8_groups": 25.6741,
    "store_s8_lut": 26.154,
    "store_residual": 18.0671,
    "ragged_outputs": 15.2509,
    "ragged_channels": 29.8929,
    "layernorm_rows": 248.541,
    "layernorm_elements": 16.3197,
}
# Largest relative error on the held-out measured shapes.
FIT_MAX_RELATIVE_ERROR = {"instructions": 0.0038, "cycles": 0.0054}

_ATTENTION, _MLP = ENCODER.layer  # the fitted ops: an encoder layer's
_COEFFICIENTS = {
    (_ATTENTION.kind, "instructions"): ATTENTION_INSTRUCTIONS,
    (_MLP.kind, "instructions"): MLP_INSTRUCTIONS,
    (_ATTENTION.kind, "cycles"): ATTENTION_CYCLES_M7,
    (_MLP.kind, "cycles"): MLP_CYCLES_M7,
}


def predict(shape: OpShape, quantity: str = "instructions") -> float:
    """Fitted instructions (Cortex-M7 DSP build) or estimated Cortex-M7 cycles of one op call."""
    coefficients = _COEFFICIENTS[(shape.kind, quantity)]
    if not coefficients:
        raise RuntimeError("kernel_cost has no fitted coefficients (run bench/kernel_cost.py --fit)")
    features = op_features(shape)
    return sum(coefficients.get(name, 0.0) * value for name, value in features.items())


@dataclasses.dataclass(frozen=True)
class KernelCostModel:
    """schedule.cost.CostModel from the fitted instruction formulas.

    `resolution`: the planner (planner.choose_tile) treats tiles whose cost is within this
    fraction of the cheapest as equally fast and takes the one with the smallest footprint. The
    default, 0.5%, is about twice the formulas' error: below it a difference is not a
    measurement. Tiles that are multiples of the micro-kernel's 4 rows all cost the same to
    within ~0.1% (a few hundred instructions per tile and head), so the planner then takes
    t = 4 — the paper's choice — instead of the largest tile that fits (at BERT-tiny s = 128:
    43,680 instead of 118,912 arena bytes for a 0.05% gain). resolution=0 takes the cheapest
    tile that fits, however small the gain."""

    quantity: str = "instructions"
    resolution: float = 0.005

    def cost(self, shape: OpShape) -> float:
        return predict(shape, self.quantity)
