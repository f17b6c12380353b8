"""Equal Flash bytes: adaptive embedding in int8 vs adaptive embedding in int4 vs exact NAS in int4, over seeds.
A script, not a test.

Every method gets the same word-embedding Flash (`--bytes`, default 319,996 B, ~320 KB: the paper's adaptive
embedding for BERT-tiny, 1000/4000/10000 at ranks 32/8/2, takes 322,804 B in int8 with its tables, so adaptive
int8 scales to 988/3952/9880 here; `stored_embedding_bytes` counts every byte) and the same training
steps (NAS: two search stages of --epochs and --finetune-epochs of fine-tune; adaptive: all of them as
fine-tune). Each `search` runs with `--embedding-bits` of its storage, so its fine-tune trains the tables
as they are stored and its accuracy is that of the stored tables (the rest of the model in float for
every method):

  adaptive-int8   `--mode adaptive --target-embedding-bytes B --embedding-bits 8`: Baevski & Auli's shape
                  scaled to B bytes at int8 (`adaptive_for_budget`)
  adaptive-int4   the same at int4: about twice the parameters in the same bytes
  nas-int4        `--mode two-stage --embedding-bits 4`, held to adaptive-int4's stored bytes
  nas-int8        (with --methods) two-stage at int8, held to adaptive-int8's stored bytes

Reported: mean ± sd over seeds of dev and test accuracy (select on dev, report test), the uncompressed
student's, and for each pair against adaptive-int8 (and nas-int4 against adaptive-int4) the paired
bootstrap over examples of the seed-averaged difference and the per-seed McNemar p on test.
Both NAS methods run `search`'s default --final-training select: the found architecture and adaptive
embedding's own at that width are trained with adaptive's recipe and steps, the best on dev written (column
"written"; "extra steps": the search stages and the other candidate's fine-tune). Several tasks in one command:
`--tasks NAME=STUDENT,...` (runs in OUT/<task>), as `nas_vs_adaptive.py`.
OUT/summary.json keeps everything, per-example correctness as packed bits; OUT/equal_flash.png plots dev and test
(mean ± sd) per method against the uncompressed student. Resumable and settings-checked as
`nas_vs_adaptive.py` (whose runner it shares); rerun the same command to finish. `--merge SUMMARY.json[,...]`
reads back the runs of earlier summaries (e.g. bench/results/equal_flash_select_<task>.json) that this command
does not have, as `nas_vs_adaptive.py --merge` (same code): `--seeds 5,6,7,8,9` adds five seeds to five
earlier ones; a summary of other settings or another student is refused, and so is one whose run this
command also has (e.g. `--seeds 0 --methods adaptive-int4`) but predicting differently.

    python bench/equal_flash.py --student runs/student-tiny --out runs/equal-flash \
        --epochs 0.5 --finetune-epochs 1 --jobs 2 --max-seq-len 64
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_stats import format_p as _p  # noqa: E402
from bench_stats import mcnemar, paired_bootstrap  # noqa: E402
from figures import pyplot, save_figure  # noqa: E402
from nas_vs_adaptive import REPO, add_run_arguments, claim_directory, method_summary  # noqa: E402
from steps import log  # noqa: E402
from nas_vs_adaptive import run_search, run_settings, task_options, training_cost  # noqa: E402
from merge_runs import earlier_summaries, with_earlier_runs  # noqa: E402
from provenance import provenance  # noqa: E402
from results_bits import correct, write_json  # noqa: E402

sys.path.insert(0, str(REPO))
from tflm_mcubert.compress.baselines import adaptive_for_budget  # noqa: E402
from tflm_mcubert.model.clustered_embedding import stored_embedding_bytes  # noqa: E402

PAPER_ADAPTIVE_INT8_BYTES = 319_996
METHODS = {  # name: (search mode, storage bits)
    "adaptive-int8": ("adaptive", 8),
    "adaptive-int4": ("adaptive", 4),
    "nas-int4": ("two-stage", 4),
    "nas-int8": ("two-stage", 8),
}
# (method, baseline) pairs compared, when both ran
PAIRS = [("adaptive-int4", "adaptive-int8"), ("nas-int4", "adaptive-int8"), ("nas-int4", "adaptive-int4")]
PAIRS += [("nas-int8", "adaptive-int8")]


def adaptive_stored_bytes(vocab_size: int, dim: int, budget: int, bits: int) -> tuple[list, list, int]:
    """Adaptive embedding's cut-offs, ranks and stored bytes at `bits` for a budget of `budget` bytes."""
    cutoffs, ranks = adaptive_for_budget(vocab_size, dim, budget, bits=bits)
    bounds = [0, *cutoffs, vocab_size]
    sizes = [b - a for a, b in zip(bounds[:-1], bounds[1:])]
    return cutoffs, ranks, stored_embedding_bytes(sizes, ranks, dim, bits)


def method_args(method: str, budget: int, vocab_size: int, dim: int) -> list[str]:
    """`search` arguments of `method`; NAS is held to adaptive's stored bytes at its width."""
    mode, bits = METHODS[method]
    target = budget if mode == "adaptive" else adaptive_stored_bytes(vocab_size, dim, budget, bits)[2]
    return ["--mode", mode, "--target-embedding-bytes", str(target), "--embedding-bits", str(bits)]


def collect(method: str, seed: int, metrics: dict) -> dict:
    row = {"method": method, "seed": seed}
    if "failed" in metrics:
        return row | metrics
    details = metrics["details"]
    stage2 = details.get("stage2", {})
    return row | {
        "embedding_params": metrics["embedding_params"],
        "embedding_bytes": metrics["embedding_bytes"],
        "storage_bits": metrics["embedding_storage_bits"],
        "accuracy_tables": metrics["accuracy_tables"],
        "validation_accuracy": metrics["validation_accuracy"],
        "test_accuracy": metrics["test_accuracy"],
        **training_cost(metrics),
        "architecture": {
            "cutoffs": details.get("cutoffs"),
            "clusters": stage2.get("clusters"),
            "ranks": stage2.get("ranks", details.get("ranks")),
        },
        "predictions": metrics["predictions"],
        "labels": metrics["labels"],
        "uncompressed": {s: metrics[f"uncompressed_{s}_accuracy"] for s in ("validation", "test")},
    }


def correct_by_seed(rows: list[dict], split: str) -> dict[int, np.ndarray]:
    return {r["seed"]: correct(r, split) for r in rows}


def compare(a_rows: list[dict], b_rows: list[dict]) -> dict:
    """a − b over the seeds both have: difference of means, paired bootstrap p, per-seed McNemar p on test."""
    result = {"difference": {}, "bootstrap_p": {}}
    for split in ("validation", "test"):
        a, b = correct_by_seed(a_rows, split), correct_by_seed(b_rows, split)
        seeds = sorted(set(a) & set(b))
        if not seeds:
            return {}
        a_all, b_all = np.array([a[s] for s in seeds]), np.array([b[s] for s in seeds])
        result["seeds"] = seeds
        result["difference"][split] = float(100 * (a_all.mean() - b_all.mean()))
        result["bootstrap_p"][split] = paired_bootstrap(a_all, b_all)
        if split == "test":
            result["mcnemar_test_p"] = {s: mcnemar(a[s], b[s]) for s in seeds}
    return result


def summarize(rows: list[dict]) -> dict:
    ok = [r for r in rows if "failed" not in r]
    by_method = {m: [r for r in ok if r["method"] == m] for m in METHODS}
    methods = {m: method_summary(rs) for m, rs in by_method.items() if rs}
    comparisons = {
        f"{a} vs {b}": compare(by_method[a], by_method[b]) for a, b in PAIRS if methods.get(a) and methods.get(b)
    }
    uncompressed = ok[0]["uncompressed"] if ok else None
    return {"methods": methods, "comparisons": comparisons, "uncompressed": uncompressed, "runs": rows}


def markdown(summary: dict) -> str:
    """The methods' table and the pairs' table. Runs of the earlier `--final-training continue` flow (no
    candidates scored on dev, nothing chosen among them) have no "extra steps" nor "written" column."""
    select = any(run["candidates_dev"] for run in summary["runs"])
    header = ["method (seeds)", "stored bytes", "params", "final steps"]
    header += ["extra steps", "run s (mean)", "written"] if select else ["run s (mean)"]
    header += ["dev", "test"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for method, row in summary["methods"].items():
        span = (
            "–".join(f"{v:,}" for v in sorted({row[k][0], row[k][-1]})) for k in ("embedding_bytes", "embedding_params")
        )
        cells = [f"{method} ({len(row['seeds'])})", *span, ",".join(map(str, row["steps"]))]
        cells += [",".join(map(str, row["extra_steps"]))] if select else []
        cells += [f"{row['seconds']['mean']:.0f}"]
        cells += [", ".join(f"{name} {count}" for name, count in row["chosen"].items())] if select else []
        cells += [f"{row[s]['mean']:.2f} ± {row[s]['sd']:.2f}" for s in ("validation", "test")]
        lines.append("| " + " | ".join(cells) + " |")
    if summary["uncompressed"]:
        u = summary["uncompressed"]
        blank = "| " * (len(header) - 3)
        lines.append(
            f"| uncompressed student (float table) {blank}| {100 * u['validation']:.2f} | {100 * u['test']:.2f} |"
        )
    lines += [
        "",
        "| pair | difference dev / test | bootstrap p dev / test (seeds × examples) | McNemar p on test, per seed |",
    ]
    lines.append("|---|---|---|---|")
    for pair, c in summary["comparisons"].items():
        d, b = c["difference"], c["bootstrap_p"]
        cells = [pair, f"{d['validation']:+.2f} / {d['test']:+.2f}", f"{_p(b['validation'])} / {_p(b['test'])}"]
        cells.append(", ".join(_p(p) for p in c["mcnemar_test_p"].values()))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def markdown_table(summary: dict) -> str:
    """`markdown` of a committed summary, every figure and p-value recomputed from its runs' per-example
    bits (bench/report.py)."""
    return markdown(summarize(summary["runs"]))


def plot(summary: dict, path: Path) -> Path | None:
    plt = pyplot()
    if plt is None:
        return None
    methods = list(summary["methods"])
    figure, axes = plt.subplots(1, 2, figsize=(10, 4))
    for axis, split in zip(axes, ("validation", "test")):
        stats = [summary["methods"][m][split] for m in methods]
        axis.bar(methods, [s["mean"] for s in stats], yerr=[s["sd"] for s in stats], capsize=5, color="#7799bb")
        if summary["uncompressed"]:
            axis.axhline(
                100 * summary["uncompressed"][split], color="grey", linestyle=":", label="uncompressed student"
            )
            axis.legend(loc="lower right", fontsize=8)
        tops = [s["mean"] + s["sd"] for s in stats] + (
            [100 * summary["uncompressed"][split]] if summary["uncompressed"] else []
        )
        axis.set_ylim(min(s["mean"] - s["sd"] for s in stats) - 2, max(tops) + 1)
        axis.set_ylabel(f"{'dev' if split == 'validation' else 'test'} accuracy % (mean ± sd over seeds)")
        axis.grid(alpha=0.3, axis="y")
    bytes_ = sorted({b for m in methods for b in summary["methods"][m]["embedding_bytes"]})
    figure.suptitle(f"equal Flash: word embedding stored in {bytes_[0]:,}–{bytes_[-1]:,} B")
    return save_figure(plt, figure, path)


def merged(rows: list[dict], opts, settings: dict) -> list[dict]:
    """`rows` and the runs of the `--merge` summaries (same task, settings, student; a run both have must
    predict the same: `merge_runs.earlier_summaries`) of the (method, seed)s `rows` lacks, the first
    file's first; by method, then seed."""
    for _name, earlier in earlier_summaries(opts, settings, rows, lambda summary: summary["runs"]):
        rows = with_earlier_runs(rows, earlier)
    return sorted(rows, key=lambda r: (list(METHODS).index(r["method"]), r["seed"]))


def run_flash_task(opts) -> bool:
    """Every (method, seed) of one task not yet finished, then its tables, summary.json and plot."""
    config = json.loads((opts.student / "config.json").read_text())
    vocab_size, dim = config["vocab_size"], config["hidden_size"]
    settings = run_settings(opts) | {"bytes": opts.bytes}
    claim_directory(opts.out, settings)
    began = time.monotonic()

    def run(job):
        method, seed = job
        args = ["--seed", str(seed), *method_args(method, opts.bytes, vocab_size, dim)]
        return collect(
            method, seed, run_search(opts.out / f"{method}-seed{seed}", f"[{method} seed {seed}]", args, opts, log)
        )

    seeds = [int(s) for s in opts.seeds.split(",")]
    wanted = opts.methods.split(",")
    jobs = [
        (m, s) for s in seeds for m in METHODS if m in wanted or (opts.out / f"{m}-seed{s}" / "metrics.json").is_file()
    ]
    with concurrent.futures.ThreadPoolExecutor(max(1, opts.jobs)) as pool:
        ran = list(pool.map(run, jobs))
    rows = merged(ran, opts, settings)
    summary = summarize(rows)
    wall = time.monotonic() - began
    summed = sum(r.get("seconds", 0) for r in ran)
    record = (
        settings | summary | {"wall_seconds_this_invocation": round(wall, 1), "run_seconds_summed": round(summed, 1)}
    )
    record["provenance"] = provenance({"student": opts.student})
    write_json(opts.out / "summary.json", record)
    print(f"\n## {opts.task} (student {opts.student})\n")
    print(markdown(summary))
    print(f"\nwall time {wall:.0f} s (this invocation); run seconds summed: {summed:.0f}")
    figure = plot(summary, opts.out / "equal_flash.png") if summary["methods"] else None
    print(f"wrote {opts.out / 'summary.json'}" + (f" and {figure}" if figure else ""))
    return all("failed" not in r for r in ran)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Any other option goes to every `search` run (e.g. --max-seq-len 64): "
        "see python -m tflm_mcubert search --help.",
    )
    add_run_arguments(parser, "runs/equal-flash")
    parser.add_argument("--bytes", type=int, default=PAPER_ADAPTIVE_INT8_BYTES, help="word-embedding Flash budget")
    parser.add_argument("--methods", default="adaptive-int8,adaptive-int4,nas-int4", help=f"of {', '.join(METHODS)}")
    opts, search_args = parser.parse_known_args()
    opts.search_args = search_args  # anything else goes to every `search` (e.g. --max-seq-len 64)
    unknown = set(opts.methods.split(",")) - set(METHODS)
    if unknown:
        raise SystemExit(f"--methods: unknown {sorted(unknown)} (choose from {', '.join(METHODS)})")
    ok = [run_flash_task(task) for task in task_options(opts)]  # tasks in turn
    return 0 if all(ok) else 1


if __name__ == "__main__":
    sys.exit(main())
