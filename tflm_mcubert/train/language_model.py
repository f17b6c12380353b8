"""`train-lm`: a GPT-2-style causal LM trained on a local text, saved as a Hugging Face checkpoint.

    tokenizer   byte-level BPE (GPT-2's pre-tokenizer, byte map and merges) trained on the training text
                with `tokenizers`, saved as GPT2TokenizerFast (vocab.json, merges.txt, tokenizer.json)
    data        every text encoded and ended with <|endoftext|>, concatenated, cut into blocks of the
                context (the last partial block dropped)
    train       next-token cross-entropy, AdamW with warm-up and linear decay, one epoch a checkpoint
                (OUT/lm-state/): a run that stops resumes where it was, with the same settings only
    save        OUT as a GPT2LMHeadModel checkpoint (model.safetensors, config.json), which `export`,
                `transformers` and this package's decoder loader all read

Perplexity is exp(mean next-token loss) over every position of the held-out blocks.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from tflm_mcubert.errors import UserError
from tflm_mcubert.model.decoder import DecoderModel, build_decoder
from tflm_mcubert.model.decoder_config import DecoderConfig
from tflm_mcubert.model.decoder_import import decoder_slots

END_OF_TEXT = "<|endoftext|>"
STATE_DIR = "lm-state"


@dataclasses.dataclass(frozen=True)
class LmSettings:
    vocab_size: int = 4096
    context: int = 128
    hidden: int = 128
    layers: int = 2
    heads: int = 2
    epochs: int = 20
    batch_size: int = 32
    learning_rate: float = 3e-3
    weight_decay: float = 0.01
    warmup_fraction: float = 0.05
    seed: int = 0
    teacher: str | None = None  # a bigger decoder's checkpoint (same tokenizer): knowledge distillation
    kd_weight: float = 0.5  # of the distillation term; the rest is the next-token loss
    kd_temperature: float = 2.0

    def hf_config(self) -> dict:
        """The GPT2LMHeadModel config.json of this model (tokenizer ids filled in by save_checkpoint)."""
        return {
            "model_type": "gpt2",
            "architectures": ["GPT2LMHeadModel"],
            "vocab_size": self.vocab_size,
            "n_positions": self.context,
            "n_embd": self.hidden,
            "n_layer": self.layers,
            "n_head": self.heads,
            "activation_function": "gelu_new",
            "layer_norm_epsilon": 1e-5,
            "tie_word_embeddings": True,
        }


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def train_tokenizer(texts: list[str], vocab_size: int, out_dir: Path):
    """A byte-level BPE (GPT-2's) trained on `texts`, saved into `out_dir` as GPT2TokenizerFast."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2TokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[END_OF_TEXT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer)
    fast = GPT2TokenizerFast(tokenizer_object=tokenizer, bos_token=END_OF_TEXT, eos_token=END_OF_TEXT)
    fast.save_pretrained(str(out_dir))
    return fast


def blocks_of(tokenizer, texts: list[str], context: int) -> np.ndarray:
    """int32[blocks, context]: the texts' ids, each text ended with <|endoftext|>, cut into blocks."""
    ids: list[int] = []
    for text in texts:
        ids += tokenizer.encode(text) + [tokenizer.eos_token_id]
    count = len(ids) // context
    if count == 0:
        raise UserError(f"the text gives {len(ids)} tokens, fewer than one {context}-token block")
    return np.asarray(ids[: count * context], np.int32).reshape(count, context)


def _loss(model: DecoderModel, block: tf.Tensor) -> tf.Tensor:
    logits = model(block[:, :-1])
    return tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(block[:, 1:], logits, from_logits=True))


def _distillation_loss(model: DecoderModel, teacher: DecoderModel, block: tf.Tensor, settings: LmSettings):
    """(1 - w) * next-token loss + w * T^2 * KL(teacher || student) at temperature T, every position."""
    inputs, t = block[:, :-1], settings.kd_temperature
    logits = model(inputs)
    hard = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(block[:, 1:], logits, from_logits=True))
    target = tf.nn.softmax(tf.stop_gradient(teacher(inputs)) / t)
    soft = tf.reduce_mean(keras.losses.kl_divergence(target, tf.nn.softmax(logits / t))) * t * t
    return (1.0 - settings.kd_weight) * hard + settings.kd_weight * soft


def perplexity(model: DecoderModel, blocks: np.ndarray, batch_size: int = 32) -> float:
    """exp of the mean next-token loss over every position of `blocks`."""
    total = 0.0
    for start in range(0, len(blocks), batch_size):
        batch = tf.constant(blocks[start : start + batch_size])
        total += float(_loss(model, batch)) * len(batch)
    return math.exp(total / len(blocks))


class _Schedule(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up, then linear decay to zero."""

    def __init__(self, peak: float, warmup: int, total: int):
        self.peak, self.warmup, self.total = peak, max(1, warmup), max(total, warmup + 1)

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        up = step / self.warmup
        down = (self.total - step) / (self.total - self.warmup)
        return self.peak * tf.maximum(0.0, tf.minimum(up, down))


def _state_matches(state_dir: Path, settings: LmSettings) -> int:
    """The epochs a resumable run in `state_dir` has done (0: none); refused if its settings differ."""
    record = state_dir / "state.json"
    if not record.is_file():
        return 0
    state = json.loads(record.read_text())
    if state["settings"] != dataclasses.asdict(settings):
        raise UserError(
            f"{state_dir}: a run with other settings is there ({state['settings']}); use another --out or remove it"
        )
    return int(state["epochs_done"])


def train_lm(settings: LmSettings, train_blocks: np.ndarray, dev_blocks: np.ndarray, out_dir: Path, teacher=None):
    """(the DecoderModel of the epoch with the lowest dev perplexity, {"perplexity", "epoch"} of it), resuming
    from OUT/lm-state/ and logging each epoch's dev perplexity. `teacher` (a DecoderModel of the same
    vocabulary): distilled from it (_distillation_loss)."""
    keras.utils.set_random_seed(settings.seed)
    config = DecoderConfig.from_hf_dict(settings.hf_config())
    model = build_decoder(config, seed=settings.seed)
    steps_per_epoch = max(1, len(train_blocks) // settings.batch_size)
    total = steps_per_epoch * settings.epochs
    schedule = _Schedule(settings.learning_rate, int(settings.warmup_fraction * total), total)
    optimizer = keras.optimizers.AdamW(schedule, weight_decay=settings.weight_decay, clipnorm=1.0)
    optimizer.build(model.trainable_variables)
    state_dir = out_dir / STATE_DIR
    state_dir.mkdir(parents=True, exist_ok=True)
    done = _state_matches(state_dir, settings)
    if done:
        _restore(state_dir, model, optimizer)
        log(f"resuming after epoch {done} of {settings.epochs}")

    @tf.function
    def train_step(block):
        with tf.GradientTape() as tape:
            loss = _loss(model, block) if teacher is None else _distillation_loss(model, teacher, block, settings)
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    best = _best_dev(state_dir)
    for epoch in range(done, settings.epochs):
        order = np.random.default_rng(settings.seed + epoch).permutation(len(train_blocks))
        losses = []
        for step in range(steps_per_epoch):
            batch = train_blocks[order[step * settings.batch_size : (step + 1) * settings.batch_size]]
            losses.append(float(train_step(tf.constant(batch))))
        dev = perplexity(model, dev_blocks)
        log(f"epoch {epoch + 1}/{settings.epochs}: train loss {np.mean(losses):.3f}, dev perplexity {dev:.2f}")
        if dev < best["perplexity"]:
            best = {"perplexity": dev, "epoch": epoch + 1}
            np.savez(state_dir / "best.npz", **{f"model_{i}": v.numpy() for i, v in enumerate(model.weights)})
        _save_state(state_dir, model, optimizer, settings, epoch + 1, best)
    with np.load(state_dir / "best.npz") as arrays:  # the epoch picked on the held-out text
        for i, variable in enumerate(model.weights):
            variable.assign(arrays[f"model_{i}"])
    log(f"kept epoch {best['epoch']} (dev perplexity {best['perplexity']:.2f}, the lowest)")
    return model, best


def _best_dev(state_dir: Path) -> dict:
    record = state_dir / "state.json"
    best = json.loads(record.read_text()).get("best") if record.is_file() else None
    return best or {"perplexity": math.inf, "epoch": 0}


def _save_state(state_dir: Path, model, optimizer, settings: LmSettings, epochs_done: int, best: dict) -> None:
    arrays = {f"model_{i}": v.numpy() for i, v in enumerate(model.weights)}
    arrays |= {f"optimizer_{i}": v.numpy() for i, v in enumerate(optimizer.variables)}
    np.savez(state_dir / "weights.tmp.npz", **arrays)
    (state_dir / "weights.tmp.npz").replace(state_dir / "weights.npz")  # the record follows its weights
    record = {"settings": dataclasses.asdict(settings), "epochs_done": epochs_done, "best": best}
    (state_dir / "state.json").write_text(json.dumps(record, indent=1))


def _restore(state_dir: Path, model, optimizer) -> None:
    with np.load(state_dir / "weights.npz") as arrays:
        for i, variable in enumerate(model.weights):
            variable.assign(arrays[f"model_{i}"])
        for i, variable in enumerate(optimizer.variables):
            variable.assign(arrays[f"optimizer_{i}"])


def hf_weights(model: DecoderModel) -> dict[str, np.ndarray]:
    """The GPT2LMHeadModel state dict of `model` (c_attn fused from q, k, v; Conv1D [in, out] layout)."""
    weights = {
        f"transformer.{name}": np.asarray(var.numpy(), np.float32) for name, (var, _) in decoder_slots(model).items()
    }
    for i, block in enumerate(model.blocks):
        layers = (block.query, block.key, block.value)
        weights[f"transformer.h.{i}.attn.c_attn.weight"] = np.concatenate([v.kernel.numpy() for v in layers], axis=1)
        weights[f"transformer.h.{i}.attn.c_attn.bias"] = np.concatenate([v.bias.numpy() for v in layers])
    return weights


def save_checkpoint(model: DecoderModel, settings: LmSettings, tokenizer, out_dir: Path, metrics: dict) -> None:
    """OUT as a GPT2LMHeadModel checkpoint with its tokenizer (already saved there) and metrics.json."""
    from safetensors.numpy import save_file

    save_file(hf_weights(model), str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    config = settings.hf_config() | {"bos_token_id": tokenizer.eos_token_id, "eos_token_id": tokenizer.eos_token_id}
    if settings.teacher:
        config["tflm_mcubert_distilled_from"] = settings.teacher
    (out_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (out_dir / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
