"""The benchmarks' statistics (bench/nas_vs_adaptive.py, bench/equal_flash.py, bench/distill_augment.py,
bench/decoder_search.py): McNemar per seed, the paired bootstrap, mean ± sd, the paired t over seeds. The
bootstrap's and McNemar's inputs are per-example correctness arrays [seeds, examples], the same examples and
seeds for both methods."""

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


def format_bootstrap_p(value: float, below: str = "<") -> str:
    """A bootstrap p: 0 is below its resolution ("<1e-4" in a table, "below 1e-4" in a sentence, where an
    inline figure holds no "<")."""
    return f"{below}1e-4" if value == 0 else format_p(value)


def p_words(value: float) -> str:
    """A bootstrap p as a sentence reads it."""
    return format_bootstrap_p(value, below="below ")


def student_t_two_sided_p(t: float, dof: int) -> float:
    """Two-sided p of Student's t with `dof` degrees of freedom (Simpson's rule on the density: no scipy)."""
    if not math.isfinite(t):
        return 0.0
    log_norm = math.lgamma((dof + 1) / 2) - math.lgamma(dof / 2) - 0.5 * math.log(dof * math.pi)
    steps, upper = 20_000, abs(t)
    width = upper / steps
    density = [math.exp(log_norm - (dof + 1) / 2 * math.log1p((k * width) ** 2 / dof)) for k in range(steps + 1)]
    area = width / 3 * (density[0] + density[-1] + 4 * sum(density[1:-1:2]) + 2 * sum(density[2:-1:2]))
    return max(0.0, min(1.0, 1.0 - 2.0 * area))


def paired_t(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """(t, two-sided p) of mean(a - b) = 0 over paired seeds."""
    diff = np.asarray(a, np.float64) - np.asarray(b, np.float64)
    if diff.size < 2:
        return float("nan"), float("nan")
    sd = diff.std(ddof=1)
    t = (math.inf if diff.mean() else 0.0) if sd == 0 else diff.mean() / (sd / math.sqrt(diff.size))
    return float(t), student_t_two_sided_p(t, diff.size - 1) if t else 1.0


def paired_difference(a_correct: np.ndarray, b_correct: np.ndarray) -> dict:
    """a − b of [seeds, examples] correctness on the same seeds and examples: the difference in points, the
    paired t over the seeds' accuracies and the paired bootstrap over seeds and examples."""
    t, p = paired_t(a_correct.mean(axis=1), b_correct.mean(axis=1))
    points = float(100 * (a_correct.mean() - b_correct.mean()))
    return {"points": points, "t": t, "paired_t_p": p, "paired_bootstrap_p": paired_bootstrap(a_correct, b_correct)}
