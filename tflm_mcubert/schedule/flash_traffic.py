"""Weight traffic from Flash and the core cycles it costs: what the zero-wait-state
instruction-class estimate (measure/instruction_classes.py) leaves out of a board's latency.

Where weights are read: every linear layer's pair4 weights and its per-channel (bias, M, shift)
table stay in Flash (constant tensors), and the kernels sweep all of a layer's channels once per
4-row block (custom_ops/src/mcubert_linear_s8.c). A layer's weights (BERT-tiny's FC1: 64 KB) are
far larger than these cores' L1 data caches (4-16 KB), so each block streams them from Flash
again: traffic = row blocks x weight bytes. A pair's two channels share their cache lines, and
one pair's sweep (K x 2 bytes) fits every cache here, so each line is fetched once per block.
Attention's own matmuls read Q, K and V from the arena and cost no Flash traffic; lookup tables
and LayerNorm parameters are small and stay cached.

So the traffic does not depend on the tile as long as it is a multiple of 4 (a ragged tile adds
blocks, and traffic): weight traffic adds cost but does not move the planner's choice, which
`tiles_by_cost_model` shows for each board.

Stall model (an ESTIMATE): every line of weights misses, and a miss stalls the core for the
Flash accesses that fill it (boards.FlashTiming.miss_cycles: wait states + 1 per access), with
nothing overlapped. The Cortex-M7 has no data prefetcher that would hide it; a real board may
overlap part of a fill with the instructions that do not depend on it, so this is an upper
estimate of the stall, next to a lower estimate of the compute (the dual-issue throughput model).
"""

from __future__ import annotations

import dataclasses
import math

from tflm_mcubert.boards import Board
from tflm_mcubert.ops.registry import BY_KIND
from tflm_mcubert.schedule.cost import OpShape
from tflm_mcubert.schedule.kernel_cost import KernelCostModel, predict
from tflm_mcubert.schedule.planner import plan_model


def weight_traffic(shape: OpShape) -> int:
    """Bytes of weights and channel tables one call of the op reads from Flash."""
    op = BY_KIND.get(shape.kind)
    if op is None or op.weight_traffic is None:
        raise ValueError(f"no weight traffic for op kind {shape.kind!r}")
    return op.weight_traffic(shape.seq_len, shape.dims, shape.tile)


def stall_cycles(shape: OpShape, board: Board) -> float:
    """Estimated core cycles one call of the op waits for Flash on `board` (0 without a model)."""
    timing = board.flash_timing
    if timing is None:
        return 0.0
    return math.ceil(weight_traffic(shape) / timing.cache_line_bytes) * timing.miss_cycles


@dataclasses.dataclass(frozen=True)
class FlashAwareCostModel:
    """schedule.cost.CostModel: estimated cycles of the kernels plus their Flash stalls on `board`
    (resolution: as KernelCostModel's)."""

    board: Board
    resolution: float = 0.005

    def cost(self, shape: OpShape) -> float:
        return predict(shape, "cycles") + stall_cycles(shape, self.board)


def tiles_by_cost_model(config, seq_len: int, board: Board) -> dict[str, dict[str, int]]:
    """The planner's tiles on `board` under each cost model: instructions, estimated cycles, and
    estimated cycles with Flash stalls."""
    models = {
        "instructions": KernelCostModel(),
        "cycles": KernelCostModel(quantity="cycles"),
        "cycles_with_flash": FlashAwareCostModel(board),
    }
    budget = board.arena_budget()
    return {name: plan_model(config, seq_len, budget, cost_model=m).tiles for name, m in models.items()}
