"""`search --board B --weight-bits auto` (and/or `--embedding-bits auto`): one Flash budget spent across the
encoder's weight width and the word tables, not only inside the embedding (issue #25).

Every candidate (encoder weights int8 or int4, word tables int8 or int4) leaves the word tables a different
share of the same budget (export/flash_budget.py). Each gets the whole `search` (the embedding search at
that share, then the KD fine-tune) in its own folder, `widths/<candidate>/`, and is then measured as the
firmware computes it: `evaluate --split validation test --weight-bits W` on the integer model at the
candidate's widths. The candidate with the best integer-model validation accuracy is kept (ties: the
earlier, int8 first); test accuracy is reported, never used. The chosen candidate's checkpoint is copied
to the search's output folder and `metrics.json` records every candidate's figures (`width_search`).

Cost: one full search per candidate. A candidate folder with its evaluation is reused, so an interrupted
width search resumes where it stopped (each candidate's search resumes from its own run checkpoints).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Callable

from tflm_mcubert.errors import UserError
from tflm_mcubert.console import log
from tflm_mcubert.ops.widths import AUTO

WIDTHS_DIR = "widths"
EVALUATION = "evaluate.json"


@dataclasses.dataclass(frozen=True)
class WidthCandidate:
    weight_bits: int  # the encoder's attention and MLP weights: 8 or 4
    embedding_bits: int | None  # the word tables' storage: 8, 4, or None (float tables, budgets at int8)

    @property
    def name(self) -> str:
        return f"w{self.weight_bits}-e{self.embedding_bits or 'float'}"

    @property
    def integer_model(self) -> str:
        """evaluate's name for the integer model at these widths."""
        return ("int4" if self.embedding_bits == 4 else "int8") + ("+w4" if self.weight_bits == 4 else "")


def width_candidates(weight_bits, embedding_bits) -> list[WidthCandidate]:
    """The candidates of `--weight-bits` and `--embedding-bits` (each a width, None, or "auto")."""
    weights = (8, 4) if weight_bits == AUTO else (weight_bits,)
    tables = (8, 4) if embedding_bits == AUTO else (embedding_bits,)
    return [WidthCandidate(w, e) for w in weights for e in tables]


def search_widths(
    candidates: list[WidthCandidate],
    out: Path,
    search_at: Callable[[WidthCandidate, Path], dict],
    evaluate_at: Callable[[WidthCandidate, Path, Path], None],
    writer: bool = True,
) -> dict:
    """Run `search_at(candidate, folder)` and `evaluate_at(candidate, folder, evaluation json)` for every
    candidate, keep the best on validation (integer model), copy it to `out`; returns its metrics with the
    comparison under `width_search`."""
    if len(candidates) < 2:
        raise UserError("a width search needs --weight-bits auto or --embedding-bits auto")
    rows = []
    for i, candidate in enumerate(candidates, 1):
        folder = out / WIDTHS_DIR / candidate.name
        evaluation = folder / EVALUATION
        log(f"width search: candidate {i}/{len(candidates)}: {candidate.name}")
        if evaluation.exists() and (folder / "metrics.json").exists():
            metrics = json.loads((folder / "metrics.json").read_text())
        else:
            metrics = search_at(candidate, folder)
            evaluate_at(candidate, folder, evaluation)
        rows.append(_candidate_row(candidate, metrics, json.loads(evaluation.read_text())))
    chosen = max(range(len(rows)), key=lambda i: (rows[i]["validation_accuracy"], -i))
    report = _report(rows, chosen)
    best = out / WIDTHS_DIR / candidates[chosen].name
    metrics = json.loads((best / "metrics.json").read_text())
    metrics["width_search"] = report
    if writer:
        _copy_checkpoint(best, out)
        (out / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    return metrics


def _candidate_row(candidate: WidthCandidate, metrics: dict, evaluation: dict) -> dict:
    splits = evaluation["by_split"]
    key = f"{candidate.integer_model}_accuracy"
    for split in ("validation", "test"):
        if key not in splits.get(split, {}):
            raise UserError(f"width search: {candidate.name}'s evaluation has no {key} on {split}")
    return {
        "name": candidate.name,
        "weight_bits": candidate.weight_bits,
        "embedding_bits": candidate.embedding_bits,
        "integer_model": candidate.integer_model,
        "validation_accuracy": splits["validation"][key],
        "test_accuracy": splits["test"][key],
        "float_validation_accuracy": metrics.get("validation_accuracy"),
        "embedding_params": metrics.get("embedding_params"),
        "embedding_bytes": metrics.get("embedding_bytes"),
        "flash_budget": metrics.get("flash_budget"),
    }


def _report(rows: list[dict], chosen: int) -> dict:
    others = [r["validation_accuracy"] for i, r in enumerate(rows) if i != chosen]
    return {
        "chosen": rows[chosen]["name"],
        "dev_margin": round(100 * (rows[chosen]["validation_accuracy"] - max(others)), 2),
        "candidates": rows,
        "rule": "best integer-model validation accuracy (evaluate, at the candidate's widths); ties: the earlier "
        "candidate; test accuracy reported, not used",
    }


def _copy_checkpoint(folder: Path, out: Path) -> None:
    """The chosen candidate's checkpoint files (not its run state) into the search's output folder."""
    for path in folder.iterdir():
        if path.is_file() and path.name != EVALUATION:
            shutil.copy2(path, out / path.name)
