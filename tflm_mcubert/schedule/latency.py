"""Latency per board: the kernels' estimated cycles (schedule/kernel_cost.py) over a board's clock, with
the estimated Flash stalls of their weight reads (schedule/flash_traffic.py) next to them.

    predict_latency(config, seq_len, "nucleo-f746zg", tiles=plan.tiles).to_json()   # report.json
"""

from __future__ import annotations

import dataclasses

from tflm_mcubert.boards import Board, get_board
from tflm_mcubert.ops.registry import TILED_KINDS
from tflm_mcubert.schedule import flash_traffic
from tflm_mcubert.schedule.cost import OpShape
from tflm_mcubert.schedule.kernel_cost import predict
from tflm_mcubert.schedule.memory import Dims


@dataclasses.dataclass(frozen=True)
class LatencyEstimate:
    board: str
    clock_hz: int
    seq_len: int
    layers: int
    tiles: dict[str, int]
    # By tiled op kind (registry.TILED_KINDS: one call each per encoder layer)
    cycles: dict[str, float]  # estimated Cortex-M7 cycles
    instructions: dict[str, float]
    flash_stall_cycles: dict[str, float]  # schedule/flash_traffic.py; 0 without a Flash model
    flash_timing: dict | None = None  # the board's FlashTiming.to_json(), None when not modelled

    @property
    def layer_cycles(self) -> float:
        return sum(self.cycles.values())

    @property
    def encoder_cycles(self) -> float:
        return self.layers * self.layer_cycles

    @property
    def encoder_seconds(self) -> float:
        return self.encoder_cycles / self.clock_hz

    @property
    def encoder_flash_stall_cycles(self) -> float:
        return self.layers * sum(self.flash_stall_cycles.values())

    def to_json(self) -> dict:
        ms = 1e3 / self.clock_hz
        return {
            "board": self.board,
            "clock_hz": self.clock_hz,
            "seq_len": self.seq_len,
            "layers": self.layers,
            "tiles": dict(self.tiles),
            "per_layer": {
                kind: {
                    "instructions": round(self.instructions[kind]),
                    "cycles_estimate": round(cycles),
                    "ms": cycles * ms,
                }
                for kind, cycles in self.cycles.items()
            },
            "encoder_ms": self.encoder_cycles * ms,
            "flash": self._flash_json(ms),
            "model": (
                "Cortex-M7 DSP kernels: fitted instruction-class cycle estimate (zero-wait-state "
                "memory) / clock, encoder layers only (embedding and classifier head excluded); "
                "'flash' adds the estimated stalls of streaming the weights from Flash"
            ),
        }

    def _flash_json(self, ms: float) -> dict:
        if self.flash_timing is None:
            return {"modelled": False, "why": "no Flash timing for this board (boards.FlashTiming)"}
        stalls = self.encoder_flash_stall_cycles
        return {
            "modelled": True,
            "timing": self.flash_timing,
            "per_layer_stall_cycles": {kind: round(v) for kind, v in self.flash_stall_cycles.items()},
            "encoder_stall_ms": stalls * ms,
            "encoder_ms_with_flash": (self.encoder_cycles + stalls) * ms,
        }


FITTED_CORE = "cortex-m7"  # the only core the kernels' cycle formulas were fitted on


def predict_latency(config, seq_len: int, board: Board | str, *, tiles: dict[str, int]) -> LatencyEstimate:
    """Estimated latency of the encoder layers of `config` (a BertConfig, Dims, or anything with
    HF attribute names) at `seq_len` on `board` (its clock; a Cortex-M7), with the ops' tiles
    (e.g. Plan.tiles)."""
    board = get_board(board) if isinstance(board, str) else board
    if board.core != FITTED_CORE:
        raise ValueError(f"{board.name}: latency formulas are fitted for Cortex-M7, not {board.core}")
    dims = Dims.of(config)
    shapes = {kind: OpShape(kind, seq_len, dims, tiles[kind]) for kind in TILED_KINDS}
    return LatencyEstimate(
        board=board.name,
        clock_hz=board.clock_hz,
        seq_len=seq_len,
        layers=dims.layers,
        tiles=dict(tiles),
        cycles={kind: predict(shape, "cycles") for kind, shape in shapes.items()},
        instructions={kind: predict(shape) for kind, shape in shapes.items()},
        flash_stall_cycles={kind: flash_traffic.stall_cycles(shape, board) for kind, shape in shapes.items()},
        flash_timing=board.flash_timing.to_json() if board.flash_timing else None,
    )
