"""Refusing weights that hold NaN or inf, by name, before they reach quantization."""

from __future__ import annotations

import numpy as np

from tflm_mcubert.errors import UserError


def require_finite(arrays: dict[str, np.ndarray], *, source: str) -> None:
    """A UserError naming the first float tensor holding NaN or inf, and how many such values it has.

    A diverged training run or a corrupted file would otherwise surface deep in quantization as a
    scale or zero point out of range, without saying which weight is bad."""
    for name, array in arrays.items():
        if array.dtype.kind != "f" and array.dtype.name != "bfloat16":  # ml_dtypes' (a second to import)
            continue
        bad = int(array.size - np.count_nonzero(np.isfinite(array.astype(np.float32, copy=False))))
        if bad:
            raise UserError(
                f"{source}: weight {name} has {bad:,} non-finite value{'s' * (bad != 1)} (NaN or inf) "
                f"of {array.size:,}: the checkpoint is corrupt or its training diverged"
            )
