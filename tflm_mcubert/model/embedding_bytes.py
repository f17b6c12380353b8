"""The Flash bytes a clustered word embedding takes as the export stores it, and the parameters a byte budget
buys. Plain arithmetic over the op's storage rules (ops/SPEC.md 4.1), without Keras, so that the commands
which only price a model (`boards`, the shape search's pricing, the Flash budget) answer without loading it;
model/clustered_embedding.py and compress/budget.py re-export these."""

from __future__ import annotations

from tflm_mcubert.errors import UserError
from tflm_mcubert.ops.contract import EMBEDDING_WORD_BITS
from tflm_mcubert.ops.embedding import embedding_storage_bytes

# The export's word-embedding tables (ops/SPEC.md 4.1, `MCUBERT_EMBEDDING`), per exported cluster: the
# `clusters` row (end id, rank: 2 x int32), its `word_requant` (multiplier, shift: 2 x int32 per channel
# of d, the per-channel scales), its rows in `word_rows` and, for i > 0, its Vᵀ in `word_projections`
# (int8, pair4-packed: padded to 2 channels x 4 ranks). The permutation costs no Flash: the tokenizer's
# vocabulary is written in the permuted order.
CLUSTER_ENTRY_BYTES = 2 * 4
REQUANT_BYTES_PER_CHANNEL = 2 * 4


def exported_clusters(cluster_sizes, ranks, dim: int) -> list[tuple[int, int]]:
    """(rows, rank) of each cluster the exporter writes, cluster 0 first at rank d, by the op's rules
    (as `quantize.float_model.embedding_clusters`): empty clusters are dropped, rank 0 is stored as one
    zero column (the op needs rank >= 1), and an empty dense cluster takes the first token of the first
    low-rank cluster (the op needs cluster 0)."""
    dense = int(cluster_sizes[0])
    low_rank = [(int(n), max(1, int(r))) for n, r in zip(cluster_sizes[1:], ranks) if int(n) > 0]
    if dense == 0:
        if not low_rank:
            raise UserError("embedding has no tokens")
        dense, (n, r) = 1, low_rank[0]
        low_rank = [(n - 1, r)] + low_rank[1:] if n > 1 else low_rank[1:]
    return [(dense, dim), *low_rank]


def _check_bits(bits: int) -> None:
    if bits not in EMBEDDING_WORD_BITS:
        raise UserError(f"embedding storage of {bits} bits is not exported (supported: {EMBEDDING_WORD_BITS})")


def cluster_stored_bytes(index: int, rows: int, rank: int, dim: int, bits: int = 8) -> int:
    """Flash bytes of one cluster as the export stores it (`index` 0: the dense one; an empty cluster is
    not stored, rank 0 is stored as rank 1): its table entry and requantization, and its rows and Vᵀ as
    `ops.embedding.embedding_storage_bytes` counts them at `bits`."""
    _check_bits(bits)
    if rows == 0:
        return 0
    rank = dim if index == 0 else max(1, rank)
    geometry = [(rows, rank)] if index == 0 else [(0, dim), (rows, rank)]  # a low-rank one stores its Vᵀ
    return CLUSTER_ENTRY_BYTES + REQUANT_BYTES_PER_CHANNEL * dim + embedding_storage_bytes(geometry, dim, bits)


def stored_embedding_bytes(cluster_sizes, ranks, dim: int, bits: int = 8) -> int:
    """Flash bytes the export stores for a clustered word embedding: rows, Vᵀ projections, per-channel
    requantization (its scales) and the cluster table, at a storage width of `bits` for the rows (8, or 4:
    SPEC 4.1.1). Rows and Vᵀ are `ops.embedding.embedding_storage_bytes`'s (the op's word tables, what
    report.json's `embedding.embedding_bytes` gives); this adds the tables. Used by
    `ClusteredLowRankEmbedding.stored_bytes`, `search --target-embedding-bytes`, metrics.json and export's
    report.json. Position and token-type tables are not included."""
    clusters = exported_clusters(cluster_sizes, ranks, dim)
    return sum(cluster_stored_bytes(i, n, r, dim, bits) for i, (n, r) in enumerate(clusters))


def smallest_embedding(vocab_size: int, dim: int) -> int:
    return vocab_size + dim


def params_for_bytes(target_bytes: int, vocab_size: int, dim: int, num_clusters: int, bits: int = 8) -> int:
    """The parameter budget a search runs at for a budget of `target_bytes` stored at `bits`: the bytes left
    after every cluster's table entry and requantization, at one byte per parameter (8 bits: exact) or, at 4
    bits, at a dense row's (d/2 + 2 bytes for d parameters). Only Stage 1 uses the latter: Vᵀ is int8, so a
    low-rank cluster costs more per parameter; Stage 2 and `fit_to_bytes` count the bytes themselves."""
    if bits not in (8, 4):
        raise UserError(f"a byte budget for {bits}-bit embedding storage is not supported (8 or 4)")
    free = target_bytes - num_clusters * (CLUSTER_ENTRY_BYTES + REQUANT_BYTES_PER_CHANNEL * dim)
    params = free if bits == 8 else (2 * free * dim) // (dim + 4)
    floor = smallest_embedding(vocab_size, dim)
    if params < floor:
        raise UserError(
            f"--target-embedding-bytes {target_bytes:,} is infeasible: {num_clusters} clusters' tables take "
            f"{target_bytes - free:,} B and the smallest embedding the search can build {floor:,} parameters"
        )
    return params
