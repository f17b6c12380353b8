"""The `finetune` and `distill` workflows as functions (the CLI in `cli/train.py` only parses into these), and
the steps they share with the embedding search (`compress/search.py`).

Each one: loads checkpoints and the task, opens its run directory (OUT/run: settings, cached teacher
logits, stage checkpoints; see `train.RunDirectory`), trains, evaluates on validation and test, and writes
a checkpoint to OUT with `metrics.json` next to it.

`distill` and `search` take a `Pruning` (--prune-vocab CORPUS, compress/vocab_pruning.py): the model to
train loses the pieces the corpus does not use before training, trains and is evaluated on the pruned
tokenization, and OUT's tokenizer is the pruned one (export then needs no --prune-vocab). The teacher
keeps its vocabulary and its logits come from its own tokenization of the same examples.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np

from tflm_mcubert.data import tasks
from tflm_mcubert.errors import UserError
from tflm_mcubert.files import METRICS_FILE
from tflm_mcubert.model.config import preset as preset_config
from tflm_mcubert.model.hf_import import load_checkpoint, resolve_checkpoint_dir, save_checkpoint
from tflm_mcubert.model.task_record import task_record
from tflm_mcubert.model.labels import choose_label_names
from tflm_mcubert.ops.widths import Widths
from tflm_mcubert.quantize.weight_fake_quant import WeightFakeQuant
from tflm_mcubert.train.augment import Augmentation, read_unlabeled, texts_digest
from tflm_mcubert.train.batches import EncodedSplit, encode_split
from tflm_mcubert.train.cluster import DEFAULT_CLUSTER_TIMEOUT
from tflm_mcubert.train.distill import (
    Objective,
    embedding_projection,
    student_config,
    student_from_teacher,
    teacher_layers_for,
)
from tflm_mcubert.train.intermediate import IntermediateKD
from tflm_mcubert.train.layer_kd import LayerKD
from tflm_mcubert.train.teacher_labels import LabellingTeacher, Tokenization, check_single_text_task, extra_examples
from tflm_mcubert.train.trainer import (
    RunDirectory,
    Stage,
    Trainer,
    UpdateRule,
    accuracy,
    enable_determinism,
    make_strategy,
    open_run_directory,
    predict_logits,
)

SPLITS = ("train", "validation", "test")


@dataclasses.dataclass
class DataOptions:
    task: str
    text_column: str = "text"
    text_pair_column: str | None = None
    label_column: str = "label"
    max_seq_len: int = 128
    max_train_examples: int | None = None
    max_eval_examples: int | None = None

    def record(self) -> dict:
        """The task as the checkpoints trained on it record it (model/task_record.py)."""
        return task_record(
            self.task,
            text_column=self.text_column,
            text_pair_column=self.text_pair_column,
            label_column=self.label_column,
        )


@dataclasses.dataclass
class TrainOptions:
    epochs: float = 1.0
    batch_size: int = 32
    lr: float = 5e-5
    seed: int = 0
    kd_weight: float = 0.0
    temperature: float = 2.0
    hidden_kd: float = 0.0
    checkpoint_every: int = 200
    strategy: str = "default"
    cluster_timeout: float = DEFAULT_CLUSTER_TIMEOUT  # multiworker: forming the cluster, and any collective op
    resume: bool = False
    progress: bool = True


@dataclasses.dataclass
class TaskData:
    splits: dict[str, EncodedSplit]
    num_labels: int
    label_names: list[str]  # the names of the ids: the task's, or (check_labels) the checkpoint's or HF's default
    train_texts: list[str] = dataclasses.field(default_factory=list)  # what --augment edits
    pair_task: bool = False

    def fingerprint(self) -> str:
        return hashlib.sha256("".join(self.splits[s].fingerprint() for s in SPLITS).encode()).hexdigest()


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --- shared steps ----------------------------------------------------------------------------------------


def load_task_data(opts: DataOptions, tokenizer, vocab_size: int) -> TaskData:
    if opts.max_seq_len < 2:
        raise UserError(f"--max-seq-len must be at least 2, got {opts.max_seq_len}")
    for name in ("max_train_examples", "max_eval_examples"):
        value = getattr(opts, name)
        if value is not None and value < 1:
            raise UserError(f"--{name.replace('_', '-')} must be positive, got {value}")
    if tokenizer is None:
        raise UserError("the checkpoint has no tokenizer files (vocab.txt or tokenizer.json): cannot read text")
    dataset = tasks.load_task(
        opts.task, text_column=opts.text_column, text_pair_column=opts.text_pair_column, label_column=opts.label_column
    )
    count = tasks.num_labels(dataset)
    splits = {}
    for split in SPLITS:
        rows = dataset[split]
        limit = opts.max_train_examples if split == "train" else opts.max_eval_examples
        if limit is not None and len(rows) > limit:
            rows = rows.select(range(limit))  # splits are already shuffled: a random subset
        splits[split] = encode_split(
            rows, tokenizer, name=split, max_seq_len=opts.max_seq_len, num_labels=count, vocab_size=vocab_size
        )
    texts = list(dataset["train"][tasks.TEXT])[: len(splits["train"])]
    return TaskData(splits, count, tasks.label_names(dataset), texts, tasks.is_pair_task(dataset))


def checkpoint_fingerprint(source: str) -> str:
    """A digest of a checkpoint's config and weight files (what a resumed run must find unchanged)."""
    ckpt = resolve_checkpoint_dir(source)
    digest = hashlib.sha256()
    for path in sorted(ckpt.iterdir()):
        if path.is_file() and (path.name == "config.json" or path.suffix in (".safetensors", ".bin")):
            digest.update(path.name.encode())
            with open(path, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    digest.update(chunk)
    return digest.hexdigest()


def load_classifier(source: str, *, what: str = "--checkpoint"):
    """(model, tokenizer, label names or None) of a checkpoint that must already be a classifier (a
    fine-tuned teacher or student)."""
    loaded = load_checkpoint(source)
    if loaded.model.classifier is None:
        raise UserError(f"{what} {source}: has no classifier; fine-tune it first (the finetune command)")
    return loaded.model, loaded.tokenizer, loaded.label_names


def open_run(out: Path, settings: dict, opts: TrainOptions, strategy, on_step_end=None) -> tuple[RunDirectory, Trainer]:
    run = open_run_directory(out / "run", settings, resume=opts.resume, strategy=strategy)
    if run.resumed:
        log(f"resuming the run in {out}")
    trainer = Trainer(
        run,
        strategy,
        batch_size=opts.batch_size,
        seed=opts.seed,
        checkpoint_every=opts.checkpoint_every,
        progress=opts.progress,
        on_step_end=on_step_end,
        cluster_timeout=opts.cluster_timeout,
    )
    return run, trainer


def teacher_logits(
    run: RunDirectory, teacher, teacher_fingerprint: str, data: TaskData, batch_size: int, progress: bool = True
) -> dict[str, np.ndarray]:
    """The teacher's logits on every split, computed once and cached in the run directory (saying so: on a
    big teacher this is minutes before the first training step)."""

    def compute(split: str) -> np.ndarray:
        if progress:
            log(f"the teacher's logits on the {split} split ({len(data.splits[split].labels):,} examples) ...")
        return predict_logits(teacher, data.splits[split], batch_size)

    out = {}
    for split in SPLITS:
        key = f"{teacher_fingerprint}:{data.splits[split].fingerprint()}"
        out[split] = run.cached(f"teacher-logits-{split}", key, lambda s=split: compute(s))
    return out


def announce(opts: TrainOptions, what: str, data_opts: DataOptions) -> None:
    """The first line of a command: loading a model and tokenizing a task take tens of seconds."""
    if opts.progress:
        log(f"loading {what} and tokenizing {data_opts.task} ...")


def evaluate(
    model,
    data: TaskData,
    batch_size: int,
    remap: Callable[[EncodedSplit], EncodedSplit] | None = None,
    predictions: dict | None = None,
):
    """Validation and test accuracy; `predictions`, when given, receives each split's predicted labels (for
    paired tests between methods)."""
    scores = {}
    for split in ("validation", "test"):
        encoded = data.splits[split] if remap is None else remap(data.splits[split])
        logits = predict_logits(model, encoded, batch_size)
        scores[f"{split}_accuracy"] = accuracy(logits, encoded)
        if predictions is not None:
            predictions[split] = np.argmax(logits, axis=-1).astype(int).tolist()
    return scores


def settings_of(command: str, data_opts: DataOptions, train_opts: TrainOptions, data: TaskData, **extra) -> dict:
    """What a resumed run must share with the original: everything that changes the result."""
    train = {
        k: v
        for k, v in dataclasses.asdict(train_opts).items()
        if k not in ("checkpoint_every", "strategy", "cluster_timeout", "resume", "progress")
    }
    return {"command": command, **dataclasses.asdict(data_opts), **train, **extra, "data": data.fingerprint()}


def prune_for_training(model, tokenizer, pruning, what: str):
    """(model, tokenizer, report): with `pruning` (a `compress.vocab_pruning.Pruning`), the model and
    tokenizer pruned to its corpus (the pruning's report: tokens kept, embedding and blob bytes saved);
    else unchanged and None."""
    if pruning is None:
        return model, tokenizer, None
    return pruning.apply(model, tokenizer, what)


def write_metrics(out: Path, metrics: dict, writer: bool) -> None:
    if writer:
        out.mkdir(parents=True, exist_ok=True)
        (out / METRICS_FILE).write_text(json.dumps(metrics, indent=2, default=float) + "\n")


def start(opts: TrainOptions):
    strategy = make_strategy(opts.strategy, opts.cluster_timeout)
    enable_determinism(opts.seed)
    return strategy, time.monotonic()


# --- the commands ----------------------------------------------------------------------------------------


def finetune(checkpoint: str, out: Path, data_opts: DataOptions, opts: TrainOptions, *, on_step_end=None) -> dict:
    """A checkpoint fine-tuned on the task (labels only): the teacher of the later stages."""
    strategy, began = start(opts)
    announce(opts, checkpoint, data_opts)
    with strategy.scope():
        loaded = load_checkpoint(checkpoint)
        tokenizer, model = loaded.tokenizer, loaded.model
        data = load_task_data(data_opts, tokenizer, model.config.vocab_size)
        names = loaded.label_names
        if model.classifier is None:  # a bare encoder (e.g. a sentence-transformers BERT): add a fresh head
            model, names = model.with_classifier(data.num_labels, seed=opts.seed), None
        check_labels(model, data, "--checkpoint", names)
        settings = settings_of("finetune", data_opts, opts, data, checkpoint=checkpoint_fingerprint(checkpoint))
        run, trainer = open_run(out, settings, opts, strategy, on_step_end)
        record = trainer.fit(
            Stage(
                "finetune",
                model,
                [UpdateRule("weights", model.trainable_variables, opts.lr)],
                data.splits["train"],
                opts.epochs,
                Objective(),
            )
        )
    scores = evaluate(model, data, opts.batch_size)
    if run.writer:
        save_checkpoint(model, out, tokenizer, label_names=data.label_names, task=data_opts.record())
    metrics = {
        "command": "finetune",
        "checkpoint": checkpoint,
        "label_names": data.label_names,
        **scores,
        "stages": [record.to_dict()],
        "seconds": round(time.monotonic() - began, 1),
    }
    write_metrics(out, metrics, run.writer)
    return metrics


def distill(
    teacher_source: str,
    out: Path,
    data_opts: DataOptions,
    opts: TrainOptions,
    *,
    preset: str,
    pruning=None,
    on_step_end=None,
    qat_weight_bits: int | None = None,
    augmentation: Augmentation | None = None,
    layer_kd: LayerKD | None = None,
) -> dict:
    """A `preset`-shaped student of the teacher (same vocabulary, or the teacher's pruned to
    `pruning`'s corpus: a `compress.vocab_pruning.Pruning`), trained by task KD. `qat_weight_bits` (4 or 8):
    its encoder matrices fake-quantized at that width in the forward (quantization-aware, straight-through;
    quantize/weight_fake_quant.py) and scored so. `augmentation`: teacher-labelled examples added to the
    training split (augmented copies of its sentences, unlabeled text; train/augment.py). `layer_kd`: the
    student's initialisation and the intermediate-layer terms (train/intermediate.py)."""
    # Long: one run's phases in order (teacher, student, labelled data, training, metrics), each a call.
    augmentation = augmentation or Augmentation()
    layer_kd = (layer_kd or LayerKD()).validate()
    if layer_kd.active and pruning is not None:
        raise UserError("--prune-vocab with --intermediate-kd: the teacher's layers follow its own tokenization")
    if qat_weight_bits is not None:
        Widths.uniform(qat_weight_bits, "--qat-weight-bits")
    strategy, began = start(opts)
    shape = preset_config(preset)
    announce(opts, f"the teacher {teacher_source}", data_opts)
    with strategy.scope():
        teacher, teacher_tokenizer, teacher_names = load_classifier(teacher_source, what="--teacher")
        teacher_data = load_task_data(data_opts, teacher_tokenizer, teacher.config.vocab_size)
        check_labels(teacher, teacher_data, "--teacher", teacher_names, strict=True)
        objective = Objective(kd_weight=opts.kd_weight, temperature=opts.temperature)
        if opts.hidden_kd:
            raise UserError("distill: hidden-state KD needs equal widths; the student is narrower (use --hidden-kd 0)")
        student, init = student_from_teacher(
            teacher, student_config(teacher.config, shape), seed=opts.seed, init=layer_kd.init
        )
        student, tokenizer, pruned = prune_for_training(student, teacher_tokenizer, pruning, "--teacher")
        data = teacher_data if pruned is None else load_task_data(data_opts, tokenizer, student.config.vocab_size)
        teacher_fp = checkpoint_fingerprint(teacher_source)
        extra = {} if pruning is None else {"prune": dataclasses.asdict(pruning)}
        extra |= {} if qat_weight_bits is None else {"qat_weight_bits": qat_weight_bits}
        unlabeled = unlabeled_texts(augmentation, teacher_data)
        extra |= {"augment": augmentation_settings(augmentation, unlabeled)} if augmentation.active else {}
        extra |= layer_kd.settings()
        settings = settings_of("distill", data_opts, opts, data, teacher=teacher_fp, preset=preset, **extra)
        run, trainer = open_run(out, settings, opts, strategy, on_step_end)
        logits = teacher_logits(run, teacher, teacher_fp, teacher_data, opts.batch_size, opts.progress)
        labeller = LabellingTeacher(teacher, teacher_fp, Tokenization(teacher_tokenizer, teacher.config.vocab_size))
        train, train_logits, added = with_teacher_labelled(
            run, augmentation, unlabeled, teacher_data.train_texts, data.splits["train"], logits["train"],
            labeller, Tokenization(tokenizer, student.config.vocab_size), data_opts, opts,
        )  # fmt: skip
        stages = distill_stages(student, teacher, objective, layer_kd, train, train_logits, opts)
        weights = (
            None if qat_weight_bits is None else WeightFakeQuant(student, Widths.uniform(qat_weight_bits)).install()
        )
        records = []
        for stage in stages:
            stage.before_step = None if weights is None else weights.refresher()
            records.append(trainer.fit(stage))
        if weights is not None:
            weights.refresh()  # the final weights' clip ratios: scored as the export will store them
    scores = evaluate(student, data, opts.batch_size)
    teacher_scores = {
        f"teacher_{split}_accuracy": accuracy(logits[split], teacher_data.splits[split])
        for split in ("validation", "test")
    }
    if run.writer:
        save_checkpoint(student, out, tokenizer, label_names=teacher_data.label_names, task=data_opts.record())
    metrics = {
        "command": "distill",
        "teacher": teacher_source,
        "label_names": teacher_data.label_names,
        "preset": preset,
        "init": init,
        **scores,
        **teacher_scores,
        "params": student.config.param_count(),
        "accuracy_weights": qat_weight_bits or "float",  # the scores' encoder weights: float, or fake-quantized
        **({} if pruned is None else {"vocab_pruning": pruned}),
        "train_examples": len(train),
        **({} if added is None else {"teacher_labelled": added}),
        "stages": [record.to_dict() for record in records],
        "seconds": round(time.monotonic() - began, 1),
    }
    write_metrics(out, metrics, run.writer)
    return metrics


def distill_stages(student, teacher, objective: Objective, layer_kd: LayerKD, train, train_logits, opts) -> list[Stage]:
    """The logits stage `distill`; with intermediate KD, its terms added to it, or (layer_kd.epochs > 0)
    trained alone in a first stage `intermediate` (TinyBERT's two phases: the layers first, then the
    logits, which no longer need the teacher on the fly). The intermediate maps train with the student
    (same rule and learning rate) and are checkpointed with the stage, never exported."""

    def stage(name, epochs, stage_objective, logits):
        variables = student.trainable_variables + stage_objective.extra_variables
        rules = [UpdateRule("weights", variables, opts.lr)]
        return Stage(name, student, rules, train, epochs, stage_objective, logits, stage_objective.extra_variables)

    if not layer_kd.active:
        return [stage("distill", opts.epochs, objective, train_logits)]
    width = student.config.hidden_size
    same = width == teacher.config.hidden_size
    basis = np.eye(width, dtype=np.float32) if same else embedding_projection(teacher, width)
    layer_map = teacher_layers_for(student.config.num_hidden_layers, teacher.config.num_hidden_layers)
    terms = IntermediateKD(teacher, student, layer_map, relation_heads=layer_kd.relation_heads, initial_map=basis.T)
    with_terms = dataclasses.replace(objective, intermediate_weight=layer_kd.weight, intermediate=terms)
    if layer_kd.epochs == 0:
        return [stage("distill", opts.epochs, with_terms, train_logits)]
    alone = dataclasses.replace(with_terms, logit_terms=False)
    return [stage("intermediate", layer_kd.epochs, alone, None), stage("distill", opts.epochs, objective, train_logits)]


def augmentation_settings(augmentation: Augmentation, unlabeled: list[str]) -> dict:
    return {**dataclasses.asdict(augmentation), "unlabeled_sha256": texts_digest(unlabeled)}


def with_teacher_labelled(
    run: RunDirectory,
    augmentation: Augmentation,
    unlabeled: list[str],
    train_texts: list[str],
    train: EncodedSplit,
    train_logits: np.ndarray,
    teacher: LabellingTeacher,
    student_side: Tokenization,
    data_opts: DataOptions,
    opts: TrainOptions,
) -> tuple[EncodedSplit, np.ndarray, dict | None]:
    """The training split and its teacher logits, with `augmentation`'s examples (train/teacher_labels.py)
    appended when it asks for any; and their record."""
    if not augmentation.active:
        return train, train_logits, None
    added = extra_examples(
        run,
        augmentation,
        train_texts=train_texts,
        unlabeled=unlabeled,
        seed=opts.seed,
        teacher=teacher,
        student_side=student_side,
        max_seq_len=data_opts.max_seq_len,
        batch_size=opts.batch_size,
        progress=opts.progress,
    )
    return train.extended(added.student), np.concatenate([train_logits, added.logits]), added.record


def unlabeled_texts(augmentation: Augmentation, data: TaskData) -> list[str]:
    """The --unlabeled texts (checked before the run starts: a bad file fails in seconds, not after
    training)."""
    if augmentation.active:
        check_single_text_task(data.pair_task)
    return [] if augmentation.unlabeled is None else read_unlabeled(augmentation.unlabeled)


def check_labels(model, data: TaskData, what: str, names: list[str] | None = None, *, strict: bool = False) -> None:
    """Refuses a classifier of another label count, and settles `data.label_names` on the names the output
    checkpoint gets: the task's, else the checkpoint's own (`names`), else HF's default (model/labels.py).
    `strict`: the checkpoint's logits teach (distill, search), so its ids must mean what the task's do."""
    if model.config.num_labels != data.num_labels:
        raise UserError(f"{what}: its classifier has {model.config.num_labels} labels, the task {data.num_labels}")
    data.label_names = choose_label_names(data.label_names, names, what, strict=strict, warn=log)
