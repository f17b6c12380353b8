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


# A GPT-2 decoder small enough to export in about a second: two layers, a 48-position KV cache.
SMALL_DECODER = {"model_type": "gpt2", "vocab_size": 97, "n_positions": 48, "n_embd": 32, "n_layer": 2, "n_head": 4}


@functools.lru_cache(maxsize=None)
def small_decoder_export(seed: int = 5) -> bytes:
    """The .tflite of a calibrated SMALL_DECODER (caches as variable tensors, the tied table shared)."""
    from tflm_mcubert.model.decoder import build_decoder
    from tflm_mcubert.model.decoder_config import DecoderConfig
    from tflm_mcubert.quantize.quantized_decoder import calibrate_decoder
    from tflm_mcubert.schedule.planner import plan_of
    from tflm_mcubert.tflite.mcubert_writer import model_to_tflite

    decoder = build_decoder(DecoderConfig.from_hf_dict(SMALL_DECODER), seed=seed)
    rng = np.random.default_rng(0)
    vocab = SMALL_DECODER["vocab_size"]
    decoder = calibrate_decoder(decoder, [rng.integers(0, vocab, 40) for _ in range(6)], top_k=3)
    return model_to_tflite(decoder, plan_of(decoder, 1 << 20))


def decoder_steps(quantized, steps: int = 6) -> np.ndarray:
    """The top-k ids of `steps` greedy steps from token 4: what a decoder mutation must not change."""
    caches, token, out = quantized.new_caches(), 4, []
    for position in range(steps):
        ids = quantized.step(token, position, caches)
        out.append(ids)
        token = int(ids[0, 0])
    return np.stack(out)
