"""Issue 28, finding 1: the integrity record cannot be switched off by the corruption it is there to catch.

Before, a model whose record was not found by its name loaded with a warning (Python) or
OK/verified = 0 (C): one flipped byte in the name `MCUBERT_INTEGRITY` plus one in a weight ran a
changed model, and a flipped root offset (byte 0) made the C verifier answer OK. Now a model with
MCUBERT ops must carry the record, the root is checked before the walk, and the device can also
check the file against the size and CRC-32 its firmware was built with
(mcubert_verify_model_expected). Every flip below must be rejected by the Python reader, by
mcubert_verify_model and by mcubert_verify_model_expected.
"""

import ctypes
import struct
import zlib

import numpy as np
import pytest

from tests.export.mcubert_models import small_export
from tests.kernels.verify_model_calls import call_verify
from tests.tflite.record_path import RECORD_HEADER_BYTES, record_path_bytes, record_span
from tests.tflite.test_integrity import constant_buffers, without_record
from tflm_mcubert.ops import kernel_abi
from tflm_mcubert.tflite.integrity import INTEGRITY_METADATA, IntegrityError, expected_crc32, verify_integrity
from tflm_mcubert.tflite.mcubert_reader import ModelFormatError, read_model

MODEL_ERROR = kernel_abi.ERROR_MODEL


@pytest.fixture(scope="module")
def exported():
    return small_export(16).tflite


@pytest.fixture(scope="module")
def library(host_library):
    return ctypes.CDLL(str(host_library))


def call_c(library, model: bytes, expected: tuple[int, int] | None = None):
    """(status, verified, message) of mcubert_verify_model, or of _expected with (size, crc32)."""
    status, result, message = call_verify(library, model, expected)
    return status, result.verified, message


def python_rejects(model: bytes) -> bool:
    try:
        verify_integrity(model)
    except IntegrityError:
        return True
    except Exception:  # a flatbuffer the lazy reader cannot walk: the reader's ModelFormatError
        return True
    return False


def flipped(data: bytes, *flips: tuple[int, int]) -> bytes:
    out = bytearray(data)
    for position, mask in flips:
        out[position] ^= mask
    return bytes(out)


def assert_all_reject(library, exported: bytes, model: bytes, what: str):
    expected = (len(exported), expected_crc32(exported))
    assert python_rejects(model), f"{what}: Python accepted it"
    status, verified, message = call_c(library, model)
    assert status == MODEL_ERROR and not verified, f"{what}: mcubert_verify_model {status}: {message}"
    status, verified, message = call_c(library, model, expected)
    assert status == MODEL_ERROR and not verified, f"{what}: mcubert_verify_model_expected {status}: {message}"


def test_the_expected_values_verify_the_intact_export_and_match_the_record(library, exported):
    start, _ = record_span(exported)
    (word3,) = struct.unpack_from("<I", exported, start + 12)
    assert expected_crc32(exported) == word3  # bit-exact with what the device compares
    assert call_c(library, exported, (len(exported), word3)) == (0, 1, "")
    assert call_c(library, exported) == (0, 1, "")


def test_another_model_or_size_than_the_firmware_was_built_for_is_refused(library, exported):
    crc = expected_crc32(exported)
    status, verified, message = call_c(library, exported, (len(exported), crc ^ 1))
    assert (status, verified) == (MODEL_ERROR, 0)
    assert message == f"model: crc32: the model's CRC-32 is 0x{crc:08x}, the firmware was built for 0x{crc ^ 1:08x}"[
        :127
    ] or message.startswith(f"model: crc32: the model's CRC-32 is 0x{crc:08x}"), message
    status, _, message = call_c(library, exported, (len(exported) + 4, crc))
    assert status == MODEL_ERROR
    assert message.startswith(f"model: size: the model is {len(exported)} bytes, the firmware was built for"), message


def test_the_two_byte_bypass_is_refused(library, exported):
    """The audit's case: one byte of the record's name and one of a weight."""
    name_at = exported.index(INTEGRITY_METADATA.encode())
    _, tensor, weight_at, _ = constant_buffers(exported)[3]
    model = flipped(exported, (name_at + 3, 0x01), (weight_at, 0x20))
    with pytest.raises(ModelFormatError, match="MCUBERT_INTEGRITY: missing, but the model uses MCUBERT ops"):
        read_model(model)
    status, verified, message = call_c(library, model)
    assert (status, verified) == (MODEL_ERROR, 0)
    assert "MCUBERT_INTEGRITY: missing" in message
    status, _, message = call_c(library, model, (len(exported), expected_crc32(exported)))
    assert status == MODEL_ERROR and "MCUBERT_INTEGRITY: missing" in message, message


@pytest.mark.parametrize("position", range(4))
def test_every_flip_of_the_root_offset_is_refused(library, exported, position):
    """Byte 0 was the C-only hole: the verifier walked a wrong root, found no record, answered OK."""
    for mask in range(1, 256):
        assert_all_reject(library, exported, flipped(exported, (position, mask)), f"byte {position} ^ {mask:#x}")


def test_every_flip_on_the_way_to_the_record_is_refused(library, exported):
    """Each bit of every byte the verifiers read to find the record (or to require it), alone and
    together with a weight flip: rejected by all three."""
    positions = record_path_bytes(exported)
    assert len(positions) > 150, len(positions)
    _, _, weight_at, _ = constant_buffers(exported)[5]
    for position in positions:
        for bit in range(8):
            what = f"byte {position} bit {bit}"
            assert_all_reject(library, exported, flipped(exported, (position, 1 << bit)), what)
            model = flipped(exported, (position, 1 << bit), (weight_at, 0x04))
            assert_all_reject(library, exported, model, what + " + weight")


def test_every_byte_outside_the_constants_is_covered(library, exported):
    """One flip in every byte that is neither constant data nor the record's naming CRC words (those
    only say where): no verifier may accept any of them, none may answer 'unverified'."""
    start, end = record_span(exported)
    skip = np.zeros(len(exported), bool)
    skip[start + RECORD_HEADER_BYTES : end] = True
    for _, _, at, length in constant_buffers(exported):
        skip[at : at + length] = True
    rng = np.random.default_rng(28)
    positions = np.flatnonzero(~skip)
    assert len(positions) > 2000, len(positions)
    for position in positions:
        mask = 1 << int(rng.integers(8))
        assert_all_reject(library, exported, flipped(exported, (int(position), mask)), f"byte {position} ^ {mask}")


def test_a_model_without_mcubert_ops_is_verified_against_the_expected_crc(library, exported):
    """Another tool's model (no record, no MCUBERT ops): unverified alone, verified by the firmware's
    values, and any flip is caught by them."""
    other = without_record(exported, rename_ops=True)
    assert expected_crc32(other) == zlib.crc32(other)
    assert call_c(library, other)[0] == kernel_abi.UNVERIFIED
    expected = (len(other), zlib.crc32(other))
    assert call_c(library, other, expected) == (0, 1, "")
    _, _, weight_at, _ = constant_buffers(other)[2]
    status, verified, message = call_c(library, flipped(other, (weight_at, 0x08)), expected)
    assert (status, verified) == (MODEL_ERROR, 0) and message.startswith("model: crc32: "), message


@pytest.mark.parametrize("cpu", ["cortex-m7", "cortex-m4"])
def test_cortex_m_refuses_the_bypass_against_the_expected_values(arm_images, exported, cpu):
    """On the device's instruction set: the intact export verifies against its expected values, the
    two-byte bypass and a byte-0 flip do not (both entry points)."""
    from tflm_mcubert.measure.arm_emulator import ArmEmulator

    emu = ArmEmulator(arm_images(cpu), cpu)
    name_at = exported.index(INTEGRITY_METADATA.encode())
    _, _, weight_at, _ = constant_buffers(exported)[3]
    cases = (
        (exported, 0),
        (flipped(exported, (name_at + 3, 0x01), (weight_at, 0x20)), MODEL_ERROR),
        (flipped(exported, (0, 0x04)), MODEL_ERROR),
    )
    for model, expected_status in cases:
        mark = emu.heap_mark()
        model_at, result_at = emu.put(model), emu.alloc(16)
        message_at = emu.alloc(kernel_abi.MESSAGE_CAPACITY)
        for call in (
            ("mcubert_verify_model", model_at, len(model), result_at, message_at),
            (
                "mcubert_verify_model_expected",
                model_at,
                len(model),
                len(exported),
                expected_crc32(exported),
                result_at,
                message_at,
            ),
        ):
            run = emu.call(*call)
            message = emu.read(message_at, kernel_abi.MESSAGE_CAPACITY).split(b"\0")[0].decode()
            verified = int(np.frombuffer(emu.read(result_at, 4), "<i4")[0])
            assert (run.value, verified) == (expected_status, int(expected_status == 0)), (call[0], message)
        emu.release(mark)
