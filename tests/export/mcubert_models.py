"""Small MCUBERT exports shared by the mcubert export, runtime and quantize tests (each made once)."""

from __future__ import annotations

import functools

import numpy as np

from tflm_mcubert.data.calibration import random_samples
from tflm_mcubert.export.mcubert_export import export_mcubert
from tflm_mcubert.model.bert import build_model
from tflm_mcubert.model.config import BertConfig

KB = 1024
UNLIMITED = 1 << 30

# Small enough to export in a fraction of a second; two layers so that tensors chain; 3 heads so
# that head slicing is not a power of two; a classifier head unless labels is None.
SMALL = dict(
    vocab_size=300,
    hidden_size=48,
    num_hidden_layers=2,
    num_attention_heads=3,
    intermediate_size=96,
    max_position_embeddings=320,
    type_vocab_size=2,
)


def perturbed(model, seed: int = 1):
    """Biases and LayerNorm parameters off their init (zeros / ones), as in a trained model."""
    rng = np.random.default_rng(seed)
    model.set_weights(
        [w + rng.normal(0, 0.05, w.shape).astype(np.float32) if w.ndim == 1 else w for w in model.get_weights()]
    )
    return model


def small_model(labels: int | None = 3, seed: int = 0):
    return perturbed(build_model(BertConfig(**SMALL, num_labels=labels), seed=seed), seed + 1)


@functools.lru_cache(maxsize=None)
def small_export(seq_len: int, labels: int | None = 3, budget: int = UNLIMITED, seed: int = 0):
    model = small_model(labels, seed)
    samples = random_samples(model.config.vocab_size, seq_len, 3, seed=seed)
    return export_mcubert(model, None, seq_len=seq_len, arena_budget=budget, samples=samples, sentences=None)


def random_inputs(rng: np.random.Generator, seq_len: int, vocab: int, valid: int | None = None) -> dict:
    valid = seq_len if valid is None else valid
    mask = (np.arange(seq_len) < valid).astype(np.int8)
    return {
        "input_ids": rng.integers(0, vocab, (1, seq_len)).astype(np.int32) * mask,
        "attention_mask": mask[None],
        "token_type_ids": (rng.random((1, seq_len)) < 0.5).astype(np.int32) * mask,
    }
