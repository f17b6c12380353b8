"""Embedding-parameter budgets: counting deployable parameters and projecting a searched architecture
onto a budget (`search --target-embedding-params N`).

The search itself is steered toward N by adjusting λ online (`nas.SizePenalty`); what the soft search
ends with may still overshoot a little, so each decision is then projected onto the budget, using the
search's own preferences wherever it has them:

1. clustering (after Stage 1 / the joint search): move tokens to cheaper clusters, those that lose the
   least α-preference per parameter saved first (`demote_to_budget`);
2. ranks (after Stage 2 / the joint search): count the singular values of largest β that fit, which
   prunes an over-budget search and fills an under-budget one (`betas_for_budget`); the factors are
   then the best fit of the searched table at those ranks (`search_space._searched_factors`);
3. last resort on the final embedding, for anything still over (e.g. a ratio-then-clustering
   model whose searched ranks are too large): drop the singular components carrying the least energy
   per parameter (`truncate_to_budget`).

The smallest embedding any mode may be asked for is v + d: every token at rank 1, the least that keeps
tokens distinguishable. Anything smaller is refused as infeasible (`check_target`).

A budget in bytes (`search --target-embedding-bytes B`): the Flash the export stores for the word
embedding (`clustered_embedding.stored_embedding_bytes`: rows, Vᵀ, per-channel requantization, the
cluster table). The search runs at the parameter budget B minus the fixed per-cluster tables
(`params_for_bytes`); what the export adds beyond one byte per parameter (Vᵀ padded to 4 ranks, a
rank-0 cluster stored as one zero column) is then paid by `fit_to_bytes`, which lowers ranks, least
energy per byte saved first, until the stored bytes fit B. The search itself counts parameters: a cluster
it cuts to rank 0 still costs its n_i bytes of zero column there.
"""

from __future__ import annotations

import heapq

import numpy as np

from tflm_mcubert.model.clustered_embedding import ClusteredLowRankEmbedding
from tflm_mcubert.model.embedding_bytes import cluster_stored_bytes, stored_embedding_bytes
from tflm_mcubert.model.embedding_bytes import params_for_bytes, smallest_embedding  # noqa: F401 (re-exported)
from tflm_mcubert.model.lowrank import low_rank_factorization, svd
from tflm_mcubert.errors import UserError


def check_target(target: int, vocab_size: int, dim: int) -> None:
    floor = smallest_embedding(vocab_size, dim)
    if target < floor:
        raise UserError(
            f"--target-embedding-params {target:,} is infeasible: the smallest embedding the "
            f"search can build (every token at rank 1) has v + d = {vocab_size:,} + {dim} = "
            f"{floor:,} parameters"
        )


def fit_to_bytes(embedding: ClusteredLowRankEmbedding, target_bytes: int, bits: int = 8):
    """`embedding` with ranks lowered until its stored bytes (`stored_embedding_bytes`) fit `target_bytes`:
    one singular component at a time, the one with the least energy (σ²) per byte saved first. A drop that
    saves nothing (rank 1 → 0: the export stores rank 0 as one zero column) is never made; when no drop
    saves anything and the bytes are still over, the budget is refused. Returns `embedding` if it fits."""
    sizes, dim = embedding.cluster_sizes, embedding.dim
    ranks = list(embedding.ranks)

    def stored(ranks) -> int:
        return stored_embedding_bytes(sizes, ranks, dim, bits)

    if stored(ranks) <= target_bytes:
        return embedding
    products, spectra = _products_and_spectra(embedding)
    while stored(ranks) > target_bytes:
        best = None
        for i, r in enumerate(ranks):
            if r == 0:
                continue
            saving = stored(ranks) - stored(ranks[:i] + [r - 1] + ranks[i + 1 :])
            if saving > 0 and (best is None or spectra[i][r - 1] ** 2 / saving < best[0]):
                best = (spectra[i][r - 1] ** 2 / saving, i)
        if best is None:
            raise UserError(
                f"the embedding cannot be cut to {target_bytes:,} B: at {stored(ranks):,} B (ranks {ranks}) no "
                f"rank lowers its stored size further"
            )
        ranks[best[1]] -= 1
    return _refactored(embedding, products, ranks)


def deployable_params(counts, ranks, dim: int) -> int:
    """n_0·d + Σ_{i≥1} r_i·(n_i + d) over non-empty clusters, a rank above n_i counting as n_i (as
    `ClusteredLowRankEmbedding` stores it)."""
    counts = [int(n) for n in counts]
    total = counts[0] * dim
    for n, r in zip(counts[1:], ranks):
        r = min(int(r), n)
        total += r * (n + dim) if n else 0
    return total


def assignment_params(assignment: np.ndarray, ranks, dim: int) -> int:
    return deployable_params(np.bincount(assignment, minlength=len(ranks) + 1), ranks, dim)


def demote_to_budget(
    assignment: np.ndarray, logits: np.ndarray, ranks, dim: int, budget: int, cluster_size=None
) -> np.ndarray:
    """Move tokens to cheaper clusters until the clustering fits `budget` at the given ranks (or every token
    is in a cheapest cluster). Greedy over single moves: each token's next move is to the cheaper cluster
    it prefers most, and the move losing the least α-preference (logit gap) per parameter saved goes first.
    `cluster_size(cluster, n)`: what the budget counts of one cluster with n tokens (default: parameters;
    a byte budget: `cluster_stored_bytes`).
    """
    assignment = np.asarray(assignment).copy()
    logits = np.asarray(logits, np.float64)
    cost = np.asarray([dim, *ranks], np.float64)  # per-token parameters of each cluster

    def next_move(token):
        cheaper = np.flatnonzero(cost < cost[assignment[token]])
        if cheaper.size == 0:
            return None
        target = int(cheaper[np.argmax(logits[token, cheaper])])
        saving = cost[assignment[token]] - cost[target]
        return (logits[token, assignment[token]] - logits[token, target]) / saving, token, target

    counts = np.bincount(assignment, minlength=len(cost)).tolist()
    all_ranks = [dim, *ranks]

    def params(cluster, n):  # what one cluster stores with n tokens (as `deployable_params` counts it)
        if cluster_size is not None:
            return cluster_size(cluster, n)
        return n * dim if cluster == 0 else min(all_ranks[cluster], n) * (n + dim) if n else 0

    size = sum(params(i, n) for i, n in enumerate(counts))
    heap = [move for move in map(next_move, range(len(assignment))) if move is not None]
    heapq.heapify(heap)
    while size > budget and heap:
        _, token, target = heapq.heappop(heap)
        source = assignment[token]
        size -= params(source, counts[source]) + params(target, counts[target])
        counts[source] -= 1
        counts[target] += 1
        size += params(source, counts[source]) + params(target, counts[target])
        assignment[token] = target
        if (move := next_move(token)) is not None:
            heapq.heappush(heap, move)
    return assignment


def betas_for_budget(counts, betas: list[np.ndarray], dim: int, budget: int) -> list[np.ndarray]:
    """The singular values a budget keeps: the largest β first, each kept if it still fits.

    β already weighs importance against cost (the size penalty pushes β_il down in proportion to its
    n_i + d parameters), so its order is the search's own ranking; with a budget it replaces the fixed
    threshold β*, in both directions (pruning an over-budget search, filling an under-budget one).
    Returns one boolean mask per cluster i > 0 (counts[0] is the dense cluster).
    """
    counts = [int(n) for n in counts]
    keep = [np.zeros(len(b), bool) for b in betas]
    size = counts[0] * dim
    candidates = sorted(
        ((float(b[k]), i, k) for i, b in enumerate(betas) for k in range(len(b))),
        key=lambda item: (-item[0], item[1], item[2]),
    )
    for _, i, component in candidates:
        n = counts[i + 1]
        rank = int(keep[i].sum())
        if n == 0 or rank >= n:
            continue
        cost = n + dim  # a column of U_i and a row of Vᵀ_i
        if size + cost <= budget:
            keep[i][component] = True
            size += cost
    return keep


def truncate_to_budget(embedding: ClusteredLowRankEmbedding, budget: int) -> ClusteredLowRankEmbedding:
    """Lower ranks until `embedding` fits: drop the singular components of U_i·Vᵀ_i with the least
    energy (σ²) per parameter saved (n_i + d), one at a time. Returns `embedding` itself if it fits."""
    if embedding.stored_params() <= budget:
        return embedding
    sizes, dim = embedding.cluster_sizes, embedding.dim
    products, spectra = _products_and_spectra(embedding)
    ranks = list(embedding.ranks)
    heap = [(spectra[i][r - 1] ** 2 / (sizes[i + 1] + dim), i) for i, r in enumerate(ranks) if r]
    heapq.heapify(heap)
    while deployable_params(sizes, ranks, dim) > budget:
        if not heap:
            raise UserError(
                f"the dense cluster alone ({sizes[0]:,} tokens x {dim}) exceeds the budget of {budget:,} parameters"
            )
        _, i = heapq.heappop(heap)
        ranks[i] -= 1
        if ranks[i]:
            heapq.heappush(heap, (spectra[i][ranks[i] - 1] ** 2 / (sizes[i + 1] + dim), i))
    return _refactored(embedding, products, ranks)


def _products_and_spectra(embedding: ClusteredLowRankEmbedding):
    """Each low-rank cluster's U_i·Vᵀ_i (float64) and its singular values."""
    products = [
        np.asarray(u.numpy(), np.float64) @ np.asarray(vt.numpy(), np.float64)
        for u, vt in zip(embedding.us, embedding.vts)
    ]
    return products, [svd(p)[1] if r else np.zeros(0) for p, r in zip(products, embedding.ranks)]


def _refactored(embedding: ClusteredLowRankEmbedding, products, ranks) -> ClusteredLowRankEmbedding:
    """`embedding` with each cluster's product refactorised at the new rank (its best fit)."""
    factors = [
        low_rank_factorization(p, r) if r else (np.zeros((p.shape[0], 0)), np.zeros((0, embedding.dim)))
        for p, r in zip(products, ranks)
    ]
    return ClusteredLowRankEmbedding.from_factors(
        np.asarray(embedding.table.numpy()),
        factors,
        cutoffs=embedding.cutoffs,
        permutation=embedding.permutation,
        origin=embedding.origin,
    )


def keep_by_importance(
    counts, importance: list[np.ndarray], dim: int, budget: int | None, stored_size=None
) -> list[np.ndarray]:
    """The singular components a budget keeps, by importance PER PARAMETER: a component of cluster i costs
    n_i + d (a column of U_i, a row of Vᵀ_i), so a cheap cluster's weaker component may beat a big
    cluster's stronger one. Greedy, each kept if it still fits; components of no importance are never kept,
    so a cluster may end at rank 0. Without a budget every component of positive importance is kept.
    `stored_size(counts, ranks)`: what the budget counts instead of parameters (a byte budget:
    `bytes_of`, where a cluster's first column is free, its rank-0 zero column being stored anyway).
    Returns one boolean mask per cluster i > 0 (counts[0] is the dense cluster)."""
    counts = [int(n) for n in counts]
    keep = [np.zeros(len(s), bool) for s in importance]
    ranks = [0] * len(importance)
    size = counts[0] * dim
    candidates = sorted(
        (
            (-float(s[k]) / (counts[i + 1] + dim), i, k)
            for i, s in enumerate(importance)
            for k in range(len(s))
            if s[k] > 0 and counts[i + 1] > 0
        ),
    )
    for _, i, component in candidates:
        if stored_size is None:
            fits = budget is None or size + counts[i + 1] + dim <= budget
        else:
            fits = budget is None or stored_size(counts, ranks[:i] + [ranks[i] + 1] + ranks[i + 1 :]) <= budget
        if fits:
            keep[i][component] = True
            ranks[i] += 1
            size += counts[i + 1] + dim
    return keep


def demote_to_bytes(assignment: np.ndarray, logits: np.ndarray, num_clusters: int, dim: int, budget: int, bits=8):
    """A byte budget's Stage-1 projection: move tokens out of the dense cluster (least attached first, as
    `demote_to_budget`) until the clustering fits `budget` with every low-rank cluster at rank 1 — the least
    the export stores for it (rank 0 is stored as one zero column) — so Stage 2 can fit the budget."""

    def floor(cluster, n):
        return cluster_stored_bytes(cluster, n, 1, dim, bits)

    counts = np.bincount(assignment, minlength=num_clusters)
    if sum(floor(i, int(n)) for i, n in enumerate(counts)) <= budget:
        return assignment
    return demote_to_budget(assignment, logits, [1] * (num_clusters - 1), dim, budget, cluster_size=floor)


def bytes_of(dim: int, bits: int = 8):
    """`stored_size` for a byte budget: the export's stored bytes (`stored_embedding_bytes`)."""
    return lambda counts, ranks: stored_embedding_bytes(counts, ranks, dim, bits)
