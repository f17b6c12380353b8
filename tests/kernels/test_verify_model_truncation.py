"""A model that is not all there is never MCUBERT_OK: truncated encoder and decoder exports through the
plain mcubert_verify_model (the bytes a C user has, no expected values) and mcubert_verify_model_expected.

Truncated as stored, the record's size word refuses them. Truncated and then resealed (the record's size
and CRC rewritten to agree with what is left, as a crafted file or a tool that re-signs what it has would
do), only the walk of the structure can: every offset and length must point inside the bytes given.
"""

import ctypes

import pytest
from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as schema

from tests.export.mcubert_models import small_decoder_export, small_export
from tests.kernels.verify_model_calls import call_verify
from tests.tflite.record_path import record_span, resealed
from tflm_mcubert.ops import kernel_abi
from tflm_mcubert.tflite.integrity import expected_crc32
from tflm_mcubert.tflite.mcubert_reader import read_decoder, read_model
from tflm_mcubert.tflite.mcubert_writer import OFFLINE_PLAN_METADATA

MODEL_ERROR = kernel_abi.ERROR_MODEL
# Every cut in the last bytes (operator codes, tensors, options: the first structures a cut removes,
# the flatbuffer being written back to front) and every STRIDE-th cut before them.
TAIL, STRIDE = 4000, 7


@pytest.fixture(scope="module")
def library(host_library):
    return ctypes.CDLL(str(host_library))


@pytest.fixture(scope="module", params=["decoder", "encoder"])
def exported(request):
    if request.param == "decoder":
        return small_decoder_export(), read_decoder
    return small_export(16).tflite, read_model


def cuts(size: int, tail: int = TAIL, stride: int = STRIDE) -> list[int]:
    return sorted(set(range(0, size, stride)) | set(range(max(size - tail, 0), size)))


def test_every_truncation_is_refused_by_both_entry_points(library, exported):
    model, _ = exported
    assert call_verify(library, model)[0] == 0
    expected = (len(model), expected_crc32(model))
    for n in cuts(len(model)):
        status, result, message = call_verify(library, model[:n])
        assert (status, result.verified) == (MODEL_ERROR, 0), (n, message)
        assert message.startswith("model: "), message
        assert call_verify(library, model[:n], expected)[0] == MODEL_ERROR, n


def test_a_resealed_truncation_is_refused_unless_only_padding_was_cut(library, exported):
    """The record agrees with the bytes, so only the structure is left to refuse them: the plain entry
    point accepts nothing but a cut of the zeros after the last string's NUL (the model is all there,
    and the reader reads it as exported); the expected values refuse even those."""
    model, read = exported
    span, expected = record_span(model), (len(model), expected_crc32(model))
    refused = 0
    for n in cuts(len(model), tail=2500, stride=29):  # each resealed cut is a CRC of the whole file
        crafted = resealed(model[:n], span)
        if crafted is None:
            continue
        status, result, message = call_verify(library, crafted)
        if status == 0:
            assert result.verified == 1 and not any(model[n:]) and model[n - 1] == 0, n
            read(crafted)  # all there: the Python reader reads it too
        else:
            assert (status, result.verified) == (MODEL_ERROR, 0), (n, message)
            assert message.startswith("model: "), message
            refused += 1
        assert call_verify(library, crafted, expected)[0] == MODEL_ERROR, n
    assert refused > 1000


def test_a_plan_shorter_than_its_tensors_is_refused(library):
    """TFLM reads one offline-planned offset per tensor: a plan buffer without them is named as the
    Python reader names it, even under a record that agrees."""
    model = small_decoder_export()
    root = schema.Model.GetRootAs(model, 0)
    plan = next(
        root.Metadata(i).Buffer()
        for i in range(root.MetadataLength())
        if root.Metadata(i).Name().decode() == OFFLINE_PLAN_METADATA
    )
    buffer = root.Buffers(plan)
    start = buffer._tab.Vector(buffer._tab.Offset(4))
    tensors = root.Subgraphs(0).TensorsLength()
    crafted = bytearray(model)
    crafted[start - 4 : start] = (4 * (3 + tensors - 1)).to_bytes(4, "little")  # the last offset cut off
    status, _, message = call_verify(library, resealed(bytes(crafted), record_span(model)))
    assert status == MODEL_ERROR
    assert message == f"model: {OFFLINE_PLAN_METADATA}: {tensors} offsets in {tensors - 1} words for {tensors} tensors"
