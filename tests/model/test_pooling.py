import numpy as np
import pytest

from tflm_mcubert.model.pooling import mean_pool


def test_mean_pool_averages_only_unmasked_positions():
    hidden = np.array(
        [[[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]], [[5.0, 6.0], [100.0, 100.0], [100.0, 100.0]]], np.float32
    )
    mask = np.array([[1, 1, 0], [1, 0, 0]])
    np.testing.assert_allclose(mean_pool(hidden, mask), [[2.0, 3.0], [5.0, 6.0]])


def test_mean_pool_of_an_all_masked_row_is_zero_not_nan():
    pooled = mean_pool(np.ones((1, 3, 4), np.float32), np.zeros((1, 3), np.int32))
    np.testing.assert_array_equal(pooled, np.zeros((1, 4)))


def test_mean_pool_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match="do not match"):
        mean_pool(np.ones((2, 3, 4)), np.ones((2, 4)))
