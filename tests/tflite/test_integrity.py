"""The integrity record: every corrupted byte of an exported model is caught, and named where it can be."""

import random
import warnings

import flatbuffers
import numpy as np
import pytest
from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as schema

from tests.export.mcubert_models import random_inputs, small_export
from tflm_mcubert.runtime.reference import run_reference
from tflm_mcubert.tflite.integrity import INTEGRITY_METADATA, verify_integrity
from tflm_mcubert.tflite.mcubert_reader import ModelFormatError, read_model

SEQ_LEN = 16


@pytest.fixture(scope="module")
def exported():
    return small_export(SEQ_LEN).tflite


def constant_buffers(data: bytes) -> list[tuple[int, str, int, int]]:
    """(buffer index, tensor name, data start, data length) of every non-empty constant tensor."""
    model = schema.Model.GetRootAs(data, 0)
    subgraph, seen, found = model.Subgraphs(0), set(), []
    for t in range(subgraph.TensorsLength()):
        tensor = subgraph.Tensors(t)
        buffer = model.Buffers(tensor.Buffer())
        if tensor.Buffer() in seen or not buffer.DataLength():
            continue
        seen.add(tensor.Buffer())
        start = buffer._tab.Vector(buffer._tab.Offset(4))
        found.append((tensor.Buffer(), tensor.Name().decode(), start, buffer.DataLength()))
    return found


def test_an_export_carries_a_record_that_verifies(exported):
    assert verify_integrity(exported) is True
    read_model(exported)


def test_one_corrupted_byte_in_each_constant_is_named(exported):
    rng = np.random.default_rng(0)
    constants = constant_buffers(exported)
    assert len(constants) > 20
    for _, name, start, length in constants:
        corrupted = bytearray(exported)
        corrupted[start + int(rng.integers(length))] ^= 0x10
        with pytest.raises(ModelFormatError, match=f"corrupted: {name}: constant data corrupted"):
            read_model(bytes(corrupted))


def test_a_truncated_model_is_named(exported):
    with pytest.raises(ModelFormatError):
        read_model(exported[:-16])


def without_record(data: bytes, rename_ops: bool = False) -> bytes:
    """`data` packed again without the record (an older export); `rename_ops`: and its custom codes no
    longer MCUBERT_... (another tool's model)."""
    model = schema.ModelT.InitFromPackedBuf(bytearray(data), 0)
    model.metadata = [m for m in model.metadata if m.name.decode() != INTEGRITY_METADATA]
    if rename_ops:
        for code in model.operatorCodes:
            code.customCode = b"OTHER_" + code.customCode
    builder = flatbuffers.Builder(1 << 20)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def test_a_model_with_mcubert_ops_but_without_the_record_is_refused(exported):
    with pytest.raises(ModelFormatError, match="MCUBERT_INTEGRITY: missing, but the model uses MCUBERT ops"):
        read_model(without_record(exported))


def test_a_model_without_mcubert_ops_or_record_is_only_warned_about(exported):
    other = without_record(exported, rename_ops=True)
    assert verify_integrity(other) is False
    with pytest.warns(UserWarning, match="cannot be checked for corruption"):
        with pytest.raises(ModelFormatError):  # then: not an MCUBERT model (its ops are unknown)
            read_model(other)


def test_random_flips_anywhere_are_rejected_by_name_or_leave_the_output_unchanged(exported):
    """Random byte flips anywhere: no crash and no unflagged different output (a CI sample)."""
    rng = random.Random(1)
    inputs = random_inputs(np.random.default_rng(0), SEQ_LEN, 300, valid=11)
    expected = run_reference(read_model(exported), inputs).outputs
    outcomes = {"rejected": 0, "same": 0}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a flip that hides the record must not pass silently either
        for _ in range(400):
            corrupted = bytearray(exported)
            corrupted[rng.randrange(len(corrupted))] ^= 1 << rng.randrange(8)
            try:
                model = read_model(bytes(corrupted))
            except (ModelFormatError, UserWarning):
                outcomes["rejected"] += 1
                continue
            for name, value in run_reference(model, inputs).outputs.items():
                np.testing.assert_array_equal(value, expected[name])
            outcomes["same"] += 1
    assert outcomes["rejected"] > 350, outcomes
