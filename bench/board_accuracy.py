"""Accuracy on the board's Flash: BERT-mini with int4 encoder weights vs the best BERT-tiny that fits the
same Flash, int4 vs float weights, and the whole-model budget vs today's default export. A script, not a test.

Every configuration is a `search --mode adaptive --board B` of a distilled student (the embedding scaled to
what the board's Flash leaves after the encoder at its weight width, the head, the .tflite's structure and the
tokenizer blob, `export/flash_budget.py`), fine-tuned for the same steps (2 × --epochs + --finetune-epochs:
adaptive's equal-steps recipe), then measured as the firmware computes it: `evaluate --split validation test
--weight-bits W` (the integer model through the ops' numpy reference, word tables at the width the search
trained them for; `float` is the same checkpoint in float). Seed 0 of every configuration is also exported
(`export --board B --weight-bits W`) and its report.json gives the Flash bytes and whether it fits; adaptive
embedding's shape depends on the budget only, so every seed of a configuration has the same bytes.

Configurations (`--configs`, a comma list of these names; by default the first four):

  tiny-f767-w8e8p   BERT-tiny, NUCLEO-F767ZI, int8 weights, int8 word tables, vocabulary pruned to the task
  mini-f767-w4e4p   BERT-mini, NUCLEO-F767ZI, int4 weights, int4 word tables, pruned (the only BERT-mini
                    that fits: at int8 weights its encoder alone is over the budget, and with the full
                    vocabulary its tokenizer blob leaves the word tables nothing)
  tiny-f746-default BERT-tiny, NUCLEO-F746ZG, int8 weights, float-trained word tables exported int8, full
                    vocabulary: today's default `search --board nucleo-f746zg` and export
  tiny-f746-w4e4p   BERT-tiny, NUCLEO-F746ZG, int4 weights, int4 word tables, pruned
  tiny-f767-w8e8    (candidate) as tiny-f767-w8e8p with the full vocabulary
  tiny-f746-w8e8p   (candidate) BERT-tiny, NUCLEO-F746ZG, int8 weights and tables, pruned
  mini-f767-w4e4p-top4k  (candidate) as mini-f767-w4e4p with only the task's 4,000 most frequent pieces (and
                    the single characters): fewer rows and a smaller tokenizer blob for the same bytes
  mini-f767-w4e4p-qat  as mini-f767-w4e4p, its final fine-tune quantization-aware (`search --qat-weight-bits
                    4`: the same steps, the encoder's weights fake-quantized at int4); point "Q-search"
  tiny-f746-default-q8  tiny-f746-default fine-tuned quantization-aware at int8 (`--qat-weight-bits 8`): the
                    board path of bench/board_shape_latency.py's BERT-tiny
  tiny-f746-w4e4p-q4  tiny-f746-w4e4p fine-tuned quantization-aware at int4
  tiny-f746-w8e4p-q8  (candidate) int8 weights, int4 word tables, pruned, quantization-aware at int8

Points (a side's "best" is its candidate with the highest mean dev accuracy over the seeds run; ties to the
first listed; only configurations that fit):

  A  at the F767ZI's Flash: best BERT-mini − best BERT-tiny. Target ≥ +2.0 test points, dev agreeing, p < 0.05
  B  BERT-mini int4 weights − the same checkpoint with float weights: as trained (float encoder weights and
     activations, the word tables as stored: `search`'s own dev/test predictions); "B-float" against
     evaluate's float model (the latent float word tables too). Target ≥ −0.7 test points
  C  at the F746ZG's Flash: best of the F746 configurations − tiny-f746-default. Target ≥ +1.0 test points
  D  at the F746ZG's Flash, quantization-aware: best of tiny-f746-w4e4p-q4 and tiny-f746-w8e4p-q8 −
     tiny-f746-default-q8. Ahead on test, dev agreeing, p < 0.05

p: the paired bootstrap of `bench_stats.py` (seeds and examples resampled, 10,000 draws) of the seed-averaged
difference, over the seeds both sides have; McNemar: exact, per seed, on test.

With `--qat-steps N` every run is also evaluated after the export's quantization-aware fine-tune (`evaluate
--qat-steps N`: KD from the float model on the calibration samples, activations and encoder weights
fake-quantized as stored, quantize/qat.py), the variant `<config>@w<bits>+qat`, and point Q compares it with
the same checkpoint's PTQ (`<config>@w<bits>`), paired by seed. `--searches-from DIR` reuses the finished
searches (and their PTQ evaluations and exports) of an earlier OUT: only the QAT evaluations run.

A student's path may hold `{seed}` (`--tiny-student runs/tiny-s{seed}`): each seed then compresses its own
student, so the seeds vary the distillation too. `--evaluate-seq-len` evaluates at another length than the
search trains at (e.g. the export's 128 tokens). `--earlier SUMMARY` (earlier.py) takes the runs a committed
summary of the same settings holds, so that a fresh machine runs only the seeds it lacks.

Each student is needed only when a configuration of --configs uses it (`--configs tiny-f746-w4e4p`: no
--mini-student). Runs go the F767ZI's configurations first (points A and B), seed by seed, then the F746ZG's
(points C and D).
Resumable: each run lives in OUT/<config>-seed<k>/ (`model/`: the search's checkpoint, resumed with `search
--resume`; `evaluate.json`; `export/` for seed 0; `run.json`: the run's record with per-example
predictions). A finished step is read back; rerun the same command to finish. OUT/bench.json keeps the
settings; a rerun with other settings is refused. OUT/summary.json holds every run and the points' statistics,
OUT/board_accuracy.png plots them.

    python bench/board_accuracy.py --tiny-student runs/rotten_tomatoes/student \\
        --mini-student runs/rotten_tomatoes/student-mini --out runs/board-accuracy --seeds 0,1,2,3,4
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_stats import format_bootstrap_p, mcnemar, paired_bootstrap, statistics  # noqa: E402
from figures import pyplot, save_figure  # noqa: E402
from provenance import provenance  # noqa: E402
import earlier  # noqa: E402
import start_before  # noqa: E402
from steps import claim, log, run_step  # noqa: E402
from results_bits import compact, correct, models  # noqa: E402
from board_accuracy_records import finished_records, record_from_files  # noqa: E402

from board_accuracy_configs import (  # noqa: E402, F401 (re-exported: the board paths' users read them here)
    B_TARGET,
    CONFIGS,
    DEFAULT_CONFIGS,
    F746,
    F767,
    POINTS,
    QAT,
    QAT_OF,
    REFERENCES,
    SETTINGS,
    Config,
    quantized_name,
    variant,
)


def run_one(name: str, seed: int, opts) -> dict:
    """One configuration and seed: search, evaluate (and export for seed 0); its record (run.json)."""
    config = CONFIGS[name]
    folder = opts.out / f"{name}-seed{seed}"
    record_file = folder / "run.json"
    if record_file.is_file():
        return json.loads(record_file.read_text())
    folder.mkdir(parents=True, exist_ok=True)
    if opts.searches_from:
        reuse_search(opts.searches_from / folder.name, folder)
    student = student_of(opts, config.model, seed)
    model = folder / "model"
    search = ["search", "--checkpoint", str(student), "--task", opts.task, "--out", str(model), "--resume"]
    search += ["--quiet", "--seed", str(seed), "--epochs", str(opts.epochs)]
    search += ["--finetune-epochs", str(opts.finetune_epochs), "--max-seq-len", str(opts.max_seq_len)]
    search += ["--export-seq-len", str(opts.export_seq_len), *config.search_args(opts.task)]
    tag = f"[{name} seed {seed}]"
    search_s = run_step(search, model / "metrics.json", f"{tag} search", opts.out)
    if search_s is None:
        return {"config": name, "seed": seed, "failed": "search"}
    evaluation = folder / "evaluate.json"
    evaluate = ["evaluate", "--checkpoint", str(model), "--task", opts.task, "--seq-len", str(opts.evaluate_seq_len)]
    evaluate += ["--split", "validation", "test", "--weight-bits", *map(str, config.evaluate_bits)]
    evaluate += ["--json", str(evaluation)]
    evaluate_s = run_step(evaluate, evaluation, f"{tag} evaluate", opts.out)
    if evaluate_s is None:
        return {"config": name, "seed": seed, "failed": "evaluate"}
    if opts.qat_steps:
        qat = [*evaluate[:-1], str(folder / "evaluate-qat.json"), "--qat-steps", str(opts.qat_steps)]
        # evaluate's --seed would also reshuffle the task's rows: the QAT keeps evaluate's default seed
        if run_step(qat, folder / "evaluate-qat.json", f"{tag} evaluate QAT", opts.out) is None:
            return {"config": name, "seed": seed, "failed": "evaluate QAT"}
    if seed in opts.export_seeds:
        export = folder / "export"
        command = ["export", "--checkpoint", str(model), "--board", config.board, "--seq-len", str(opts.export_seq_len)]
        command += ["--weight-bits", str(config.weight_bits), "--out", str(export)]
        run_step(command, export / "report.json", f"{tag} export", opts.out)
    record = record_from_files(name, seed, folder)
    record_file.write_text(json.dumps(record) + "\n")
    return record


def student_of(opts, model: str, seed: int) -> Path | None:
    """The `model` ("tiny" or "mini") student that seed `seed` compresses: --<model>-student, its `{seed}` filled."""
    path = getattr(opts, f"{model}_student")
    return None if path is None else Path(str(path).replace("{seed}", str(seed)))


def students_read(opts) -> dict[str, Path]:
    """The students --configs reads, by role: `tiny_student`, or `tiny_student_seed<k>` per seed when its path
    holds `{seed}`."""
    students = {}
    for model in sorted({CONFIGS[c].model for c in opts.configs}):
        per_seed = "{seed}" in str(getattr(opts, f"{model}_student"))
        for seed in opts.seeds if per_seed else opts.seeds[:1]:
            students[f"{model}_student" + (f"_seed{seed}" if per_seed else "")] = student_of(opts, model, seed)
    return students


def reuse_search(source: Path, folder: Path) -> None:
    """Link an earlier OUT's finished search (model/, export/) into `folder` and copy its PTQ evaluation, so
    that only what is new (the QAT evaluation) runs."""
    if not (source / "model" / "metrics.json").is_file():
        return
    for part in ("model", "export"):
        if (source / part).is_dir() and not (folder / part).exists():
            (folder / part).symlink_to((source / part).resolve(), target_is_directory=True)
    for part in ("evaluate.json", "evaluate.json.seconds"):
        if (source / part).is_file() and not (folder / part).exists():
            (folder / part).write_bytes((source / part).read_bytes())


# --- statistics -------------------------------------------------------------------------------------------


def correct_by_seed(records: list[dict], key: str, split: str) -> dict[int, np.ndarray]:
    return {r["seed"]: correct(r, split, key) for r in records if key in models(r)}


def compare(a: dict[str, dict[int, np.ndarray]], b: dict[str, dict[int, np.ndarray]], samples: int = 10_000) -> dict:
    """a − b, per split ({split: {seed: correct}}), over the seeds both have: difference of the means in
    points, paired bootstrap p (seeds and examples), per-seed McNemar p on test."""
    seeds = sorted(set(a["test"]) & set(b["test"]) & set(a["validation"]) & set(b["validation"]))
    if not seeds:
        return {"seeds": []}
    result = {"seeds": seeds, "difference": {}, "bootstrap_p": {}}
    for split in ("validation", "test"):
        a_all, b_all = np.array([a[split][s] for s in seeds]), np.array([b[split][s] for s in seeds])
        result["difference"][split] = float(100 * (a_all.mean() - b_all.mean()))
        result["bootstrap_p"][split] = paired_bootstrap(a_all, b_all, samples=samples)
    result["mcnemar_test_p"] = {s: mcnemar(a["test"][s], b["test"][s]) for s in seeds}
    return result


def variant_summary(records: list[dict], key: str) -> dict:
    rows = [r for r in records if key in models(r)]
    exported = next((r["export"] for r in rows if r.get("export")), None)
    return {
        "seeds": [r["seed"] for r in rows],
        "validation": statistics([r["accuracy"][key]["validation"] for r in rows]),
        "test": statistics([r["accuracy"][key]["test"] for r in rows]),
        "steps": sorted({r["steps"] for r in rows}),
        "search_seconds": statistics([r["seconds"]["search"] for r in rows], scale=1.0),
        "evaluate_seconds": statistics(
            [r["seconds"]["evaluate_qat" if key.endswith(QAT) else "evaluate"] for r in rows], scale=1.0
        ),
        "embedding_params": sorted({r["embedding_params"] for r in rows}),
        "embedding_bytes": sorted({r["embedding_bytes"] for r in rows}),
        "export": exported,
    }


def fits(name: str, key: str, summary: dict) -> bool:
    """A variant fits its board when measured at the configuration's own width and seed 0's export fit (an
    unexported configuration counts as fitting: search sized it to the board)."""
    config = CONFIGS[name]
    if key.removesuffix(QAT) != variant(name, config.weight_bits):
        return False
    exported = summary.get("export")
    return exported is None or exported["fits"]


def best(candidates: list[str], variants: dict) -> str | None:
    """The fitting candidate variant with the highest mean dev accuracy (ties: the first listed)."""
    keys = [variant(c, CONFIGS[c].weight_bits) for c in candidates]
    keys = [k for k in keys if k in variants and variants[k]["fits"]]
    return max(keys, key=lambda k: (variants[k]["validation"]["mean"], -keys.index(k)), default=None)


def summarize(records: list[dict]) -> dict:
    ok = [r for r in records if "failed" not in r]
    by_config = {name: [r for r in ok if r["config"] == name] for name in CONFIGS}
    variants = {}
    for name, rows in by_config.items():
        for bits in CONFIGS[name].evaluate_bits if rows else ():
            key = variant(name, bits)
            variants[key] = variant_summary(rows, key) | {"config": name, "weight_bits": bits}
            variants[key]["fits"] = fits(name, key, variants[key])
            if rows and all(key + QAT in models(r) for r in rows):
                variants[key + QAT] = variant_summary(rows, key + QAT) | {"config": name, "weight_bits": bits}
                variants[key + QAT]["fits"] = fits(name, key + QAT, variants[key + QAT])
        for reference in REFERENCES if rows else ():
            if all(reference in models(r) for r in rows):
                summary = variant_summary(rows, reference) | {"config": name, "weight_bits": reference, "fits": False}
                variants[f"{name}@{reference}"] = summary
    correct = {}
    for key, summary in variants.items():
        name, rows = summary["config"], by_config[summary["config"]]
        inner = summary["weight_bits"] if summary["weight_bits"] in REFERENCES else key
        correct[key] = {split: correct_by_seed(rows, inner, split) for split in ("validation", "test")}
    points = {}
    for point, (label, a_side, b_side, target, needs_p) in POINTS.items():
        a, b = best(a_side, variants), best(b_side, variants)
        entry = {"label": label, "a": a, "b": b, "a_candidates": a_side, "b_candidates": b_side, "target": target}
        if a and b:
            entry |= compare(correct[a], correct[b])
            entry["met"] = target_met(entry, target, needs_p)
        points[point] = entry
    mini = variant("mini-f767-w4e4p", 4)
    if mini in variants:
        for point, reference in (("B", "trained"), ("B-float", "float")):
            b = f"mini-f767-w4e4p@{reference}"
            if b not in variants:
                continue
            entry = {"label": f"BERT-mini int4 weights − {REFERENCES[reference]}", "a": mini, "b": b}
            entry |= {"target": B_TARGET} | compare(correct[mini], correct[b])
            entry["met"] = target_met(entry, B_TARGET, False)
            points[point] = entry
    for key in [k for k in variants if k.endswith(QAT)]:
        entry = {"label": "the same checkpoints: QAT − PTQ", "a": key, "b": key.removesuffix(QAT), "target": 0.0}
        entry |= compare(correct[key], correct[key.removesuffix(QAT)])
        entry["met"] = target_met(entry, 0.0, False)
        points[f"Q {variants[key]['config']}"] = entry
    for name, twin in QAT_OF.items():
        a, b = variant(name, 4), variant(twin, 4)
        if a in variants and b in variants:
            entry = {"label": "search's fine-tune with int4 weights − without", "a": a, "b": b, "target": 0.0}
            entry |= compare(correct[a], correct[b])
            entry["met"] = target_met(entry, 0.0, False)
            points[f"Q-search {name}"] = entry
    return {"variants": variants, "points": points, "runs": records}


def target_met(entry: dict, target: float, needs_p: bool) -> bool | None:
    """The test difference reaches `target`; with `needs_p`, also dev agreeing (its difference positive)
    and the test bootstrap p below 0.05."""
    if not entry.get("seeds"):
        return None
    d = entry["difference"]
    ok = d["test"] >= target
    if needs_p:
        ok = ok and d["validation"] > 0 and entry["bootstrap_p"]["test"] < 0.05
    return bool(ok)


# --- report ---------------------------------------------------------------------------------------------


def markdown(summary: dict, qat_steps: int = 0) -> str:
    """The variants' table and the points' table (docs/benchmarks/board-accuracy.md quotes both)."""
    return variants_table(summary, qat_steps) + "\n\n" + points_table(summary)


def variants_table(summary: dict, qat_steps: int = 0) -> str:
    header = ["variant (seeds)", "setup", "steps", "word tables B / params", "Flash B (budget)", "fits"]
    header += ["search s, evaluate s (mean)", "dev", "test"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for key, v in summary["variants"].items():
        config = CONFIGS[v["config"]]
        exported = v["export"] or {}
        flash = f"{exported['model_bytes']:,} ({exported['budget_bytes']:,})" if exported else ""
        if v["weight_bits"] != config.weight_bits:
            flash = "not exported"
        tables = (
            f"{'/'.join(f'{b:,}' for b in v['embedding_bytes'])} / {'/'.join(f'{p:,}' for p in v['embedding_params'])}"
        )
        setup = config.describe() + (f", QAT {qat_steps} steps" if key.endswith(QAT) else "")
        if v["weight_bits"] in REFERENCES:
            setup = f"the same runs, float: {REFERENCES[v['weight_bits']]}"
        cells = [f"{key} ({len(v['seeds'])})", setup, ",".join(map(str, v["steps"])), tables, flash]
        cells += [
            "yes" if v["fits"] else "no",
            f"{v['search_seconds']['mean']:.0f}, {v['evaluate_seconds']['mean']:.0f}",
        ]
        cells += [f"{v[s]['mean']:.2f} ± {v[s]['sd']:.2f}" for s in ("validation", "test")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def points_table(summary: dict, measured_only: bool = False) -> str:
    """One row per point; with `measured_only`, none for a point whose sides were not both run (a summary of
    some configurations, as the QAT benchmark's)."""
    lines = ["| point | a − b | seeds | dev / test difference | bootstrap p dev / test | McNemar p test, per seed |"]
    lines.append("|---|---|---|---|---|---|")
    for point, e in summary["points"].items():
        if not e.get("seeds"):
            if not measured_only:
                lines.append(f"| {point} | {e['a']} − {e['b']} | 0 | | | not measured |")
            continue
        d, p = e["difference"], e["bootstrap_p"]
        cells = [point, f"{e['a']} − {e['b']}", str(len(e["seeds"])), f"{d['validation']:+.2f} / {d['test']:+.2f}"]
        cells += [f"{format_bootstrap_p(p['validation'])} / {format_bootstrap_p(p['test'])}"]
        cells += [", ".join(format_bootstrap_p(x) for x in e["mcnemar_test_p"].values())]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(summary: dict, path: Path) -> Path | None:
    plt = pyplot()
    if plt is None:
        return None
    keys = list(summary["variants"])
    figure, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    for axis, split in zip(axes, ("validation", "test")):
        stats = [summary["variants"][k][split] for k in keys]
        colours = ["#7799bb" if summary["variants"][k]["fits"] else "#cccccc" for k in keys]
        axis.bar(range(len(keys)), [s["mean"] for s in stats], yerr=[s["sd"] for s in stats], capsize=4, color=colours)
        axis.set_xticks(range(len(keys)), keys, rotation=35, ha="right", fontsize=7)
        axis.set_ylim(min(s["mean"] - s["sd"] for s in stats) - 3, max(s["mean"] + s["sd"] for s in stats) + 1)
        axis.set_ylabel(f"{'dev' if split == 'validation' else 'test'} accuracy % (mean ± sd over seeds)")
        axis.grid(alpha=0.3, axis="y")
    figure.suptitle("rotten tomatoes, integer model as exported (grey: does not fit its board, or float)")
    return save_figure(plt, figure, path, dpi=110)


# --- command --------------------------------------------------------------------------------------------


def int_list(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from None
    if not values or min(values) < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give one or more seeds, each 0 or more")
    return values


def parse(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--tiny-student",
        type=Path,
        help="distilled BERT-tiny (distill --out); needed when a configuration is BERT-tiny",
    )
    parser.add_argument(
        "--mini-student",
        type=Path,
        help="distilled BERT-mini (distill --out); needed when a configuration is BERT-mini",
    )
    parser.add_argument("--task", default="rotten_tomatoes")
    parser.add_argument("--out", type=Path, default=Path("runs/board-accuracy"))
    parser.add_argument("--seeds", type=int_list, default=[0, 1, 2, 3, 4])
    parser.add_argument("--configs", default=",".join(DEFAULT_CONFIGS), help=f"of {', '.join(CONFIGS)}")
    parser.add_argument("--epochs", type=float, default=0.5, help="search --epochs (adaptive: 2 × this + fine-tune)")
    parser.add_argument("--finetune-epochs", type=float, default=1.0)
    parser.add_argument("--max-seq-len", type=int, default=64, help="training and evaluation (default 64)")
    parser.add_argument("--export-seq-len", type=int, default=64, help="the export the budget is split for")
    parser.add_argument("--evaluate-seq-len", type=int, help="evaluate --seq-len (default: --max-seq-len)")
    parser.add_argument("--export-seeds", type=int_list, default=[0], help="seeds also exported (default 0)")
    parser.add_argument("--qat-steps", type=int, default=0, help="also evaluate after N QAT steps (variant +qat)")
    parser.add_argument("--searches-from", type=Path, help="an earlier OUT whose finished searches to reuse")
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="summarize the finished runs (their records made again from their files), start none",
    )
    start_before.add_argument(parser)
    earlier.add_argument(parser)
    opts = parser.parse_args(argv)
    configs = [c.strip() for c in opts.configs.split(",") if c.strip()]
    unknown = sorted(set(configs) - set(CONFIGS))
    if unknown or not configs:
        parser.error(f"--configs: unknown {unknown} (choose from {', '.join(CONFIGS)})")
    opts.configs = configs
    for model in sorted({CONFIGS[c].model for c in configs}):
        if getattr(opts, f"{model}_student") is None:
            parser.error(f"--{model}-student is required: --configs has BERT-{model} configurations")
    opts.evaluate_seq_len = opts.evaluate_seq_len or opts.max_seq_len
    if opts.qat_steps < 0:
        parser.error("--qat-steps must be 0 or more")
    if opts.epochs <= 0 or opts.finetune_epochs <= 0:
        parser.error("--epochs and --finetune-epochs must be positive")
    return opts


def settings_of(opts) -> dict:
    """The settings a rerun must repeat (qat_steps and evaluate_seq_len only when set: earlier OUTs have none)."""
    keys = SETTINGS + (("qat_steps",) if opts.qat_steps else ())
    keys += ("evaluate_seq_len",) if opts.evaluate_seq_len != opts.max_seq_len else ()
    return {k: str(v) if isinstance(v, Path) else v for k, v in vars(opts).items() if k in keys}


def main(argv=None) -> int:
    opts = parse(argv)
    # the students' paths may differ between machines; the settings that make the runs comparable may not
    comparable = {k: v for k, v in settings_of(opts).items() if not k.endswith("_student")}
    previous = earlier.load(opts.earlier, comparable, where=None)
    jobs = [] if opts.report_only else job_order(opts.configs, opts.seeds)
    jobs = [(name, seed) for name, seed in jobs if not earlier.holds_record(previous, name, seed)]
    for student in sorted({student_of(opts, CONFIGS[name].model, seed) for name, seed in jobs}):
        if not (student / "config.json").is_file():  # the earlier summary's seeds need none here
            raise SystemExit(f"{student}: no config.json (a distill --out checkpoint)")
    claim(opts.out, settings_of(opts))
    began = time.monotonic()
    failed = []
    for n, (name, seed) in enumerate(jobs):
        if start_before.reached(opts.start_before):
            reached = start_before.name(opts.start_before)
            log(f"{reached} reached: {len(jobs) - n} runs not started (rerun to go on)", opts.out)
            break
        record = run_one(name, seed, opts)
        if "failed" in record:
            failed.append(record)
        else:
            log(f"[{name} seed {seed}] {format_accuracies(record)} ({n + 1}/{len(jobs)})", opts.out)
        elapsed = time.monotonic() - began
        log(f"elapsed {elapsed:.0f} s; about {elapsed / (n + 1) * (len(jobs) - n - 1):.0f} s to go", opts.out)
    local = finished_records(opts.out, rebuild=opts.report_only)
    records = earlier.merge_records(local, previous, lambda r: r["config"] in opts.configs and r["seed"] in opts.seeds)
    summary = summarize(records)
    wall = time.monotonic() - began
    record = settings_of(opts) | summary | {"wall_seconds_this_invocation": round(wall, 1)}
    # the earlier summary named its students per seed, or once when its path had no {seed}
    taken = {
        role
        for r in records[len(local) :]
        for role in (f"{CONFIGS[r['config']].model}_student", f"{CONFIGS[r['config']].model}_student_seed{r['seed']}")
    }
    record["provenance"] = earlier.merge_provenance(provenance(students_read(opts)), previous, taken, shared=())
    (opts.out / "summary.json").write_text(summary_text(record))
    print(markdown(summary, opts.qat_steps))
    figure = plot(summary, opts.out / "board_accuracy.png") if summary["variants"] else None
    print(
        f"\nwall time {wall:.0f} s (this invocation); wrote {opts.out / 'summary.json'}"
        + (f", {figure}" if figure else "")
    )
    for record in failed:
        print(f"{record['config']} seed {record['seed']}: {record['failed']} failed (see {opts.out / 'progress.log'})")
    return 1 if failed else 0


def summary_text(record: dict) -> str:
    """summary.json as it is committed: the statistics indented, then one line per run (its per-example
    correctness as packed bits: results_bits.py)."""
    head = json.dumps({k: v for k, v in record.items() if k != "runs"}, indent=1)
    runs = ",\n".join(json.dumps(compact(r)) for r in record.get("runs", []))
    return head[:-2] + ',\n "runs": [\n' + runs + "\n ]\n}\n"


def job_order(configs: list[str], seeds: list[int]) -> list[tuple[str, int]]:
    """The F767ZI's configurations seed by seed (points A and B), then the other boards' (point C)."""
    phases = [[c for c in configs if CONFIGS[c].board == F767], [c for c in configs if CONFIGS[c].board != F767]]
    return [(c, s) for phase in phases for s in seeds for c in phase]


def format_accuracies(record: dict) -> str:
    return "; ".join(
        f"{key} dev {100 * a['validation']:.2f} test {100 * a['test']:.2f}" for key, a in record["accuracy"].items()
    )


if __name__ == "__main__":
    sys.exit(main())
