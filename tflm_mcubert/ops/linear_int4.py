"""Int4 linear-layer weights: the packed "w4row" layout and the reference matmul (SPEC.md 3.1.1).

Layout, for a weight W[N out, K in] with values in [-7, 7] (symmetric, as int8's [-127, 127]):

    row_bytes = 4 * ceil(K / 8)                      one 32-bit word per 8 K values
    byte c * row_bytes + k // 2, nibble k % 2 (0: bits 0-3, 1: bits 4-7)  =  W[c, k] + 8

i.e. each channel is a row of little-endian words, nibble i of word j holding K value 8 j + i in
offset binary (the stored nibble is the value plus 8, 1..15). The nibbles past K (at most 7 per row)
are padding and must be 0 — a nibble no weight can have (0 would be -8), so unpack refuses a non-zero
padding nibble and a zero weight nibble alike. Flash: N * 4 * ceil(K/8) bytes, half the int8 pair4
layout's ceil(N/2) * 8 * ceil(K/4) plus at most 4 bytes per channel (none when 8 divides K).

The channel rows (bias, multiplier, shift) are the int8 layer's, unchanged: the accumulators are
exactly bias + sum_k x[k] W[c, k] with the unpacked weights, so the requantize stage is shared
(`linear.Linear` with weight_bits=4 stores these bytes; `linear.linear_from_int4` is the int8 twin).
"""

from __future__ import annotations

import numpy as np

from tflm_mcubert.ops.fixed_point import int_matmul
from tflm_mcubert.ops.validation import OpSpecError, check_array

WORD_DEPTH = 8  # K values per 32-bit word
WEIGHT4_MAX = 7  # symmetric int4 weights: [-7, 7]
NIBBLE_OFFSET = 8  # stored nibble = weight + 8


def row_bytes_int4(in_features: int) -> int:
    """Bytes of one output channel's packed row: a word per 8 K values."""
    return 4 * -(-in_features // WORD_DEPTH)


def packed_size_int4(out_features: int, in_features: int) -> int:
    return out_features * row_bytes_int4(in_features)


def pack_weights_int4(weight: np.ndarray) -> np.ndarray:
    """int8[N, K] with values in [-7, 7] -> uint8[packed_size_int4(N, K)] in the w4row layout."""
    weight = np.asarray(weight)
    if weight.dtype != np.int8 or weight.ndim != 2:
        raise ValueError("pack_weights_int4: expected an int8 [N, K] matrix")
    if weight.size and (int(weight.min()) < -WEIGHT4_MAX or int(weight.max()) > WEIGHT4_MAX):
        raise ValueError(
            f"pack_weights_int4: weights must be in [-{WEIGHT4_MAX}, {WEIGHT4_MAX}] "
            f"(found [{int(weight.min())}, {int(weight.max())}])"
        )
    n, k = weight.shape
    nibbles = np.zeros((n, 2 * row_bytes_int4(k)), dtype=np.uint8)  # padding nibbles stay 0
    nibbles[:, :k] = (weight.astype(np.int16) + NIBBLE_OFFSET).astype(np.uint8)
    packed = nibbles[:, 0::2] | (nibbles[:, 1::2] << 4)
    return np.ascontiguousarray(packed).reshape(-1)


def unpack_weights_int4(
    packed: np.ndarray, out_features: int, in_features: int, *, op: str = "pack", field: str = "weights"
) -> np.ndarray:
    """Inverse of pack_weights_int4 -> int8[N, K]; refuses a wrong size or dtype, a non-zero padding
    nibble, and a weight nibble of 0 (the value -8, outside the symmetric range)."""
    check_array(op, field, packed, np.uint8, (packed_size_int4(out_features, in_features),))
    rows = packed.reshape(out_features, row_bytes_int4(in_features))
    nibbles = np.empty((out_features, 2 * rows.shape[1]), dtype=np.uint8)
    nibbles[:, 0::2] = rows & 0xF
    nibbles[:, 1::2] = rows >> 4
    padding = nibbles[:, in_features:]
    if np.any(padding):
        c, i = (int(v) for v in np.argwhere(padding)[0])
        raise OpSpecError(
            op, field, f"padding nibble {in_features + i} of channel {c} is {int(padding[c, i])} (must be 0)"
        )
    values = nibbles[:, :in_features]
    if np.any(values == 0):
        c, k = (int(v) for v in np.argwhere(values == 0)[0])
        raise OpSpecError(
            op, field, f"weight [{c}, {k}] is -8: int4 weights are in [-{WEIGHT4_MAX}, {WEIGHT4_MAX}] (nibble 1..15)"
        )
    return (values.astype(np.int16) - NIBBLE_OFFSET).astype(np.int8)


def matmul_int4(x: np.ndarray, packed: np.ndarray, out_features: int, in_features: int) -> np.ndarray:
    """int64[n, N] accumulators sum_k x[r, k] W[c, k] (no bias) of int8 x[n, K] and the packed int4
    weights: what the C gemm returns (every value is int32-bounded: |sum| <= 4096 * 128 * 7 < 2^22)."""
    x = np.asarray(x)
    if x.dtype != np.int8 or x.ndim != 2 or x.shape[1] != in_features:
        raise ValueError(f"matmul_int4: expected int8 activations [n, {in_features}]")
    weight = unpack_weights_int4(packed, out_features, in_features)
    return int_matmul(x, weight.T)
