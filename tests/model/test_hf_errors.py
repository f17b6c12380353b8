"""Bad checkpoints are refused with a UserError that names the problem; odd-but-valid ones load."""

import json
import logging
import os
import pickle
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from tflm_mcubert.errors import UserError
from tflm_mcubert.model.hf_import import load_checkpoint, to_hf_state_dict


def rewrite_weights(ckpt, edit):
    """Apply `edit(dict of name -> array)` to the checkpoint's model.safetensors in place."""
    path = ckpt / "model.safetensors"
    weights = load_file(path)
    edit(weights)
    save_file(weights, path, metadata={"format": "pt"})


def edit_config(ckpt, **changes):
    path = ckpt / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def assert_same_weights(a, b):
    state_a, state_b = to_hf_state_dict(a), to_hf_state_dict(b)
    assert state_a.keys() == state_b.keys()
    for name in state_a:
        np.testing.assert_array_equal(state_a[name], state_b[name], err_msg=name)


@pytest.fixture
def ckpt(tmp_path, make_hf_checkpoint):
    return make_hf_checkpoint(tmp_path, classifier=False, fmt="safetensors")


# --- Where the checkpoint is -------------------------------------------------------------------------


def test_empty_directory(tmp_path):
    with pytest.raises(UserError, match="no config.json"):
        load_checkpoint(tmp_path)


def test_missing_config(ckpt):
    (ckpt / "config.json").unlink()
    with pytest.raises(UserError, match=r"config\.json: no config\.json"):
        load_checkpoint(ckpt)


def test_no_weights(ckpt):
    (ckpt / "model.safetensors").unlink()
    with pytest.raises(UserError, match="no weights.*model.safetensors.*pytorch_model.bin"):
        load_checkpoint(ckpt)


def test_nonexistent_local_path(tmp_path):
    with pytest.raises(UserError, match="no such checkpoint directory"):
        load_checkpoint(str(tmp_path / "nope"))
    # A Path is always local, even when it reads like "owner/name".
    with pytest.raises(UserError, match="no such checkpoint directory"):
        load_checkpoint(Path("prajjwal1/bert-tiny"))


def test_file_instead_of_directory(ckpt):
    with pytest.raises(UserError, match="is a file; pass the checkpoint directory"):
        load_checkpoint(ckpt / "model.safetensors")


def test_hub_id_while_offline():
    assert os.environ["HF_HUB_OFFLINE"] == "1"  # conftest; the hub is never contacted
    with pytest.raises(
        UserError,
        match="prajjwal1/bert-tiny: no such local directory, and the Hugging Face "
        r"hub could not be reached .*HF_HUB_OFFLINE.*local checkpoint directory",
    ):
        load_checkpoint("prajjwal1/bert-tiny")


def test_hub_id_without_network(monkeypatch):
    # What snapshot_download raises when online but DNS fails (observed on a machine without network).
    import huggingface_hub
    from huggingface_hub.errors import LocalEntryNotFoundError

    def unreachable(*args, **kwargs):
        raise LocalEntryNotFoundError("Got: ConnectError: [Errno -2] Name or service not known\nmore text")

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", unreachable)
    with pytest.raises(
        UserError,
        match=r"could not be reached to download it \(Got: ConnectError: "
        r"\[Errno -2\] Name or service not known\); pass a local",
    ):
        load_checkpoint("someone/some-bert")


# --- config.json ---------------------------------------------------------------------------------------


def test_malformed_config(ckpt):
    (ckpt / "config.json").write_text('{"model_type": "bert",')
    with pytest.raises(UserError, match="config.json: malformed JSON"):
        load_checkpoint(ckpt)


def test_non_bert_model_type(ckpt):
    edit_config(ckpt, model_type="gpt2", architectures=["GPT2LMHeadModel"])
    with pytest.raises(UserError, match="model_type 'gpt2' is a decoder; this command reads BERT encoders"):
        load_checkpoint(ckpt)


def test_absurd_config_is_refused_before_allocating(ckpt):
    edit_config(ckpt, vocab_size=10**12)  # 128 TB of embeddings: only a refusal can be this fast
    with pytest.raises(UserError, match="parameters is absurd"):
        load_checkpoint(ckpt)


# --- Weights -------------------------------------------------------------------------------------------


def test_missing_weight(ckpt):
    rewrite_weights(ckpt, lambda w: w.pop("encoder.layer.1.output.dense.bias"))
    with pytest.raises(
        UserError,
        match=r"1 weight\(s\) of a 2-layer BertModel missing: "
        r"encoder\.layer\.1\.output\.dense\.bias$",
    ):
        load_checkpoint(ckpt)


def test_unknown_weight(ckpt):
    rewrite_weights(ckpt, lambda w: w.update({"encoder.layer.0.attention.self.mystery.weight": np.zeros(3)}))
    with pytest.raises(
        UserError,
        match=r"1 weight\(s\) unknown to a 2-layer BertModel: "
        r"encoder\.layer\.0\.attention\.self\.mystery\.weight$",
    ):
        load_checkpoint(ckpt)


def test_more_layers_than_config_lists_a_few_and_counts(ckpt):
    edit_config(ckpt, num_hidden_layers=1)
    with pytest.raises(
        UserError,
        match=r"16 weight\(s\) unknown to a 1-layer BertModel: "
        r"encoder\.layer\.1\.\S+, .* and 11 more$",
    ):
        load_checkpoint(ckpt)


def test_classifier_weights_without_classifier_architecture(tmp_path, make_hf_checkpoint):
    ckpt = make_hf_checkpoint(tmp_path, classifier=True)
    edit_config(ckpt, architectures=["BertModel"])
    with pytest.raises(
        UserError,
        match="classifier.bias, classifier.weight; config.json does not declare BertForSequenceClassification",
    ):
        load_checkpoint(ckpt)


def test_shape_mismatch_names_tensor_and_both_shapes(ckpt):
    edit_config(ckpt, intermediate_size=48)  # the weights were saved with 64
    with pytest.raises(UserError) as raised:
        load_checkpoint(ckpt)
    assert re.search(
        r"weight encoder\.layer\.0\.intermediate\.dense\.(weight|bias) has shape \[64(, 32)?\], "
        r"but config\.json implies \[48(, 32)?\]",
        str(raised.value),
    ), raised.value


def test_corrupt_safetensors(ckpt):
    (ckpt / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{garbage")
    with pytest.raises(UserError, match="model.safetensors: not a readable safetensors file"):
        load_checkpoint(ckpt)


def test_tokenizer_larger_than_embedding_table(ckpt):
    (ckpt / "vocab.txt").write_text(
        "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"word{i}" for i in range(200)])
    )
    with pytest.raises(UserError, match="the tokenizer has 205 tokens but config.json vocab_size is 128"):
        load_checkpoint(ckpt)


def test_checkpoint_without_tokenizer_files(ckpt):
    (ckpt / "vocab.txt").unlink()
    assert load_checkpoint(ckpt).tokenizer is None


# --- Unusual but valid spellings -----------------------------------------------------------------------


def test_prefix_legacy_names_buffers_and_pretraining_heads(tmp_path, make_hf_checkpoint):
    ckpt = make_hf_checkpoint(tmp_path, classifier=False)
    reference = load_checkpoint(ckpt).model

    def to_old_bert_for_pretraining(weights):
        for name in list(weights):
            new = "bert." + name.replace("LayerNorm.weight", "LayerNorm.gamma").replace(
                "LayerNorm.bias", "LayerNorm.beta"
            )
            weights[new] = weights.pop(name)
        weights["bert.embeddings.position_ids"] = np.arange(64, dtype=np.int64)[np.newaxis]
        weights["bert.embeddings.token_type_ids"] = np.zeros((1, 64), np.int64)
        weights["cls.predictions.bias"] = np.zeros(128, np.float32)
        weights["cls.seq_relationship.weight"] = np.zeros((2, 32), np.float32)

    rewrite_weights(ckpt, to_old_bert_for_pretraining)
    edit_config(ckpt, architectures=["BertForPreTraining"])
    loaded = load_checkpoint(ckpt)

    assert loaded.architecture == "BertForPreTraining"
    assert_same_weights(loaded.model, reference)


def test_same_weight_spelled_twice(ckpt):
    rewrite_weights(ckpt, lambda w: w.update({"bert.pooler.dense.bias": w["pooler.dense.bias"]}))
    with pytest.raises(UserError, match="weight pooler.dense.bias appears twice"):
        load_checkpoint(ckpt)


def test_sharded_safetensors(ckpt):
    reference = load_checkpoint(ckpt).model
    weights = load_file(ckpt / "model.safetensors")
    names = sorted(weights)
    shards = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    for shard, shard_names in shards.items():
        save_file({n: weights[n] for n in shard_names}, ckpt / shard, metadata={"format": "pt"})
    weight_map = {n: shard for shard, shard_names in shards.items() for n in shard_names}
    (ckpt / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    (ckpt / "model.safetensors").unlink()

    assert_same_weights(load_checkpoint(ckpt).model, reference)


def test_shard_index_pointing_outside_the_directory(ckpt):
    (ckpt / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"x": "../model.safetensors"}}))
    (ckpt / "model.safetensors").unlink()
    with pytest.raises(UserError, match="shard name '../model.safetensors' is not a plain file name"):
        load_checkpoint(ckpt)


def test_missing_pooler_is_random_with_a_warning(ckpt, caplog):
    # As saved by BertForMaskedLM, or BertModel(add_pooling_layer=False).
    rewrite_weights(ckpt, lambda w: [w.pop("pooler.dense.weight"), w.pop("pooler.dense.bias")])
    with caplog.at_level(logging.WARNING, logger="tflm_mcubert.model.hf_import"):
        loaded = load_checkpoint(ckpt)
    assert "no pooler weights; pooler_output comes from a randomly initialised pooler" in caplog.text
    assert loaded.model.pooler.kernel.shape == (32, 32)


def test_missing_pooler_in_a_classifier_is_an_error(tmp_path, make_hf_checkpoint):
    ckpt = make_hf_checkpoint(tmp_path, classifier=True)
    rewrite_weights(ckpt, lambda w: [w.pop("bert.pooler.dense.weight"), w.pop("bert.pooler.dense.bias")])
    with pytest.raises(
        UserError,
        match=r"2 weight\(s\) of a 2-layer classifier missing: "
        r"pooler\.dense\.bias, pooler\.dense\.weight",
    ):
        load_checkpoint(ckpt)


# --- pytorch_model.bin ---------------------------------------------------------------------------------


class RunsAShellCommand:
    """Unpickling this runs `touch <marker>`: the classic malicious-checkpoint payload."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


@pytest.mark.filterwarnings("ignore:Detected pickle protocol 4")  # torch's, for the legacy case
@pytest.mark.parametrize("writer", ["torch.save", "pickle protocol 2", "pickle protocol 4"])
def test_pickle_payload_is_refused_not_executed(tmp_path, make_hf_checkpoint, writer):
    import torch

    ckpt = make_hf_checkpoint(tmp_path, fmt="bin")
    bin_path = ckpt / "pytorch_model.bin"
    marker = tmp_path / "payload-ran"
    state = {"payload": RunsAShellCommand(marker), **torch.load(bin_path, weights_only=True)}
    if writer == "torch.save":
        torch.save(state, bin_path)
    else:  # a legacy, non-zip pickle, as very old checkpoints are
        with open(bin_path, "wb") as f:
            pickle.dump(state, f, protocol=int(writer[-1]))

    with pytest.raises(
        UserError,
        match=r"pytorch_model\.bin: refused to unpickle \(.+\): only plain "
        r"tensor checkpoints are accepted",
    ) as raised:
        load_checkpoint(ckpt)
    assert not marker.exists()
    if writer != "pickle protocol 4":  # protocol 4 is refused at its first FRAME opcode, before the payload
        assert "it references posix.system" in str(raised.value)


def test_bin_that_is_not_a_state_dict(tmp_path, make_hf_checkpoint):
    import torch

    ckpt = make_hf_checkpoint(tmp_path, fmt="bin")
    torch.save({"model": {"a": torch.zeros(2)}}, ckpt / "pytorch_model.bin")
    with pytest.raises(UserError, match="expected a flat mapping of tensor names to tensors"):
        load_checkpoint(ckpt)


def test_truncated_bin(tmp_path, make_hf_checkpoint):
    ckpt = make_hf_checkpoint(tmp_path, fmt="bin")
    data = (ckpt / "pytorch_model.bin").read_bytes()
    (ckpt / "pytorch_model.bin").write_bytes(data[: len(data) // 2])
    with pytest.raises(UserError, match="pytorch_model.bin: not a readable PyTorch checkpoint"):
        load_checkpoint(ckpt)


def test_bin_without_torch_installed(tmp_path, make_hf_checkpoint, monkeypatch):
    ckpt = make_hf_checkpoint(tmp_path, fmt="bin")
    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` raise ImportError
    with pytest.raises(UserError, match="needs PyTorch; install torch, or convert the checkpoint to safetensors"):
        load_checkpoint(ckpt)


@pytest.mark.parametrize("value", [True, "BertModel", [1], {"a": "BertModel"}])
def test_architectures_that_are_not_a_list_of_names_are_named(ckpt, value):
    edit_config(ckpt, architectures=value)
    with pytest.raises(UserError, match="architectures must be a list of class names"):
        load_checkpoint(ckpt)


@pytest.mark.parametrize("value", [None, 3, "labels"])
def test_an_id2label_that_is_not_a_mapping_loads_or_is_named(ckpt, value):
    edit_config(ckpt, architectures=["BertForSequenceClassification"], id2label=value)
    try:
        load_checkpoint(ckpt)
    except UserError:
        pass
