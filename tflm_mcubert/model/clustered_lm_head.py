"""The tied LM head through the clustered low-rank table: logits = h · Eᵀ over the whole
vocabulary, computed cluster by cluster from the compressed table, never building the dense matrix.

A cluster-i token's row is U_i[row] · Vᵀ_i, so the cluster's logits are U_i · (Vᵀ_i · h): r_i·d
multiply-adds to project h once, then r_i per token, instead of d per token (cluster 0 is dense). The
reference here is float and works on `ClusteredLowRankEmbedding.to_arrays()`; the int8 op and its C
kernel follow it. `head_macs` is the cost the op's instruction count is later measured against.

    logits = clustered_logits(arrays, h)           # [vocab] in the layer's ids
    ids, scores = top_k(arrays, h, k)              # the k best, found cluster by cluster
"""

from __future__ import annotations

import numpy as np


def _clusters(arrays: dict):
    """(start, end, table or (U, Vᵀ)) per cluster, in the layer's id order."""
    bounds = [int(b) for b in arrays["boundaries"]]
    yield bounds[0], bounds[1], arrays["table_0"]
    for i in range(1, len(bounds) - 1):
        yield bounds[i], bounds[i + 1], (arrays[f"u_{i}"], arrays[f"vt_{i}"])


def _logits_of(table, h: np.ndarray) -> np.ndarray:
    """One cluster's logits for h [d] or [n, d]: a dense table, or (U, Vᵀ) projected once then per token."""
    if isinstance(table, tuple):
        u, vt = (np.asarray(a, np.float64) for a in table)
        return (h @ vt.T) @ u.T
    return h @ np.asarray(table, np.float64).T


def clustered_logits(arrays: dict, h: np.ndarray) -> np.ndarray:
    """h [d] (or [n, d]) · Eᵀ in the layer's ids: [vocab] (or [n, vocab])."""
    h = np.asarray(h, np.float64)
    return np.concatenate([_logits_of(table, h) for _, _, table in _clusters(arrays)], axis=-1)


def top_k(arrays: dict, h: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k largest logits of h [d] and their ids (layer ids), best first, ties to the smaller id: found
    keeping k candidates across clusters, as a device does that cannot hold the vocabulary's logits."""
    if k < 1:
        raise ValueError(f"top_k: k must be at least 1, got {k}")
    h = np.asarray(h, np.float64)
    best_ids, best_scores = np.zeros(0, np.int64), np.zeros(0, np.float64)
    for start, end, table in _clusters(arrays):
        best_ids = np.concatenate([best_ids, np.arange(start, end, dtype=np.int64)])
        best_scores = np.concatenate([best_scores, _logits_of(table, h)])
        order = np.lexsort((best_ids, -best_scores))[:k]
        best_ids, best_scores = best_ids[order], best_scores[order]
    return best_ids, best_scores


def head_macs(arrays: dict) -> int:
    """Multiply-adds of one token's logits through the clustered table."""
    total = 0
    for start, end, table in _clusters(arrays):
        if isinstance(table, tuple):
            rank, dim = np.shape(table[1])
            total += rank * dim + (end - start) * rank
        else:
            total += (end - start) * np.shape(table)[1]
    return total


def dense_head_macs(arrays: dict) -> int:
    return int(arrays["boundaries"][-1]) * int(arrays["dim"])
