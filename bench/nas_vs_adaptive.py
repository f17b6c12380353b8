"""Exact two-stage NAS vs adaptive embedding at equal embedding parameters, over budgets and seeds. A script, not
a test.

Model: a distilled BERT-tiny (`distill --out`). Budgets (`--budgets`): percentages of the dense v·d table
(`2%`, or a bare number up to 100: `2,4,8`), absolute parameter counts (`318420`, `156k`) and/or bytes as the
export stores the word embedding in int8 (`160kB`, `160000B`: `stored_embedding_bytes`). At each budget T,
adaptive embedding is Baevski & Auli's shape with cut-offs and ranks scaled by one factor, the largest that
fits T (`compress.baselines.adaptive_for_budget`; at 318,420 for BERT-tiny: 1000/4000/10000, ranks 32/8/2, the
paper's); NAS gets exactly adaptive's size as its `--target-embedding-params` (or `--target-embedding-bytes`),
so the two compare at equal parameters (or bytes). Each seed runs two `search`es. Adaptive embedding fine-tunes
for 2 search stages of --epochs + --finetune-epochs (`search`'s equal-steps default; 6% warm-up, linear
decay). NAS runs its 2 search stages, then (`search --final-training select`, the default) trains each
candidate architecture -- the one it found and adaptive embedding's own -- from the student with exactly
that recipe and those steps, and writes the best on dev: the written model has the baseline's training
budget, and the search stages and the other candidate's fine-tune are its extra cost, reported apart
("extra steps", the search stages' seconds). Pass `--final-training continue` for the older flow.

Tasks: `--task T --student S` (runs in OUT), or several in one command, each with its own student:
`--tasks rotten_tomatoes=runs/rt/student,party_speeches=runs/party/student` (runs in OUT/<task>).

Reported per task and budget: mean ± sd over seeds of dev and test accuracy (selection on dev, accuracy on
test), which candidate NAS wrote, and its cost; per seed, an exact McNemar test of NAS vs adaptive on the
per-example test predictions; over all seeds, a paired bootstrap (`bench_stats.py`) of the seed-averaged
accuracy difference resampling both the seeds and the test (dev) examples (summary.json also keeps the
examples-only p, `bootstrap_p_examples`, the older figures of docs/benchmarks/compression.md); for NAS, each stage's dev
accuracy as trained, as the soft relaxation and as written (hard). Printed as a markdown table;
OUT/summary.json keeps everything, per-example correctness as packed bits, and OUT/nas_vs_adaptive.png plots dev and
test accuracy (mean ± sd) against the budget.

Resumable per (task, budget, method, seed): each run lives in OUT[/<task>]/<budget>/<method>-seed<k>/
(<budget>: `2pct`, the parameter count, or the byte count and `B`); a finished one (metrics.json) is read
back, an interrupted one continues with `search --resume`. Rerun the same command to finish.
OUT/<budget>/bench.json records the settings its runs were made with; a rerun with other settings is
refused. An older single-budget OUT (its summary.json with the same
settings) is taken over as is. `--merge SUMMARY.json[,...]` reads back the runs of earlier summaries (e.g.
bench/results/nas_vs_adaptive_select_<task>.json) that this command does not have: a budget it does not run
joins the tables, summary.json and plot as it was, and a budget it runs gets the earlier (method, seed)s it
lacks (`--seeds 5,6,7,8,9` adds five seeds to five earlier ones). They must be of the same task and
settings and the same student (its uncompressed dev and test accuracy, recorded in every run, equal to this
command's runs'), and a run this command has that the summary also holds (`--seeds 0 --methods adaptive`: a
reproduction check) must predict the same, example for example. Summaries are written compact.

    python bench/nas_vs_adaptive.py --tasks rotten_tomatoes=runs/rt/student,party_speeches=runs/party/student \
        --out runs/bench --budgets 4,2,318420 --epochs 0.5 --finetune-epochs 1 --max-seq-len 64
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import json
import math
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # this checkout's tflm_mcubert, as the `search`es run it
from tflm_mcubert.compress.baselines import adaptive_params  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_stats import format_p as _p  # noqa: E402
from bench_stats import mcnemar, mean_sd, paired_bootstrap, statistics  # noqa: E402, F401 (equal_flash's too)
from figures import pyplot, save_figure  # noqa: E402
from provenance import provenance  # noqa: E402
import steps  # noqa: E402
from steps import log  # noqa: E402
from merge_runs import earlier_summaries, with_earlier_runs  # noqa: E402
from results_bits import correct, write_json  # noqa: E402

METHODS = ("nas", "adaptive")
LABELS = {"nas": "exact two-stage NAS", "adaptive": "adaptive embedding (scaled)"}
# What a budget directory's runs were made with: a rerun with other values is refused.
SETTINGS = ("task", "student", "epochs_per_search_stage", "finetune_epochs", "search_args")


@dataclasses.dataclass
class Budget:
    label: str  # directory name: 2pct, the parameter count, or the byte count and B
    requested: str  # as given
    target: int  # parameters, or bytes
    nas_target: int  # adaptive's actual size: NAS is held to it
    cutoffs: list[int]
    ranks: list[int]
    unit: str = "params"  # or "bytes": the export's stored word-embedding bytes (int8)

    @property
    def directory_settings(self) -> dict:
        settings = {"budget": self.nas_target, "adaptive_cutoffs": self.cutoffs, "adaptive_ranks": self.ranks}
        return settings if self.unit == "params" else {**settings, "budget_unit": self.unit}

    def method_args(self, method: str) -> list[str]:
        option = f"--target-embedding-{self.unit}"
        if method == "nas":
            return ["--mode", "two-stage", option, str(self.nas_target)]
        return ["--mode", "adaptive", option, str(self.target)]


def parse_budget(text: str, vocab_size: int, dim: int) -> tuple[str, int, str]:
    """`2%` or `2` (≤ 100): percent of the dense table's parameters, rounded down; `318420`, `156k`:
    parameters; `160000B`, `160kB`: bytes as the export stores the word embedding (int8)."""
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*(%|[kKmM]?)\s*([bB]?)\s*", text)
    if not match or (match.group(3) and match.group(2) == "%"):
        raise SystemExit(
            f"--budgets: {text!r} is neither a percentage (2%, 2), a parameter count (318420, 156k) "
            "nor a byte count (160000B, 160kB)"
        )
    value, unit = float(match.group(1)), match.group(2)
    if match.group(3):
        count = int(round(value * {"": 1, "k": 1e3, "m": 1e6}[unit.lower()]))
        return f"{count}B", count, "bytes"
    if unit == "%" or (not unit and value <= 100):
        if not 0 < value <= 100:
            raise SystemExit(f"--budgets: {text!r} is not a percentage in (0, 100]")
        return f"{value:g}pct", int(math.floor(value / 100 * vocab_size * dim)), "params"
    params = int(round(value * {"": 1, "k": 1e3, "m": 1e6}[unit.lower()]))
    return str(params), params, "params"


def plan_budgets(texts: str, student: Path) -> list[Budget]:
    from tflm_mcubert.compress.baselines import adaptive_for_budget
    from tflm_mcubert.errors import UserError

    config = json.loads((student / "config.json").read_text())
    vocab_size, dim = config["vocab_size"], config["hidden_size"]
    budgets = []
    for text in texts.split(","):
        label, target, unit = parse_budget(text, vocab_size, dim)
        bits = 8 if unit == "bytes" else None
        try:
            cutoffs, ranks = adaptive_for_budget(vocab_size, dim, target, bits=bits)
        except UserError as error:
            raise SystemExit(f"--budgets {text}: {error}") from None
        size = (
            adaptive_params(vocab_size, dim, cutoffs, ranks)
            if bits is None
            else adaptive_bytes(vocab_size, dim, cutoffs, ranks)
        )
        budgets.append(Budget(label, text, target, size, cutoffs, ranks, unit))
    return budgets


def adaptive_bytes(vocab_size: int, dim: int, cutoffs, ranks) -> int:
    from tflm_mcubert.model.clustered_embedding import stored_embedding_bytes

    bounds = [0, *cutoffs, vocab_size]
    return stored_embedding_bytes([b - a for a, b in zip(bounds[:-1], bounds[1:])], ranks, dim, 8)


def written_bytes(checkpoint: Path) -> int:
    """The export's stored word-embedding bytes (int8) of a `search --out`, recomputed from its cut-offs and
    ranks with today's accounting (older runs' metrics.json used an earlier estimate)."""
    config = json.loads((checkpoint / "config.json").read_text())
    block = config["mcubert_compression"]
    return adaptive_bytes(config["vocab_size"], config["hidden_size"], block["cutoffs"], block["ranks"])


def claim_directory(directory: Path, settings: dict) -> None:
    """Refuse to mix runs made with other settings into `directory` (module docstring)."""
    directory.mkdir(parents=True, exist_ok=True)
    record = directory / "bench.json"
    if record.is_file():
        previous = json.loads(record.read_text())
    elif (directory / "summary.json").is_file():  # an older single-budget run of this script
        old = json.loads((directory / "summary.json").read_text())
        previous = {key: old.get(key) for key in (*SETTINGS, "budget")}
        previous |= {k: settings[k] for k in ("adaptive_cutoffs", "adaptive_ranks")}  # checked per run below
    else:
        previous = settings
    if previous != settings:
        changed = {k: (previous.get(k), settings.get(k)) for k in settings if previous.get(k) != settings.get(k)}
        raise SystemExit(f"{directory} holds runs made with other settings (was, now): {changed}")
    record.write_text(json.dumps(settings, indent=1) + "\n")


def run_search(out: Path, name: str, method_args: list[str], opts, log) -> dict:
    """`search --out out` with `method_args` and the bench's settings, unless out/metrics.json exists (an
    interrupted run resumes): its metrics, or {"failed": the last lines of its error}."""
    metrics_file = out / "metrics.json"
    if not metrics_file.is_file():
        command = [sys.executable, "-m", "tflm_mcubert", "search", "--checkpoint", str(opts.student)]
        command += ["--task", opts.task, "--out", str(out), "--resume", "--quiet"]
        command += ["--epochs", str(opts.epochs), "--finetune-epochs", str(opts.finetune_epochs)]
        command += [*method_args, *opts.search_args]
        log(f"{name} {' '.join(command[2:])}")
        began = time.monotonic()
        done = subprocess.run(command, capture_output=True, text=True, env=steps.package_env())
        if done.returncode != 0:
            log(f"{name} failed ({done.returncode}): {done.stderr.strip().splitlines()[-3:]}")
            return {"failed": done.stderr.strip().splitlines()[-3:]}
        log(f"{name} done in {time.monotonic() - began:.0f} s")
    return json.loads(metrics_file.read_text())


def run_one(budget: Budget, method: str, seed: int, opts, log) -> dict:
    out = opts.out / budget.label / f"{method}-seed{seed}"
    name = f"[{budget.label} {method} seed {seed}]"
    metrics = run_search(out, name, ["--seed", str(seed), *budget.method_args(method)], opts, log)
    if "failed" in metrics:
        return {"budget": budget.label, "method": method, "seed": seed, **metrics}
    details = metrics["details"]
    if method == "adaptive" and (details["cutoffs"], details["ranks"]) != (budget.cutoffs, budget.ranks):
        raise SystemExit(
            f"{out}: adaptive {details['cutoffs']}/{details['ranks']}, this budget's is "
            f"{budget.cutoffs}/{budget.ranks}: a different configuration"
        )
    size = metrics["embedding_params"] if budget.unit == "params" else written_bytes(out)
    if size > budget.nas_target:
        raise SystemExit(f"{out}: {size:,} {budget.unit}, over this budget's {budget.nas_target:,}")
    return {
        "budget": budget.label,
        "method": method,
        "seed": seed,
        "embedding_params": metrics["embedding_params"],
        "embedding_bytes": written_bytes(out),
        "validation_accuracy": metrics["validation_accuracy"],
        "test_accuracy": metrics["test_accuracy"],
        **training_cost(metrics),
        "architecture": {"clusters": _clusters(details), "ranks": _ranks(details)},
        "stages": {k: v for k, v in details.items() if k in ("stage1", "stage2")},
        "predictions": metrics["predictions"],
        "labels": metrics["labels"],
        "uncompressed": {s: metrics[f"uncompressed_{s}_accuracy"] for s in ("validation", "test")},
    }


def training_cost(metrics: dict) -> dict:
    """The written model's training steps (the chosen candidate's fine-tune under `--final-training select`,
    else every stage), what the run spent beyond them (search stages, the other candidates' fine-tunes),
    the search stages alone, and which candidate was written."""
    total = sum(stage["steps"] for stage in metrics["stages"])
    choice = metrics.get("final_training") or {"mode": "continue"}
    final = total
    if choice["mode"] in ("select", "retrain"):
        chosen = next(c for c in choice["candidates"] if c["name"] == choice["chosen"])
        twin = chosen["same_architecture_as"] or chosen["name"]
        final = next(c["steps"] for c in choice["candidates"] if c["name"] == twin)
    search = metrics.get("search_cost") or {"steps": 0, "seconds": 0.0}
    return {
        "steps": final,
        "extra_steps": total - final,
        "seconds": metrics["seconds"],
        "search_steps": search["steps"],
        "search_seconds": search["seconds"],
        "chosen": choice.get("chosen", metrics.get("mode")),  # a baseline or `continue` run: its mode
        "candidates_dev": {c["name"]: c["validation_accuracy"] for c in choice.get("candidates", [])},
    }


def _clusters(details: dict):
    if "stage2" in details:
        return details["stage2"]["clusters"]
    bounds = [0, *details["cutoffs"]]
    return [b - a for a, b in zip(bounds[:-1], bounds[1:])] + ["rest"]


def _ranks(details: dict):
    return details["stage2"]["ranks"] if "stage2" in details else details["ranks"]


def compare(runs: dict[str, list[dict]]) -> dict:
    by_seed = {m: {r["seed"]: r for r in runs[m]} for m in METHODS}
    paired = sorted(set(by_seed["nas"]) & set(by_seed["adaptive"]))
    result = {"seeds": paired, "mcnemar_test_p": {}, "bootstrap_p": {}, "bootstrap_p_examples": {}, "difference": {}}
    right = {}
    for split in ("validation", "test"):
        for method in METHODS:
            right[method, split] = np.array([correct(by_seed[method][s], split) for s in paired])
        if paired:
            pair = right["nas", split], right["adaptive", split]
            result["bootstrap_p"][split] = paired_bootstrap(*pair)  # over seeds and examples
            result["bootstrap_p_examples"][split] = paired_bootstrap(*pair, resample_seeds=False)
            result["difference"][split] = float(100 * (right["nas", split].mean() - right["adaptive", split].mean()))
    for k, s in enumerate(paired):
        result["mcnemar_test_p"][s] = mcnemar(right["nas", "test"][k], right["adaptive", "test"][k])
    return result


def method_summary(rows: list[dict]) -> dict:
    """One method's finished runs: seeds, sizes, steps, dev and test mean ± sd, architectures."""
    return {
        "seeds": [r["seed"] for r in rows],
        "embedding_params": sorted({r["embedding_params"] for r in rows}),
        "embedding_bytes": sorted({r["embedding_bytes"] for r in rows}),
        "steps": sorted({r["steps"] for r in rows}),
        "extra_steps": sorted({r.get("extra_steps", 0) for r in rows}),
        "seconds": statistics([r["seconds"] for r in rows], scale=1.0),
        "search_seconds": statistics([r.get("search_seconds", 0.0) for r in rows], scale=1.0),
        "chosen": {c: sum(r.get("chosen") == c for r in rows) for c in sorted({r.get("chosen") for r in rows})},
        "validation": statistics([r["validation_accuracy"] for r in rows]),
        "test": statistics([r["test_accuracy"] for r in rows]),
        "architectures": [r["architecture"] for r in rows],
    }


def summarize_budget(budget: Budget, results: list[dict], dense_shape: tuple[int, int]) -> dict:
    runs = {m: [r for r in results if r["method"] == m and "failed" not in r] for m in METHODS}
    methods = {method: method_summary(rows) for method, rows in runs.items() if rows}
    vocab_size, dim = dense_shape
    adaptive_size = adaptive_params(vocab_size, dim, budget.cutoffs, budget.ranks)
    return {
        "label": budget.label,
        "requested": budget.requested,
        "unit": budget.unit,  # what the budget counts: parameters, or the export's word-embedding bytes (int8)
        "target": budget.target,
        "nas_target": budget.nas_target,  # adaptive's size: NAS is held to it
        "fraction_of_table": adaptive_size / (vocab_size * dim),  # adaptive's parameters / the dense table's
        "adaptive": {
            "cutoffs": budget.cutoffs,
            "ranks": budget.ranks,
            "params": adaptive_size,
            "bytes": adaptive_bytes(vocab_size, dim, budget.cutoffs, budget.ranks),
        },
        "methods": methods,
        "comparison": compare(runs),
        "runs": results,
    }


TABLE_HEADER = [
    "budget (params: % of table)",
    "method (seeds)",
    "embedding params",
    "int8 export bytes",
    "final steps",
    "extra steps (search + other candidates)",
    "run s, search stages s (mean)",
    "written",
    "dev",
    "test",
    "NAS − adaptive dev / test",
    "bootstrap p dev / test (seeds × examples)",
    "McNemar p on test, per seed",
]


def recomputed(budget: dict) -> dict:
    """A committed budget's summary made again from its runs: every mean and p-value from the per-example bits."""
    runs = {m: [r for r in budget["runs"] if r["method"] == m and "failed" not in r] for m in METHODS}
    methods = {method: method_summary(rows) for method, rows in runs.items() if rows}
    return budget | {"methods": methods, "comparison": compare(runs)}


def summary_table(summary: dict) -> str:
    """`markdown_table` of a committed summary's budgets, recomputed from their runs (bench/report.py)."""
    return markdown_table([recomputed(budget) for budget in summary["budgets"]])


def markdown_table(summaries: list[dict]) -> str:
    """One row per budget and method: mean ± sd, training and search cost, NAS − adaptive with its p. Runs of
    the earlier `--final-training continue` flow (no candidates scored on dev, nothing chosen among them) have no
    extra steps, search stages' seconds nor "written" column."""
    select = any(run.get("candidates_dev") for s in summaries for run in s["runs"])
    dropped = set() if select else {5, 6, 7}
    header = [name for k, name in enumerate(TABLE_HEADER) if k not in dropped]
    if not select:
        header[header.index("final steps")] = "steps"
        header.insert(header.index("dev"), "run s (mean)")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for summary in sorted(summaries, key=lambda s: s["fraction_of_table"]):
        comparison = summary["comparison"]
        for method in METHODS:
            row = summary["methods"].get(method)
            if row is None:
                continue
            name = f"{LABELS[method]} ({len(row['seeds'])})"
            if method == "adaptive":
                shape = summary["adaptive"]
                name += f" {'/'.join(map(str, shape['cutoffs']))}; ranks {'/'.join(map(str, shape['ranks']))}"
            params, stored = (
                "–".join(f"{p:,}" for p in sorted({row[key][0], row[key][-1]}))
                for key in ("embedding_params", "embedding_bytes")
            )
            budget = f"{summary['nas_target']:,} {'params' if summary['unit'] == 'params' else 'B'}"
            cells = [f"{budget} ({100 * summary['fraction_of_table']:.2f}%)", name, params, stored]
            cells += [",".join(map(str, row["steps"])), ",".join(map(str, row["extra_steps"]))]
            cells.append(f"{row['seconds']['mean']:.0f}, {row['search_seconds']['mean']:.0f}")
            cells.append(", ".join(f"{name} {count}" for name, count in row["chosen"].items()))
            cells += [f"{row[s]['mean']:.2f} ± {row[s]['sd']:.2f}" for s in ("validation", "test")]
            if method == "nas" and comparison["seeds"]:
                d, b = comparison["difference"], comparison["bootstrap_p"]
                cells += [f"{d['validation']:+.2f} / {d['test']:+.2f}", f"{_p(b['validation'])} / {_p(b['test'])}"]
                cells += [", ".join(_p(p) for p in comparison["mcnemar_test_p"].values())]
            else:
                cells += ["", "", ""]
            if not select:
                cells = [c for k, c in enumerate(cells) if k not in dropped]
                cells.insert(header.index("run s (mean)"), f"{row['seconds']['mean']:.0f}")
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def print_stages(summary: dict) -> None:
    rows_all = [r for r in summary["runs"] if r["method"] == "nas" and "failed" not in r]
    for stage in ("stage1", "stage2"):
        rows = [r["stages"][stage] for r in rows_all if "hard_dev" in r["stages"].get(stage, {})]
        if rows:
            cells = "  ".join(
                f"{key} {mean_sd([x[key] for x in rows])}" for key in ("trained_dev", "soft_dev", "hard_dev")
            )
            gap = mean_sd([x["trained_dev"] - x["hard_dev"] for x in rows])
            shapes = [(x["clusters"], x["ranks"]) for x in rows]
            print(f"{summary['label']} NAS {stage}: {cells}  trained-hard {gap}  clusters/ranks {shapes}")


def add_run_arguments(parser: argparse.ArgumentParser, out: str) -> None:
    """The options every accuracy benchmark's runs share (the rest of the command line goes to `search`)."""
    parser.add_argument("--student", type=Path, help="distilled classifier checkpoint (distill --out) of --task")
    parser.add_argument("--task", default="rotten_tomatoes")
    parser.add_argument(
        "--tasks",
        help="several tasks in one command, each with its own student: NAME=STUDENT,NAME=STUDENT "
        "(e.g. rotten_tomatoes=runs/rt/student,party_speeches=runs/party/student); each task's runs go to OUT/NAME",
    )
    parser.add_argument("--out", type=Path, default=Path(out))
    parser.add_argument("--seeds", default="0,1,2,3,4")
    parser.add_argument("--epochs", type=float, default=1.0, help="per NAS search stage (default 1)")
    parser.add_argument("--finetune-epochs", type=float, default=1.0, help="default 1")
    parser.add_argument("--jobs", type=int, default=1, help="searches run at once (default 1)")
    parser.add_argument(
        "--merge",
        help="comma-separated summary.json files of earlier runs (same task, settings and student; a run both "
        "have must predict the same): the runs this command does not have join the tables, summary.json and plot",
    )


def task_options(opts) -> list[argparse.Namespace]:
    """One namespace per task: --tasks NAME=STUDENT,... (each in OUT/NAME), or --task with --student in OUT."""
    if opts.tasks is None:
        if opts.student is None:
            raise SystemExit("give --student (the distilled checkpoint of --task), or --tasks NAME=STUDENT,...")
        return [opts]
    per_task = []
    for item in opts.tasks.split(","):
        name, _, student = item.partition("=")
        if not name.strip() or not student.strip():
            raise SystemExit(f"--tasks: {item!r} is not NAME=STUDENT (e.g. rotten_tomatoes=runs/rt/student)")
        task = argparse.Namespace(**vars(opts))
        task.task, task.student, task.out = name.strip(), Path(student.strip()), opts.out / name.strip()
        per_task.append(task)
    return per_task


def run_settings(opts) -> dict:
    """What a benchmark directory's runs are made with (`claim_directory` refuses a rerun with others)."""
    return {
        "task": opts.task,
        "student": str(opts.student),
        "epochs_per_search_stage": opts.epochs,
        "finetune_epochs": opts.finetune_epochs,
        "search_args": opts.search_args,
    }


def plot(summaries: list[dict], path: Path) -> Path | None:
    plt = pyplot()
    if plt is None:
        return None
    summaries = sorted(summaries, key=lambda s: s["fraction_of_table"])
    figure, axes = plt.subplots(1, 2, figsize=(10, 4), sharex=True)
    for axis, split in zip(axes, ("validation", "test")):
        for offset, (method, marker) in zip((-0.04, 0.04), (("nas", "o"), ("adaptive", "^"))):
            points = [
                (100 * s["fraction_of_table"], s["methods"][method][split]) for s in summaries if method in s["methods"]
            ]
            if points:
                x = np.array([p[0] for p in points])
                axis.errorbar(
                    x * (1 + offset),
                    [p[1]["mean"] for p in points],
                    yerr=[p[1]["sd"] for p in points],
                    marker=marker,
                    capsize=4,
                    label=LABELS[method],
                )
        uncompressed = [r["uncompressed"][split] for s in summaries for r in s["runs"] if "uncompressed" in r]
        if uncompressed:
            axis.axhline(100 * uncompressed[0], color="grey", linestyle=":", label="uncompressed student")
        axis.set_xscale("log")
        axis.minorticks_off()
        axis.set_xticks([100 * s["fraction_of_table"] for s in summaries])
        axis.set_xticklabels([f"{100 * s['fraction_of_table']:.2g}%" for s in summaries])
        axis.set_xlabel("embedding parameters, % of the dense table")
        axis.set_ylabel(f"{'dev' if split == 'validation' else 'test'} accuracy % (mean ± sd over seeds)")
        axis.grid(alpha=0.3)
    axes[0].legend(loc="lower right", fontsize=8)
    figure.suptitle("exact two-stage NAS vs adaptive embedding at equal embedding parameters")
    return save_figure(plt, figure, path)


def earlier_budgets(opts, settings: dict, results: list[dict]) -> dict[str, dict]:
    """{budget label: its summary} of the `--merge` summaries of this task, the first file's first
    (`earlier_summaries`, which refuses other settings, another student or a run not reproduced)."""
    earlier = {}
    for name, summary in earlier_summaries(opts, settings, results, _budget_runs):
        for budget in summary["budgets"]:
            earlier.setdefault(budget["label"], budget | {"merged_from": name})
    return earlier


def _budget_runs(summary: dict) -> list[dict]:
    return [r | {"budget": r.get("budget", b["label"])} for b in summary["budgets"] for r in b["runs"]]


def run_task(opts) -> bool:
    """Every (budget, seed, method) of one task not yet finished, then its tables, summary.json and plot.
    True when no run failed."""
    budgets = plan_budgets(opts.budgets, opts.student)
    settings = run_settings(opts)
    for budget in budgets:
        claim_directory(opts.out / budget.label, settings | budget.directory_settings)
    began = time.monotonic()
    seeds = [int(s) for s in opts.seeds.split(",")]
    wanted = opts.methods.split(",")
    jobs = [
        (budget, method, seed)
        for budget in budgets
        for seed in seeds
        for method in METHODS
        if method in wanted or (opts.out / budget.label / f"{method}-seed{seed}" / "metrics.json").is_file()
    ]
    with concurrent.futures.ThreadPoolExecutor(max(1, opts.jobs)) as pool:
        results = list(pool.map(lambda job: run_one(*job, opts, log), jobs))
    config = json.loads((opts.student / "config.json").read_text())
    dense_shape = (config["vocab_size"], config["hidden_size"])
    summaries, earlier = [], earlier_budgets(opts, settings, results)
    for budget in budgets:
        rows = with_earlier_runs([r for r in results if r["budget"] == budget.label], earlier.pop(budget.label, None))
        summary = summarize_budget(budget, rows, dense_shape)
        write_json(opts.out / budget.label / "summary.json", settings | summary)
        summaries.append(summary)
    summaries += earlier.values()  # the --merge budgets this command does not run, as they were
    wall = time.monotonic() - began
    summed = sum(r.get("seconds", 0) for r in results)
    summary = settings | {
        "dense_embedding_params": dense_shape[0] * dense_shape[1],
        "budgets": summaries,
        "wall_seconds_this_invocation": round(wall, 1),
        "run_seconds_summed": round(summed, 1),
        "provenance": provenance({"student": opts.student}),
    }
    write_json(opts.out / "summary.json", summary)
    print(f"\n## {opts.task} (student {opts.student})\n")
    print(markdown_table(summaries))
    print()
    for s in summaries:
        print_stages(s)
    print(f"wall time {wall:.0f} s (this invocation); run seconds summed: {summed:.0f}")
    figure = plot(summaries, opts.out / "nas_vs_adaptive.png")
    print(f"wrote {opts.out / 'summary.json'}" + (f" and {figure}" if figure else ""))
    return all("failed" not in r for r in results)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Any other option goes to every `search` run (e.g. --max-seq-len 64): "
        "see python -m tflm_mcubert search --help.",
    )
    add_run_arguments(parser, "runs/budgets")
    parser.add_argument(
        "--budgets",
        default="318420",
        help="comma-separated; percent of the dense table (2%%, or a bare number <= 100) or parameters "
        "(318420, 156k); run in this order (default 318420: the paper's adaptive embedding for BERT-tiny)",
    )
    parser.add_argument(
        "--methods",
        default="nas,adaptive",
        help="run only these (a finished run of the other, e.g. linked from another --out, is still read back)",
    )
    opts, search_args = parser.parse_known_args()
    opts.search_args = search_args  # anything else goes to every `search` (e.g. --max-seq-len 64)
    ok = [run_task(task) for task in task_options(opts)]  # tasks in turn: one finishes before the next starts
    return 0 if all(ok) else 1


if __name__ == "__main__":
    sys.exit(main())
