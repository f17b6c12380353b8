"""Models and exports shared by the export tests; every conversion is made once per session."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from tflm_mcubert.data.calibration import random_samples
from tflm_mcubert.export.stock import export_stock
from tflm_mcubert.model.bert import build_model
from tflm_mcubert.model.config import BertConfig, preset

SEQ_LEN = 32


def with_perturbed_vectors(model, seed: int = 1):
    """Biases and LayerNorm parameters moved off their init (zeros / ones), as in a trained model.

    The converter drops a zero bias and a unit gamma, so an untouched random model would export a
    smaller graph than any real checkpoint does.
    """
    rng = np.random.default_rng(seed)
    model.set_weights(
        [w + rng.normal(0, 0.05, w.shape).astype(np.float32) if w.ndim == 1 else w for w in model.get_weights()]
    )
    return model


@pytest.fixture(scope="session")
def tiny_classifier():
    """bert-tiny with a 2-label head: the deployment this package targets first."""
    return with_perturbed_vectors(build_model(preset("bert-tiny", num_labels=2), seed=0))


@pytest.fixture(scope="session")
def micro_model():
    """A BERT small enough that a conversion takes about a second (for the runner and file tests)."""
    config = BertConfig(
        vocab_size=200,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=16,
        num_labels=3,
    )
    return with_perturbed_vectors(build_model(config, seed=0))


@pytest.fixture(scope="session")
def micro_int8(micro_model):
    return export_stock(micro_model, seq_len=8, precision="int8", calibration=random_samples(200, 8, 8, seed=0))


@pytest.fixture(scope="session")
def calibration():
    return random_samples(30522, SEQ_LEN, 16, seed=0)


@pytest.fixture(scope="session")
def eval_samples():
    """Held out from calibration (another seed): padded lengths from SEQ_LEN/4 to SEQ_LEN."""
    return random_samples(30522, SEQ_LEN, 16, seed=1)


@pytest.fixture(scope="session")
def tiny_export(tiny_classifier, calibration):
    """precision -> .tflite of tiny_classifier at SEQ_LEN, keeping hidden states as well as logits."""

    @functools.cache
    def export(precision: str) -> bytes:
        return export_stock(
            tiny_classifier,
            seq_len=SEQ_LEN,
            precision=precision,
            calibration=calibration,
            outputs=("last_hidden_state", "logits"),
        )

    return export
