"""The storage width of every linear layer ("matrix") of a model, 4 or 8 bits (SPEC.md 3.1.1): one value
that carries `--weight-bits 8|4`, or the width per matrix that `--weight-bits auto` chose, through
calibration, QAT and the Flash budget to each op's options (SPEC.md 3.1.2).

A matrix is named "<node>.<layer>": "layer0.attention.query", "layer1.decoder_mlp.fc2" (the node name
from OpDef.node_name, the layer from OpDef.linear_layers). Matrices not named take the default.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping

import numpy as np

from tflm_mcubert.errors import UserError
from tflm_mcubert.ops.linear import WEIGHT_BITS, uniform_width

AUTO = "auto"  # --weight-bits auto: the board's Flash chooses each matrix's width


def _checked(bits, what: str) -> int:
    if isinstance(bits, bool) or not isinstance(bits, (int, np.integer)) or int(bits) not in WEIGHT_BITS:
        raise UserError(f"{what} {bits!r}: choose 4 (int4 weights) or 8 (int8 weights)")
    return int(bits)


@dataclasses.dataclass(frozen=True)
class Widths:
    default: int = 8
    matrices: tuple[tuple[str, int], ...] = ()  # (matrix name, width) where it differs from the default, sorted

    def __post_init__(self):
        _checked(self.default, "weight bits")
        for name, bits in self.matrices:
            _checked(bits, f"{name}: weight bits")

    @classmethod
    def uniform(cls, bits: int, flag: str = "weight bits") -> "Widths":
        """Every matrix at `bits` (a bad width is a UserError naming `flag`)."""
        return cls(_checked(bits, flag))

    @classmethod
    def per_matrix(cls, widths: Mapping[str, int], default: int = 8) -> "Widths":
        """The named matrices at their widths, the rest at `default`."""
        return cls(
            default, tuple(sorted((n, _checked(b, f"{n}: weight bits")) for n, b in widths.items() if b != default))
        )

    def matrix(self, name: str) -> int:
        return dict(self.matrices).get(name, self.default)

    def of_op(self, node: str, layers: tuple[str, ...]) -> int | tuple[int, ...]:
        """What an op's `quantize(weight_bits=...)` takes for node `node` with linear layers `layers`: one
        width when they share it, else one per layer in that order."""
        if not layers:
            return self.default
        return uniform_width(tuple(self.matrix(f"{node}.{layer}") for layer in layers))

    @property
    def uniform_bits(self) -> int | None:
        """The one width of every matrix, or None when they differ."""
        return None if self.matrices else self.default

    def used(self) -> set[int]:
        """The widths a model of these matrices may store (the default's included)."""
        return {self.default, *(bits for _, bits in self.matrices)}

    def traffic_bits(self) -> int:
        """One width for the Flash-traffic estimate: the common one, or 8 when they differ (an upper bound)."""
        used = self.used()
        return used.pop() if len(used) == 1 else 8

    def to_json(self, nodes) -> int | dict:
        """How report.json gives them: the one width, or per op node of `nodes` with linear layers its one
        width or its layers' in order."""
        if self.uniform_bits is not None:
            return self.uniform_bits
        return {n.name: self.of_op(n.name, n.op.linear_layers) for n in nodes if n.op.linear_layers}
