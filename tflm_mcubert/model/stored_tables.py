"""The clustered embedding's word vectors as the export stores its tables: fake quantization, straight-through.

A search's fine-tune trains the tables it will deploy (`search --embedding-bits 8|4`), and its reported
accuracy is the accuracy of the stored tables; export's quantization-aware fine-tune does the same for int4
(`quantize/qat.py`). The rules are the export's (ops/SPEC.md 2 and 4.1.1):

  int8  cluster 0 per channel ([-127, 127]), U_i per tensor, Vᵀ_i per output channel
  int4  cluster 0 per channel (its max) x per row ([-7, 7]); U_i per column ([-7, 7]), that column's scale
        folded into Vᵀ_i's row before Vᵀ_i is quantized per output channel (int8)

Rounding uses the identity's gradient, scales none (they follow the tables, as the export recomputes
them). What is left out: the requantization of the word vector to the embedding's pre-norm scale, which
every storage shares.
"""

from __future__ import annotations

import tensorflow as tf

from tflm_mcubert.model.clustered_lookup import clustered_lookup, pad_rows

INT8_MAX, INT4_MAX = 127.0, 7.0
STORAGE_BITS = (8, 4)


def fake_quantize(x, scale, limit: float):
    """x rounded to the grid `scale` within [-limit, limit] and back; gradient of the identity."""
    scale = tf.stop_gradient(tf.where(scale > 0, scale, tf.ones_like(scale)))
    quantized = tf.clip_by_value(tf.round(x / scale), -limit, limit) * scale
    return x + tf.stop_gradient(quantized - x)


def _max_abs(x, axis):
    return tf.reduce_max(tf.abs(x), axis=axis, keepdims=True)


def _dense_table(table, bits: int):
    if bits == 8:
        return fake_quantize(table, _max_abs(table, 0) / INT8_MAX, INT8_MAX)
    channel = tf.stop_gradient(_max_abs(table, 0))
    channel = tf.where(channel > 0, channel, tf.ones_like(channel))
    row_step = _max_abs(table / channel, 1) / INT4_MAX
    return fake_quantize(table / channel, row_step, INT4_MAX) * channel


def _low_rank_factors(u, vt, bits: int):
    """(U_i, Vᵀ_i) as stored; for int4, U_i's integer grid and Vᵀ_i with the column scales folded in."""
    if bits == 8:
        u = fake_quantize(u, _max_abs(u, None) / INT8_MAX, INT8_MAX)
        return u, fake_quantize(vt, _max_abs(vt, 0) / INT8_MAX, INT8_MAX)
    column = tf.stop_gradient(_max_abs(u, 0) / INT4_MAX)  # [1, r]
    column = tf.where(column > 0, column, tf.ones_like(column))
    grid = fake_quantize(u / column, tf.ones_like(column), INT4_MAX)
    folded = vt * tf.transpose(column)  # [r, d]
    return grid, fake_quantize(folded, _max_abs(folded, 0) / INT8_MAX, INT8_MAX)


def stored_word_vectors(lookup, ids, bits: int):
    """`lookup`'s (a ClusteredLowRankEmbedding) word vectors for permuted `ids`, its tables stored at `bits`."""
    if bits not in STORAGE_BITS:
        raise ValueError(f"storage of {bits} bits is not modelled (supported: {STORAGE_BITS})")

    def embed_cluster(i, local):
        if i == 0:
            return tf.gather(pad_rows(_dense_table(lookup.table, bits)), local)
        if lookup.ranks[i - 1] == 0:
            return None
        u, vt = _low_rank_factors(lookup.us[i - 1], lookup.vts[i - 1], bits)
        return tf.matmul(tf.gather(pad_rows(u), local), vt)

    return clustered_lookup(tf.cast(ids, tf.int32), lookup.boundaries, embed_cluster, lookup.dim)
