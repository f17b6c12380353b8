import numpy as np
import pytest


def random_split(vocab_size, *, size=24, num_labels=2, seed=0, name="train", min_len=3, max_len=9):
    """An EncodedSplit of random token ids (ids 1.. so that 0 stays [PAD]), lengths min_len..max_len.

    Equal lengths (and a size that the batch size divides) give batches of one shape: one trace per
    training step function, which is most of a tiny training run's time."""
    from tflm_mcubert.train.batches import EncodedSplit

    rng = np.random.default_rng(seed)
    lengths = rng.integers(min_len, max_len + 1, size=size)
    ids = [rng.integers(1, vocab_size, size=n).astype(np.int32) for n in lengths]
    types = [np.zeros(n, np.int32) for n in lengths]
    return EncodedSplit(name, ids, types, rng.integers(0, num_labels, size=size).astype(np.int32), pad_id=0)


@pytest.fixture
def make_split():
    """Factory: make_split(vocab_size, size=24, num_labels=2, seed=0) -> EncodedSplit of random ids."""
    return random_split
