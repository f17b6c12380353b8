"""MCUBERT's two-stage embedding search (nas.py, exact relaxation) for a decoder, whose input embedding and
LM head are ONE tied table, with the language-model loss (`search --checkpoint <GPT-2 decoder>`).

    Stage 1   the clustering: exact_space.ExactClusteringSearch from the frequency clustering at the paper's
              ranks d/div^i, α trained on the LM loss plus nas.SizePenalty (λ steered to the budget), the
              weights on the LM loss; every step trains the hard clustering it would deploy
    Stage 2   the ranks: exact_space.ExactRankSearch on the table Stage 1 trained, components kept by
              importance per parameter within the budget
    then      the searched table (budget.truncate_to_budget if over) fine-tuned with the whole model

Every forward reads the whole searched table once, [vocab, d], for both ends of the model
(DecoderModel.tied_logits): the embedding gathers its rows, the head scores every row, so the search weighs
a cluster's rank by what it costs the next-token loss through both uses. The loss is the next-token
cross-entropy, optionally mixed with KD from the dense decoder (`kd_weight`). `mode="adaptive"`: the
baseline at the same budget (adaptive embedding, frequency clusters and SVD ranks), fine-tuned for the
search's steps and its fine-tune's together (equal steps, as nas.py's `equal_steps`).

The written checkpoint is a GPT-2 checkpoint whose tied table is the searched table's float reconstruction,
plus the searched factors (SEARCHED_EMBEDDING_FILE, `ClusteredLowRankEmbedding.to_arrays`), which `export` stores as
the word table instead of compressing it itself (export/decoder_export.py).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from tflm_mcubert.compress import budget as budgets
from tflm_mcubert.compress import exact_space
from tflm_mcubert.compress.baselines import adaptive_cutoffs, adaptive_embedding, adaptive_for_budget
from tflm_mcubert.compress.nas import DEFAULT_LAMBDA, STAGE1_STARTS, SizePenalty, frequency_assignment
from tflm_mcubert.errors import UserError
from tflm_mcubert.model.clustered_embedding import ClusteredLowRankEmbedding
from tflm_mcubert.data.tasks import load_task
from tflm_mcubert.model.decoder import DecoderModel, copy_decoder
from tflm_mcubert.model.decoder_import import load_decoder
from tflm_mcubert.model.decoder_config import SEARCHED_EMBEDDING_FILE, SEARCHED_KEY
from tflm_mcubert.train.language_model import blocks_of, hf_weights, perplexity
from tflm_mcubert.tokenizer.bpe_blob import checkpoint_tokenizer
from tflm_mcubert.console import log

LM_SEARCH_MODES = ("two-stage", "adaptive")
LOG_EVERY = 50


@dataclasses.dataclass(frozen=True)
class LmSearchOptions:
    target_params: int
    mode: str = "two-stage"
    num_clusters: int = 4
    div: float = 4.0
    steps: int = 200  # per search stage
    finetune_steps: int = 200
    batch_size: int = 8
    lr: float = 3e-4
    arch_lr: float = 1e-3
    min_count: int = 3
    stage1_start: str = "paper"  # choices.STAGE1_STARTS: the paper's shape d/div^i, or adaptive scaled to the budget
    kd_weight: float = 0.0  # of KD from the dense decoder; the rest is the next-token loss
    temperature: float = 2.0
    seed: int = 0

    def __post_init__(self):
        if self.mode not in LM_SEARCH_MODES:
            raise UserError(f"--mode {self.mode}: a decoder's search is one of {', '.join(LM_SEARCH_MODES)}")
        if self.stage1_start not in STAGE1_STARTS:
            raise UserError(f"--stage1-start {self.stage1_start}: one of {', '.join(STAGE1_STARTS)}")

    def validate(self, vocab_size: int, dim: int) -> "LmSearchOptions":
        budgets.check_target(self.target_params, vocab_size, dim)
        for name in ("steps", "finetune_steps", "batch_size", "lr", "arch_lr", "div"):
            if getattr(self, name) <= 0:
                raise UserError(f"--{name.replace('_', '-')} must be positive, got {getattr(self, name)}")
        if self.temperature <= 0:
            raise UserError(f"--temperature must be positive, got {self.temperature}")
        if not 0.0 <= self.kd_weight <= 1.0:
            raise UserError(f"--kd-weight must be in [0, 1], got {self.kd_weight}")
        if self.num_clusters < 2:
            raise UserError(f"--clusters must be at least 2, got {self.num_clusters}")
        return self


def tokenizer_order_table(embedding: ClusteredLowRankEmbedding) -> tf.Tensor:
    """A compressed embedding's whole table [vocab, d] in the original (tokenizer) id order."""
    return embedding(tf.constant(embedding.remap(np.arange(embedding.vocab_size)), tf.int32))


class _LmStage:
    """One stage's steps: the weights on the LM loss, and with an architecture, α or β on it plus the size
    penalty (Alg. 1/3's alternation, as nas.search_rules sets it up for the encoder)."""

    def __init__(self, model: DecoderModel, table_of, opts: LmSearchOptions, teacher=None, penalty=None, arch=()):
        self.model, self.table_of, self.opts, self.teacher, self.penalty = model, table_of, opts, teacher, penalty
        self.arch = list(arch)
        arch_ids = {id(v) for v in self.arch}
        self.weights = [v for v in _trainable(model, table_of) if id(v) not in arch_ids]
        self.weight_opt = keras.optimizers.Adam(opts.lr)
        self.arch_opt = keras.optimizers.Adam(opts.arch_lr)

    def loss(self, block):
        inputs, opts = block[:, :-1], self.opts
        logits = self.model.tied_logits(inputs, self.table_of())
        hard = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(block[:, 1:], logits))
        if not opts.kd_weight:
            return hard
        t = opts.temperature  # train/language_model.py's distillation term
        target = tf.nn.softmax(tf.stop_gradient(self.teacher(inputs)) / t)
        soft = tf.reduce_mean(tf.reduce_sum(target * -tf.nn.log_softmax(logits / t), axis=-1)) * t * t
        return (1.0 - opts.kd_weight) * hard + opts.kd_weight * soft

    @tf.function
    def _step(self, block):
        with tf.GradientTape() as tape:
            loss = self.loss(block)
        grads = tape.gradient(loss, self.weights)  # none for a cluster cut to rank 0
        self.weight_opt.apply_gradients([(g, v) for g, v in zip(grads, self.weights) if g is not None])
        if self.arch:
            with tf.GradientTape() as tape:
                total = self.loss(block) + self.penalty()
            grads = tape.gradient(total, self.arch)
            self.arch_opt.apply_gradients([(g, v) for g, v in zip(grads, self.arch) if g is not None])
        return loss

    def run(self, name: str, blocks: np.ndarray, steps: int, rng, before_step=None) -> list[float]:
        losses, started = [], time.time()
        for step in range(steps):
            if before_step is not None:
                before_step()
            rows = rng.choice(len(blocks), min(self.opts.batch_size, len(blocks)), replace=False)
            losses.append(float(self._step(tf.constant(blocks[rows]))))
            size = self.penalty.after_step() if self.penalty is not None else {}
            if (step + 1) % LOG_EVERY == 0 or step + 1 == steps:
                mean = np.mean(losses[-LOG_EVERY:])
                log(f"{name}: step {step + 1}/{steps}, loss {mean:.4f} {size} ({time.time() - started:.0f} s)")
        return losses


def _trainable(model, table_of) -> list:
    """The model's trainable variables, its own dense table left out (the searched table replaces it),
    and those of the layer `table_of` reads."""
    owner = getattr(table_of, "layer", None)
    own = [v for v in model.trainable_variables if v is not model.token_embeddings]
    return own + (list(owner.trainable_variables) if owner is not None else [])


def _reader(layer):
    """table_of for a search layer (original ids) or a ClusteredLowRankEmbedding (permuted ids)."""
    if isinstance(layer, ClusteredLowRankEmbedding):
        read = lambda: tokenizer_order_table(layer)  # noqa: E731
    else:
        all_ids = tf.range(layer.vocab_size)
        read = lambda: layer(all_ids)  # noqa: E731
    read.layer = layer
    return read


def _penalty(layer, deployable_size, vocab: int, dim: int, target: int) -> SizePenalty:
    return SizePenalty(layer.embedding_size, deployable_size, vocab * dim, lambda_=DEFAULT_LAMBDA, target=target)


def two_stage_table(model, blocks, opts: LmSearchOptions, teacher, rng) -> tuple[ClusteredLowRankEmbedding, dict]:
    """Stage 1 and Stage 2 (module docstring) on `model` (trained in place); the searched embedding."""
    table = np.asarray(model.token_embeddings.numpy())
    vocab, dim = table.shape
    frequency = np.bincount(blocks.reshape(-1), minlength=vocab)
    cutoffs, ranks = adaptive_cutoffs(vocab, opts.num_clusters), None
    if opts.stage1_start == "budget":  # nas.py's: adaptive embedding scaled to the budget
        cutoffs, ranks = adaptive_for_budget(
            vocab, dim, opts.target_params, num_clusters=opts.num_clusters, div=opts.div
        )
    start = frequency_assignment(frequency, cutoffs)
    layer1 = exact_space.ExactClusteringSearch.from_frequency(
        table, start, frequency, min_count=opts.min_count, num_clusters=opts.num_clusters, div=opts.div, ranks=ranks
    )
    size1 = lambda: budgets.assignment_params(layer1.clustering(), layer1.ranks, dim)  # noqa: E731
    stage1 = _LmStage(
        model, _reader(layer1), opts, teacher, _penalty(layer1, size1, vocab, dim, opts.target_params),
        arch=[layer1.alpha_logits],
    )  # fmt: skip
    losses1 = stage1.run("stage1-clustering", blocks, opts.steps, rng, before_step=layer1.choose)
    assignment = layer1.clustering()
    if np.sum(assignment == 0) * dim > opts.target_params:  # the dense cluster alone overshoots: demote
        logits = layer1.effective_logits().numpy()
        assignment = budgets.demote_to_budget(assignment, logits, layer1.ranks, dim, opts.target_params)
    layer2 = exact_space.ExactRankSearch.from_clustering(
        layer1.seen_table(), assignment, num_clusters=opts.num_clusters, beta_threshold=0.5, budget=opts.target_params
    )
    size2 = lambda: budgets.deployable_params(layer2.cluster_sizes, layer2.ranks(), dim)  # noqa: E731
    stage2 = _LmStage(
        model, _reader(layer2), opts, teacher, _penalty(layer2, size2, vocab, dim, opts.target_params),
        arch=list(layer2.betas),
    )  # fmt: skip
    losses2 = stage2.run("stage2-ranks", blocks, opts.steps, rng, before_step=layer2.choose)
    embedding = layer2.to_clustered_embedding(origin="nas-two-stage-lm")
    details = {
        "stage1": {"clusters": np.bincount(assignment, minlength=opts.num_clusters).tolist(), "loss": losses1[-1]},
        "stage2": {"ranks": layer2.ranks(), "loss": losses2[-1]},
        "moved_from_frequency": int(np.sum(layer1.clustering() != start)),
    }
    if embedding.stored_params() > opts.target_params:
        details["truncated_from_params"] = int(embedding.stored_params())
        embedding = budgets.truncate_to_budget(embedding, opts.target_params)
    return embedding, details


def adaptive_table(model, blocks, opts: LmSearchOptions) -> ClusteredLowRankEmbedding:
    """The adaptive-embedding baseline within the budget (frequency clusters of the training blocks)."""
    table = np.asarray(model.token_embeddings.numpy(), np.float64)
    vocab, dim = table.shape
    cutoffs, ranks = adaptive_for_budget(vocab, dim, opts.target_params, num_clusters=opts.num_clusters, div=opts.div)
    frequency = np.bincount(blocks.reshape(-1), minlength=vocab).astype(np.float64)
    return adaptive_embedding(table, frequency, cutoffs=cutoffs, ranks=ranks)


def search_decoder(model: DecoderModel, train_blocks, dev_blocks, opts: LmSearchOptions):
    """(fine-tuned student with the searched table's reconstruction as its table, the embedding, metrics)."""
    config = model.config
    opts.validate(config.vocab_size, config.hidden_size)
    keras.utils.set_random_seed(opts.seed)
    rng = np.random.default_rng(opts.seed)
    student, started = copy_decoder(model), time.time()
    teacher = model if opts.kd_weight else None
    if opts.mode == "two-stage":
        embedding, details = two_stage_table(student, train_blocks, opts, teacher, rng)
        steps = opts.finetune_steps
    else:
        embedding, details, steps = (
            adaptive_table(student, train_blocks, opts),
            {},
            2 * opts.steps + opts.finetune_steps,
        )
    before = _dev_perplexity(student, embedding, dev_blocks)
    losses = _LmStage(student, _reader(embedding), opts, teacher).run("fine-tune", train_blocks, steps, rng)
    student.token_embeddings.assign(tokenizer_order_table(embedding).numpy())
    metrics = {
        "mode": opts.mode,
        "target_params": opts.target_params,
        "params": int(embedding.stored_params()),
        "dense_params": int(config.vocab_size * config.hidden_size),
        "clusters": list(embedding.cluster_sizes),
        "ranks": list(embedding.ranks),
        "finetune_steps": steps,
        "finetune_loss_last": float(np.mean(losses[-LOG_EVERY:])),
        "dev_perplexity_before_finetune": before,
        "dev_perplexity": perplexity(student, dev_blocks),
        "options": dataclasses.asdict(opts),
        "seconds": round(time.time() - started, 1),
        **details,
    }
    return student, embedding, metrics


def _dev_perplexity(model, embedding, blocks) -> float:
    probe = copy_decoder(model, table=tokenizer_order_table(embedding).numpy())
    return perplexity(probe, blocks)


def steps_for(epochs: float, blocks: int, batch_size: int) -> int:
    """Steps of `epochs` passes over `blocks` training blocks at `batch_size` (at least one)."""
    return max(1, int(np.ceil(epochs * blocks / batch_size)))


def run_lm_search(
    checkpoint: str, task: str, out_dir: Path, opts: LmSearchOptions, epochs: float, finetune_epochs: float
):
    """`search --checkpoint <decoder>`: the search on `task`'s training text (dev: its validation split), the
    epochs turned into steps; OUT written by save_searched. Returns metrics.json's content."""
    model, folder = load_decoder(checkpoint)
    tokenizer = checkpoint_tokenizer(folder, model.config.vocab_size)
    if tokenizer is None:
        raise UserError(f"{folder}: a decoder's search needs the checkpoint's tokenizer to read --task's text")
    dataset = load_task(task, seed=opts.seed)
    context = model.config.max_positions
    train = blocks_of(tokenizer, list(dataset["train"]["text"]), context)
    dev = blocks_of(tokenizer, list(dataset["validation" if "validation" in dataset else "test"]["text"]), context)
    opts = dataclasses.replace(
        opts,
        steps=steps_for(epochs, len(train), opts.batch_size),
        finetune_steps=steps_for(finetune_epochs, len(train), opts.batch_size),
    )
    log(f"{opts.mode}: {opts.steps} steps a search stage, {opts.finetune_steps} fine-tune steps, {len(train)} blocks")
    student, embedding, metrics = search_decoder(model, train, dev, opts)
    metrics["dense_dev_perplexity"] = perplexity(model, dev)
    save_searched(student, embedding, metrics, folder, out_dir)
    return metrics


def save_searched(student, embedding, metrics: dict, source: Path, out_dir: Path) -> None:
    """OUT: the source checkpoint's tokenizer and config (with SEARCHED_KEY), the student's weights (its table
    the searched one's reconstruction), the searched factors (SEARCHED_EMBEDDING_FILE) and metrics.json."""
    from safetensors.numpy import save_file

    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt", "special_tokens_map.json"):
        if (source / name).is_file():
            shutil.copyfile(source / name, out_dir / name)
    config = json.loads((source / "config.json").read_text())
    config[SEARCHED_KEY] = {k: metrics[k] for k in ("mode", "target_params", "params", "clusters", "ranks")}
    save_file(hf_weights(student), str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    np.savez(out_dir / SEARCHED_EMBEDDING_FILE, **embedding.to_arrays())
    (out_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (out_dir / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
