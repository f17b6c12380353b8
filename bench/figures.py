"""The benchmarks' figures: matplotlib on a file backend, optional (a benchmark's figures and numbers come
from one run; without matplotlib the numbers are still printed and written)."""

from __future__ import annotations

import sys
from pathlib import Path


def pyplot():
    """matplotlib.pyplot on a file backend, or None (said on stderr) when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot", file=sys.stderr)
        return None
    return plt


def save_figure(plt, figure, path: Path, dpi: int = 120) -> Path:
    figure.tight_layout()
    figure.savefig(path, dpi=dpi)
    plt.close(figure)
    return path
