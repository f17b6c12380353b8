"""The statistics and tables of bench/board_shape_latency.py's summaries: each arm's accuracies over seeds,
the searched shape against BERT-tiny (paired t over seeds, paired bootstrap over examples and seeds), and the
tables and sentences bench/report.py puts in the pages, every figure recomputed from the runs' bits."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_stats import paired_difference, statistics  # noqa: E402
from distill_augment import _cell, _p  # noqa: E402
from results_bits import correct  # noqa: E402

BOARD = "nucleo-f746zg"
SPLITS = ("validation", "test")
CHOSEN, TINY = "chosen", "bert-tiny"  # the arms: the searched shape, and the baseline
INTEGER, FLOAT = "integer", "float"  # evaluate's integer model, and its float twin
TINY_SHAPE = ("L2-H128-A2-F512", 8)  # BERT-tiny at int8 weights: the search's anchor, the baseline arm's model
PATHS = {INTEGER: "integer model", FLOAT: "its float twin"}


def board_label(board: str) -> str:
    """ "F746ZG" of "nucleo-f746zg": how the tables name the board."""
    return board.removeprefix("nucleo-").upper()


def bits_of(run: dict, model: str, split: str) -> np.ndarray | None:
    return correct(run["board"], split, model) if run.get("board") else None


def summarize(runs: dict[str, list[dict]]) -> dict:
    """Per arm: mean ± sd of the float student and the board path's models; the searched shape against BERT-tiny."""
    out = {"arms": {}, "against": TINY}
    for arm, rows in runs.items():
        stats = {"seeds": [r["seed"] for r in rows]}
        stats["student"] = {
            split: {**statistics([r["student"]["accuracy"][split] for r in rows], 1.0), "n": len(rows)}
            if rows
            else None
            for split in SPLITS
        }
        for model in PATHS:
            per_split = {}
            for split in SPLITS:
                values = [b.mean() for r in rows if (b := bits_of(r, model, split)) is not None]
                per_split[split] = {**statistics(values), "n": len(values)} if values else None
            stats[model] = per_split
        students, boards = [r["student"] for r in rows], [r["board"] for r in rows if r["board"]]
        stats["steps"] = sorted({s["steps"] for s in students})
        stats["student_minutes"] = statistics([s["seconds"] for s in students], 1 / 60) if students else None
        board_seconds = [(b["search_seconds"] or 0) + (b["evaluate_seconds"] or 0) for b in boards]
        stats["board_minutes"] = statistics(board_seconds, 1 / 60) if boards else None
        out["arms"][arm] = stats
    out["difference"] = versus(runs[CHOSEN], runs[TINY])
    return out


def versus(arm_runs: list[dict], reference_runs: list[dict]) -> dict:
    """Per model, on the seeds both arms have: mean difference in points, paired t over seeds, paired bootstrap."""
    base, other = {r["seed"]: r for r in reference_runs}, {r["seed"]: r for r in arm_runs}
    seeds, out = board_seeds(arm_runs, reference_runs), {}
    for model in PATHS:
        entry = {"seeds": seeds}
        for split in SPLITS if seeds else ():
            a, b = (np.array([bits_of(runs[s], model, split) for s in seeds]) for runs in (other, base))
            entry[split] = paired_difference(a, b)
        out[model] = entry
    return out


def board_seeds(*arms: list[dict]) -> list[int]:
    """The seeds on which every arm's run took the board path: the pairs a comparison may use."""
    return sorted(set.intersection(*({r["seed"] for r in rows if r.get("board")} for rows in arms)))


def paired_runs(runs: dict[str, list[dict]]) -> dict[str, list[dict]]:
    """Each arm's runs on the seeds both arms took the board path: what a comparison's means are taken over."""
    seeds = set(board_seeds(runs[CHOSEN], runs[TINY]))
    return {arm: [r for r in rows if r["seed"] in seeds] for arm, rows in runs.items()}


def markdown(summary: dict, exports: dict, shape: str, board: str = BOARD, seq_len: int = 128) -> str:
    """Per arm: the estimate, Flash, arena and accuracies; then the searched shape against BERT-tiny."""
    lines = [
        f"| student | est. ms at {seq_len} tokens | Flash (whole model) | arena | seeds | float student dev "
        "| float student test | integer model dev | integer model test | distill min | board path min |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for arm, s in summary["arms"].items():
        export = exports.get(arm) or {}
        cost = [f"{export['latency_ms']:.1f}" if export else "–", *_memory(export)]
        cells = [_cell(s[path][split]) for path in ("student", INTEGER) for split in SPLITS]
        minutes = [f"{m['mean']:.1f}" if m else "–" for m in (s["student_minutes"], s["board_minutes"])]
        name = f"{shape} (searched)" if arm == CHOSEN else "BERT-tiny"
        lines.append("| " + " | ".join([name, *cost, str(len(s["seeds"])), *cells, *minutes]) + " |")
    lines += ["", "| searched against BERT-tiny | seeds | dev, points (paired t p) | test, points (paired t p) "
                  "| test: paired bootstrap p |", "|---|---|---|---|---|"]  # fmt: skip
    for model, label in PATHS.items():
        label = f"{label} ({board_label(board)})" if model == INTEGER else label
        entry = summary["difference"][model]
        if entry["seeds"]:
            dev, test = entry["validation"], entry["test"]
            lines.append(
                f"| {label} | {len(entry['seeds'])} | {dev['points']:+.2f} ({_p(dev['paired_t_p'])}) "
                f"| {test['points']:+.2f} ({_p(test['paired_t_p'])}) | {_p(test['paired_bootstrap_p'])} |"
            )
    return "\n".join(lines)


def _memory(export: dict) -> list[str]:
    if not export:
        return ["–", "–"]
    return [f"{export['flash_bytes'] / 1024:,.1f} KB", f"{export['arena_bytes'] / 1024:,.1f} KB"]


def verdict(summary: dict) -> str:
    """The searched shape's integer model against BERT-tiny's on test, in one sentence's words (recomputed
    from the bits): "L1-H96-A3-F192-w4 (46.8 ms est.) scores 75.1 ± 0.5 ... (paired t p = 0.2, 5 seeds)"."""
    stats, exports = summarize(paired_runs(summary["runs"])), summary["exports"]
    arms, difference = stats["arms"], stats["difference"][INTEGER]
    test = {arm: _cell(arms[arm][INTEGER]["test"]) for arm in arms}
    points, seeds = difference["test"]["points"], len(difference["seeds"])
    return (
        f"{summary['search']['chosen']} ({exports[CHOSEN]['latency_ms']:.1f} ms est.), whose integer model scores "
        f"{test[CHOSEN]} on test against BERT-tiny's {test[TINY]} ({exports[TINY]['latency_ms']:.1f} ms est.): "
        f"{points:+.2f} points (paired t p = {_p(difference['test']['paired_t_p'])}, {seeds} seeds)"
    )


def candidates_table(summary: dict) -> str:
    """The search's candidates (seed 0) as it scored them: the distilled students, before the board path."""
    search = summary["search"]
    lines = [
        "| candidate | encoder parameters | est. ms | Flash less word tables (tokenizer blob in) | arena | dev | test "
        "| steps | distill min |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for c in search["candidates"]:
        name = f"**{c['shape']}** (chosen)" if c["chosen"] else c["shape"]
        cells = [f"{c['encoder_params']:,}", f"{c['latency_ms']:.1f}", f"{c['flash_bytes'] / 1024:,.1f} KB"]
        cells += [f"{c['arena_bytes'] / 1024:,.1f} KB", f"{100 * c['validation_accuracy']:.2f}"]
        cells += [f"{100 * c['test_accuracy']:.2f}", f"{c['steps']:,}", f"{c['seconds'] / 60:.1f}"]
        lines.append("| " + " | ".join([name, *cells]) + " |")
    return "\n".join(lines)


def ranking_table(summaries: list[dict]) -> str:
    """Per task and board, the search's candidates (seed 0) as the two rankings see them: the float students as
    `distill` scored them, and their integer models after the board path (`--rank-by board`), each
    ranking's first marked."""
    lines = [
        "| task | board | recipe | candidate | word tables | float student dev | float student test "
        "| integer model dev | integer model test | ranked first on |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    tiny = f"{TINY_SHAPE[0]}-w{TINY_SHAPE[1]}"
    for summary in summaries:
        rows = summary["search"]["candidates"]
        if any("board" not in row for row in rows):
            raise ValueError(f"{summary['command']}: a candidate has no board-path accuracy (--rank-by student?)")
        firsts = {
            "the float students": max(rows, key=lambda r: (r["validation_accuracy"], -r["latency_ms"])),
            "the board path": max(rows, key=lambda r: (r["board"]["validation_accuracy"], -r["latency_ms"])),
        }
        for row in rows:
            first = " and ".join(name for name, best in firsts.items() if best is row) or "-"
            name = row["shape"] + (" (BERT-tiny)" if row["shape"] == tiny else "")
            # a summary without a recipe was searched with logits, the only recipe of --preset auto then
            settings = summary["settings"]
            cells = [settings["task"], settings["board"], settings.get("recipe", "logits"), name]
            cells.append(f"{row['embedding_bytes'] / 1024:,.1f} KB")
            cells += [f"{100 * row[k]:.2f}" for k in ("validation_accuracy", "test_accuracy")]
            cells += [f"{100 * row['board'][k]:.2f}" for k in ("validation_accuracy", "test_accuracy")]
            lines.append("| " + " | ".join([*cells, first]) + " |")
    return "\n".join(lines)


def seeds_table(summaries: list[dict]) -> str:
    """Per task and board, the search's choice (its seed 0) against BERT-tiny on the seeds both arms took the
    board path: the integer models' dev and test (mean ± sd over those seeds) and the test difference with the
    paired t over seeds and the paired bootstrap. Where the search chose BERT-tiny both arms are the same runs: no
    difference to test."""
    lines = [
        "| task | board | the search's choice | est. ms, choice / BERT-tiny | seeds | integer model dev "
        "| integer model test | BERT-tiny dev | BERT-tiny test | test, points (paired t p) "
        "| test: paired bootstrap p |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    tiny = f"{TINY_SHAPE[0]}-w{TINY_SHAPE[1]}"
    for summary in summaries:
        stats = summarize(paired_runs(summary["runs"]))
        seeds = stats["difference"][INTEGER]["seeds"]
        chosen = summary["search"]["chosen"]
        estimates = [summary["exports"].get(arm) for arm in (CHOSEN, TINY)]
        cells = [summary["settings"]["task"], summary["settings"]["board"]]
        cells.append(chosen + (" (BERT-tiny)" if chosen == tiny else ""))
        cells += [" / ".join(f"{e['latency_ms']:,.0f}" if e else "–" for e in estimates), str(len(seeds))]
        cells += [_cell(stats["arms"][arm][INTEGER][split]) for arm in (CHOSEN, TINY) for split in SPLITS]
        test = stats["difference"][INTEGER].get("test")
        if chosen == tiny:
            cells += ["0 (the same runs)", "–"]
        elif test:
            cells += [f"{test['points']:+.2f} ({_p(test['paired_t_p'])})", _p(test["paired_bootstrap_p"])]
        else:
            cells += ["–", "–"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def markdown_table(summary: dict) -> str:
    """`markdown` of a committed summary, every figure and p-value recomputed from its runs' bits."""
    settings = summary["settings"]
    shape = summary["search"]["chosen"]
    return markdown(
        summarize(summary["runs"]), summary["exports"], shape, settings["board"], settings["export_seq_len"]
    )


def teacher_accuracy(summary: dict) -> str:
    """ "67.91 dev / 69.03 test": the teacher's accuracy as the summary recorded it (finetune's metrics.json)."""
    accuracy = summary["teacher"]["accuracy"]
    return f"{accuracy['validation']:.2f} dev / {accuracy['test']:.2f} test"


def tables_width_table(narrow: dict, wide: dict) -> str:
    """Both arms' integer models with int4 word tables (`narrow`, the summary of `--embedding-bits 4`) and with
    today's int8 tables (`wide`), on the seeds all four board paths ran from the same students: each width's
    means, and each arm's width chosen on dev seed by seed (what `distill --embedding-bits auto` does per
    candidate), with the searched shape against BERT-tiny; then each arm's int4-table change (paired t over
    seeds, paired bootstrap)."""
    if narrow["search"]["chosen"] != wide["search"]["chosen"]:
        raise ValueError("the two summaries' searches chose different shapes: not the same students")
    widths = {"int4": narrow["runs"], "int8": wide["runs"]}
    seeds = set(board_seeds(*(rows for runs in widths.values() for rows in runs.values())))
    seeds &= same_students(narrow, wide)  # a seed trained again elsewhere is another student: not a pair
    widths = {
        w: {arm: [r for r in rows if r["seed"] in seeds] for arm, rows in runs.items()} for w, runs in widths.items()
    }
    rows = [(f"{w} tables", runs) for w, runs in widths.items()]
    rows.append(("each arm's better on dev, per seed", {arm: better_on_dev(widths, arm) for arm in (CHOSEN, TINY)}))
    lines = [
        "| word tables | seeds | searched dev | searched test | BERT-tiny dev | BERT-tiny test "
        "| searched − BERT-tiny, dev (paired t p) | test (paired t p) | test: paired bootstrap p |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for width, runs in rows:
        stats = summarize(runs)
        cells = [_cell(stats["arms"][arm][INTEGER][split]) for arm in (CHOSEN, TINY) for split in SPLITS]
        lines.append(
            "| " + " | ".join([width, str(len(seeds)), *cells, *_difference_cells(stats["difference"])]) + " |"
        )
    lines += ["", "| student | seeds | int4 − int8 tables, dev (paired t p) | test (paired t p) "
                  "| test: paired bootstrap p |", "|---|---|---|---|---|"]  # fmt: skip
    for arm, name in ((CHOSEN, narrow["search"]["chosen"]), (TINY, "BERT-tiny")):
        change = versus(widths["int4"][arm], widths["int8"][arm])
        lines.append("| " + " | ".join([name, str(len(seeds)), *_difference_cells(change)]) + " |")
    return "\n".join(lines)


def same_students(*summaries: dict) -> set[int]:
    """The seeds at which every summary's two students have one SHA-256 (their provenance, the earlier
    summaries' included): distill is not bit-reproducible across machines, so a seed trained again is another
    student, and its runs pair with nothing in the other summary."""

    def hashes(summary: dict) -> dict[str, str]:
        provenance, found = summary.get("provenance", {}), {}
        for record in (provenance, *provenance.get("earlier", [])):
            for role, checkpoint in record.get("checkpoints", {}).items():
                found.setdefault(role, checkpoint.get("sha256"))
        return found

    known = [hashes(s) for s in summaries]
    seeds = set.intersection(*({r["seed"] for rows in s["runs"].values() for r in rows} for s in summaries))
    return {
        seed
        for seed in seeds
        if all(
            (first := known[0].get(f"{arm}-s{seed}")) is not None
            and all(h.get(f"{arm}-s{seed}") == first for h in known)
            for arm in (CHOSEN, TINY)
        )
    }


def better_on_dev(widths: dict[str, dict], arm: str) -> list[dict]:
    """`arm`'s run per seed at the table width whose integer model scored higher on dev (a tie: int8, the
    default), as a search of both widths chooses; `widths`: {"int4": runs, "int8": runs} on the same seeds."""

    def dev(run: dict) -> float:
        return bits_of(run, INTEGER, "validation").mean()

    return [max(w8, w4, key=dev) for w8, w4 in zip(widths["int8"][arm], widths["int4"][arm], strict=True)]


def _difference_cells(difference: dict) -> list[str]:
    """dev and test points with their paired t p, and the test's paired bootstrap p, of versus()'s integer model."""
    entry = difference[INTEGER]
    if not entry["seeds"]:
        return ["–", "–", "–"]
    dev, test = entry["validation"], entry["test"]
    cells = [f"{d['points']:+.2f} ({_p(d['paired_t_p'])})" for d in (dev, test)]
    return [*cells, _p(test["paired_bootstrap_p"])]
