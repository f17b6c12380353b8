"""The clustered word table as the ops that read it in int8 see it: MCUBERT_LM_HEAD (scoring every id) and
MCUBERT_DECODER_EMBEDDING (looking one up). Cluster i owns ids [end_{i-1}, end_i) and stores rows of rank
r_i (r_0 = d) and, for i > 0, the pair4 projection V_i (d outputs, r_i inputs); SPEC 4.1. The embedding
op itself keeps its own view (ops/embedding.py), which also reads int4 storage.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tflm_mcubert.ops import contract
from tflm_mcubert.ops.linear import packed_size, unpack_weights
from tflm_mcubert.ops.validation import OpSpecError, check_array


@dataclasses.dataclass(frozen=True)
class WordCluster:
    start: int
    end: int
    rank: int
    rows: np.ndarray  # int8[end - start, rank]
    projection: np.ndarray | None  # int8[d, rank] (V_i unpacked); None for cluster 0


def word_clusters(op: str, clusters, word_rows, word_projections, d: int, vocab_size: int) -> tuple[WordCluster, ...]:
    """The int8 clusters of the tables, checked (sizes, ends, ranks) as the kernels check them; errors name `op`."""
    table = check_array(op, "clusters", clusters, np.int32)
    if table.ndim != 2 or table.shape[1] != 2 or not 1 <= table.shape[0] <= contract.MAX_CLUSTERS:
        raise OpSpecError(
            op, "clusters", f"expected int32[c, 2] with 1 <= c <= {contract.MAX_CLUSTERS}, got {table.shape}"
        )
    ends, ranks = table[:, 0].astype(np.int64), table[:, 1].astype(np.int64)
    starts = np.concatenate([[0], ends[:-1]])
    if np.any(ends <= starts) or ends[-1] != vocab_size:
        raise OpSpecError(
            op, "clusters", f"cluster ends must increase strictly and the last must equal vocab_size {vocab_size}"
        )
    if ranks[0] != d or np.any(ranks[1:] < 1) or np.any(ranks[1:] > d):
        raise OpSpecError(op, "clusters", f"rank of cluster 0 must be d={d}; others in [1, d]")
    row_sizes = [int(n * r) for n, r in zip(ends - starts, ranks)]
    proj_sizes = [0] + [packed_size(d, int(r)) for r in ranks[1:]]
    check_array(op, "word_rows", word_rows, np.int8, (sum(row_sizes),))
    check_array(op, "word_projections", word_projections, np.int8, (sum(proj_sizes),))
    views, row_off, proj_off = [], 0, 0
    for i, (start, end, rank) in enumerate(zip(starts, ends, ranks)):
        rows = word_rows[row_off : row_off + row_sizes[i]].reshape(int(end - start), int(rank))
        projection = None
        if i > 0:
            packed = word_projections[proj_off : proj_off + proj_sizes[i]]
            projection = unpack_weights(packed, d, int(rank), op=op, field=f"word_projections[{i}]")
        views.append(WordCluster(int(start), int(end), int(rank), rows, projection))
        row_off += row_sizes[i]
        proj_off += proj_sizes[i]
    return tuple(views)
