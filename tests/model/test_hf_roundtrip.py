"""save_checkpoint writes what load_checkpoint and transformers both read back unchanged."""

import json

import numpy as np
import pytest

from tflm_mcubert.model.bert import build_model
from tflm_mcubert.model.config import BertConfig
from tflm_mcubert.model.hf_import import load_checkpoint, save_checkpoint, to_hf_state_dict


def assert_same_weights(a, b):
    state_a, state_b = to_hf_state_dict(a), to_hf_state_dict(b)
    assert state_a.keys() == state_b.keys()
    for name in state_a:
        np.testing.assert_array_equal(state_a[name], state_b[name], err_msg=name)


@pytest.mark.parametrize("classifier", [False, True], ids=["model", "classifier"])
def test_save_then_load_is_identity(tmp_path, classifier, make_hf_checkpoint):
    original = load_checkpoint(make_hf_checkpoint(tmp_path, classifier=classifier, fmt="bin", num_labels=3))

    saved_dir = save_checkpoint(original.model, tmp_path / "saved", tokenizer=original.tokenizer)
    reloaded = load_checkpoint(saved_dir)

    assert reloaded.config == original.config
    assert_same_weights(reloaded.model, original.model)
    text = ["the dog was very happy !", "bad film"]
    assert reloaded.tokenizer(text)["input_ids"] == original.tokenizer(text)["input_ids"]


@pytest.mark.parametrize("classifier", [False, True], ids=["model", "classifier"])
def test_transformers_reads_a_model_we_built(tmp_path, classifier, random_batch, hf_forward, our_forward):
    # A model that never came from HF (as after our own training), with non-default shapes.
    config = BertConfig(
        vocab_size=300,
        hidden_size=48,
        num_hidden_layers=2,
        num_attention_heads=3,
        intermediate_size=80,
        max_position_embeddings=32,
        type_vocab_size=3,
        hidden_act="gelu_new",
        num_labels=4 if classifier else None,
    )
    model = build_model(config, seed=11)
    # Keras initialises biases and LayerNorm to zeros/ones; move them so a mix-up would show.
    rng = np.random.default_rng(1)
    for variable in model.weights:
        variable.assign(variable + rng.normal(0, 0.05, variable.shape))

    saved_dir = save_checkpoint(model, tmp_path / "ours")
    batch = random_batch(config, seed=5, lengths=(12, 9))

    ours, theirs = our_forward(model, batch), hf_forward(saved_dir, batch)  # hf_forward: no missing keys
    assert set(ours) == set(theirs)
    for name in ours:
        np.testing.assert_allclose(ours[name], theirs[name], rtol=0, atol=1e-4, err_msg=name)
    written = json.loads((saved_dir / "config.json").read_text())
    assert written["architectures"] == ["BertForSequenceClassification" if classifier else "BertModel"]
    assert sorted(p.name for p in saved_dir.iterdir()) == ["config.json", "model.safetensors"]


def test_save_overwrites_an_earlier_save(tmp_path):
    config = BertConfig(
        vocab_size=64,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=16,
    )
    out = tmp_path / "run"
    save_checkpoint(build_model(config, seed=1), out)
    second = build_model(config, seed=2)
    save_checkpoint(second, out)

    assert_same_weights(load_checkpoint(out).model, second)
    assert not list(out.glob("*.tmp"))
