"""MCUBERT's embedding search (paper §3.2), its ablations (Fig. 4) and the baselines (Table 1), each
ending in the same KD fine-tune of the compressed model.

Modes:
- two-stage, `relaxation="exact"` (the default): the straight-through search of `exact_space`: every
  architecture it trains is one it can deploy. Stage 1 starts from the frequency clustering (rare tokens
  stay there), Stage 2 factorises the table the encoder saw and keeps components by importance per
  parameter within the budget, possibly cutting a cluster to rank 0. What it writes is the architecture of
  its last training step.
- two-stage, `relaxation="soft"` (the paper): Stage 1 (Alg. 1) searches the clustering α at fixed ranks
  d/div^i, alternating w and α updates; argmax α gives the clusters. Stage 2 (Alg. 3) searches the ranks β
  of that clustering, alternating w and β; singular values with β > β* are kept.
- one-stage: α and β together (DARTS); ratio-then-clustering: β first (on the frequency clustering of
  adaptive embedding), then α at those ranks; clustering-only: Stage 1 alone.
- adaptive, svd, fwsvd: the baselines, no search.

The size penalty is λ·Σ_i Size(Emb_i) / (v·d): the soft embedding size as a FRACTION of the dense table,
so λ is "loss worth removing the whole table" and means the same for BERT-tiny and BERT-base (the
paper's λ multiplies a raw parameter count and must be re-tuned per model).

`target_params` replaces a fixed λ by a budget: after every step λ is multiplied by
(params / target)^η, params being the deployable size of the architecture the search would output now
(argmax α, β > β*), so λ rises while the search is over budget and falls while under; the decisions are
then projected onto the budget (`budget.py`).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import tensorflow as tf

from tflm_mcubert.compress import budget as budgets
from tflm_mcubert.compress import budget_control
from tflm_mcubert.compress import exact_space
from tflm_mcubert.compress.choices import DEFAULT_CANDIDATES, MODES, NAS_MODES, STAGE1_STARTS
from tflm_mcubert.compress import final_training as after_search  # its options are fields here
from tflm_mcubert.compress.final_training import with_embedding
from tflm_mcubert.compress.baselines import adaptive_cutoffs, adaptive_embedding, adaptive_for_budget
from tflm_mcubert.compress.baselines import embedding_fisher, frequency_ranking, fwsvd_embedding
from tflm_mcubert.compress.baselines import rank_for_budget, svd_embedding
from tflm_mcubert.train.batches import EncodedSplit
from tflm_mcubert.model.clustered_embedding import ClusteredLowRankEmbedding
from tflm_mcubert.train.distill import Objective
from tflm_mcubert.model.stored_tables import STORAGE_BITS
from tflm_mcubert.ops.widths import Widths
from tflm_mcubert.compress.search_space import (
    JointSearch,
    RankSearch,
    TokenClusteringSearch,
    fixed_ranks,
    split_trainable_variables,
)
from tflm_mcubert.compress.run_schedule import LR_SCHEDULES, RunSchedule
from tflm_mcubert.train.trainer import Stage, StageRecord, Trainer, UpdateRule, accuracy
from tflm_mcubert.train.trainer import predict_logits
from tflm_mcubert.errors import UserError
from tflm_mcubert.model.bert import BertModel

RELAXATIONS = ("exact", "soft")  # exact: two-stage and clustering-only; the other ablations are soft

# λ control: at most a factor e^0.05 per step, and λ kept within a range where it stays meaningful.
LAMBDA_RATE, LAMBDA_MIN, LAMBDA_MAX = 0.05, 1e-4, 1e4
DEFAULT_LAMBDA = 1.0


@dataclasses.dataclass
class SearchOptions:
    mode: str = "two-stage"
    num_clusters: int = 4
    div: float = 4.0  # Stage 1's fixed ranks d/div^i
    lambda_: float | None = None  # fixed λ; with target_params, λ's starting value
    target_params: int | None = None
    target_bytes: int | None = None  # the export's stored word-embedding bytes; replaces target_params
    # 8 or 4: the word tables' storage width; byte budgets count it, and the fine-tune trains and reports the
    # tables as stored (`model.stored_tables`). None: float tables, byte budgets at int8.
    embedding_bits: int | None = None
    # 4 or 8: the final fine-tune fake-quantizes the encoder's matrices at this width (straight-through QAT,
    # quantize/weight_fake_quant.py) and scores them so. None: float weights.
    qat_weight_bits: int | None = None
    epochs: float = 1.0  # per search stage
    finetune_epochs: float = 1.0
    lr: float = 5e-5  # weights w (the paper's AdamW, no weight decay)
    arch_lr: float = 1e-3  # α and β
    beta_threshold: float = 0.5
    cutoffs: tuple[int, ...] | None = None  # adaptive embedding (default: Baevski & Auli's, scaled)
    ranks: tuple[int, ...] | None = None  # adaptive embedding (default: d/div^i)
    relaxation: str = "exact"
    min_count: int = 3  # exact Stage 1: tokens seen fewer times in training follow their frequency cluster
    stage1_start: str = "paper"  # STAGE1_STARTS
    lr_schedule: str = "warmup-linear"  # the weights' (`run_schedule.py`; constant: the paper's)
    equal_steps: bool = True  # baselines fine-tune for the two-stage search's steps + its fine-tune's
    budget_control: str = "multiplicative"  # choices.BUDGET_CONTROLS: how the budget is held
    alpha_margin: float | None = None  # exact Stage 1's start margin (None: `budget_control.alpha_margin`)
    final_training: str = "select"  # choices.FINAL_TRAININGS: what is trained after the search stages
    candidates: tuple[str, ...] = DEFAULT_CANDIDATES  # what `select` trains and chooses among

    @property
    def storage_bits(self) -> int:
        """The width byte budgets count: --embedding-bits, int8 by default."""
        return self.embedding_bits or 8

    def validate(self, vocab_size: int, dim: int) -> "SearchOptions":
        if self.mode not in MODES:
            raise UserError(f"unknown --mode {self.mode!r} (choose from: {', '.join(MODES)})")
        fixed_ranks(dim, self.num_clusters, self.div)  # checks clusters >= 2 and div > 1
        if self.target_params is not None and self.target_bytes is not None:
            raise UserError("give --target-embedding-params or --target-embedding-bytes, not both")
        if self.target_params is not None:
            budgets.check_target(self.target_params, vocab_size, dim)
        if self.embedding_bits not in (None, *STORAGE_BITS):
            raise UserError(f"--embedding-bits must be one of {STORAGE_BITS}, got {self.embedding_bits}")
        if self.qat_weight_bits is not None:
            Widths.uniform(self.qat_weight_bits, "--qat-weight-bits")
        if self.target_bytes is not None:
            budgets.params_for_bytes(self.target_bytes, vocab_size, dim, self.num_clusters, self.storage_bits)
        if self.lambda_ is not None and self.lambda_ < 0:
            raise UserError(f"--lambda must be non-negative, got {self.lambda_}")
        budget = self.target_params is not None or self.target_bytes is not None
        budget_control.check_options(self, budget)
        after_search.check_options(self)
        if self.mode in NAS_MODES and self.lambda_ is None and not budget:
            raise UserError(f"--mode {self.mode} needs --lambda or --target-embedding-params/-bytes")
        if self.mode in ("svd", "fwsvd") and not budget:
            raise UserError(f"--mode {self.mode} needs --target-embedding-params/-bytes (it sets the rank)")
        if self.mode == "adaptive" and budget and (self.cutoffs or self.ranks):
            raise UserError(
                "--mode adaptive: give either --target-embedding-params/-bytes (cut-offs and ranks scaled to "
                "it) or --cutoffs/--ranks, not both"
            )
        if self.relaxation not in RELAXATIONS:
            raise UserError(f"unknown --relaxation {self.relaxation!r} (choose from: {', '.join(RELAXATIONS)})")
        if self.lr_schedule not in LR_SCHEDULES:
            raise UserError(f"unknown --lr-schedule {self.lr_schedule!r} (choose from: {', '.join(LR_SCHEDULES)})")
        if self.stage1_start not in STAGE1_STARTS:
            raise UserError(f"unknown --stage1-start {self.stage1_start!r} (choose from: {', '.join(STAGE1_STARTS)})")
        if self.min_count < 0:
            raise UserError(f"--min-count must be non-negative, got {self.min_count}")
        if not 0.0 <= self.beta_threshold < 1.0:
            raise UserError(f"--beta-threshold must be in [0, 1), got {self.beta_threshold}")
        for name in ("epochs", "finetune_epochs", "lr", "arch_lr"):
            if getattr(self, name) <= 0:
                raise UserError(f"--{name.replace('_', '-')} must be positive, got {getattr(self, name)}")
        return self


@dataclasses.dataclass
class SearchJob:
    """What a search runs on: the uncompressed fine-tuned classifier and its training data (original ids)."""

    trainer: Trainer
    strategy: tf.distribute.Strategy
    model: BertModel
    train: EncodedSplit
    objective: Objective
    teacher_logits: np.ndarray | None
    batch_size: int = 32
    validation: EncodedSplit | None = None  # when given, accuracy before and after conversion is recorded


@dataclasses.dataclass
class SearchOutcome:
    embedding: ClusteredLowRankEmbedding
    model: BertModel  # compressed and fine-tuned; takes permuted ids
    records: list[StageRecord]
    details: dict


class SizePenalty:
    """λ·Size/(v·d) for an arch update rule, with λ fixed or steered toward a target (module docstring)."""

    def __init__(self, soft_size, deployable_size, dense_params: int, *, lambda_: float, target: int | None):
        self.soft_size, self.deployable_size = soft_size, deployable_size
        self.dense_params, self.target = float(dense_params), target
        self.lam = tf.Variable(float(lambda_), trainable=False, dtype=tf.float32, name="size_lambda")
        self.size_range: list[int] | None = None  # [min, max] deployable size over the steps run (not resumed)

    def __call__(self) -> tf.Tensor:
        return self.lam * self.soft_size() / self.dense_params

    def after_step(self) -> dict:
        params = int(self.deployable_size())
        low, high = self.size_range or (params, params)
        self.size_range = [min(low, params), max(high, params)]
        if self.target is not None:
            pressure = float(np.clip(math.log(max(params, 1) / self.target), -1.0, 1.0))
            self.lam.assign(
                float(np.clip(float(self.lam.numpy()) * math.exp(LAMBDA_RATE * pressure), LAMBDA_MIN, LAMBDA_MAX))
            )
        return {"params": params, "lambda": f"{float(self.lam.numpy()):.3g}"}


def search_rules(model: BertModel, penalty: SizePenalty, *, lr: float, arch_lr: float) -> list[UpdateRule]:
    """Alg. 1/3's alternation: w on the task loss, then α/β on the task loss + the size penalty."""
    weights, architecture = split_trainable_variables(model)
    return [UpdateRule("weights", weights, lr), UpdateRule("architecture", architecture, arch_lr, penalty)]


def frequency_assignment(token_frequency: np.ndarray, cutoffs) -> np.ndarray:
    """Cluster of each token when tokens are ranked by frequency and cut at `cutoffs`."""
    assignment = np.empty(len(token_frequency), np.int64)
    assignment[frequency_ranking(token_frequency)] = np.searchsorted(
        cutoffs, np.arange(len(token_frequency)), side="right"
    )
    return assignment


def token_frequency(split: EncodedSplit, vocab_size: int) -> np.ndarray:
    ids = np.concatenate(split.input_ids) if len(split) else np.zeros(0, np.int32)
    return np.bincount(ids, minlength=vocab_size)


# --- the search ------------------------------------------------------------------------------------------


def run_search(job: SearchJob, opts: SearchOptions) -> SearchOutcome:
    config = job.model.config
    opts.validate(config.vocab_size, config.hidden_size)
    if job.model.embeddings.word_lookup is not None:
        raise UserError("the checkpoint's word embedding is already compressed; search from an uncompressed one")
    if opts.target_bytes is not None:  # searched in parameters, then fitted to the bytes (`budget.py`)
        params = budgets.params_for_bytes(
            opts.target_bytes, config.vocab_size, config.hidden_size, opts.num_clusters, opts.storage_bits
        )
        opts = dataclasses.replace(opts, target_params=params)
    with job.strategy.scope():
        search = _Search(job, opts)
        embedding, searched_model, details = _within_budget(search)
        if opts.final_training == "continue" or opts.mode not in NAS_MODES:
            model = search.finetune(searched_model, embedding, details)
        else:  # the found architecture (and the other candidates) trained as the baseline is
            adaptive = lambda: search._adaptive()[0]  # noqa: E731
            projected = lambda: _projected_search(search, details)  # noqa: E731
            embedding, model = after_search.train_and_select(search, embedding, adaptive, projected, details)
    details["lambda"] = search.final_lambda
    details["size_range"] = search.size_ranges  # per search stage: the smallest and largest size trained
    return SearchOutcome(embedding, model, search.records, details)


def _within_budget(search: "_Search"):
    """(embedding, searched model, details) of the search's mode, its embedding fitted to the budget."""
    opts = search.opts
    embedding, searched_model, details = search.run_mode(opts.mode)
    # at int4 the parameter budget only approximates the bytes (`params_for_bytes`): the bytes decide
    params_decide = opts.target_bytes is None or opts.storage_bits == 8
    if params_decide and opts.target_params is not None and embedding.stored_params() > opts.target_params:
        details["truncated_from_params"] = embedding.stored_params()
        embedding = budgets.truncate_to_budget(embedding, opts.target_params)
    if opts.target_bytes is not None:
        details["params_budget_from_bytes"] = opts.target_params
        if embedding.stored_bytes(opts.storage_bits) > opts.target_bytes:
            details["truncated_from_bytes"] = embedding.stored_bytes(opts.storage_bits)
            embedding = budgets.fit_to_bytes(embedding, opts.target_bytes, opts.storage_bits)
    return embedding, searched_model, details


def _projected_search(search: "_Search", details: dict) -> ClusteredLowRankEmbedding:
    """The `projected` candidate: a second search from the budget's adaptive shape under the projected budget
    control, its stages checkpointed apart ("projected-..."), their records added to `search`'s."""
    opts = dataclasses.replace(search.opts, stage1_start="budget", budget_control="projected", alpha_margin=None)
    second = _Search(search.job, opts, stage_prefix="projected-")
    embedding, _, details["projected"] = _within_budget(second)
    search.records.extend(second.records)
    return embedding


class _Search:
    def __init__(self, job: SearchJob, opts: SearchOptions, stage_prefix: str = ""):
        self.job, self.opts = job, opts
        self.stage_prefix = stage_prefix  # a second search in the same run checkpoints its stages apart
        self.vocab_size, self.dim = job.model.config.vocab_size, job.model.config.hidden_size
        self.table = np.asarray(job.model.embeddings.word_embeddings.numpy())
        self.records: list[StageRecord] = []
        self.final_lambda: dict[str, float] = {}
        self.size_ranges: dict[str, list[int] | None] = {}
        self.schedule = RunSchedule(opts, len(job.train), job.batch_size)

    # -- helpers --
    def _fit(self, name: str, model: BertModel, layer, deployable_size, before_step=None):
        """Train one alternating search stage of `layer` inside `model`."""
        opts = self.opts
        lambda_, target = budget_control.penalty_lambda(opts, DEFAULT_LAMBDA, name)
        penalty = SizePenalty(
            layer.embedding_size, deployable_size, self.vocab_size * self.dim, lambda_=lambda_, target=target
        )
        stage = Stage(
            self.stage_prefix + name,
            model,
            search_rules(model, penalty, lr=self.schedule.search_stage_lr(), arch_lr=opts.arch_lr),
            self.job.train,
            opts.epochs,
            self.job.objective,
            self.job.teacher_logits,
            extra_state=[penalty.lam],
            after_step=penalty.after_step,
            before_step=before_step,
        )
        self.records.append(self.job.trainer.fit(stage))
        self.final_lambda[name] = float(penalty.lam.numpy())
        self.size_ranges[name] = penalty.size_range

    def _demote(self, assignment, logits, ranks):
        if self.opts.target_params is None:
            return assignment
        return budgets.demote_to_budget(assignment, logits, ranks, self.dim, self.opts.target_params)

    def _kept(self, counts, layer):
        """β > β*, or with a target the largest β that fit it (`budget.betas_for_budget`)."""
        if self.opts.target_params is None:
            return None
        return budgets.betas_for_budget(counts, [b.numpy() for b in layer.betas], self.dim, self.opts.target_params)

    def _stage1(self, model: BertModel, table: np.ndarray, ranks=None, name: str = "stage1-clustering"):
        layer = TokenClusteringSearch.from_dense(table, self.opts.num_clusters, self.opts.div, ranks=ranks)
        searched = model.with_word_lookup(layer)
        self._fit(name, searched, layer, lambda: budgets.assignment_params(layer.clustering(), layer.ranks, self.dim))
        assignment = self._demote(layer.clustering(), layer.alpha_logits.numpy(), layer.ranks)
        return layer, searched, assignment

    def _rank_search(self, model: BertModel, table: np.ndarray, assignment, name: str):
        layer = RankSearch.from_assignment(table, assignment, self.opts.num_clusters, self.opts.beta_threshold)
        searched = model.with_word_lookup(layer)
        self._fit(
            name, searched, layer, lambda: budgets.deployable_params(layer.cluster_sizes, layer.ranks(), self.dim)
        )
        return layer, searched, self._kept(layer.cluster_sizes, layer)

    @staticmethod
    def _clusters(assignment, num_clusters) -> list[int]:
        return np.bincount(assignment, minlength=num_clusters).tolist()

    # -- modes --
    def run_mode(self, mode: str):
        """(embedding, searched model, details) of `mode` (MODE_METHODS, below the class)."""
        return MODE_METHODS[mode](self)

    def _two_stage(self):
        if self.opts.relaxation == "exact":
            return self._exact_two_stage()
        layer1, model1, assignment = self._stage1(self.job.model, self.table)
        stage1 = self._stage_log(model1, layer1, layer1.to_clustered_embedding(assignment))
        layer2, model2, keep = self._rank_search(model1, layer1.dense_table(), assignment, "stage2-ranks")
        embedding = layer2.to_clustered_embedding(keep)
        stage2 = self._stage_log(model2, layer2, layer2.to_clustered_embedding(keep))
        stage1.update(alpha_entropy=_entropy(layer1.alpha().numpy()))
        stage2.update(ranks_above_threshold=layer2.ranks(), beta_histogram=_beta_histogram(layer2.betas))
        return embedding, model2, {"stage1": stage1, "stage2": stage2}

    def _exact_start(self):
        """Stage 1's start (STAGE1_STARTS: adaptive embedding's frequency clustering at the paper's ranks, or
        adaptive embedding scaled to the budget), and the tokens too rare to own an α."""
        frequency = token_frequency(self.job.train, self.vocab_size)
        cutoffs, ranks = adaptive_cutoffs(self.vocab_size, self.opts.num_clusters), None
        if self.opts.stage1_start == "budget":
            try:
                cutoffs, ranks = self._adaptive_shape()
            except UserError:  # under the smallest adaptive embedding: the paper's shape, demoted and cut
                pass
        start = frequency_assignment(frequency, cutoffs)
        layer_args = dict(
            table=self.table, start=start, min_count=self.opts.min_count, num_clusters=self.opts.num_clusters
        )
        layer_args.update(div=self.opts.div, ranks=ranks)
        if self.opts.budget_control == "projected":  # every clustering it trains fits the budget
            layer = budget_control.ProjectedClusteringSearch.within_budget(
                layer_args,
                budget=self.opts.target_params,
                frequency=frequency,
                margin=budget_control.alpha_margin(self.opts),
            )
        else:
            layer = exact_space.ExactClusteringSearch.from_frequency(
                **layer_args, frequency=frequency, margin=budget_control.alpha_margin(self.opts)
            )
        return layer, {"rare_tokens": int(np.sum(frequency < self.opts.min_count)), "start": start}

    def _exact_stage1(self):
        layer, info = self._exact_start()
        model = self.job.model.with_word_lookup(layer)
        self._fit(
            "stage1-clustering",
            model,
            layer,
            lambda: budgets.assignment_params(layer.clustering(), layer.ranks, self.dim),
            before_step=layer.choose,
        )
        assignment = layer.clustering()
        log = self._stage_log(model, layer, layer.to_clustered_embedding(assignment, origin="nas-clustering"))
        log.update(
            alpha_entropy=layer.alpha_entropy(),
            rare_tokens=info["rare_tokens"],
            moved_from_frequency=int(np.sum(assignment != info["start"])),
            start_clusters=self._clusters(info["start"], self.opts.num_clusters),
            start_ranks=list(layer.ranks),
        )
        return layer, model, assignment, log

    def _exact_two_stage(self):
        opts = self.opts
        layer1, model1, assignment, stage1 = self._exact_stage1()
        if opts.target_bytes is not None:  # the same for bytes: every low-rank cluster stores one column
            demoted = budgets.demote_to_bytes(
                assignment,
                layer1.effective_logits().numpy(),
                opts.num_clusters,
                self.dim,
                opts.target_bytes,
                bits=opts.storage_bits,
            )
            if np.any(demoted != assignment):
                assignment, stage1["demoted_to_budget"] = demoted, True
        elif opts.target_params is not None and np.sum(assignment == 0) * self.dim > opts.target_params:
            # The dense cluster alone overshoots: no rank choice can fit, so Stage 1's choice must yield.
            assignment = self._demote(assignment, layer1.effective_logits().numpy(), layer1.ranks)
            stage1["demoted_to_budget"] = True
        layer2 = exact_space.ExactRankSearch.from_clustering(
            layer1.seen_table(),
            assignment,
            num_clusters=opts.num_clusters,
            beta_threshold=opts.beta_threshold,
            # a byte budget is kept in bytes here: a cluster cut to rank 0 still stores a zero column
            budget=opts.target_params if opts.target_bytes is None else opts.target_bytes,
            stored_size=None if opts.target_bytes is None else budgets.bytes_of(self.dim, opts.storage_bits),
        )
        model2 = model1.with_word_lookup(layer2)
        self._fit(
            "stage2-ranks",
            model2,
            layer2,
            lambda: budgets.deployable_params(layer2.cluster_sizes, layer2.ranks(), self.dim),
            before_step=layer2.choose,
        )
        stage2 = self._stage_log(model2, layer2, layer2.to_clustered_embedding())
        stage2["beta_histogram"] = _beta_histogram(layer2.betas)
        return layer2.to_clustered_embedding(), model2, {"stage1": stage1, "stage2": stage2}

    def _stage_log(self, searched: BertModel, layer, embedding: ClusteredLowRankEmbedding) -> dict:
        """Cluster sizes and ranks of what the stage would write; on dev, the model as trained, as the soft
        relaxation and as written (hard). The exact search trains the hard one, the paper's the soft one."""
        log = {
            "clusters": list(embedding.cluster_sizes),
            "ranks": list(embedding.ranks),
            "params": int(embedding.stored_params()),
            "trained": "hard" if hasattr(layer, "hardness") else "soft",
        }
        validation, batch = self.job.validation, self.job.batch_size
        if validation is None:
            return log
        log["trained_dev"] = accuracy(predict_logits(searched, validation, batch), validation)
        if hasattr(layer, "hardness"):
            with exact_space.relaxed(layer):
                log["soft_dev"] = accuracy(predict_logits(searched, validation, batch), validation)
        else:
            log["soft_dev"] = log["trained_dev"]
        model, permutation = with_embedding(searched, embedding)
        remapped = validation.remapped(permutation)
        log["hard_dev"] = accuracy(predict_logits(model, remapped, batch), remapped)
        return log

    def _clustering_only(self):
        if self.opts.relaxation == "exact":
            layer, model, assignment, log = self._exact_stage1()
        else:
            layer, model, assignment = self._stage1(self.job.model, self.table)
            log = self._stage_log(model, layer, layer.to_clustered_embedding(assignment))
        return layer.to_clustered_embedding(assignment), model, {"stage1": log}

    def _one_stage(self):
        layer = JointSearch.from_dense(self.table, self.opts.num_clusters, self.opts.beta_threshold)
        model = self.job.model.with_word_lookup(layer)
        self._fit(
            "joint-search", model, layer, lambda: budgets.assignment_params(layer.clustering(), layer.ranks(), self.dim)
        )
        assignment = self._demote(layer.clustering(), layer.alpha_logits.numpy(), layer.ranks())
        embedding = layer.to_clustered_embedding(
            assignment, self._kept(self._clusters(assignment, self.opts.num_clusters), layer)
        )
        details = {
            "joint": {
                "clusters": self._clusters(assignment, self.opts.num_clusters),
                "ranks_above_threshold": layer.ranks(),
                "ranks": list(embedding.ranks),
            }
        }
        return embedding, model, details

    def _ratio_then_clustering(self):
        c = self.opts.num_clusters
        frequency = token_frequency(self.job.train, self.vocab_size)
        by_frequency = frequency_assignment(frequency, adaptive_cutoffs(self.vocab_size, c))
        layer_a, model_a, keep = self._rank_search(self.job.model, self.table, by_frequency, "ratio-search")
        ranks = layer_a.ranks() if keep is None else [int(k.sum()) for k in keep]
        # Stage B starts from the table the ratio search ended with, each token as the model saw it.
        table = np.asarray(layer_a(np.arange(self.vocab_size, dtype=np.int32)[np.newaxis])[0])
        layer_b, model_b, assignment = self._stage1(model_a, table, ranks=ranks, name="clustering-search")
        details = {
            "ratio_search": {"clusters": self._clusters(by_frequency, c), "ranks": ranks},
            "clustering_search": {"clusters": self._clusters(assignment, c)},
        }
        return layer_b.to_clustered_embedding(assignment, origin="nas-ratio-then-clustering"), model_b, details

    def _adaptive_shape(self) -> tuple[list[int], list[int]]:
        """Adaptive embedding's cut-offs and ranks: Baevski & Auli's shape scaled to the budget when there is
        one (`adaptive_for_budget`), else --cutoffs/--ranks or the paper's."""
        c, opts = self.opts.num_clusters, self.opts
        if opts.target_bytes is not None or opts.target_params is not None:
            bits = None if opts.target_bytes is None else opts.storage_bits
            target = opts.target_params if bits is None else opts.target_bytes
            return adaptive_for_budget(self.vocab_size, self.dim, target, num_clusters=c, div=opts.div, bits=bits)
        cutoffs = list(opts.cutoffs or adaptive_cutoffs(self.vocab_size, c))
        ranks = list(opts.ranks or fixed_ranks(self.dim, c, opts.div))
        if len(cutoffs) != c - 1 or len(ranks) != c - 1:
            raise UserError(f"--clusters {c} needs {c - 1} --cutoffs and {c - 1} --ranks")
        return cutoffs, ranks

    def _adaptive(self):
        cutoffs, ranks = self._adaptive_shape()
        frequency = token_frequency(self.job.train, self.vocab_size)
        embedding = adaptive_embedding(self.table, frequency, cutoffs=cutoffs, ranks=ranks)
        return embedding, self.job.model, {"cutoffs": cutoffs, "ranks": ranks}

    def _svd(self):
        rank = rank_for_budget(self.vocab_size, self.dim, self.opts.target_params)
        return svd_embedding(self.table, rank), self.job.model, {"rank": rank}

    def _fwsvd(self):
        rank = rank_for_budget(self.vocab_size, self.dim, self.opts.target_params)
        fisher = self.job.trainer.run.cached(
            "fisher",
            f"{self.job.train.fingerprint()}",
            lambda: embedding_fisher(
                self.job.model,
                self.job.train,
                self.job.objective,
                self.job.teacher_logits,
                batch_size=self.job.batch_size,
            ),
        )
        return fwsvd_embedding(self.table, rank, fisher), self.job.model, {"rank": rank}

    # -- the last stage --
    def finetune(self, searched: BertModel, embedding: ClusteredLowRankEmbedding, details: dict) -> BertModel:
        """KD fine-tune of the compressed model on permuted ids (what its tokenizer will produce)."""
        validation, batch = self.job.validation, self.job.batch_size
        embedding.storage_bits = self.opts.embedding_bits  # scored, and trained, as stored
        if validation is not None:  # how much the search itself and the conversion to hard choices cost
            details["validation_accuracy_searched"] = accuracy(predict_logits(searched, validation, batch), validation)
            model, permutation = with_embedding(searched, embedding)
            details["validation_accuracy_converted"] = after_search.dev_accuracy(self.job, model, permutation)
        epochs = details["finetune_epochs"] = self.schedule.finetune_epochs()  # equal steps for a baseline
        model, _, record = after_search.kd_finetune(
            self.job,
            searched,
            embedding,
            name="finetune",
            learning_rate=self.schedule.finetune_lr(),
            epochs=epochs,
            bits=self.opts.embedding_bits,
            weight_bits=self.opts.qat_weight_bits,
        )
        self.records.append(record)
        return model


def _entropy(alpha: np.ndarray) -> float:
    """Mean entropy (nats) of the rows of α."""
    return float(np.mean(-np.sum(alpha * np.log(np.maximum(alpha, 1e-30)), axis=-1)))


def _beta_histogram(betas, bins: int = 10) -> list[int]:
    values = np.concatenate([b.numpy() for b in betas]) if betas else np.zeros(0)
    return np.histogram(values, bins=bins, range=(0.0, 1.0))[0].tolist()


# Every mode of MODES and the method that runs it (tests/compress check that the two agree).
MODE_METHODS = {
    "two-stage": _Search._two_stage,
    "clustering-only": _Search._clustering_only,
    "one-stage": _Search._one_stage,
    "ratio-then-clustering": _Search._ratio_then_clustering,
    "adaptive": _Search._adaptive,
    "svd": _Search._svd,
    "fwsvd": _Search._fwsvd,
}
