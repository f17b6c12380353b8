"""Latency per board: the kernels' estimated cycles (schedule/kernel_cost.py) over a board's clock, with
the estimated Flash stalls of their weight reads (schedule/flash_traffic.py) next to them.

    predict_latency(config, seq_len, "nucleo-f746zg", tiles=plan.tiles).to_json()   # report.json
"""

from __future__ import annotations

import dataclasses

from tflm_mcubert.boards import Board, get_board
from tflm_mcubert.ops import contract
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
    attention_cycles: float  # one layer's attention op (estimated Cortex-M7 cycles)
    mlp_cycles: float
    attention_instructions: float
    mlp_instructions: float
    attention_flash_stall_cycles: float = 0.0  # schedule/flash_traffic.py; 0 without a Flash model
    mlp_flash_stall_cycles: float = 0.0
    flash_timing: dict | None = None  # the board's FlashTiming.to_json(), None when not modelled

    @property
    def layer_cycles(self) -> float:
        return self.attention_cycles + self.mlp_cycles

    @property
    def encoder_cycles(self) -> float:
        return self.layers * self.layer_cycles

    @property
    def encoder_seconds(self) -> float:
        return self.encoder_cycles / self.clock_hz

    @property
    def encoder_flash_stall_cycles(self) -> float:
        return self.layers * (self.attention_flash_stall_cycles + self.mlp_flash_stall_cycles)

    def to_json(self) -> dict:
        ms = 1e3 / self.clock_hz
        return {
            "board": self.board,
            "clock_hz": self.clock_hz,
            "seq_len": self.seq_len,
            "layers": self.layers,
            "tiles": dict(self.tiles),
            "per_layer": {
                "attention": {
                    "instructions": round(self.attention_instructions),
                    "cycles_estimate": round(self.attention_cycles),
                    "ms": self.attention_cycles * ms,
                },
                "mlp": {
                    "instructions": round(self.mlp_instructions),
                    "cycles_estimate": round(self.mlp_cycles),
                    "ms": self.mlp_cycles * ms,
                },
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
            "per_layer_stall_cycles": {
                "attention": round(self.attention_flash_stall_cycles),
                "mlp": round(self.mlp_flash_stall_cycles),
            },
            "encoder_stall_ms": stalls * ms,
            "encoder_ms_with_flash": (self.encoder_cycles + stalls) * ms,
        }


def predict_latency(config, seq_len: int, board: Board | str, *, tiles: dict[str, int]) -> LatencyEstimate:
    """Estimated latency of the encoder layers of `config` (a BertConfig, Dims, or anything with
    HF attribute names) at `seq_len` on `board` (its clock; a Cortex-M7), with the ops' tiles
    (e.g. Plan.tiles)."""
    board = get_board(board) if isinstance(board, str) else board
    if board.core != "cortex-m7":
        raise ValueError(f"{board.name}: latency formulas are fitted for Cortex-M7, not {board.core}")
    dims = Dims.of(config)
    shapes = {kind: OpShape(kind, seq_len, dims, tiles[kind]) for kind in contract.TILED_KINDS}
    return LatencyEstimate(
        board=board.name,
        clock_hz=board.clock_hz,
        seq_len=seq_len,
        layers=dims.layers,
        tiles=dict(tiles),
        attention_cycles=predict(shapes["attention"], "cycles"),
        mlp_cycles=predict(shapes["mlp"], "cycles"),
        attention_instructions=predict(shapes["attention"]),
        mlp_instructions=predict(shapes["mlp"]),
        attention_flash_stall_cycles=flash_traffic.stall_cycles(shapes["attention"], board),
        mlp_flash_stall_cycles=flash_traffic.stall_cycles(shapes["mlp"], board),
        flash_timing=board.flash_timing.to_json() if board.flash_timing else None,
    )
