"""`--merge`: an earlier summary's runs joined to this command's, never silently. A summary made with other
settings or from another student is refused, and so is one whose run this command has too (the same method,
seed and budget) but predicts otherwise, example for example: a re-run must reproduce what it joins."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from results_bits import CORRECT, PREDICTIONS, correct


def student_scores(runs: list[dict]) -> set[tuple[float, float]]:
    """The uncompressed student's (dev, test) accuracy as finished runs recorded it."""
    return {(r["uncompressed"]["validation"], r["uncompressed"]["test"]) for r in runs if "uncompressed" in r}


def earlier_summaries(opts, settings: dict, results: list[dict], runs_of) -> list[tuple[str, dict]]:
    """(file, summary) of the `--merge` summaries of this task, in the order given. Refused when made with
    other settings (every key of `settings` but the student's path) or from another student (its
    uncompressed scores differ), or when a run both have -- the same (method, seed, and budget if any) --
    predicts differently: a re-run must reproduce the recorded run example for example. `runs_of(summary)`:
    its runs."""
    ours, found = student_scores(results), []
    for name in filter(None, (getattr(opts, "merge", None) or "").split(",")):
        summary = json.loads(Path(name).read_text())
        if summary.get("task") != opts.task:
            continue
        changed = {k: (summary.get(k), v) for k, v in settings.items() if k != "student" and summary.get(k) != v}
        theirs = student_scores(runs_of(summary))
        if changed or len(theirs | ours) > 1:
            raise SystemExit(
                f"--merge {name}: made with other settings (was, now: {changed}) or from another student "
                f"(uncompressed dev, test: {sorted(theirs)} there, {sorted(ours)} here)"
            )
        recorded = {run_key(r): r for r in runs_of(summary) if PREDICTIONS in r or CORRECT in r}
        for run in results:
            if (PREDICTIONS in run or CORRECT in run) and run_key(run) in recorded:
                if not same_examples_right(run, recorded[run_key(run)]):
                    raise SystemExit(
                        f"--merge {name}: {run_key(run)} re-run here predicts differently from the recorded run "
                        "(another code version or environment): not merged"
                    )
        found.append((name, summary))
    return found


def same_examples_right(run: dict, recorded: dict) -> bool:
    """Both runs right on the same examples of every split (a committed summary keeps only that)."""
    return all(np.array_equal(correct(run, split), correct(recorded, split)) for split in ("validation", "test"))


def run_key(run: dict) -> tuple:
    return run.get("budget"), run["method"], run["seed"]


def with_earlier_runs(rows: list[dict], earlier: dict | None) -> list[dict]:
    """`rows` and the earlier summary's runs of the (method, seed)s `rows` do not have."""
    have = {(r["method"], r["seed"]) for r in rows}
    return rows + [r for r in (earlier or {}).get("runs", []) if (r["method"], r["seed"]) not in have]
