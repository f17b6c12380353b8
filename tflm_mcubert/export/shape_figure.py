"""The figure of one `distill --preset auto` search: what each trained candidate scored on dev against what it
costs on the board: the estimated latency, and the Flash of everything but the word tables (the tables fill
the rest of the whole-model budget, so every candidate's whole model is the same size; what a shape buys is
the rest's share). The candidates no other beats on both dev accuracy and cost are joined (their Pareto
front), the chosen one is starred, the latency cap is drawn. The accuracy is the one the search ranked on:
the integer model's on the board path where it measured that, else the float student's. Made from the
`shape_search` section of metrics.json, so bench scripts draw the committed searches with the same
function."""

from __future__ import annotations

from pathlib import Path

from tflm_mcubert.export.shape_search import BOARD, ranked_accuracy

FIGURE_FILE = "shape_search.png"
PANELS = (("latency_ms", "estimated latency (ms)"), ("flash_bytes", "Flash besides the word tables (KB)"))


def accuracy_front(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The (cost, accuracy) points no other point beats on both (cheaper or equal, and more accurate),
    cheapest first."""
    front: list[tuple[float, float]] = []
    for cost, accuracy in sorted(points, key=lambda p: (p[0], -p[1])):
        if not front or accuracy > front[-1][1]:
            front.append((cost, accuracy))
    return front


def draw_shape_search(report: dict, path: Path, title: str | None = None) -> Path:
    """Write the search's figure (see the module docstring) as a PNG at `path`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = report["candidates"]
    fig, axes = plt.subplots(1, len(PANELS), figsize=(10, 4.2), dpi=110, sharey=True)
    for ax, (key, label) in zip(axes, PANELS):
        scale = 1024 if key == "flash_bytes" else 1
        points = [(row[key] / scale, 100 * ranked_accuracy(row)) for row in rows]
        front = accuracy_front(points)
        ax.plot(*zip(*front), color="tab:blue", linewidth=1, alpha=0.6, label="Pareto front (dev)")
        for row, (x, y) in zip(rows, points):
            marker, size = ("*", 160) if row["chosen"] else ("o", 40)
            ax.scatter([x], [y], marker=marker, s=size, color="tab:orange" if row["chosen"] else "tab:blue", zorder=3)
            ax.annotate(row["shape"], (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
        if key == "latency_ms" and report.get("max_latency_ms"):
            ax.axvline(report["max_latency_ms"], linestyle="--", color="grey", linewidth=0.8)
            ax.annotate(f"cap {report['max_latency_ms']:g} ms", (report["max_latency_ms"], min(p[1] for p in points)),
                        fontsize=7, color="dimgrey", ha="right", va="bottom", rotation=90)  # fmt: skip
        ax.margins(x=0.15, y=0.2)  # room for the shapes' names
        ax.set_xlabel(label)
        ax.grid(True, alpha=0.3)
    on_board = any(BOARD in row for row in rows)
    axes[0].set_ylabel(f"dev accuracy of the {'exported' if on_board else 'distilled'} candidate (%)")
    axes[0].legend(fontsize=7, loc="best")
    fig.suptitle(
        title
        or f"{report['board']} at {report['seq_len']} tokens: {len(rows)} candidates of "
        f"{report['shapes_fitting']} shapes that fit; chosen {report['chosen']}",
        fontsize=9,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
