import numpy as np
import pytest
import tensorflow as tf

from tflm_mcubert.model.lowrank import fisher_rows, fisher_weighted_factorization, low_rank_factorization
from tflm_mcubert.errors import UserError


def truncation(matrix, rank):
    u, s, vt = np.linalg.svd(matrix.astype(np.float64), full_matrices=False)
    return (u[:, :rank] * s[:rank]) @ vt[:rank]


@pytest.fixture
def matrix():
    return np.random.default_rng(0).normal(size=(40, 12)).astype(np.float32)


@pytest.mark.parametrize("rank", [0, 1, 5, 12])
def test_alg2_reconstruction_is_the_rank_r_truncation(matrix, rank):
    u, vt = low_rank_factorization(matrix, rank)
    assert u.shape == (40, rank) and vt.shape == (rank, 12)
    np.testing.assert_allclose(u @ vt, truncation(matrix, rank), atol=1e-5)


def test_alg2_splits_singular_values_evenly(matrix):
    u, vt = low_rank_factorization(matrix, 4)
    sigma = np.linalg.svd(matrix, compute_uv=False)[:4]
    np.testing.assert_allclose(np.linalg.norm(u, axis=0), np.sqrt(sigma), rtol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(vt, axis=1), np.sqrt(sigma), rtol=1e-5)


def test_rank_above_the_matrix_is_refused(matrix):
    with pytest.raises(UserError, match="rank 13"):
        low_rank_factorization(matrix, 13)


def test_fwsvd_with_uniform_fisher_is_plain_svd(matrix):
    u, vt = fisher_weighted_factorization(matrix, 4, np.full(40, 3.0))
    su, svt = low_rank_factorization(matrix, 4)
    np.testing.assert_allclose(u @ vt, su @ svt, atol=1e-5)
    np.testing.assert_allclose(np.abs(u), np.abs(su), atol=1e-5)  # same balanced factors, up to sign


def weighted_error(matrix, approx, fisher):
    return float(np.sum(fisher[:, None] * (matrix - approx) ** 2))


def test_fwsvd_is_hsu_et_al_and_beats_svd_on_the_weighted_objective(matrix):
    fisher = np.random.default_rng(1).gamma(0.3, size=40) + 1e-3
    u, vt = fisher_weighted_factorization(matrix, 3, fisher)
    root = np.sqrt(fisher)[:, None]
    hsu = truncation(root * matrix, 3) / root  # Î⁻¹ (Î W)_r
    np.testing.assert_allclose(u @ vt, hsu, atol=1e-4)
    plain = truncation(matrix, 3)
    assert weighted_error(matrix, u @ vt, fisher) < weighted_error(matrix, plain, fisher)


def test_fwsvd_rows_without_fisher_are_projected_not_infinite(matrix):
    fisher = np.ones(40)
    fisher[::2] = 0.0
    u, vt = fisher_weighted_factorization(matrix, 3, fisher)
    assert np.all(np.isfinite(u @ vt))
    # a zero-weight row is its projection onto the kept right singular subspace
    basis = np.linalg.svd(matrix[1::2], full_matrices=False)[2][:3]
    np.testing.assert_allclose((u @ vt)[0], matrix[0] @ basis.T @ basis, atol=1e-4)
    with pytest.raises(UserError, match="all zero"):
        fisher_weighted_factorization(matrix, 3, np.zeros(40))


def test_fisher_rows_sums_duplicate_sparse_rows_before_squaring():
    grad = tf.IndexedSlices(
        values=tf.constant([[1.0, 2.0], [3.0, 0.0], [1.0, 1.0]]),
        indices=tf.constant([1, 3, 1]),
        dense_shape=tf.constant([4, 2]),
    )
    np.testing.assert_allclose(fisher_rows(grad), [0.0, 4.0 + 9.0, 0.0, 9.0])
    np.testing.assert_allclose(fisher_rows(np.array([[1.0, 2.0], [0.0, 3.0]])), [5.0, 9.0])
