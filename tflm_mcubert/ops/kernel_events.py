"""The event counts of the MCUBERT kernels' loop nests, derived from a shape exactly as the C code
iterates (custom_ops/src): what the fitted cost model (schedule/kernel_cost.py) weighs, and the bytes
of weights each call streams from Flash (schedule/flash_traffic.py). An op's OpDef points at its
functions here (`cost_features`, `weight_traffic`); an op without them has no cost formula.

The formulas assume what realistic layers have: head size, hidden and ffn multiples of 4,
requantization shifts <= -2 (the fast output path), mask mode 0 with every key attending.
"""

from __future__ import annotations

import collections
import functools
import math

from tflm_mcubert.ops import linear

BLOCK_ROWS = 4  # the micro-kernel's rows (contract dsp_rows)
GROUP = 4  # K values per SMLAD group
CHUNK = 8  # channels per micro-kernel call (MCUBERT_CHUNK_CHANNELS)
UNROLL = 8  # groups per iteration of the assembly's sweep


def _blocks(rows: int) -> list[int]:
    """Row counts of the blocks of `rows` rows (full blocks of 4, then the ragged rest)."""
    return [BLOCK_ROWS] * (rows // BLOCK_ROWS) + ([rows % BLOCK_ROWS] if rows % BLOCK_ROWS else [])


def tile_sizes(s: int, t: int) -> list[int]:
    """Token counts of the tiles of a sequence of s tokens with tile t."""
    return [t] * (s // t) + ([s % t] if s % t else [])


def _swept(c_begin: int, c_end: int) -> int:
    """Channels a linear stage sweeps for channels [c_begin, c_end): chunks start on a pair."""
    return c_end - (c_begin & ~1) if c_end > c_begin else 0


class _Events(dict):
    def add(self, name: str, value: float) -> None:
        self[name] = self.get(name, 0) + value

    def merge(self, other: "_Events", times: int) -> None:
        for name, value in other.items():
            self.add(name, times * value)

    def gemm(self, blocks: list[int], channels: int, k: int) -> None:
        """Per row block, `channels` sweeps over K = k in micro-kernel calls of up to CHUNK channels."""
        if not blocks:
            return
        groups, n = k // GROUP, len(blocks)  # every block sweeps alike: multiply, not loop (a search prices many)
        self.add("micro_calls", n * math.ceil(channels / CHUNK))
        self.add("micro_groups", n * channels * groups)
        self.add("micro_iterations", n * channels * math.ceil(groups / UNROLL))
        self.add("tail_macs", channels * (k % GROUP) * sum(blocks))

    def widen(self, blocks: list[int], k: int, name: str) -> None:
        rows = sum(blocks)
        self.add(f"{name}_rows", rows)
        self.add(f"{name}_groups", rows * (k // GROUP))

    def stores(self, blocks: list[int], channels: int, name: str) -> None:
        """Fast straight-line stores per channel of full blocks; ragged blocks loop per output."""
        full = blocks.count(BLOCK_ROWS)
        if full:
            self.add(name, full * channels)
        for count in (c for c in blocks if c != BLOCK_ROWS):
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
    return dict(_attention_features(s, d, h, t))


# The planner prices every tile of every shape a search admits, many of them the same call; counting one
# walks every head, tile and block, so each distinct call is counted once.
@functools.lru_cache(maxsize=4096)
def _attention_features(s: int, d: int, h: int, t: int) -> dict[str, float]:
    dh = d // h
    keys = s
    e = _Events(call=1, heads=h)
    kv_blocks = _blocks(keys)
    tiles = tile_sizes(s, t)
    for head in range(h):
        c0 = head * dh
        swept = _swept(c0, c0 + dh)
        e.add("kv_blocks", len(kv_blocks))
        e.widen(kv_blocks, d, "widen8")
        e.gemm(kv_blocks, 2 * swept, d)  # K and V
        e.stores(kv_blocks, 2 * dh, "store_s8")
        for n, repeats in collections.Counter(tiles).items():  # tiles of one size count alike
            tile = _Events()
            blocks = _blocks(n)
            tile.add("tiles", 1)
            tile.add("q_blocks", len(blocks))
            tile.widen(blocks, d, "widen8")  # x rows for Q
            tile.gemm(blocks, swept, d)
            tile.stores(blocks, dh, "store_s8")
            tile.widen(blocks, dh, "widen8")  # Q rows for the scores
            tile.gemm(blocks, keys, dh)
            for count in blocks:
                full_pairs = keys // 2 if count == BLOCK_ROWS else 0
                tile.add("store_scores", full_pairs)
                tile.add("ragged_outputs", (keys - 2 * full_pairs) * count)
            tile.add("softmax_rows", n)
            tile.add("softmax_keys", n * keys)
            tile.widen(blocks, keys, "widen16")
            tile.gemm(blocks, dh, keys)
            tile.stores(blocks, dh, "store_context")
            if head == h - 1:
                tile.add("last_tiles", 1)
                tile.add("out_blocks", len(blocks))
                tile.widen(blocks, d, "widen8")
                tile.gemm(blocks, d, d)
                tile.stores(blocks, d, "store_residual")
                tile.add("layernorm_rows", n)
                tile.add("layernorm_elements", n * d)
            e.merge(tile, repeats)
    return {name: float(e.get(name, 0)) for name in ATTENTION_FEATURES}


def mlp_features(s: int, d: int, f: int, t: int) -> dict[str, float]:
    """Event counts of one MCUBERT_MLP call."""
    return dict(_mlp_features(s, d, f, t))


@functools.lru_cache(maxsize=4096)
def _mlp_features(s: int, d: int, f: int, t: int) -> dict[str, float]:
    e = _Events(call=1)
    for n, repeats in collections.Counter(tile_sizes(s, t)).items():
        tile = _Events()
        blocks = _blocks(n)
        tile.add("tiles", 1)
        tile.add("blocks", len(blocks))
        tile.widen(blocks, d, "widen8")
        tile.gemm(blocks, f, d)
        tile.stores(blocks, f, "store_s8_lut")
        tile.widen(blocks, f, "widen8")
        tile.gemm(blocks, d, f)
        tile.stores(blocks, d, "store_residual")
        tile.add("layernorm_rows", n)
        tile.add("layernorm_elements", n * d)
        e.merge(tile, repeats)
    return {name: float(e.get(name, 0)) for name in MLP_FEATURES}


CHANNEL_TABLE_BYTES = 12  # int32 bias, multiplier, shift per output channel


def linear_bytes(out_features: int, in_features: int, weight_bits: int = 8) -> int:
    """Flash bytes of one linear layer: its weights (pair4 int8, or w4row int4 for weight_bits 4) and the
    per-channel (bias, M, shift) table."""
    return linear.stored_size(out_features, in_features, weight_bits) + CHANNEL_TABLE_BYTES * out_features


def row_blocks(rows: int) -> int:
    return math.ceil(rows / BLOCK_ROWS)


def attention_weight_traffic(s: int, d: int, t: int, weight_bits: int = 8) -> int:
    """Bytes of weights and channel tables one MCUBERT_ATTENTION call reads from Flash."""
    tile_blocks = sum(row_blocks(n) for n in tile_sizes(s, t))
    key_value = 2 * row_blocks(s) * linear_bytes(d, d, weight_bits)  # every head's K and V, all tokens
    query_output = 2 * tile_blocks * linear_bytes(d, d, weight_bits)  # Q per tile, output projection
    return key_value + query_output


def mlp_weight_traffic(s: int, d: int, f: int, t: int, weight_bits: int = 8) -> int:
    """Bytes of weights and channel tables one MCUBERT_MLP call reads from Flash."""
    tile_blocks = sum(row_blocks(n) for n in tile_sizes(s, t))
    return tile_blocks * (linear_bytes(f, d, weight_bits) + linear_bytes(d, f, weight_bits))
