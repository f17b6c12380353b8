"""Hypothesis fuzzing of the Python parsers: the model reader and the checkpoint loader.

Each corrupted input must end in the project's own error type (ModelFormatError / UserError) or be
read to exactly what was exported; any other exception is a finding. The model reader is fuzzed
twice: as stored (the integrity record rejects almost everything, cheaply), and with the record
re-sealed after the mutation — a crafted file whose CRCs agree — so the structural parser behind the
record sees every mutation too. A decoder export is mutated as well (truncations resealed included),
and each mutant also goes to both C verifiers (ASan + UBSan, verify_pipe.py): a C OK must be a model
the Python reader reads as exported.
"""

import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.numpy import load_file, save_file

from tests.export.mcubert_models import decoder_steps, random_inputs, small_decoder_export, small_export
from tests.tflite.record_path import record_span, resealed
from tflm_mcubert.errors import UserError
from tflm_mcubert.runtime.reference import ReferenceInputError, run_reference
from tflm_mcubert.tflite.integrity import add_integrity_record
from tflm_mcubert.tflite.mcubert_reader import ModelFormatError, read_decoder, read_model

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
def decoder_exported():
    model_bytes = small_decoder_export()
    return model_bytes, decoder_steps(read_decoder(model_bytes).quantized)


def decoder_steps_or_named_error(model_bytes: bytes):
    try:
        return decoder_steps(read_decoder(model_bytes).quantized)
    except ModelFormatError:
        return None


def decoder_mutations(size: int):
    """mutations(), and a truncation resealed (the record rewritten to agree with the bytes left) of up
    to a quarter of the file: the structures written first, which a cut removes first."""
    return st.one_of(mutations(size), st.tuples(st.just("truncate-reseal"), st.integers(1, size // 4)))


def mutate_decoder(data: bytes, mutation) -> bytes:
    if mutation[0] != "truncate-reseal":
        return mutate(data, mutation)
    cut = data[: len(data) - mutation[1]]
    return resealed(cut, record_span(data)) or cut


@SETTINGS
@given(data=st.data())
def test_a_corrupted_decoder_is_named_or_reads_as_exported(decoder_exported, data):
    model_bytes, expected = decoder_exported
    corrupted = mutate_decoder(model_bytes, data.draw(decoder_mutations(len(model_bytes))))
    steps = decoder_steps_or_named_error(corrupted)
    if steps is not None:
        np.testing.assert_array_equal(steps, expected)


@pytest.fixture(scope="module")
def c_verifiers(tmp_path_factory):
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import verify_pipe

    if verify_pipe.run_fuzzers.compiler() is None:
        pytest.skip("clang is not installed: the C verifiers' driver is built with its ASan + UBSan")
    work = tmp_path_factory.mktemp("verify_pipe")
    pipe = verify_pipe.VerifyPipe(verify_pipe.build(work), work / "driver.log")
    yield pipe, verify_pipe.expected_of
    pipe.close()


@SETTINGS
@given(data=st.data())
def test_the_c_verifiers_accept_only_a_decoder_python_reads_as_exported(decoder_exported, c_verifiers, data):
    """Both entry points: mcubert_verify_model with the bytes alone (its OK must mean the model is all
    there: TFLM's unchecked reads follow in the driver) and _expected with the export's size and CRC."""
    (model_bytes, expected), (pipe, expected_of) = decoder_exported, c_verifiers
    corrupted = mutate_decoder(model_bytes, data.draw(decoder_mutations(len(model_bytes))))
    status, verified, expected_status = pipe.verify(corrupted, expected_of(model_bytes))
    if status == 0 or expected_status == 0:
        assert verified == 1 or status != 0
        np.testing.assert_array_equal(decoder_steps_or_named_error(corrupted), expected)


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
    loads_or_is_named(load_checkpoint, copy, key, value)


def loads_or_is_named(load, checkpoint, key: str, value) -> None:
    """`load(checkpoint)` after its config.json's `key` is set to `value`: it loads or raises UserError."""
    config = json.loads((checkpoint / "config.json").read_text())
    config[key] = value
    (checkpoint / "config.json").write_text(json.dumps(config))
    try:
        load(checkpoint)
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
