"""The small synthetic shapes bench/kernel_cost.py --fit measures to refit the cost formulas of
tflm_mcubert/schedule/kernel_cost.py, their kernel calls, and the coefficients printed for pasting.

The shapes spread sequence length, width, heads (or FFN size) and tile, odd lengths included, so the
least-squares fit sees every term of the formulas move on its own.
"""

from __future__ import annotations

import numpy as np

from tflm_mcubert.ops import kernel_abi, testing
from tflm_mcubert.ops.attention import AttentionParams
from tflm_mcubert.ops.mlp import MLPParams
from tflm_mcubert.ops.quantization import TensorQuant

FIT_ATTENTION = [
    (s, d, h, t)
    for s, d, h, t in (
        (8, 32, 1, 4),
        (12, 32, 2, 3),
        (16, 64, 2, 4),
        (16, 64, 4, 5),
        (20, 32, 2, 7),
        (24, 64, 1, 8),
        (24, 128, 2, 4),
        (28, 64, 2, 2),
        (32, 32, 4, 1),
        (32, 64, 2, 6),
        (32, 128, 4, 16),
        (36, 64, 2, 9),
        (40, 32, 1, 40),
        (40, 128, 2, 12),
        (44, 64, 4, 4),
        (48, 32, 2, 11),
        (48, 64, 2, 48),
        (52, 128, 4, 8),
        (56, 64, 1, 13),
        (64, 32, 2, 4),
        (64, 64, 4, 3),
        (64, 128, 2, 32),
        (16, 256, 4, 4),
        (24, 256, 8, 6),
        (12, 64, 2, 1),
        (20, 128, 4, 2),
        (8, 128, 2, 8),
        (60, 32, 4, 10),
        (13, 64, 2, 4),
        (30, 32, 2, 8),
        (45, 128, 4, 6),
        (77, 64, 2, 12),
        (29, 256, 4, 5),
    )
]
FIT_MLP = [
    (s, d, f, t)
    for s, d, f, t in (
        (8, 32, 64, 4),
        (12, 32, 128, 3),
        (16, 64, 128, 4),
        (16, 64, 256, 5),
        (20, 32, 64, 7),
        (24, 64, 256, 8),
        (24, 128, 512, 4),
        (28, 64, 128, 2),
        (32, 32, 128, 1),
        (32, 64, 64, 6),
        (32, 128, 256, 16),
        (36, 64, 128, 9),
        (40, 32, 256, 40),
        (40, 128, 128, 12),
        (44, 64, 512, 4),
        (48, 32, 64, 11),
        (48, 64, 128, 48),
        (52, 128, 128, 8),
        (8, 256, 1024, 4),
        (12, 256, 256, 3),
        (16, 64, 32, 16),
        (20, 96, 384, 6),
        (13, 64, 256, 4),
        (30, 32, 128, 8),
        (45, 128, 512, 6),
    )
]


def fit_tasks() -> list[tuple]:
    tasks = []
    for s, d, h, t in FIT_ATTENTION:
        tasks.append(("fit_attention", s, d, h, t))
    for s, d, f, t in FIT_MLP:
        tasks.append(("fit_mlp", s, d, f, t))
    return tasks


def fit_call(kind: str, s: int, d: int, second: int, t: int):
    """A small synthetic op for the formula fit (realistic quantization), as a kernel call."""
    rng = np.random.default_rng(s * 131 + d * 7 + second + t)
    if kind == "attention":
        fa = testing.float_attention(rng, d, second, sharpness=2.0)
        x = rng.normal(size=(s, d))
        inq = TensorQuant.observe(x, symmetric=False)
        xq = inq.quantize(x)
        params = AttentionParams.quantize(
            fa, fa.calibrate(inq.dequantize(xq), np.ones(s, bool), inq), seq_len=s, tile=t
        )
        call = kernel_abi.attention_call(params, xq, np.ones(s, np.int8))
    else:
        fm = testing.float_mlp(rng, d, second)
        x = rng.normal(size=(s, d))
        inq = TensorQuant.observe(x, symmetric=False)
        xq = inq.quantize(x)
        params = MLPParams.quantize(fm, fm.calibrate(inq.dequantize(xq), inq), seq_len=s, tile=t)
        call = kernel_abi.mlp_call(params, xq)
    return call


def print_fitted(fitted: dict) -> None:
    print("\n# fitted coefficients (paste into tflm_mcubert/schedule/kernel_cost.py)")
    for (kind, quantity), coefficients in fitted.items():
        name = f"{kind.upper()}_{'INSTRUCTIONS' if quantity == 'instructions' else 'CYCLES_M7'}"
        body = ", ".join(f'"{k}": {v:.6g}' for k, v in coefficients.items())
        print(f"{name} = {{{body}}}")
