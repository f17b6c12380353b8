"""What `search` trains after its search stages (`--final-training`), and which model it writes.

  select    (default) every candidate architecture is initialised from the uncompressed student (SVD of the
            student's table for that architecture, as the baselines are) and KD fine-tuned with exactly
            adaptive embedding's recipe and steps (`run_schedule.RunSchedule` of `--mode adaptive`); the best
            on dev is written, ties to adaptive embedding. Candidates (`--candidates`):
              searched   the architecture the search found
              adaptive   adaptive embedding's own shape at the budget (`baselines.adaptive_for_budget`)
              projected  the architecture of a second search under `--stage1-start budget --budget-control
                         projected` (two more search stages: off by default, see DEFAULT_CANDIDATES)
            With a budget the written model is therefore never worse on dev than adaptive embedding trained
            the same way; the candidates, their dev scores and the choice go to metrics.json.
  retrain   the searched architecture alone, trained that way (no selection)
  continue  the searched model's own weights fine-tuned for --finetune-epochs (the flow before; the paper's)

NAS papers train the found architecture the baseline's way and report the search's cost apart: the search
stages' steps and seconds are `search_cost`, not counted in the final model's training.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tflm_mcubert.compress.choices import CANDIDATES, FINAL_TRAININGS
from tflm_mcubert.compress.run_schedule import RunSchedule
from tflm_mcubert.errors import UserError
from tflm_mcubert.model.bert import BertModel
from tflm_mcubert.model.clustered_embedding import ClusteredLowRankEmbedding, invert_permutation
from tflm_mcubert.ops.widths import Widths
from tflm_mcubert.quantize.weight_fake_quant import WeightFakeQuant
from tflm_mcubert.train.trainer import Stage, StageRecord, UpdateRule, accuracy, predict_logits

PROJECTED_MODES = ("two-stage", "clustering-only")


def check_options(opts) -> None:
    """Refuse an unknown --final-training or --candidates name."""
    if opts.final_training not in FINAL_TRAININGS:
        raise UserError(f"unknown --final-training {opts.final_training!r} (choose from: {', '.join(FINAL_TRAININGS)})")
    unknown = [c for c in opts.candidates if c not in CANDIDATES]
    if unknown or not opts.candidates:
        raise UserError(f"--candidates: {unknown[0] if unknown else 'none'!r} (choose from: {', '.join(CANDIDATES)})")


@dataclasses.dataclass
class Candidate:
    name: str
    embedding: ClusteredLowRankEmbedding  # initialised from the student, not yet trained
    same_as: str | None = None  # an earlier candidate with the same architecture: trained once
    model: BertModel | None = None
    dev: float | None = None
    record: StageRecord | None = None

    def describe(self, bits: int) -> dict:
        return {
            "name": self.name,
            "clusters": list(self.embedding.cluster_sizes),
            "ranks": list(self.embedding.ranks),
            "params": int(self.embedding.stored_params()),
            "bytes": int(self.embedding.stored_bytes(bits)),
            "validation_accuracy": self.dev,
            "same_architecture_as": self.same_as,
            "steps": None if self.record is None else self.record.steps,
            "seconds": None if self.record is None else self.record.seconds,
        }


def from_student(table: np.ndarray, found: ClusteredLowRankEmbedding, origin: str) -> ClusteredLowRankEmbedding:
    """`found`'s architecture (clusters, ranks) initialised from the student's dense `table` by SVD."""
    return ClusteredLowRankEmbedding.from_dense(
        table, cutoffs=found.cutoffs, ranks=found.ranks, permutation=found.permutation, origin=origin
    )


def cluster_of_tokens(embedding: ClusteredLowRankEmbedding) -> np.ndarray:
    """The cluster of every original token id: two embeddings with equal clusters and ranks are one
    architecture whatever order their permutations give the tokens inside a cluster."""
    new_ids = np.arange(embedding.vocab_size) if embedding.permutation is None else embedding.permutation
    return np.searchsorted(embedding.boundaries, new_ids, side="right") - 1


def same_architecture(a: ClusteredLowRankEmbedding, b: ClusteredLowRankEmbedding) -> bool:
    return tuple(a.ranks) == tuple(b.ranks) and np.array_equal(cluster_of_tokens(a), cluster_of_tokens(b))


def stage_cost(records: list[StageRecord]) -> dict:
    return {"steps": int(sum(r.steps for r in records)), "seconds": round(float(sum(r.seconds for r in records)), 1)}


def with_embedding(searched: BertModel, embedding: ClusteredLowRankEmbedding) -> tuple[BertModel, np.ndarray]:
    """`searched` with `embedding` as its word lookup, and the permutation (old id → new id) its ids take."""
    config = searched.config
    permutation = embedding.permutation
    if permutation is None:
        permutation = np.arange(config.vocab_size, dtype=np.int32)
    pad = int(permutation[config.pad_token_id])
    return searched.with_word_lookup(embedding, config=dataclasses.replace(config, pad_token_id=pad)), permutation


def kd_finetune(
    job, searched: BertModel, embedding, *, name: str, learning_rate, epochs: float, bits, weight_bits=None
):
    """KD fine-tune of `embedding` inside a twin of `searched` (its other weights copied), on permuted ids:
    (model, permutation, stage record). `bits`: the tables as stored (None: float). `weight_bits` (4 or 8,
    `--qat-weight-bits`): the encoder's matrices are fake-quantized at that width in the forward
    (quantize/weight_fake_quant.py, straight-through) and stay so for scoring, as the tables do; None: float."""
    model, permutation = with_embedding(searched, embedding)
    embedding.storage_bits = bits  # trained, and scored, as stored
    objective = job.objective
    if objective.hidden_weight > 0:  # the teacher still reads original ids
        objective = dataclasses.replace(objective, teacher_ids=invert_permutation(permutation))
    stage = Stage(name, model, [], job.train.remapped(permutation), epochs, objective, job.teacher_logits)
    stage.rules = [UpdateRule("weights", model.trainable_variables, learning_rate)]
    if weight_bits is None:
        return model, permutation, job.trainer.fit(stage)
    weights = WeightFakeQuant(model, Widths.uniform(weight_bits)).install()
    stage.before_step = weights.refresher()
    record = job.trainer.fit(stage)
    weights.refresh()  # the clip ratios of the final weights: scored as the export will store them
    return model, permutation, record


def dev_accuracy(job, model: BertModel, permutation: np.ndarray) -> float:
    validation = job.validation.remapped(permutation)
    return accuracy(predict_logits(model, validation, job.batch_size), validation)


def wanted_candidates(opts, has_budget: bool) -> tuple[list[str], dict[str, str]]:
    """(candidates to train, in preference order; {skipped candidate: why})."""
    wanted = list(opts.candidates) if opts.final_training == "select" else ["searched"]
    skipped = {}
    if not has_budget:
        skipped |= {c: "no embedding budget to hold it to" for c in wanted if c != "searched"}
    elif "projected" in wanted and (opts.mode not in PROJECTED_MODES or opts.relaxation != "exact"):
        skipped["projected"] = f"the projected control needs --relaxation exact and --mode {'/'.join(PROJECTED_MODES)}"
    elif "projected" in wanted and opts.budget_control == "projected":
        skipped["projected"] = "the search itself ran under the projected control"
    return [c for c in CANDIDATES if c in wanted and c not in skipped], skipped


def train_and_select(search, found: ClusteredLowRankEmbedding, adaptive, projected, details: dict):
    """Train each candidate with adaptive embedding's recipe and return (embedding, model) of the best on
    dev. `adaptive()` and `projected()` return those candidates' architectures (`projected` runs its search
    and appends its stages to `search.records`). Records the candidates, the choice and the costs in
    `details["final_training"]` and `details["search_cost"]`."""
    job, opts = search.job, search.opts
    has_budget = opts.target_params is not None or opts.target_bytes is not None
    names, skipped = wanted_candidates(opts, has_budget)
    if job.validation is None and len(names) > 1:
        raise ValueError("selecting among candidates needs the dev split (SearchJob.validation)")
    makers = {"searched": lambda: found, "adaptive": adaptive, "projected": projected}
    candidates = []
    for name in names:
        try:
            architecture = makers[name]()
        except UserError as error:  # e.g. a budget below the smallest adaptive embedding: no such baseline
            skipped[name] = str(error)
            continue
        candidate = Candidate(name, from_student(search.table, architecture, origin=f"{name}-retrained"))
        candidate.same_as = next(
            (c.name for c in candidates if same_architecture(c.embedding, candidate.embedding)), None
        )
        candidates.append(candidate)
    details["search_cost"] = stage_cost(search.records)  # every search stage, the projected one's included
    _train(search, candidates)
    chosen = max(candidates, key=lambda c: (c.dev if c.dev is not None else -1.0, -CANDIDATES.index(c.name)))
    details["final_training"] = _choice_report(opts, candidates, chosen, skipped)
    return chosen.embedding, chosen.model


def _train(search, candidates: list[Candidate]) -> None:
    """Fine-tune every distinct architecture for the steps adaptive embedding gets (its `--mode adaptive`
    schedule), each as its own checkpointed stage; a repeated architecture takes its twin's result."""
    job, opts = search.job, search.opts
    baseline = dataclasses.replace(opts, mode="adaptive")  # the baseline's schedule: equal steps, same rates
    by_name = {}
    for candidate in candidates:
        if candidate.same_as is not None:
            twin = by_name[candidate.same_as]
            candidate.model, candidate.dev, candidate.embedding = twin.model, twin.dev, twin.embedding
            continue
        schedule = RunSchedule(baseline, len(job.train), job.batch_size)
        candidate.model, permutation, candidate.record = kd_finetune(
            job,
            job.model,
            candidate.embedding,
            name=f"finetune-{candidate.name}",
            learning_rate=schedule.finetune_lr(),
            epochs=schedule.finetune_epochs(),
            bits=opts.embedding_bits,
            weight_bits=opts.qat_weight_bits,
        )
        search.records.append(candidate.record)
        if job.validation is not None:
            candidate.dev = dev_accuracy(job, candidate.model, permutation)
        by_name[candidate.name] = candidate


def _choice_report(opts, candidates: list[Candidate], chosen: Candidate, skipped: dict) -> dict:
    chosen_architecture = chosen.same_as or chosen.name
    others = [c.dev for c in candidates if c.same_as is None and c.name != chosen_architecture and c.dev is not None]
    return {
        "mode": opts.final_training,
        "candidates": [c.describe(opts.storage_bits) for c in candidates],
        "skipped": skipped,
        "chosen": chosen.name,
        # dev points by which the chosen one beats the best of the other architectures (None: no other)
        "dev_margin": None if not others or chosen.dev is None else round(100 * (chosen.dev - max(others)), 4),
        "final_steps": sorted({c.record.steps for c in candidates if c.record is not None}),
        "final_cost": stage_cost([c.record for c in candidates if c.record is not None]),
    }
