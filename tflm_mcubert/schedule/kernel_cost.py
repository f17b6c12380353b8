"""Instruction and cycle costs of the MCUBERT kernels (DSP path, Cortex-M7), fitted to measurements.

    from tflm_mcubert.schedule.kernel_cost import KernelCostModel, predict_latency
    plan = plan_model(config, seq_len, budget, cost_model=KernelCostModel())
    predict_latency(config, seq_len, "nucleo-f746zg", tiles=plan.tiles).to_json()   # report.json

Each op's cost is a linear formula over the counts of the events of its loop nest — row blocks,
micro-kernel calls, 4-value groups swept, loop iterations, widened groups, outputs stored by each
output stage (full blocks take a straight-line path, ragged ones a loop), softmax keys, LayerNorm
elements... `op_features` derives those counts from the shape exactly as the C code iterates
(custom_ops/src), and the per-event coefficients below are least-squares fits to counts measured on
the emulated core (`python bench/kernel_cost.py --fit` regenerates them and prints their error).
The formulas assume what realistic layers have: head size, hidden and ffn multiples of 4,
requantization shifts <= -2 (the fast output path), mask mode 0 with every key attending.

Cycles are the instruction-class ESTIMATE of measure/instruction_classes.py (a throughput model of
the Cortex-M7 pipeline, zero-wait-state memory) fitted the same way; `predict_latency` divides them
by a board's clock. Flash wait states and cache misses on weight reads are not modelled, so on a
board with weights in internal Flash the real latency is higher.
"""

from __future__ import annotations

import dataclasses
import math

from tflm_mcubert.boards import Board, get_board
from tflm_mcubert.ops import contract
from tflm_mcubert.schedule.memory import Dims
from tflm_mcubert.schedule.cost import OpShape

BLOCK_ROWS = 4  # the micro-kernel's rows (contract dsp_rows)
GROUP = 4  # K values per SMLAD group


def _blocks(rows: int) -> list[int]:
    """Row counts of the blocks of `rows` rows (full blocks of 4, then the ragged rest)."""
    return [BLOCK_ROWS] * (rows // BLOCK_ROWS) + ([rows % BLOCK_ROWS] if rows % BLOCK_ROWS else [])


def _tiles(s: int, t: int) -> list[int]:
    return [t] * (s // t) + ([s % t] if s % t else [])


def _pairs(c_begin: int, c_end: int) -> int:
    """Channel pairs a linear stage visits for channels [c_begin, c_end)."""
    return ((c_end - 1) >> 1) - (c_begin >> 1) + 1 if c_end > c_begin else 0


class _Events(dict):
    def add(self, name: str, value: float) -> None:
        self[name] = self.get(name, 0) + value

    def gemm(self, blocks: list[int], pairs: int, k: int) -> None:
        """`pairs` 4x2 micro-kernel calls per row block over K = k (two sweeps each)."""
        groups = k // GROUP
        for count in blocks:
            self.add("micro_calls", pairs)
            self.add("micro_groups", pairs * 2 * groups)
            self.add("micro_iterations", pairs * 2 * math.ceil(groups / 4))
            self.add("tail_macs", pairs * (k % GROUP) * count)

    def widen(self, blocks: list[int], k: int, name: str) -> None:
        rows = sum(blocks)
        self.add(f"{name}_rows", rows)
        self.add(f"{name}_groups", rows * (k // GROUP))

    def stores(self, blocks: list[int], channels: int, name: str) -> None:
        """Fast straight-line stores per channel of full blocks; ragged blocks loop per output."""
        for count in blocks:
            if count == BLOCK_ROWS:
                self.add(name, channels)
            else:
                self.add("ragged_outputs", channels * count)
                self.add("ragged_channels", channels)


ATTENTION_FEATURES = (
    "call",
    "heads",
    "tiles",
    "last_tiles",
    "kv_blocks",
    "q_blocks",
    "out_blocks",
    "micro_calls",
    "micro_groups",
    "micro_iterations",
    "tail_macs",
    "widen8_rows",
    "widen8_groups",
    "widen16_rows",
    "widen16_groups",
    "store_s8",
    "store_scores",
    "store_context",
    "store_residual",
    "ragged_outputs",
    "ragged_channels",
    "softmax_rows",
    "softmax_keys",
    "layernorm_rows",
    "layernorm_elements",
)
MLP_FEATURES = (
    "call",
    "tiles",
    "blocks",
    "micro_calls",
    "micro_groups",
    "micro_iterations",
    "tail_macs",
    "widen8_rows",
    "widen8_groups",
    "store_s8_lut",
    "store_residual",
    "ragged_outputs",
    "ragged_channels",
    "layernorm_rows",
    "layernorm_elements",
)


def attention_features(s: int, d: int, h: int, t: int) -> dict[str, float]:
    """Event counts of one MCUBERT_ATTENTION call (mask mode 0, every key valid)."""
    dh = d // h
    keys = s
    e = _Events(call=1, heads=h)
    kv_blocks = _blocks(keys)
    tiles = _tiles(s, t)
    for head in range(h):
        c0 = head * dh
        pairs = _pairs(c0, c0 + dh)
        e.add("kv_blocks", len(kv_blocks))
        e.widen(kv_blocks, d, "widen8")
        e.gemm(kv_blocks, 2 * pairs, d)  # K and V
        e.stores(kv_blocks, 2 * dh, "store_s8")
        for n in tiles:
            blocks = _blocks(n)
            e.add("tiles", 1)
            e.add("q_blocks", len(blocks))
            e.widen(blocks, d, "widen8")  # x rows for Q
            e.gemm(blocks, pairs, d)
            e.stores(blocks, dh, "store_s8")
            e.widen(blocks, dh, "widen8")  # Q rows for the scores
            e.gemm(blocks, math.ceil(keys / 2), dh)
            for count in blocks:
                full_pairs = keys // 2 if count == BLOCK_ROWS else 0
                e.add("store_scores", full_pairs)
                e.add("ragged_outputs", (keys - 2 * full_pairs) * count)
            e.add("softmax_rows", n)
            e.add("softmax_keys", n * keys)
            e.widen(blocks, keys, "widen16")
            e.gemm(blocks, math.ceil(dh / 2), keys)
            e.stores(blocks, dh, "store_context")
            if head == h - 1:
                e.add("last_tiles", 1)
                e.add("out_blocks", len(blocks))
                e.widen(blocks, d, "widen8")
                e.gemm(blocks, math.ceil(d / 2), d)
                e.stores(blocks, d, "store_residual")
                e.add("layernorm_rows", n)
                e.add("layernorm_elements", n * d)
    return {name: float(e.get(name, 0)) for name in ATTENTION_FEATURES}


def mlp_features(s: int, d: int, f: int, t: int) -> dict[str, float]:
    """Event counts of one MCUBERT_MLP call."""
    e = _Events(call=1)
    for n in _tiles(s, t):
        blocks = _blocks(n)
        e.add("tiles", 1)
        e.add("blocks", len(blocks))
        e.widen(blocks, d, "widen8")
        e.gemm(blocks, math.ceil(f / 2), d)
        e.stores(blocks, f, "store_s8_lut")
        e.widen(blocks, f, "widen8")
        e.gemm(blocks, math.ceil(d / 2), f)
        e.stores(blocks, d, "store_residual")
        e.add("layernorm_rows", n)
        e.add("layernorm_elements", n * d)
    return {name: float(e.get(name, 0)) for name in MLP_FEATURES}


def op_features(shape: OpShape) -> dict[str, float]:
    dims = shape.dims
    if shape.kind == "attention":
        return attention_features(shape.seq_len, dims.hidden, dims.heads, shape.tile)
    if shape.kind == "mlp":
        return mlp_features(shape.seq_len, dims.hidden, dims.ffn, shape.tile)
    raise ValueError(f"no cost formula for op kind {shape.kind!r}")


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
    "call": -3613.47,
    "heads": 1504.16,
    "tiles": -219.172,
    "last_tiles": 1353.36,
    "kv_blocks": 5052.61,
    "q_blocks": 605.698,
    "out_blocks": -1970.42,
    "micro_calls": 86.8086,
    "micro_groups": 12.4311,
    "micro_iterations": 4.24948,
    "tail_macs": 32.7145,
    "widen8_rows": -98.1198,
    "widen8_groups": 6.4199,
    "widen16_rows": -390.95,
    "widen16_groups": 73.1628,
    "store_s8": 222.027,
    "store_scores": -162.078,
    "store_context": -242.871,
    "store_residual": -242.871,
    "ragged_outputs": -3.28425,
    "ragged_channels": 25.9882,
    "softmax_rows": -390.95,
    "softmax_keys": 23.5399,
    "layernorm_rows": 1508.35,
    "layernorm_elements": 40.6894,
}
MLP_INSTRUCTIONS: dict[str, float] = {
    "call": 287.742,
    "tiles": 99.1513,
    "blocks": 114.259,
    "micro_calls": 52.6735,
    "micro_groups": 6.75061,
    "micro_iterations": 27.0025,
    "tail_macs": -6.69388e-10,
    "widen8_rows": 196.058,
    "widen8_groups": 41.7914,
    "store_s8_lut": 35.2392,
    "store_residual": 38.197,
    "ragged_outputs": 31.8628,
    "ragged_channels": 45.9162,
    "layernorm_rows": 392.117,
    "layernorm_elements": 23.3351,
}
# estimated Cortex-M7 cycles per event (measure/instruction_classes.py)
ATTENTION_CYCLES_M7: dict[str, float] = {
    "call": -1979.69,
    "heads": 857.69,
    "tiles": -112.44,
    "last_tiles": 853.137,
    "kv_blocks": 3057.1,
    "q_blocks": 383.493,
    "out_blocks": -1192.17,
    "micro_calls": 62.0962,
    "micro_groups": 7.63708,
    "micro_iterations": 2.7029,
    "tail_macs": 20.165,
    "widen8_rows": -52.2457,
    "widen8_groups": 3.63508,
    "widen16_rows": -211.897,
    "widen16_groups": 43.9074,
    "store_s8": 129.524,
    "store_scores": -95.2535,
    "store_context": -135.225,
    "store_residual": -135.225,
    "ragged_outputs": -3.15175,
    "ragged_channels": 22.1791,
    "softmax_rows": -211.897,
    "softmax_keys": 12.6706,
    "layernorm_rows": 926.79,
    "layernorm_elements": 22.1697,
}
MLP_CYCLES_M7: dict[str, float] = {
    "call": 242.323,
    "tiles": 67.1747,
    "blocks": 104.932,
    "micro_calls": 39.8159,
    "micro_groups": 4.1566,
    "micro_iterations": 16.6264,
    "tail_macs": -3.63798e-10,
    "widen8_rows": 123.074,
    "widen8_groups": 25.2824,
    "store_s8_lut": 23.9932,
    "store_residual": 27.3273,
    "ragged_outputs": 16.0144,
    "ragged_channels": 38.0707,
    "layernorm_rows": 246.148,
    "layernorm_elements": 12.641,
}
# Largest relative error on the held-out measured shapes.
FIT_MAX_RELATIVE_ERROR = {"instructions": 0.0024, "cycles": 0.0041}

_COEFFICIENTS = {
    ("attention", "instructions"): ATTENTION_INSTRUCTIONS,
    ("mlp", "instructions"): MLP_INSTRUCTIONS,
    ("attention", "cycles"): ATTENTION_CYCLES_M7,
    ("mlp", "cycles"): MLP_CYCLES_M7,
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

    `resolution`: costs within this relative step count as equal (they are quantized on a log
    scale), so that the planner's tie-break — the smaller footprint — picks the smallest tile
    among those as fast to within the resolution. The default, 0.5%, is about twice the
    formulas' error: below it a difference is not a measurement. Tiles that are multiples of
    the micro-kernel's 4 rows all cost the same to within ~0.2% (a few hundred instructions
    per tile and head), so the planner then takes t = 4 — the paper's choice — instead of the
    largest tile that fits (at BERT-tiny s = 128: 43,680 instead of 118,912 arena bytes for a
    0.05% gain). resolution=0 keeps exact costs: the cheapest tile that fits, however small
    the gain."""

    quantity: str = "instructions"
    resolution: float = 0.005

    def cost(self, shape: OpShape) -> float:
        value = predict(shape, self.quantity)
        if self.resolution > 0 and value > 0:
            step = math.log1p(self.resolution)
            return math.exp(round(math.log(value) / step) * step)
        return value


# ---------------------------------------------------------------------------------------------
# Latency per board
# ---------------------------------------------------------------------------------------------


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

    @property
    def layer_cycles(self) -> float:
        return self.attention_cycles + self.mlp_cycles

    @property
    def encoder_cycles(self) -> float:
        return self.layers * self.layer_cycles

    @property
    def encoder_seconds(self) -> float:
        return self.encoder_cycles / self.clock_hz

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
            "model": (
                "Cortex-M7 DSP kernels: fitted instruction-class cycle estimate (zero-wait-state "
                "memory; Flash wait states and cache misses not modelled) / clock; encoder "
                "layers only (embedding and classifier head excluded)"
            ),
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
    )
