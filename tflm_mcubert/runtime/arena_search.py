"""What both ways of running TFLM share: their error type and the arena-size bisection.

The runner of the wheel's own kernels (tflm_runner.py) and the binding of ours (tflm_binding.py)
both look for the smallest arena a model runs in, both reach TFLM through one child protocol
(tflm_process.py), and both report TFLM's refusal or crash as a TflmError.
"""

from __future__ import annotations

from typing import Callable

# Upper limit of an arena search: past it, the model is not an MCU model.
MAX_ARENA_BYTES = 1024 * 1024 * 1024


class TflmError(RuntimeError):
    """The interpreter refused the model or failed to run it; the message carries TFLM's own report."""


def smallest_passing(passes: Callable[[int], bool], *, lower_failing: int, upper: int | None = None) -> int:
    """Least n > lower_failing with passes(n), assuming passing is monotone in n.

    Without `upper`, one that passes is found by doubling from max(2 * lower_failing, 64 KiB)."""
    if upper is None:
        upper = max(2 * lower_failing, 64 * 1024)
        while not passes(upper):
            lower_failing = upper
            upper *= 2
            if upper > MAX_ARENA_BYTES:
                raise TflmError(f"the model does not run even in a {MAX_ARENA_BYTES:,}-byte arena")
    elif not passes(upper):
        raise TflmError(f"the model does not run even in a {upper:,}-byte arena")
    while upper - lower_failing > 1:
        middle = (lower_failing + upper) // 2
        if passes(middle):
            upper = middle
        else:
            lower_failing = middle
    return upper
