"""Our Keras BERT, loaded from an HF checkpoint, computes what `transformers` computes."""

import numpy as np
import pytest

from tflm_mcubert.model.hf_import import load_checkpoint

TOLERANCE = 1e-4  # max abs difference, float32

CASES = {
    "tiny-model-safetensors": dict(classifier=False, fmt="safetensors"),
    "tiny-classifier-bin": dict(classifier=True, fmt="bin", num_labels=2),
    # Non-preset shapes: odd head count and intermediate size, 3 token types, 1 layer.
    "odd-shapes-classifier-safetensors": dict(
        classifier=True,
        fmt="safetensors",
        hidden_size=96,
        num_attention_heads=3,
        num_hidden_layers=1,
        intermediate_size=200,
        vocab_size=500,
        type_vocab_size=3,
        max_position_embeddings=64,
        num_labels=5,
    ),
    "odd-shapes-model-bin": dict(
        classifier=False,
        fmt="bin",
        hidden_size=96,
        num_attention_heads=3,
        num_hidden_layers=1,
        intermediate_size=200,
        vocab_size=500,
        type_vocab_size=3,
        max_position_embeddings=64,
    ),
    "relu-classifier-bin": dict(classifier=True, fmt="bin", hidden_act="relu", num_labels=3),
    "gelu_new-model-safetensors": dict(
        classifier=False, fmt="safetensors", hidden_act="gelu_new", num_attention_heads=4, num_hidden_layers=3
    ),
    "gelu_pytorch_tanh-classifier-safetensors": dict(
        classifier=True, fmt="safetensors", hidden_act="gelu_pytorch_tanh", num_labels=2
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_outputs_match_transformers(tmp_path, case, make_hf_checkpoint, random_batch, hf_forward, our_forward):
    ckpt = make_hf_checkpoint(tmp_path, seed=7, **case)
    loaded = load_checkpoint(ckpt)
    batch = random_batch(loaded.config, seed=3)

    ours, theirs = our_forward(loaded.model, batch), hf_forward(ckpt, batch)

    expected_outputs = {"last_hidden_state", "pooler_output"} | ({"logits"} if case["classifier"] else set())
    assert set(ours) == set(theirs) == expected_outputs
    for name in expected_outputs:
        assert ours[name].shape == theirs[name].shape, name
        # Padded rows included: HF masks keys only, exactly as we do, so they must agree there too.
        np.testing.assert_allclose(ours[name], theirs[name], rtol=0, atol=TOLERANCE, err_msg=name)


def test_loaded_checkpoint_describes_itself(tmp_path, make_hf_checkpoint):
    ckpt = make_hf_checkpoint(tmp_path, classifier=True, num_labels=4, hidden_act="relu")
    loaded = load_checkpoint(str(ckpt))

    assert loaded.architecture == "BertForSequenceClassification"
    assert loaded.source == str(ckpt)
    assert (loaded.config.num_labels, loaded.config.hidden_act, loaded.config.hidden_size) == (4, "relu", 32)
    assert loaded.tokenizer is not None
    encoded = loaded.tokenizer(["the cat sat on the mat .", "a dog"], padding=True)
    assert encoded["input_ids"][0] == [2, 5, 7, 9, 10, 5, 11, 27, 3]  # ids from the tiny vocab.txt
    assert encoded["attention_mask"][1] == [1, 1, 1, 1, 0, 0, 0, 0, 0]
