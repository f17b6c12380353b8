"""`distill --preset auto --board B`: the board picks the student.

The shape space (export/shape_space.py) prices every encoder shape on the board before any training; this
module turns that list into a choice made by training:

    survivors    the shapes that fit (and meet --max-latency-ms), reduced to their Pareto front of estimated
                 latency against encoder parameters (no survivor is both slower and smaller than another),
                 then to at most `count` of it, spread evenly from the fastest to the largest: the largest is
                 what the budget can buy, the fastest and those between say whether it pays under the step
                 budget. `distill`'s default student (BERT-tiny, at int8 weights where they fit) joins them
                 when the board admits it: parameters are not depth, and off the front it can still be the
                 best, so the search never chooses below the default unmeasured
    training     each survivor is distilled from the teacher by the caller's `train_at` (the same options,
                 hence the same number of steps, for every one) in its own folder, OUT/shapes/<shape>/
    ranking      optionally each trained survivor is also taken the board path by the caller's `rank_at`
                 (word tables searched under the board's Flash, integer model evaluated): its accuracies
                 are what the board will run, and they rank the candidates in place of the float student's
    choice       the best validation accuracy wins (ties: the faster); test accuracy is reported, never used.
                 The winner's checkpoint (the distilled student) is copied to OUT and OUT/metrics.json records
                 every candidate

A finished candidate (its folder holds metrics.json) is read back, never retrained, so an interrupted search
continues with `--resume` where it stopped; an unfinished one resumes from its own run checkpoints. The plan
(board, sequence, survivors, training settings) is kept in OUT/shape_search.json: a resumed search must
find it unchanged.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from pathlib import Path
from typing import Callable

from tflm_mcubert.console import log
from tflm_mcubert.errors import UserError
from tflm_mcubert.export.shape_space import Priced, Shape
from tflm_mcubert.files import METRICS_FILE
from tflm_mcubert.model.config import preset, shape_name

AUTO = "auto"
SHAPES_DIR = "shapes"
PLAN_FILE = "shape_search.json"
DEFAULT_COUNT = 3
ANCHOR = "bert-tiny"  # distill's default --preset: always measured where admitted
RUN_DIR = "run"  # a candidate's training state (train/trainer.py's RunDirectory)
# The teacher's logits on each split as a candidate's run caches them (train/workflows.py's teacher_logits).
TEACHER_LOGITS = tuple(f"teacher-logits-{split}.npz" for split in ("train", "validation", "test"))
RULE = "best validation accuracy (ties: the faster estimate); test accuracy reported, not used"
BOARD_RULE = (
    "best validation accuracy of the integer model on the board path (ties: the faster estimate); test reported"
)
BOARD = "board"  # a candidate row's board-path accuracies, when the search ranks on them


def encoder_params(shape: Shape) -> int:
    """The encoder layers' parameters: the capacity a shape buys (its word tables are sized at export)."""
    return shape.layers * shape.config(0, 0).encoder_layer_param_count()


def admitted(priced: list[Priced], max_latency_ms: float | None, where: str) -> list[Priced]:
    """The priced shapes that fit and meet the latency cap, fastest first; a UserError saying why when none
    does. `where` names the board and sequence for the message."""
    fitting = sorted((p for p in priced if p.fits), key=lambda p: p.latency_ms)
    if not fitting:
        raise UserError(
            f"no student shape fits {where} (of {len(priced)} priced; `boards --shapes` lists them with --json); "
            "a shorter sequence needs a smaller arena"
        )
    within = [p for p in fitting if max_latency_ms is None or p.latency_ms <= max_latency_ms]
    if not within:
        fastest = fitting[0]
        raise UserError(
            f"--max-latency-ms {max_latency_ms:g}: no shape that fits {where} is that fast (the fastest, "
            f"{fastest.shape.name}, is estimated at {fastest.latency_ms:.1f} ms)"
        )
    return within


def pareto_front(shapes: list[Priced]) -> list[Priced]:
    """Fastest first, each with more encoder parameters than every faster one: the shapes no other shape
    beats on both estimated latency and size."""
    front: list[Priced] = []
    for p in sorted(shapes, key=lambda p: (p.latency_ms, -encoder_params(p.shape))):
        if not front or encoder_params(p.shape) > encoder_params(front[-1].shape):
            front.append(p)
    return front


def spread(front: list[Priced], count: int) -> list[Priced]:
    """At most `count` of `front`, evenly spaced along it, the fastest and the largest always among them."""
    if count < 1:
        raise UserError(f"--shape-candidates must be at least 1, got {count}")
    if len(front) <= count:
        return list(front)
    if count == 1:
        return [front[-1]]  # one candidate: the most the board holds
    picks = sorted({round(i * (len(front) - 1) / (count - 1)) for i in range(count)})
    return [front[i] for i in picks]


@dataclasses.dataclass
class ShapeSearchPlan:
    board: str
    seq_len: int
    max_latency_ms: float | None
    count: int
    priced: int  # how many shapes were priced
    fitting: int  # how many fit (and met the latency cap)
    candidates: list[Priced]
    training: dict  # what changes a candidate's result (teacher, data, options): a resume must share it
    anchor: Priced | None = None  # the default student among the candidates, when admitted

    def to_json(self) -> dict:
        plan = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "anchor"}
        plan["candidates"] = [p.shape.name for p in self.candidates]
        if self.anchor is not None:  # absent otherwise: plans from before it resume unchanged
            plan["anchor"] = self.anchor.shape.name
        return plan


def anchor_of(within: list[Priced]) -> Priced | None:
    """`ANCHOR`'s shape among the admitted ones: at int8 weights (`export`'s default) if they fit, else int4."""
    name = shape_name(preset(ANCHOR))
    widths = {p.shape.weight_bits: p for p in within if p.shape.preset == name}
    return widths.get(8) or widths.get(4)


def plan_search(
    priced: list[Priced], board: str, seq_len: int, *, count: int, max_latency_ms: float | None, training: dict
) -> ShapeSearchPlan:
    """The survivors of `priced` (see the module docstring) as the plan of one search."""
    if max_latency_ms is not None and max_latency_ms <= 0:
        raise UserError(f"--max-latency-ms must be positive, got {max_latency_ms:g}")
    within = admitted(priced, max_latency_ms, f"{board} at {seq_len} tokens")
    chosen, anchor = spread(pareto_front(within), count), anchor_of(within)
    if anchor is not None and anchor not in chosen:
        chosen = sorted([*chosen, anchor], key=lambda p: p.latency_ms)
    return ShapeSearchPlan(board, seq_len, max_latency_ms, count, len(priced), len(within), chosen, training, anchor)


def open_plan(out: Path, plan: ShapeSearchPlan, resume: bool) -> None:
    """Write the plan to OUT, or with `resume` check that OUT's is the same; an earlier search without
    `resume` is refused rather than mixed with this one."""
    path = out / PLAN_FILE
    current = json.loads(json.dumps(plan.to_json()))
    if path.is_file():
        if not resume:
            raise UserError(
                f"{out}: holds an earlier shape search; pass --resume to continue it, or choose another --out"
            )
        stored = json.loads(path.read_text())
        changed = sorted(k for k in set(stored) | set(current) if stored.get(k) != current.get(k))
        if changed:
            raise UserError(
                f"--resume: {out} was started with a different shape search ({', '.join(changed)} changed); "
                "use a new --out"
            )
        return
    path.write_text(json.dumps(current, indent=2) + "\n")


def candidate_folder(out: Path, shape: Shape) -> Path:
    return out / SHAPES_DIR / shape.name


def run_shape_search(
    plan: ShapeSearchPlan,
    out: Path,
    train_at: Callable[[Shape, Path], dict],
    resume: bool = False,
    rank_at: Callable[[Shape, Path], dict] | None = None,
) -> dict:
    """Train every candidate of `plan` with `train_at(shape, folder)` (which returns the folder's metrics)
    or read back the finished ones, with `rank_at(shape, folder)` measure it on the board path (its
    validation and test accuracy and seconds), choose the best on validation (the board path's if ranked),
    copy it to `out`; returns its metrics with the comparison under `shape_search`, as written to
    OUT/metrics.json."""
    open_plan(out, plan, resume)
    began, rows = time.monotonic(), []
    for number, priced in enumerate(plan.candidates, 1):
        folder = candidate_folder(out, priced.shape)
        estimate = f"est. {priced.latency_ms:.1f} ms, {encoder_params(priced.shape):,} encoder parameters"
        if (folder / METRICS_FILE).is_file():
            log(f"shape search: candidate {number}/{len(plan.candidates)}: {priced.shape.name} finished, read back")
            metrics = json.loads((folder / METRICS_FILE).read_text())
        else:
            log(f"shape search: candidate {number}/{len(plan.candidates)}: {priced.shape.name} ({estimate})")
            share_teacher_logits(out, folder)
            metrics = train_at(priced.shape, folder)
        row = candidate_row(priced, metrics)
        if rank_at is not None:
            log(f"shape search: candidate {number}/{len(plan.candidates)}: {priced.shape.name} on the board path")
            row[BOARD] = rank_at(priced.shape, folder)
        rows.append(row)
    chosen = max(range(len(rows)), key=lambda i: (ranked_accuracy(rows[i]), -rows[i]["latency_ms"], -i))
    rows[chosen]["chosen"] = True
    best = candidate_folder(out, plan.candidates[chosen].shape)
    metrics = json.loads((best / METRICS_FILE).read_text())
    metrics["shape_search"] = report(plan, rows, chosen, time.monotonic() - began)
    copy_checkpoint(best, out)
    (out / METRICS_FILE).write_text(json.dumps(metrics, indent=2, default=float) + "\n")
    return metrics


def share_teacher_logits(out: Path, folder: Path) -> None:
    """Seed a candidate's run directory with the teacher logits an earlier candidate cached: every candidate
    distills from the same teacher on the same data, and a large teacher's pass over the task takes minutes.
    The run directory checks each cached array's key (teacher and data fingerprints) before using it, so a
    copy that does not apply is recomputed, never trusted."""
    run = folder / RUN_DIR
    for name in TEACHER_LOGITS:
        earlier = [path for path in sorted((out / SHAPES_DIR).glob(f"*/{RUN_DIR}/{name}")) if path.parent != run]
        if earlier and not (run / name).exists():
            run.mkdir(parents=True, exist_ok=True)
            shutil.copy2(earlier[0], run / name)


def candidate_row(priced: Priced, metrics: dict) -> dict:
    """One candidate as metrics.json lists it: its shape, its estimates on the board, what training gave."""
    for key in ("validation_accuracy", "test_accuracy", "stages", "seconds"):
        if key not in metrics:
            raise UserError(f"shape search: {priced.shape.name}'s metrics.json has no {key}; delete its folder")
    return {
        "shape": priced.shape.name,
        **dataclasses.asdict(priced.shape),
        "encoder_params": encoder_params(priced.shape),
        "flash_bytes": priced.flash_bytes,
        "embedding_bytes": priced.embedding_bytes,
        "arena_bytes": priced.arena_bytes,
        "latency_ms": round(priced.latency_ms, 3),
        "validation_accuracy": metrics["validation_accuracy"],
        "test_accuracy": metrics["test_accuracy"],
        "steps": sum(stage["steps"] for stage in metrics["stages"]),
        "seconds": metrics["seconds"],
        "chosen": False,
    }


def ranked_accuracy(row: dict) -> float:
    """The validation accuracy a candidate is ranked on: its integer model's on the board path where the
    search measured it, else the float student's."""
    return row[BOARD]["validation_accuracy"] if BOARD in row else row["validation_accuracy"]


def report(plan: ShapeSearchPlan, rows: list[dict], chosen: int, seconds: float) -> dict:
    others = [ranked_accuracy(r) for i, r in enumerate(rows) if i != chosen]
    margin = round(100 * (ranked_accuracy(rows[chosen]) - max(others)), 2) if others else None
    board = BOARD in rows[chosen]
    return {
        "board": plan.board,
        "seq_len": plan.seq_len,
        "max_latency_ms": plan.max_latency_ms,
        "shapes_priced": plan.priced,
        "shapes_fitting": plan.fitting,
        "chosen": rows[chosen]["shape"],
        "dev_margin": margin,
        "rule": BOARD_RULE if board else RULE,
        "candidates": rows,
        "seconds_this_run": round(seconds, 1),
        "training_seconds": round(sum(r["seconds"] for r in rows), 1),
        **({"board_seconds": round(sum(r[BOARD]["seconds"] for r in rows), 1)} if board else {}),
    }


def copy_checkpoint(folder: Path, out: Path) -> None:
    """The chosen candidate's checkpoint files (not its run state, not its metrics) into OUT."""
    for path in folder.iterdir():
        if path.is_file() and path.name != METRICS_FILE:
            shutil.copy2(path, out / path.name)
