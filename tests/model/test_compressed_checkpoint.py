"""The compressed checkpoint (`search --out`): clustered embedding arrays, permuted vocabulary, round trip."""

import dataclasses
import json

import numpy as np
import pytest

from tflm_mcubert.model.clustered_embedding import ClusteredLowRankEmbedding, write_permuted_tokenizer
from tflm_mcubert.errors import UserError
from tflm_mcubert.model.hf_import import (
    COMPRESSION_KEY,
    PERMUTATION_KEY,
    load_checkpoint,
    save_checkpoint,
    to_hf_state_dict,
)

TEXTS = ["the dog was very happy !", "bad film , not good"]


@pytest.fixture
def compressed(tmp_path, make_hf_checkpoint):
    """A classifier whose word table became a permuted 3-cluster embedding, saved as `search` saves it."""
    original = load_checkpoint(make_hf_checkpoint(tmp_path, classifier=True, vocab_size=30, num_labels=3))
    table = original.model.embeddings.word_embeddings.numpy()
    assignment = np.random.default_rng(0).integers(0, 3, size=30)
    layer = ClusteredLowRankEmbedding.from_assignment(table, assignment, ranks=[5, 2], origin="nas-two-stage")
    config = original.config
    pad = int(layer.permutation[config.pad_token_id])
    model = original.model.with_word_lookup(layer, config=dataclasses.replace(config, pad_token_id=pad))
    out = tmp_path / "compressed"
    tokenizer = write_permuted_tokenizer(original.tokenizer, layer.permutation, out)
    save_checkpoint(model, out, tokenizer, compression_info={"mode": "two-stage", "metrics": {"test_accuracy": 0.5}})
    return original, model, layer, out


def test_round_trip_keeps_the_model_the_clusters_and_the_permuted_tokenizer(compressed, tmp_path):
    original, model, layer, out = compressed
    loaded = load_checkpoint(out)
    lookup = loaded.model.embeddings.word_lookup
    assert isinstance(lookup, ClusteredLowRankEmbedding)
    assert (lookup.cutoffs, lookup.ranks, lookup.origin) == (layer.cutoffs, layer.ranks, "nas-two-stage")
    np.testing.assert_array_equal(lookup.permutation, layer.permutation)
    assert (
        loaded.config.pad_token_id == layer.permutation[original.config.pad_token_id] == loaded.tokenizer.pad_token_id
    )

    # The saved tokenizer yields permuted ids directly, and the loaded model on them is the one we saved.
    ids = loaded.tokenizer(TEXTS, padding=True, return_tensors="np")
    expected = original.tokenizer(TEXTS, padding=True, return_tensors="np")
    np.testing.assert_array_equal(ids["input_ids"], layer.permutation[expected["input_ids"]])
    batch = {k: ids[k].astype(np.int32) for k in ("input_ids", "attention_mask", "token_type_ids")}
    np.testing.assert_array_equal(loaded.model(batch)["logits"].numpy(), model(batch)["logits"].numpy())

    # Saving what was loaded writes the same tensors and structure again.
    again = save_checkpoint(loaded.model, tmp_path / "again", loaded.tokenizer)
    first, second = to_hf_state_dict(model), to_hf_state_dict(load_checkpoint(again).model)
    assert first.keys() == second.keys() and PERMUTATION_KEY in first
    assert "bert.embeddings.word_embeddings.weight" not in first
    for name in first:
        np.testing.assert_array_equal(first[name], second[name], err_msg=name)
    block = json.loads((out / "config.json").read_text())[COMPRESSION_KEY]
    assert block["cutoffs"] == layer.cutoffs and block["embedding"]["params"] == layer.stored_params()
    assert block["mode"] == "two-stage" and block["metrics"]["test_accuracy"] == 0.5


def test_saving_with_the_original_tokenizer_is_refused(compressed, tmp_path):
    original, model, _, _ = compressed
    with pytest.raises(ValueError, match="permuted vocabulary"):
        save_checkpoint(model, tmp_path / "wrong", original.tokenizer)


def test_a_compressed_checkpoint_with_a_missing_or_misshapen_array_is_refused(compressed):
    from safetensors.numpy import load_file, save_file

    _, _, _, out = compressed
    tensors = load_file(out / "model.safetensors")
    broken = dict(tensors)
    broken["bert.embeddings.word_embeddings.clustered.u_1"] = np.zeros((1, 1), np.float32)
    save_file(broken, out / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(UserError, match="clustered.u_1 has shape"):
        load_checkpoint(out)
    del broken["bert.embeddings.word_embeddings.clustered.u_1"]
    save_file(broken, out / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(UserError, match="lacks embeddings.word_embeddings.clustered.u_1"):
        load_checkpoint(out)
