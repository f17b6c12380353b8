"""Hypothesis fuzzing of the Python parsers: the model reader and the checkpoint loader.

Each corrupted input must end in the project's own error type (ModelFormatError / UserError) or be
read to exactly what was exported; any other exception is a finding. The model reader is fuzzed
twice: as stored (the integrity record rejects almost everything, cheaply), and with the record
re-sealed after the mutation — a crafted file whose CRCs agree — so the structural parser behind the
record sees every mutation too.
"""

import json
import os
import shutil

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.numpy import load_file, save_file

from tests.export.mcubert_models import random_inputs, small_export
from tflm_mcubert.errors import UserError
from tflm_mcubert.runtime.reference import ReferenceInputError, run_reference
from tflm_mcubert.tflite.integrity import add_integrity_record
from tflm_mcubert.tflite.mcubert_reader import ModelFormatError, read_model

EXAMPLES = int(os.environ.get("MCUBERT_PROPERTY_EXAMPLES", 150))
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
SEQ_LEN = 8


@pytest.fixture(scope="module")
def exported():
    model_bytes = small_export(SEQ_LEN).tflite
    inputs = random_inputs(np.random.default_rng(0), SEQ_LEN, 300, valid=6)
    return model_bytes, inputs, run_reference(read_model(model_bytes), inputs).outputs


def mutations(size: int):
    """(kind, position, value): flip a byte, zero an aligned word, truncate, or overwrite a run."""
    return st.tuples(
        st.sampled_from(["flip", "zero-word", "truncate", "overwrite"]),
        st.integers(0, size - 1),
        st.integers(1, 255),
        st.binary(min_size=1, max_size=16),
    )


def mutate(data: bytes, mutation) -> bytes:
    kind, position, value, run = mutation
    out = bytearray(data)
    if kind == "flip":
        out[position] ^= value
    elif kind == "zero-word":
        start = position & ~3
        out[start : start + 4] = bytes(len(out[start : start + 4]))
    elif kind == "truncate":
        del out[position:]
    else:
        out[position : position + len(run)] = run
    return bytes(out)


def read_or_named_error(model_bytes: bytes, inputs):
    """The reference outputs, or None when the reader (or the reference's input check) named a problem."""
    try:
        return run_reference(read_model(model_bytes), inputs).outputs
    except (ModelFormatError, ReferenceInputError):
        return None


@SETTINGS
@given(data=st.data())
def test_a_corrupted_model_is_named_or_reads_as_exported(exported, data):
    model_bytes, inputs, expected = exported
    corrupted = mutate(model_bytes, data.draw(mutations(len(model_bytes))))
    outputs = read_or_named_error(corrupted, inputs)
    if outputs is not None:
        for name, value in outputs.items():
            np.testing.assert_array_equal(value, expected[name])


@SETTINGS
@given(data=st.data())
def test_a_crafted_model_with_a_valid_record_reaches_only_named_errors(exported, data):
    model_bytes, inputs, _ = exported
    corrupted = mutate(model_bytes, data.draw(mutations(len(model_bytes))))
    try:
        crafted = add_integrity_record(corrupted)
    except Exception:  # the mutation broke the way to the record: the plain reader's case above
        return
    read_or_named_error(crafted, inputs)  # outputs may differ: the file says so, consistently


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from tests.conftest import build_hf_checkpoint

    return build_hf_checkpoint(tmp_path_factory.mktemp("ckpt"), classifier=True, num_labels=2)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(1 << 70), 1 << 70) | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)


@SETTINGS
@given(
    key=st.sampled_from(
        [
            "hidden_size",
            "num_attention_heads",
            "num_hidden_layers",
            "vocab_size",
            "intermediate_size",
            "max_position_embeddings",
            "type_vocab_size",
            "hidden_act",
            "layer_norm_eps",
            "num_labels",
            "id2label",
            "model_type",
            "architectures",
            "pad_token_id",
        ]
    ),
    value=JSON_VALUES,
)
def test_any_config_value_loads_or_is_named(checkpoint, tmp_path_factory, key, value):
    from tflm_mcubert.model.hf_import import load_checkpoint

    copy = tmp_path_factory.mktemp("cfg") / "ckpt"
    shutil.copytree(checkpoint, copy)
    config = json.loads((copy / "config.json").read_text())
    config[key] = value
    (copy / "config.json").write_text(json.dumps(config))
    try:
        load_checkpoint(copy)
    except UserError:
        pass


@SETTINGS
@given(data=st.data(), target=st.sampled_from(["model.safetensors", "vocab.txt", "tensor"]))
def test_corrupted_weights_or_vocabulary_load_or_are_named(checkpoint, tmp_path_factory, data, target):
    from tflm_mcubert.model.hf_import import load_checkpoint

    copy = tmp_path_factory.mktemp("bytes") / "ckpt"
    shutil.copytree(checkpoint, copy)
    if target == "tensor":  # a well-formed file whose tensor has another shape or dtype
        weights = load_file(copy / "model.safetensors")
        name = data.draw(st.sampled_from(sorted(weights)))
        dtype = data.draw(st.sampled_from([np.float32, np.float16, np.int64, np.int8]))
        shape = data.draw(st.lists(st.integers(0, 5), max_size=3))
        weights[name] = np.zeros(shape, dtype)
        save_file(weights, copy / "model.safetensors", metadata={"format": "pt"})
    else:
        path = copy / target
        raw = path.read_bytes()
        path.write_bytes(mutate(raw, data.draw(mutations(len(raw)))))
    try:
        load_checkpoint(copy)
    except UserError:
        pass
