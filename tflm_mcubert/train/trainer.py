"""The one training loop behind `finetune`, `distill` and `search`: stages of update rules under a
`tf.distribute` strategy, with resumable, atomically written checkpoints.

A *stage* trains one model for a number of epochs. On every batch it applies its *update rules* in
order; a rule is (variables, optimizer, optional penalty). Fine-tuning is one rule over all weights;
an NAS stage is two, alternating as in Alg. 1/3: the weights w on the task loss, then the architecture
variables α or β on the task loss plus the size penalty, each rule moving only its own variables.

Reproducibility. Op determinism is on, epoch orders are a function of (seed, epoch), and a checkpoint
holds every model and optimizer variable plus the stage's extra state (λ), so a run resumed from step k
ends bitwise equal to one that was never stopped. `RunDirectory` refuses to resume a run whose
settings or data differ from the stored ones.

Distribution. Each global batch is cut into one shard per replica (all padded to the batch's longest
sequence); a replica's loss is its examples' sum over the GLOBAL batch size, and Keras' optimizer
all-reduces (sums) the gradients, so every strategy computes the gradient of the global-batch mean.
Under MultiWorkerMirroredStrategy every worker builds the same global batch and keeps its replicas'
shards; only the chief writes checkpoints.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
import time
import weakref
from pathlib import Path
from typing import Callable

import keras
import numpy as np
import tensorflow as tf
from tqdm.auto import tqdm

from tflm_mcubert.train import cluster
from tflm_mcubert.train.batches import EncodedSplit, evaluation_batches, steps_per_epoch, training_batch
from tflm_mcubert.train.cluster import is_chief
from tflm_mcubert.train.distill import Objective
from tflm_mcubert.errors import UserError
from tflm_mcubert.model.bert import INPUT_NAMES, BertModel

STRATEGIES = ("default", "mirrored", "multiworker")
RUN_FILE = "run.json"
PER_EXAMPLE_KEYS = (*INPUT_NAMES, "labels", "teacher_logits")
LOSS_DECAY = 0.98


# --- strategies ----------------------------------------------------------------------------------------


def make_strategy(name: str, cluster_timeout: float = cluster.DEFAULT_CLUSTER_TIMEOUT) -> tf.distribute.Strategy:
    """default: one device. mirrored: every local GPU, or every logical CPU device when there is no GPU
    (a plain MirroredStrategy would use only /cpu:0). multiworker: the cluster described by TF_CONFIG,
    formed within `cluster_timeout` seconds (train/cluster.py)."""
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        devices = tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU")
        return tf.distribute.MirroredStrategy([d.name for d in devices])
    if name == "multiworker":
        return cluster.multiworker_strategy(cluster_timeout)
    raise UserError(f"unknown --strategy {name!r} (choose from: {', '.join(STRATEGIES)})")


def enable_determinism(seed: int) -> None:
    tf.config.experimental.enable_op_determinism()
    keras.utils.set_random_seed(seed)


# --- run directory ---------------------------------------------------------------------------------------


def _describe_difference(stored: dict, current: dict) -> str:
    keys = sorted(set(stored) | set(current))
    changed = [k for k in keys if stored.get(k) != current.get(k)]
    shown = [
        f"{k}: {stored.get(k)!r} -> {current.get(k)!r}"
        if k != "data"
        else "the data (task, tokenizer, max length or example count)"
        for k in changed[:4]
    ]
    more = f" and {len(changed) - 4} more" if len(changed) > 4 else ""
    return "; ".join(shown) + more


class RunDirectory:
    """`OUT/run/`: run.json (the settings, data fingerprint included), cached arrays, stage checkpoints.

    Without `resume`, an existing run is refused rather than silently overwritten or mixed with the new
    one. With `resume`, stored and current settings must agree exactly; an absent run starts afresh.
    """

    def __init__(self, root: str | Path, settings: dict, *, resume: bool, writer: bool = True):
        self.root, self.settings, self.writer = Path(root), json.loads(json.dumps(settings)), writer
        self.resumed = False
        if not writer:
            return  # a worker other than the chief: it takes the chief's decision (open_run_directory)
        run_file = self.root / RUN_FILE
        if run_file.is_file():
            if not resume:
                raise UserError(
                    f"{self.root.parent}: holds an earlier run; pass --resume to continue it, or choose another --out"
                )
            stored = json.loads(run_file.read_text())
            if stored != self.settings:
                raise UserError(
                    f"--resume: {self.root.parent} was started with different settings "
                    f"({_describe_difference(stored, self.settings)}); use a new --out"
                )
            self.resumed = True
        else:
            self.root.mkdir(parents=True, exist_ok=True)
            self._write(run_file, lambda f: f.write(json.dumps(self.settings, indent=2).encode()))

    def _write(self, path: Path, write) -> None:
        """Write via a sibling temp file and rename: an interrupted write never leaves a torn file."""
        if not self.writer:
            return
        tmp = path.with_name(path.name + ".tmp")
        try:
            with open(tmp, "wb") as f:
                write(f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)

    def save_arrays(self, name: str, arrays: dict[str, np.ndarray], meta: dict | None = None) -> None:
        payload = dict(arrays)
        payload["__meta__"] = np.array(json.dumps(meta or {}))
        self._write(self.root / f"{name}.npz", lambda f: np.savez(f, **payload))

    def load_arrays(self, name: str) -> tuple[dict[str, np.ndarray], dict] | None:
        path = self.root / f"{name}.npz"
        if not path.is_file():
            return None
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
        return arrays, json.loads(str(arrays.pop("__meta__")))

    def cached(self, name: str, key: str, compute: Callable[[], np.ndarray]) -> np.ndarray:
        """An array computed once per `key` (e.g. teacher fingerprint + data fingerprint) and kept here."""
        found = self.load_arrays(name)
        if found is not None and found[1].get("key") == key:
            return found[0]["value"]
        value = np.asarray(compute())
        self.save_arrays(name, {"value": value}, {"key": key})
        return value


def open_run_directory(root: str | Path, settings: dict, *, resume: bool, strategy) -> RunDirectory:
    """The run directory; with several workers, as the chief finds it: the chief alone checks and writes
    it, and broadcasts what it found (or its refusal) and its settings, which every worker must share."""
    if not cluster.is_multiworker(strategy):
        return RunDirectory(root, settings, resume=resume)
    chief, decision, run = is_chief(strategy), {}, None
    if chief:
        try:
            run = RunDirectory(root, settings, resume=resume)
            decision = {"resumed": run.resumed, "settings": run.settings}
        except UserError as error:
            decision = {"error": str(error)}
    decision = cluster.broadcast_json(strategy, decision)
    name = cluster.worker_name(strategy)
    if "error" in decision:
        raise UserError(decision["error"] if chief else f"{name}: the chief refused the run: {decision['error']}")
    own = json.loads(json.dumps(settings))
    problem = None if chief or decision["settings"] == own else _describe_difference(decision["settings"], own)
    differing = [i for i, flag in enumerate(cluster.flags(strategy, problem is not None)) if flag]
    if differing:
        raise UserError(
            f"{name}: its settings differ from the chief's ({problem}); every worker needs the same "
            "checkpoint, data and options"
            if problem
            else f"{name}: replica(s) {differing} differ from the chief's settings (their logs say how); "
            "every worker needs the same checkpoint, data and options"
        )
    if run is None:
        run = RunDirectory(root, settings, resume=resume, writer=False)
        run.resumed = bool(decision["resumed"])
    return run


# --- stages ----------------------------------------------------------------------------------------------


@dataclasses.dataclass
class UpdateRule:
    """Variables moved by one optimizer on the task loss (+ `penalty()`, e.g. λ·size, for this rule only)."""

    name: str
    variables: list
    learning_rate: float | keras.optimizers.schedules.LearningRateSchedule
    penalty: Callable[[], tf.Tensor] | None = None


@dataclasses.dataclass
class Stage:
    name: str
    model: BertModel
    rules: list[UpdateRule]
    train: EncodedSplit
    epochs: float
    objective: Objective
    teacher_logits: np.ndarray | None = None  # [len(train), num_labels], when objective uses KD
    extra_state: list = dataclasses.field(default_factory=list)  # tf.Variables saved with the stage
    after_step: Callable[[], dict] | None = None  # runs after every step (e.g. λ control); returns metrics
    # Runs before every step, resumed ones included (e.g. the exact search's hard choices for that step).
    before_step: Callable[[], None] | None = None


@dataclasses.dataclass
class StageRecord:
    name: str
    steps: int
    epochs: float
    seconds: float
    resumed_from: int
    loss: dict[str, float]  # per rule, moving average at the end
    metrics: dict

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


class Trainer:
    """Runs stages (see module docstring). `on_step_end(stage_name, steps_done)` is called after every
    step and its checkpoint, e.g. to stop a run early."""

    def __init__(
        self,
        run: RunDirectory,
        strategy: tf.distribute.Strategy,
        *,
        batch_size: int,
        seed: int,
        checkpoint_every: int = 200,
        progress: bool = True,
        on_step_end: Callable[[str, int], None] | None = None,
        cluster_timeout: float = cluster.DEFAULT_CLUSTER_TIMEOUT,
    ):
        if batch_size < 1:
            raise UserError(f"--batch-size must be positive, got {batch_size}")
        if checkpoint_every < 1:
            raise UserError(f"--checkpoint-every must be positive, got {checkpoint_every}")
        self.run, self.strategy = run, strategy
        self.batch_size, self.seed, self.checkpoint_every = batch_size, seed, checkpoint_every
        self.progress, self.on_step_end = progress, on_step_end
        self.cluster_timeout = cluster_timeout  # how long a stop may wait for the next step boundary

    # -- public --
    def total_steps(self, stage: Stage) -> int:
        if stage.epochs <= 0:
            raise UserError(f"stage {stage.name}: epochs must be positive, got {stage.epochs}")
        return max(1, math.ceil(stage.epochs * steps_per_epoch(len(stage.train), self.batch_size)))

    def fit(self, stage: Stage) -> StageRecord:
        stage.objective.check_student(stage.model)
        if stage.objective.uses_teacher_logits and (
            stage.teacher_logits is None or len(stage.teacher_logits) != len(stage.train)
        ):
            raise ValueError(f"stage {stage.name}: KD needs teacher logits for every training example")
        # A rank-0 cluster has zero-size factors: nothing to train, and MirroredStrategy's all-reduce of an
        # empty gradient crashes the process on CPU, so rules leave them out.
        stage = dataclasses.replace(
            stage,
            rules=[
                dataclasses.replace(rule, variables=[v for v in rule.variables if math.prod(v.shape) > 0])
                for rule in stage.rules
            ],
        )
        with self.strategy.scope():
            # The paper's AdamW with zero weight decay is Adam; Keras' AdamW would still trace a decay step.
            optimizers = [keras.optimizers.Adam(rule.learning_rate, name=f"opt_{rule.name}") for rule in stage.rules]
            for optimizer, rule in zip(optimizers, stage.rules):
                optimizer.build(rule.variables)
        total = self.total_steps(stage)
        start, loss_average, metrics, earlier_seconds = self._restore(stage, optimizers, total)
        if start == total:
            return StageRecord(stage.name, total, stage.epochs, earlier_seconds, start, loss_average, metrics)
        steps = [self._step_function(stage, rule, optimizer) for rule, optimizer in zip(stage.rules, optimizers)]
        # A resumed stage's seconds are its training time over every run, the checkpoints' too.
        began = time.monotonic() - earlier_seconds
        bar = self._progress_bar(stage.name, total, start)
        signals = cluster.StopSignals(self.cluster_timeout)
        try:
            for step in range(start, total):
                if stage.before_step is not None:
                    stage.before_step()
                batch = training_batch(stage.train, batch_size=self.batch_size, seed=self.seed, step=step)
                distributed = self._distribute(batch, stage.teacher_logits)
                for rule, step_fn in zip(stage.rules, steps):
                    loss = float(step_fn(distributed))
                    # A moving average over ~50 steps: one batch's loss says little.
                    loss_average[rule.name] = (
                        loss
                        if rule.name not in loss_average
                        else (LOSS_DECAY * loss_average[rule.name] + (1 - LOSS_DECAY) * loss)
                    )
                if stage.after_step is not None:
                    metrics = stage.after_step() or {}
                bar.update(1)
                bar.set_postfix(
                    {
                        **{k: f"{v:.4f}" for k, v in loss_average.items()},
                        **{k: v for k, v in metrics.items() if isinstance(v, (int, str))},
                    },
                    refresh=False,
                )
                done = step + 1
                stop = self._stop_requested(signals)
                if done == total or done % self.checkpoint_every == 0 or stop:
                    self._save(stage, optimizers, done, total, loss_average, metrics, time.monotonic() - began)
                if stop:
                    signals.reached_boundary()
                    raise UserError(
                        f"stopped by {signals.received or 'a signal to another worker'} after step {done} of "
                        f"{total} (stage {stage.name}); the checkpoint is saved: rerun with --resume to continue"
                    )
                if self.on_step_end is not None:
                    self.on_step_end(stage.name, done)
        finally:
            signals.close()
            bar.close()
        return StageRecord(
            stage.name, total, stage.epochs, round(time.monotonic() - began, 1), start, loss_average, metrics
        )

    def _stop_requested(self, signals: cluster.StopSignals) -> bool:
        """SIGTERM / SIGINT here, or (several workers) on any worker: every worker stops after this step."""
        here = signals.received is not None
        if not cluster.is_multiworker(self.strategy):
            return here
        return any(cluster.flags(self.strategy, here))

    # -- steps --
    def _step_function(self, stage: Stage, rule: UpdateRule, optimizer):
        model, objective, strategy = stage.model, stage.objective, self.strategy
        replicas = float(strategy.num_replicas_in_sync)
        variables = list(rule.variables)

        def replica_step(batch):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(objective.per_example_loss(model, batch)) / batch["global_size"]
                if rule.penalty is not None:
                    loss += rule.penalty() / replicas  # summed over replicas below: counted once
            grads = tape.gradient(loss, variables)
            # A variable the batch never reached (an empty cluster) gets no gradient: a zero update.
            grads = [tf.zeros_like(v) if g is None else g for g, v in zip(grads, variables)]
            optimizer.apply_gradients(zip(grads, variables))
            return loss

        def step(batch):
            return strategy.reduce("SUM", strategy.run(replica_step, args=(batch,)), axis=None)

        compiled = {}

        def call(batch):
            # Batches vary in length (dynamic padding) and size (the last one). Plain tensors (one replica)
            # get a signature with unknown dims: one trace in all. Per-replica values cannot be given one;
            # reduce_retracing makes their second trace shape-generic instead.
            if "step" not in compiled:
                signature = _shape_generic_signature(batch)
                compiled["step"] = tf.function(step, input_signature=signature, reduce_retracing=signature is None)
            return compiled["step"](batch)

        return call

    def _distribute(self, batch: dict, teacher_logits: np.ndarray | None):
        batch = dict(batch)
        if teacher_logits is not None:
            batch["teacher_logits"] = np.asarray(teacher_logits[batch["index"]], np.float32)
        size = len(batch["labels"])
        replicas = self.strategy.num_replicas_in_sync
        parts = np.array_split(np.arange(size), replicas)
        global_size = np.float32(size)

        def shard(context):
            rows = parts[context.replica_id_in_sync_group]
            out = {k: tf.constant(batch[k][rows]) for k in PER_EXAMPLE_KEYS if k in batch}
            out["global_size"] = tf.constant(global_size)
            return out

        return self.strategy.experimental_distribute_values_from_function(shard)

    # -- checkpoints --
    def _save(
        self, stage: Stage, optimizers, done: int, total: int, loss_average: dict, metrics: dict, seconds: float
    ) -> None:
        arrays = {}
        for i, v in enumerate(stage.model.variables):
            arrays[f"model/{i}"] = np.asarray(v.numpy())
        for rule, optimizer in zip(stage.rules, optimizers):
            for i, v in enumerate(optimizer.variables):
                arrays[f"opt/{rule.name}/{i}"] = np.asarray(v.numpy())
        for i, v in enumerate(stage.extra_state):
            arrays[f"extra/{i}"] = np.asarray(v.numpy())
        meta = {
            "stage": stage.name,
            "step": done,
            "total": total,
            "done": done == total,
            "loss_average": loss_average,
            "seconds": round(seconds, 1),  # trained so far, over every run of the stage
            "metrics": {k: v for k, v in metrics.items() if isinstance(v, (int, float, str))},
            # Shapes, not paths: Keras numbers layer names per process ("..._1"), so paths may differ.
            "model_shapes": [list(v.shape) for v in stage.model.variables],
        }
        self.run.save_arrays(f"stage-{stage.name}", arrays, meta)

    @staticmethod
    def _state_variables(stage: Stage, optimizers) -> list[tuple[str, tf.Variable]]:
        """(checkpoint key, variable) of everything a checkpoint holds, in a fixed order."""
        targets = [(f"model/{i}", v) for i, v in enumerate(stage.model.variables)]
        for rule, optimizer in zip(stage.rules, optimizers):
            targets += [(f"opt/{rule.name}/{i}", v) for i, v in enumerate(optimizer.variables)]
        return targets + [(f"extra/{i}", v) for i, v in enumerate(stage.extra_state)]

    def _restore(self, stage: Stage, optimizers, total: int) -> tuple[int, dict, dict, float]:
        """(steps done, loss averages, metrics, seconds trained) of the stage's checkpoint, its state restored;
        zeros and empty ones without a checkpoint."""
        targets = self._state_variables(stage, optimizers)
        if not cluster.is_multiworker(self.strategy):
            return self._restore_local(stage, targets, total)
        # The chief decides (train/cluster.py): its checkpoint, or its fresh state, on every worker.
        chief, header = is_chief(self.strategy), {}
        if chief:
            try:
                header = {"state": self._restore_local(stage, targets, total)}
            except UserError as error:
                header = {"error": str(error)}
        header = cluster.broadcast_json(self.strategy, header)
        if "error" in header:
            who = "" if chief else f"{cluster.worker_name(self.strategy)}: the chief cannot resume: "
            raise UserError(who + header["error"])
        like = [(tuple(v.shape), np.dtype(getattr(v.dtype, "as_numpy_dtype", v.dtype))) for _, v in targets]
        values = cluster.broadcast_arrays(self.strategy, [v.numpy() for _, v in targets] if chief else None, like)
        if not chief:
            for (_, variable), value in zip(targets, values):
                variable.assign(value)
        start, loss_average, metrics, seconds = header["state"]
        return int(start), dict(loss_average), dict(metrics), float(seconds)

    def _restore_local(self, stage: Stage, targets, total: int) -> tuple[int, dict, dict, float]:
        found = self.run.load_arrays(f"stage-{stage.name}")
        if found is None:
            return 0, {}, {}, 0.0
        arrays, meta = found
        if meta["total"] != total or meta["model_shapes"] != [list(v.shape) for v in stage.model.variables]:
            raise UserError(
                f"{self.run.root}: the checkpoint of stage {stage.name} does not match this run's "
                f"model or schedule; use a new --out"
            )
        for key, variable in targets:
            if key not in arrays or tuple(arrays[key].shape) != tuple(variable.shape):
                raise UserError(
                    f"{self.run.root}: the checkpoint of stage {stage.name} lacks or mis-shapes {key}; use a new --out"
                )
            variable.assign(arrays[key])
        # (a checkpoint of an older version has no seconds: its stage counts this run's alone)
        return int(meta["step"]), dict(meta["loss_average"]), dict(meta["metrics"]), float(meta.get("seconds", 0.0))

    def _progress_bar(self, name: str, total: int, start: int):
        return progress_bar(name, total, start, enabled=self.progress)


def progress_bar(name: str, total: int, start: int = 0, *, enabled: bool = True, unit: str = "step"):
    interactive = sys.stderr.isatty()
    # In a log file, a bar redrawn every 0.1 s would be thousands of lines: redraw every 30 s there.
    return tqdm(
        total=total,
        initial=start,
        desc=name,
        unit=unit,
        file=sys.stderr,
        dynamic_ncols=interactive,
        mininterval=0.5 if interactive else 30.0,
        disable=not enabled,
    )


def _shape_generic_spec(value):
    """`value`'s type spec with every dimension unknown: a tensor's, or a PerReplica value's (one tensor
    per local replica); None for anything else."""
    if isinstance(value, tf.Tensor):
        return tf.TensorSpec([None] * value.shape.rank, value.dtype)
    spec = getattr(value, "_type_spec", None)
    parts = getattr(spec, "_value_specs", None)
    if parts is None or not all(isinstance(p, tf.TensorSpec) for p in parts):
        return None
    return type(spec)(*[tf.TensorSpec([None] * p.shape.rank, p.dtype) for p in parts])


def _shape_generic_signature(batch):
    """One trace for batches of every length and size, whichever comes first: a resumed run then runs
    the very graph an uninterrupted one runs, so the two agree bit for bit (a first trace specialised to
    one batch shape computes that shape's batches through other kernels). None if a value has no such
    spec (then reduce_retracing generalises from the second trace on)."""
    specs = [_shape_generic_spec(v) for v in tf.nest.flatten(batch)]
    if any(spec is None for spec in specs):
        return None
    return [tf.nest.pack_sequence_as(batch, specs)]


class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up from 0 to `peak` over the first `warmup` fraction of `total` steps, then linear decay
    to 0 at `total` (BERT's fine-tuning schedule). A function of the optimizer's step count alone, so a
    resumed stage (whose optimizer iterations are checkpointed) continues on the same curve. `offset`: the
    steps earlier stages took on the same curve (one schedule over a whole search run)."""

    def __init__(self, peak: float, total: int, warmup: float = 0.06, offset: int = 0):
        self.peak, self.total, self.offset = float(peak), max(1, int(total)), int(offset)
        self.warmup_steps = max(1, int(round(warmup * self.total)))

    def __call__(self, step):
        step = tf.cast(step, tf.float32) + float(self.offset) + 1.0  # the first update has a non-zero rate
        rise = step / self.warmup_steps
        fall = (self.total - step + 1.0) / max(1.0, self.total - self.warmup_steps + 1.0)
        return self.peak * tf.clip_by_value(tf.minimum(rise, fall), 0.0, 1.0)

    def get_config(self):
        return {"peak": self.peak, "total": self.total, "warmup": self.warmup_steps / self.total, "offset": self.offset}


# --- evaluation ------------------------------------------------------------------------------------------

_FORWARD_OF: "weakref.WeakKeyDictionary[BertModel, Callable]" = weakref.WeakKeyDictionary()
_INPUT_SIGNATURE = [{name: tf.TensorSpec([None, None], tf.int32) for name in INPUT_NAMES}]


def predict_logits(model: BertModel, split: EncodedSplit, batch_size: int) -> np.ndarray:
    """Logits for every example of `split`, in order (dynamic padding; run outside any replica context)."""
    forward = _FORWARD_OF.get(model)
    if forward is None:  # one trace per model, whatever the batch shapes
        forward = _FORWARD_OF[model] = tf.function(
            lambda inputs: model(inputs)["logits"], input_signature=_INPUT_SIGNATURE
        )
    out = [
        np.asarray(forward({name: tf.constant(batch[name]) for name in INPUT_NAMES}))
        for batch in evaluation_batches(split, batch_size)
    ]
    return np.concatenate(out).astype(np.float32)


def accuracy(logits: np.ndarray, split: EncodedSplit) -> float:
    return float(np.mean(np.argmax(logits, axis=-1) == split.labels))
