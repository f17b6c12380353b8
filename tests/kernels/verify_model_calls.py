"""mcubert_verify_model and mcubert_verify_model_expected through ctypes, for the verifier tests."""

from __future__ import annotations

import ctypes

from tflm_mcubert.ops import kernel_abi


def call_verify(library: ctypes.CDLL, model: bytes, expected: tuple[int, int] | None = None):
    """(status, mcubert_model_integrity, message) of mcubert_verify_model, or of
    mcubert_verify_model_expected with `expected` = (size, CRC-32)."""
    data = (ctypes.c_uint8 * max(len(model), 1)).from_buffer_copy(model or b"\0")
    result = kernel_abi.ModelIntegrityC()
    message = ctypes.create_string_buffer(kernel_abi.MESSAGE_CAPACITY)
    size = ctypes.c_uint32(len(model))
    if expected is None:
        status = library.mcubert_verify_model(data, size, ctypes.byref(result), message)
    else:
        status = library.mcubert_verify_model_expected(
            data, size, *(ctypes.c_uint32(v) for v in expected), ctypes.byref(result), message
        )
    return status, result, message.value.decode()
