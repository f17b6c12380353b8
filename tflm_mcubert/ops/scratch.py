"""Scratch layouts: where inside its one scratch buffer an op keeps each intermediate.

Every op asks the runtime for a single scratch buffer of `scratch_bytes(...)` and carves it by the
layout below, so the planner sees one block per op and the byte count is exact. Regions start on
ALIGNMENT-byte boundaries (TFLM's arena alignment), so int16/int32 regions are naturally aligned. An
*overlay* gives regions that are never live at the same time one shared start: the slot is as large
as its largest alternative.

The reference implementations run on numpy views of such a buffer, which is what lets the tests
run a whole model inside one planned arena and prove that no op writes outside its regions.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, Sequence

import numpy as np

from tflm_mcubert.ops.validation import OpSpecError

ALIGNMENT = 16


def align_up(nbytes: int, alignment: int = ALIGNMENT) -> int:
    return -(-nbytes // alignment) * alignment


@dataclasses.dataclass(frozen=True)
class Region:
    name: str
    offset: int
    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize


RegionSpec = tuple[str, Sequence[int], type]


@dataclasses.dataclass(frozen=True)
class ScratchLayout:
    op: str
    regions: tuple[Region, ...]
    total_bytes: int

    def region(self, name: str) -> Region:
        for region in self.regions:
            if region.name == name:
                return region
        raise KeyError(name)

    def views(self, buffer: np.ndarray | None) -> dict[str, np.ndarray]:
        """Typed views of each region inside `buffer` (uint8[>= total_bytes]); None allocates one."""
        if buffer is None:
            buffer = np.zeros(self.total_bytes, dtype=np.uint8)
        if not isinstance(buffer, np.ndarray) or buffer.dtype != np.uint8 or buffer.ndim != 1:
            raise OpSpecError(self.op, "scratch", "expected a 1-D uint8 numpy buffer")
        if not buffer.flags.c_contiguous or not buffer.flags.writeable:
            raise OpSpecError(self.op, "scratch", "must be contiguous and writable")
        if buffer.size < self.total_bytes:
            raise OpSpecError(self.op, "scratch", f"{buffer.size} bytes given, {self.total_bytes} needed")
        return {r.name: buffer[r.offset : r.offset + r.nbytes].view(r.dtype).reshape(r.shape) for r in self.regions}


class LayoutBuilder:
    def __init__(self, op: str):
        self._op = op
        self._offset = 0
        self._regions: list[Region] = []

    def _place(self, start: int, specs: Iterable[RegionSpec]) -> int:
        offset = start
        for name, shape, dtype in specs:
            region = Region(name, offset, tuple(int(n) for n in shape), np.dtype(dtype))
            self._regions.append(region)
            offset += align_up(region.nbytes)
        return offset

    def add(self, name: str, shape: Sequence[int], dtype) -> "LayoutBuilder":
        self._offset = self._place(self._offset, [(name, shape, dtype)])
        return self

    def overlay(self, *alternatives: Sequence[RegionSpec]) -> "LayoutBuilder":
        """Each alternative is laid out sequentially from the same start; the slot takes the largest."""
        start = self._offset
        self._offset = max(self._place(start, alt) for alt in alternatives)
        return self

    def build(self) -> ScratchLayout:
        return ScratchLayout(self._op, tuple(self._regions), self._offset)
