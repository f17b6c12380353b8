"""Adaptive embedding's shape (Baevski & Auli 2019) at any budget: its cut-offs and ranks, the parameters and
bytes they take, and the shape scaled to a budget. Plain arithmetic without Keras, so that the commands
which only price a model (`boards`, export's fit to a board) answer without loading it; the embedding
itself is built in compress/baselines.py, which re-exports these."""

from __future__ import annotations

import numpy as np

from tflm_mcubert.errors import BelowSmallestError, UserError
from tflm_mcubert.model.embedding_bytes import stored_embedding_bytes

# Baevski & Auli's cut-offs, as the paper uses them for both BERT-tiny and BERT-mini.
ADAPTIVE_CUTOFFS = (1000, 4000, 10000)
BERT_VOCAB_SIZE = 30522  # the vocabulary those cut-offs were set for


def adaptive_cutoffs(vocab_size: int, num_clusters: int) -> list[int]:
    """Baevski & Auli's cut-offs (1000, 4000, 10000 for BERT's 30522 tokens) as fractions of the
    vocabulary; for other cluster counts, log-spaced between the same first and last fractions."""
    if num_clusters == len(ADAPTIVE_CUTOFFS) + 1:
        fractions = np.asarray(ADAPTIVE_CUTOFFS) / BERT_VOCAB_SIZE
    else:
        fractions = np.geomspace(
            ADAPTIVE_CUTOFFS[0] / BERT_VOCAB_SIZE, ADAPTIVE_CUTOFFS[-1] / BERT_VOCAB_SIZE, num_clusters - 1
        )
    return [int(round(f * vocab_size)) for f in fractions]


def fixed_ranks(dim: int, num_clusters: int, div: float) -> list[int]:
    """Stage 1's ranks d/div^i for clusters 1..c-1 (d=128, div=4: 32, 8, 2, as adaptive embedding)."""
    if num_clusters < 2:
        raise UserError(f"need at least 2 clusters, got {num_clusters}")
    if div <= 1:
        raise UserError(f"div must be > 1, got {div}")
    return [int(dim // div**i) for i in range(1, num_clusters)]


def adaptive_params(vocab_size: int, dim: int, cutoffs, ranks) -> int:
    """Stored parameters of adaptive embedding: n_0·d + Σ r_i·(n_i + d), n_i the tokens between cut-offs."""
    bounds = [0, *cutoffs, vocab_size]
    sizes = [b - a for a, b in zip(bounds[:-1], bounds[1:])]
    return sizes[0] * dim + sum(min(r, n) * (n + dim) for n, r in zip(sizes[1:], ranks) if n)


def scaled_adaptive(vocab_size: int, dim: int, base_cutoffs, base_ranks, factor: float):
    """Cut-offs and ranks of adaptive embedding scaled by `factor`: cut-offs round(f·c_i), kept strictly
    increasing and below the vocabulary size; ranks round(f·r_i), at least 1 and at most d."""
    cutoffs, previous = [], 0
    for c in base_cutoffs:
        previous = min(vocab_size - 1, max(previous + 1, int(round(factor * c))))
        cutoffs.append(previous)
    ranks = [min(dim, max(1, int(round(factor * r)))) for r in base_ranks]
    return cutoffs, ranks


def adaptive_for_budget(
    vocab_size: int, dim: int, target: int, *, num_clusters: int = 4, div: float = 4.0, bits: int | None = None
) -> tuple[list[int], list[int]]:
    """Adaptive embedding's cut-offs and ranks for an embedding budget of `target` parameters (or, with
    `bits`, of `target` bytes as the export stores it at that width: `stored_embedding_bytes`).

    The rule: Baevski & Auli's shape (`adaptive_cutoffs`, ranks d/div^i) scaled as a whole, every cut-off
    and every rank multiplied by the same factor f (`scaled_adaptive`); f runs over the head sizes
    k = 1, 2, ... (f = k / first cut-off), and the largest configuration whose size does not exceed
    `target` is returned. Past the head whose last cut-off reaches the vocabulary's end, the cut-offs stay
    and the ranks alone grow, each evenly toward d (`grown_ranks`), so a large budget (a 2 MB board's) is
    spent up to about the dense table's size rather than left unused. The size never decreases along the
    way (tokens move to dearer clusters, ranks grow, and with them the exported Vᵀ's padding), so it is
    found by bisection. f = 1 is the paper's configuration
    (BERT-tiny: 1000/4000/10000, ranks 32/8/2, 318,420 parameters), returned for any parameter target
    from 318,420 up to the next head size's.
    Refused (BelowSmallestError) when even f at a one-token head does not fit.
    """
    base_cutoffs = adaptive_cutoffs(vocab_size, num_clusters)
    base_ranks = fixed_ranks(dim, num_clusters, div)

    # the largest head keeping every cut-off below the vocabulary size; past it, the ranks' growth
    reach = max(1, int((vocab_size - 1) * base_cutoffs[0] / base_cutoffs[-1]))

    def config(step: int):
        head = min(step, reach)
        cutoffs, ranks = scaled_adaptive(vocab_size, dim, base_cutoffs, base_ranks, head / base_cutoffs[0])
        return cutoffs, grown_ranks(ranks, dim, step - head)

    def size(head: int) -> int:
        if bits is None:
            return adaptive_params(vocab_size, dim, *config(head))
        cutoffs, ranks = config(head)
        bounds = [0, *cutoffs, vocab_size]
        return stored_embedding_bytes([b - a for a, b in zip(bounds[:-1], bounds[1:])], ranks, dim, bits)

    if size(1) > target:
        unit = "parameters" if bits is None else "bytes"
        raise BelowSmallestError(
            f"an embedding budget of {target:,} {unit} is below the smallest adaptive embedding of this shape "
            f"({size(1):,}: a one-token dense cluster, every rank 1)",
            smallest=size(1),
        )
    low, high = 1, reach + dim
    while low < high:  # invariant: size(low) <= target
        middle = (low + high + 1) // 2
        if size(middle) <= target:
            low = middle
        else:
            high = middle - 1
    return config(low)


def grown_ranks(ranks: list[int], dim: int, step: int) -> list[int]:
    """`ranks` grown `step` of d steps toward d, each by its own headroom's share (step d: every rank d)."""
    return [r + -(-(dim - r) * step // dim) for r in ranks]
