"""Low-rank factorizations of an embedding table: plain SVD (the paper's Alg. 2) and Fisher-weighted SVD.

Every function returns a pair (U, Vt) with `U @ Vt` the rank-r approximation, U of shape [rows, r] and Vt
of shape [r, cols]. The singular values are split evenly between the two factors (U·Σ^½, Σ^½·Vᵀ) so both
factors have comparable magnitudes, which is what int8 quantization of each factor wants.
"""

from __future__ import annotations

import numpy as np

from tflm_mcubert.errors import UserError


def _check_rank(matrix: np.ndarray, rank: int) -> None:
    if matrix.ndim != 2:
        raise ValueError(f"expected a 2-D matrix, got shape {matrix.shape}")
    if not 0 <= rank <= min(matrix.shape):
        raise UserError(
            f"rank {rank} is outside 0..{min(matrix.shape)} for a {matrix.shape[0]}x{matrix.shape[1]} matrix"
        )


def svd(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Thin SVD in float64 (the table is small; float64 keeps the truncation exact to float32 precision)."""
    u, s, vt = np.linalg.svd(np.asarray(matrix, np.float64), full_matrices=False)
    return u, s, vt


def low_rank_factorization(matrix: np.ndarray, rank: int) -> tuple[np.ndarray, np.ndarray]:
    """Alg. 2: U, Σ, Vᵀ = SVD(matrix); keep the top `rank` singular values; return (U·Σ^½, Σ^½·Vᵀ)."""
    matrix = np.asarray(matrix)
    _check_rank(matrix, rank)
    u, s, vt = svd(matrix)
    root = np.sqrt(s[:rank])
    return ((u[:, :rank] * root).astype(np.float32), (root[:, None] * vt[:rank]).astype(np.float32))


def fisher_weighted_factorization(
    matrix: np.ndarray, rank: int, row_fisher: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """FWSVD (Hsu et al., ICLR'22): the rank-r factorization minimising Σ_j I_j ||W_j - (UVᵀ)_j||².

    `row_fisher[j]` is row j's Fisher importance I_j: the squared gradients of the task loss w.r.t. row j,
    summed over its columns and over batches (see `fisher_rows`). With Î = diag(√I), Hsu et al. take the
    SVD of ÎW, truncate, and multiply back by Î⁻¹: Î⁻¹(ÎW)_r = W·V_r·V_rᵀ, where V_r are the top right
    singular vectors of ÎW. We compute that right-hand form, which is the same matrix whenever every
    I_j > 0 and stays finite when a row has no Fisher weight (a token the task never uses): such a row is
    simply projected onto the kept subspace.
    """
    matrix = np.asarray(matrix, np.float64)
    _check_rank(matrix, rank)
    row_fisher = np.asarray(row_fisher, np.float64)
    if row_fisher.shape != (matrix.shape[0],):
        raise ValueError(f"row_fisher has shape {row_fisher.shape}, expected ({matrix.shape[0]},)")
    if np.any(row_fisher < 0) or not np.all(np.isfinite(row_fisher)):
        raise UserError("Fisher importances must be finite and non-negative")
    if not np.any(row_fisher > 0):
        raise UserError("Fisher importances are all zero: no gradient reached the embedding table")
    _, _, vt = svd(np.sqrt(row_fisher)[:, None] * matrix)
    basis = vt[:rank]  # [r, cols], orthonormal rows
    coefficients = matrix @ basis.T  # [rows, r]
    # Balance the factors as Alg. 2 does: with uniform weights, column l of `coefficients` has norm σ_l,
    # so this reproduces (U·Σ^½, Σ^½·Vᵀ) exactly.
    scale = np.sqrt(np.linalg.norm(coefficients, axis=0))
    scale[scale == 0] = 1.0
    return ((coefficients / scale).astype(np.float32), (scale[:, None] * basis).astype(np.float32))


def factorize(
    matrix: np.ndarray, rank: int, *, method: str = "svd", row_fisher: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Dispatch on `method`: "svd" (Alg. 2) or "fwsvd" (needs `row_fisher`)."""
    if method == "svd":
        return low_rank_factorization(matrix, rank)
    if method == "fwsvd":
        if row_fisher is None:
            raise UserError("method 'fwsvd' needs Fisher importances of the embedding rows")
        return fisher_weighted_factorization(matrix, rank, row_fisher)
    raise UserError(f"unknown factorization method {method!r} (choose svd or fwsvd)")


def fisher_rows(gradient) -> np.ndarray:
    """Per-row Fisher contribution of one batch gradient of the embedding table: Σ_columns grad².

    Accepts a dense array or a `tf.IndexedSlices` (what TF returns for a gathered table; its duplicate
    indices are summed before squaring, since the row's gradient is their sum). Sum the result over
    batches to get the `row_fisher` of `fisher_weighted_factorization`.
    """
    import tensorflow as tf

    if isinstance(gradient, tf.IndexedSlices):
        gradient = tf.convert_to_tensor(gradient)  # scatters and sums duplicates into a dense table
    dense = np.asarray(gradient, np.float64)
    return np.sum(dense * dense, axis=1)
