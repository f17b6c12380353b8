"""Small GPT-2 checkpoints and byte-level BPE tokenizers built locally (no hub): shared by the decoder tests."""

from __future__ import annotations

from pathlib import Path

import pytest


def train_byte_level_bpe(texts: list[str], vocab_size: int, folder: Path) -> Path:
    """A GPT-2-style tokenizer (vocab.json + merges.txt, "<|endoftext|>" special) trained on `texts`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.model.save(str(folder))
    return folder


def random_gpt2(folder: Path, **config) -> Path:
    """A GPT2LMHeadModel of `config` (transformers.GPT2Config's fields) saved into `folder`: HF's init nudged
    by seeded noise, so that a continuation depends on its prompt."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**config))
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.2 * torch.randn(parameter.shape))
    model.save_pretrained(folder)
    return folder
