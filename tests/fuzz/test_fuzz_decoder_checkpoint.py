"""Hypothesis fuzzing of the decoder checkpoint loader: GPT-2 and GPT-Neo folders with any config value,
corrupted weights, and corrupted tokenizer files (tokenizer.json, vocab.json, merges.txt). Each must load,
or end in the project's UserError naming the problem; any other exception is a finding."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from safetensors.numpy import load_file, save_file

from tests.fuzz.test_fuzz_python import JSON_VALUES, SETTINGS, loads_or_is_named, mutate, mutations
from tflm_mcubert.errors import UserError

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

GPT2_KEYS = ["vocab_size", "n_positions", "n_embd", "n_layer", "n_head", "n_inner", "activation_function",
             "layer_norm_epsilon", "scale_attn_weights", "scale_attn_by_inverse_layer_idx", "add_cross_attention",
             "model_type", "architectures", "tie_word_embeddings"]  # fmt: skip
NEO_KEYS = ["vocab_size", "max_position_embeddings", "hidden_size", "num_layers", "num_heads", "intermediate_size",
            "attention_layers", "attention_types", "window_size", "activation_function", "layer_norm_epsilon",
            "model_type", "architectures"]  # fmt: skip


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    from tests.cli.test_cli_decoder_errors import _byte_level_bpe

    root = tmp_path_factory.mktemp("decoder-fuzz")
    tokenizer = _byte_level_bpe()
    fast = transformers.GPT2TokenizerFast(tokenizer_object=tokenizer, eos_token="<|endoftext|>")
    vocab = tokenizer.get_vocab_size()
    torch.manual_seed(0)
    transformers.GPT2LMHeadModel(
        transformers.GPT2Config(vocab_size=vocab, n_positions=16, n_embd=16, n_layer=1, n_head=2)
    ).save_pretrained(root / "gpt2")
    transformers.GPTNeoForCausalLM(
        transformers.GPTNeoConfig(
            vocab_size=vocab, max_position_embeddings=16, hidden_size=16, num_layers=2, num_heads=2,
            attention_types=[[["global", "local"], 1]], window_size=4,
        )
    ).save_pretrained(root / "neo")  # fmt: skip
    for name in ("gpt2", "neo"):
        fast.save_pretrained(root / name)
    tokenizer.model.save(str(root / "gpt2"))  # vocab.json + merges.txt beside tokenizer.json
    return root


def _load(folder) -> None:
    """What `export --checkpoint` reads before it quantizes: the model, then its tokenizer."""
    from tflm_mcubert.model.decoder_import import load_decoder
    from tflm_mcubert.tokenizer.bpe_blob import checkpoint_tokenizer

    model, _ = load_decoder(folder)
    checkpoint_tokenizer(folder, model.config.vocab_size)


def _copy(folders, tmp_path_factory, family: str):
    copy = tmp_path_factory.mktemp("copy") / family
    shutil.copytree(folders / family, copy)
    return copy


@SETTINGS
@given(data=st.data(), family=st.sampled_from(["gpt2", "neo"]), value=JSON_VALUES)
def test_any_decoder_config_value_loads_or_is_named(folders, tmp_path_factory, data, family, value):
    copy = _copy(folders, tmp_path_factory, family)
    loads_or_is_named(_load, copy, data.draw(st.sampled_from(GPT2_KEYS if family == "gpt2" else NEO_KEYS)), value)


@SETTINGS
@given(
    data=st.data(),
    family=st.sampled_from(["gpt2", "neo"]),
    target=st.sampled_from(["model.safetensors", "tokenizer.json", "tensor", "vocab.json", "merges.txt"]),
)
def test_corrupted_decoder_weights_or_tokenizer_load_or_are_named(folders, tmp_path_factory, data, family, target):
    copy = _copy(folders, tmp_path_factory, family)
    if target in ("vocab.json", "merges.txt"):
        (copy / "tokenizer.json").unlink(missing_ok=True)  # the files GPT-2's slow tokenizer reads
        if not (copy / target).is_file():
            shutil.copy(folders / "gpt2" / "vocab.json", copy)
            shutil.copy(folders / "gpt2" / "merges.txt", copy)
    if target == "tensor":  # a well-formed file whose tensor has another shape or dtype
        weights = load_file(copy / "model.safetensors")
        name = data.draw(st.sampled_from(sorted(weights)))
        dtype = data.draw(st.sampled_from([np.float32, np.float16, np.int64, np.int8]))
        weights[name] = np.zeros(data.draw(st.lists(st.integers(0, 5), max_size=3)), dtype)
        save_file(weights, copy / "model.safetensors", metadata={"format": "pt"})
    else:
        raw = (copy / target).read_bytes()
        (copy / target).write_bytes(mutate(raw, data.draw(mutations(len(raw)))))
    try:
        _load(copy)
    except UserError:
        pass
