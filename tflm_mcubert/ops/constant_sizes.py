"""An op's constant bytes from its contract's tensor signatures alone, before any parameter exists.

The contract (ops/contract.py) declares each input's shape in the op's own symbols ("[packed(d, d)]",
"[d, 3]", "[T, d]"); evaluating them at a model's sizes gives the Flash its constants take, so a search
over model shapes can price thousands of candidates in milliseconds from the same declaration the
kernels, the writer and SPEC.md read (a test checks it against the writer's bytes).
"""

from __future__ import annotations

import math

from tflm_mcubert.ops.linear import stored_size
from tflm_mcubert.ops.op_def import OpDef

_ITEM_BYTES = {"int8": 1, "int16": 2, "int32": 4}


def _dimensions(shape: str) -> list[str]:
    """A signature's dimensions: [packed(d, d)] -> ["packed(d, d)"], [c, d, 2] -> ["c", " d", " 2"]."""
    inner, depth, start, out = shape.strip()[1:-1], 0, 0, []
    for i, char in enumerate(inner):
        depth += (char == "(") - (char == ")")
        if char == "," and depth == 0:
            out.append(inner[start:i])
            start = i + 1
    return [*out, inner[start:]]


def tensor_bytes(op: OpDef, name: str, sizes: dict[str, int], layer_bits: dict[str, int] | None = None) -> int:
    """Bytes of input `name` of `op` at `sizes` (the contract's symbols: d, ffn, s, c, T, labels, ...); a
    linear layer's packed weights at its width in `layer_bits` (layer name -> 4 or 8; 8 when absent)."""
    signature = next(t for t in op.contract.inputs if t.name == name)
    bits = (layer_bits or {}).get(name.removesuffix("_weights"), 8)
    symbols = {**sizes, "packed": lambda rows, columns: stored_size(rows, columns, bits)}
    try:
        extent = math.prod(eval(d, {"__builtins__": {}}, symbols) for d in _dimensions(signature.shape))  # noqa: S307
    except NameError as missing:
        raise ValueError(f"{op.code}.{name} {signature.shape}: no size for {missing.name}") from None
    return _ITEM_BYTES[signature.dtype] * extent


def constant_bytes(
    op: OpDef, sizes: dict[str, int], layer_bits: dict[str, int] | None = None, exclude: tuple[str, ...] = ()
) -> int:
    """Bytes of every constant input of `op` (its contract's inputs less the run-time ones and `exclude`)."""
    return sum(tensor_bytes(op, name, sizes, layer_bits) for name in op.weight_fields if name not in exclude)
