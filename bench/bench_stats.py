"""The accuracy benchmarks' statistics (bench/nas_vs_adaptive.py, bench/equal_flash.py): McNemar per seed,
the paired bootstrap, mean ± sd. Inputs are per-example correctness arrays [seeds, examples], the same
examples and seeds for both methods."""

from __future__ import annotations

import math

import numpy as np

BOOTSTRAP_SAMPLES = 10_000


def mcnemar(a_correct: np.ndarray, b_correct: np.ndarray) -> float:
    """Exact two-sided McNemar p-value (binomial on the discordant pairs)."""
    b, c = int(np.sum(a_correct & ~b_correct)), int(np.sum(~a_correct & b_correct))
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(b, c) + 1)) / 2.0**n
    return min(1.0, 2.0 * tail)


def paired_bootstrap(
    a_correct: np.ndarray,
    b_correct: np.ndarray,
    samples: int = BOOTSTRAP_SAMPLES,
    seed: int = 0,
    *,
    resample_seeds: bool = True,
) -> float:
    """Two-sided p-value of mean(a) − mean(b) = 0. `*_correct` are [seeds, examples]; each resample draws
    the examples (the same ones for both methods) and, with `resample_seeds`, the seeds, with replacement,
    so both the test set's and the training seeds' variation count; the statistic is the accuracy
    difference averaged over the drawn seeds."""
    diff = np.atleast_2d(a_correct.astype(np.float64) - b_correct.astype(np.float64))  # [seeds, examples]
    seeds, examples = diff.shape
    rng = np.random.default_rng(seed)
    means = np.empty(samples)
    for k in range(samples):
        rows = rng.integers(0, seeds, seeds) if resample_seeds else np.arange(seeds)
        per_seed = diff[:, rng.integers(0, examples, examples)].mean(axis=1)
        means[k] = per_seed[rows].mean()
    return float(min(1.0, 2.0 * min(np.mean(means <= 0.0), np.mean(means >= 0.0))))


def mean_sd(values) -> str:
    values = 100 * np.asarray(values, np.float64)
    sd = values.std(ddof=1) if values.size > 1 else 0.0
    return f"{values.mean():.2f} ± {sd:.2f}"


def statistics(values, scale: float = 100.0) -> dict:
    """Mean and sd (ddof 1) of `values` × `scale` (accuracies in percent by default)."""
    values = scale * np.asarray(values, np.float64)
    return {"mean": float(values.mean()), "sd": float(values.std(ddof=1)) if values.size > 1 else 0.0}


def format_p(value) -> str:
    return "n/a" if value is None else f"{value:.2g}" if value < 0.01 else f"{value:.3f}".rstrip("0").rstrip(".")
