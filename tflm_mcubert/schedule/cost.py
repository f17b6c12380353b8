"""What a planner asks a cost model: the cost of one tiled op at one shape.

Its own module so that cost models (schedule/kernel_cost.py) and the planner that uses them both
import it, and neither imports the other's internals.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol

from tflm_mcubert.schedule.memory import Dims


@dataclasses.dataclass(frozen=True)
class OpShape:
    kind: str  # one of ops.contract.TILED_KINDS
    seq_len: int
    dims: Dims
    tile: int


class CostModel(Protocol):
    """Relative cost of running one op with a given tile (lower is better; units are the model's)."""

    def cost(self, shape: OpShape) -> float: ...
