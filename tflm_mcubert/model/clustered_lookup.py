"""The lookup every clustered embedding shares (the deployable one, model/clustered_embedding.py; its tables
as stored, model/stored_tables.py; the search's, compress/search_space.py): permuted ids embedded cluster by
cluster over tables padded with a zero row on each side."""

from __future__ import annotations

import tensorflow as tf


def clustered_lookup(new_ids, boundaries, embed_cluster, dim: int):
    """Embed permuted ids cluster by cluster and sum: `embed_cluster(i, local)` gives cluster i's vectors
    ([..., dim]) for `local` indices into its rows PADDED with one zero row on each side (`pad_rows`), or
    None for a cluster that embeds everything to zero.

    An id of cluster i has local index id - start_i + 1; ids below or above the cluster clamp onto the
    zero rows, so they contribute nothing (and no gradient). Only integer SUB/MAXIMUM/MINIMUM, GATHER,
    a matmul and ADD: the graph converts to stock TFLite ops, where masking with a select would not.
    """
    out = None
    for i, (start, end) in enumerate(zip(boundaries[:-1], boundaries[1:])):
        if end == start:
            continue
        local = tf.clip_by_value(new_ids - (start - 1), 0, end - start + 1)
        vectors = embed_cluster(i, local)
        if vectors is not None:
            out = vectors if out is None else out + vectors
    if out is None:  # every cluster embeds to zero
        out = tf.zeros(tf.concat([tf.shape(new_ids), [dim]], 0), tf.float32)
    return out


def pad_rows(table):
    """`table` [n, k] with a zero row before and after: the rows `clustered_lookup` indexes."""
    return tf.pad(table, [[1, 1], [0, 0]])
