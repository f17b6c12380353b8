"""The seeds an earlier summary holds, so that a long comparison can grow over several sessions on fresh
machines whose runs folder starts empty: `--earlier SUMMARY` takes every (arm, seed) that the committed
summary holds and RUNS does not. Runs in RUNS win. The summary is refused when it was made with other
settings. The merged summary's provenance keeps the earlier summary's commit, environment and checkpoint
hashes for what it took.

    previous = earlier.load(path, settings)           # None without --earlier
    runs = earlier.merge_runs(local_runs, previous, seeds)      # per arm; merge_records: a flat list
    summary["provenance"] = earlier.merge_provenance(provenance(...), previous, earlier.taken_roles(...))
"""

from __future__ import annotations

import json
from pathlib import Path


def load(path: Path | None, settings: dict, where: str | None = "settings") -> dict | None:
    """The summary at `path` (None without a path). It is refused unless it holds runs and was made with
    these `settings` (kept under `where`, or at its top level)."""
    if path is None:
        return None
    try:
        summary = json.loads(Path(path).read_text())
    except (OSError, ValueError) as error:
        raise SystemExit(f"--earlier {path}: not a readable summary ({error})") from None
    if not isinstance(summary, dict) or not isinstance(summary.get("runs"), (dict, list)):
        raise SystemExit(f"--earlier {path}: not a summary of runs (no 'runs')")
    theirs = summary.get(where, {}) if where else summary
    changed = {k: (theirs.get(k), v) for k, v in settings.items() if theirs.get(k) != v}
    if changed:
        raise SystemExit(f"--earlier {path} was made with other settings (there, here): {changed}")
    return summary


def holds(summary: dict | None, arm: str, seed: int) -> bool:
    """Whether the earlier summary has a run of `arm` at `seed`."""
    return summary is not None and any(r["seed"] == seed for r in summary["runs"].get(arm, ()))


def merge_runs(local: dict[str, list[dict]], summary: dict | None, seeds: list[int]) -> dict[str, list[dict]]:
    """Each arm's runs at `seeds`, ordered by seed: the local ones, then the earlier summary's for the
    seeds that are not local."""
    merged = {}
    for arm, rows in local.items():
        have = {r["seed"] for r in rows}
        taken = [
            r for r in (summary or {}).get("runs", {}).get(arm, ()) if r["seed"] in seeds and r["seed"] not in have
        ]
        merged[arm] = sorted([*rows, *taken], key=lambda r: r["seed"])
    return merged


def holds_record(summary: dict | None, config: str, seed: int) -> bool:
    """Whether the earlier summary (a flat list of runs) has a run of `config` at `seed`."""
    return summary is not None and any((r["config"], r["seed"]) == (config, seed) for r in summary["runs"])


def merge_records(local: list[dict], summary: dict | None, wanted) -> list[dict]:
    """`local` records (a flat list of runs), then the earlier summary's that `wanted(run)` accepts and
    `local` lacks (by config and seed)."""
    have = {(r["config"], r["seed"]) for r in local}
    runs = (summary or {}).get("runs", ())
    return local + [r for r in runs if wanted(r) and (r["config"], r["seed"]) not in have]


def taken_roles(local: dict[str, list[dict]], merged: dict[str, list[dict]], suffixes=("",)) -> set[str]:
    """The provenance roles (`<arm>-s<seed><suffix>`) of the runs that `merged` took from the earlier summary."""
    roles = set()
    for arm, rows in merged.items():
        have = {r["seed"] for r in local.get(arm, ())}
        roles |= {f"{arm}-s{r['seed']}{suffix}" for r in rows if r["seed"] not in have for suffix in suffixes}
    return roles


def merge_provenance(local: dict, summary: dict | None, roles: set[str], shared=("teacher",)) -> dict:
    """`local` provenance plus, under "earlier", the commit, environment and hashes of the checkpoints that
    the taken runs read (`roles`, and the `shared` ones such as the teacher, when anything was taken).
    Earlier summaries that were themselves merged are flattened into one list."""
    if summary is None or not roles:
        return local
    wanted = roles | set(shared)
    theirs = summary.get("provenance", {})
    entries = [{k: theirs.get(k) for k in ("commit", "environment")} | {"checkpoints": theirs.get("checkpoints", {})}]
    entries += theirs.get("earlier", [])
    kept = []
    for entry in entries:
        checkpoints = {role: c for role, c in entry["checkpoints"].items() if role in wanted}
        if checkpoints.keys() - set(shared):
            kept.append({**entry, "checkpoints": checkpoints})
    return {**local, "earlier": kept} if kept else local


def add_argument(parser) -> None:
    parser.add_argument(
        "--earlier",
        type=Path,
        help="a committed summary with the same settings whose seeds are added where RUNS has none "
        "(a comparison grown over several machines); RUNS's own runs win",
    )
