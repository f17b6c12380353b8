"""Sentence embeddings from token states (numpy, so any stage can use it on any model's outputs)."""

from __future__ import annotations

import numpy as np


def mean_pool(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Mean of `hidden` [batch, seq, dim] over the positions where `mask` [batch, seq] is 1.

    This is sentence-transformers' mean pooling, the output such models are trained for. A row with no
    unmasked position gives zeros rather than NaN (the count is clamped as sentence-transformers does).
    """
    hidden = np.asarray(hidden)
    weights = np.asarray(mask, dtype=hidden.dtype)[..., np.newaxis]
    if hidden.ndim != 3 or weights.shape[:2] != hidden.shape[:2]:
        raise ValueError(f"mean_pool: hidden {hidden.shape} and mask {np.shape(mask)} do not match")
    counts = np.maximum(weights.sum(axis=1), 1e-9)
    return (hidden * weights).sum(axis=1) / counts
