"""Errors and argument checks shared by the MCUBERT ops.

Every message starts with the op and the field ("MCUBERT_ATTENTION: key.channels: ..."), because the
same checks run on parameters built in Python, on tensors read back from a .tflite, and on options
decoded from a flexbuffer, and a user has to know which of the dozens of arrays is wrong.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from tflm_mcubert.errors import UserError


class OpSpecError(UserError, ValueError):
    """An op parameter, tensor or option violates the numerics contract (ops/SPEC.md)."""

    def __init__(self, op: str, field: str, problem: str):
        super().__init__(f"{op}: {field}: {problem}")
        self.op = op
        self.field = field
        self.problem = problem


def check_int(op: str, field: str, value, lo: int, hi: int) -> int:
    """A Python or numpy integer (not bool) in [lo, hi]."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise OpSpecError(op, field, f"expected an integer, got {type(value).__name__} {value!r}")
    value = int(value)
    if not lo <= value <= hi:
        raise OpSpecError(op, field, f"{value} is outside [{lo}, {hi}]")
    return value


def check_array(
    op: str, field: str, array, dtype, shape: Sequence[int] | None = None, lo: int | None = None, hi: int | None = None
) -> np.ndarray:
    """A numpy array of exactly `dtype` (no silent casts: a float table is a bug upstream)."""
    if not isinstance(array, np.ndarray):
        raise OpSpecError(op, field, f"expected a numpy array, got {type(array).__name__}")
    if array.dtype != np.dtype(dtype):
        raise OpSpecError(op, field, f"expected dtype {np.dtype(dtype).name}, got {array.dtype.name}")
    if shape is not None and tuple(array.shape) != tuple(shape):
        raise OpSpecError(op, field, f"expected shape {tuple(shape)}, got {tuple(array.shape)}")
    if array.size and lo is not None and int(array.min()) < lo:
        raise OpSpecError(op, field, f"value {int(array.min())} is below the minimum {lo}")
    if array.size and hi is not None and int(array.max()) > hi:
        raise OpSpecError(op, field, f"value {int(array.max())} is above the maximum {hi}")
    return array


def check_writable_view(op: str, field: str, array, dtype, shape: Sequence[int]) -> np.ndarray:
    """An in/out buffer: right dtype and shape, C-contiguous (kernels index it as rows) and writable."""
    check_array(op, field, array, dtype, shape)
    if not array.flags.c_contiguous:
        raise OpSpecError(op, field, "must be C-contiguous (row-major, as in the arena)")
    if not array.flags.writeable:
        raise OpSpecError(op, field, "must be writable (the op works in place)")
    return array
