"""A model's topology: which ops run in which order, the graph's inputs, the state kept between invokes,
and how a .tflite says which topology it holds.

    ENCODER   MCUBERT_EMBEDDING, (MCUBERT_ATTENTION, MCUBERT_MLP) x L, optional MCUBERT_CLASSIFIER_HEAD
    DECODER   MCUBERT_DECODER_EMBEDDING, (MCUBERT_CAUSAL_ATTENTION, MCUBERT_DECODER_MLP) x L, MCUBERT_LM_HEAD

The writer, the reader and the planner read these facts here, so they name no op and branch on no
model kind; a third architecture is a third `Topology` (and the parameter holder that makes its nodes,
quantize/), not a third pipeline. With the op modules, this is the only place that names ops.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np

from tflm_mcubert.ops import contract
from tflm_mcubert.ops.op_def import OpDef
from tflm_mcubert.ops.registry import op as op_of


@dataclasses.dataclass(frozen=True)
class GraphInput:
    name: str
    dtype: np.dtype
    per_position: bool  # int32[1, s] (one value per position) or int32[1] (one per invoke)

    def shape(self, positions: int) -> tuple[int, ...]:
        return (1, positions) if self.per_position else (1,)


@dataclasses.dataclass(frozen=True)
class Topology:
    name: str  # "encoder", "decoder": how messages and report.json call it
    description: str  # the .tflite's description
    first: OpDef  # the op before the layers (the one a reader tells topologies apart by)
    layer: tuple[OpDef, ...]  # one layer's ops, in order
    last: OpDef  # the op after the layers
    last_optional: bool  # a model may end with its last layer (an encoder without a classifier)
    inputs: tuple[GraphInput, ...]  # the graph's inputs, in the .tflite's order
    # The graph value each op's run-time input of this name reads, where the names differ.
    values_of_inputs: tuple[tuple[str, str], ...] = ()
    # State kept between invokes, one per layer: the run-time input that reads it and its shape of the
    # params of the op that reads it (a TFLM variable tensor, zeroed by ResetVariableTensors).
    state_input: str | None = None
    state_shape: Callable[[Any], tuple[int, ...]] | None = None
    state_noun: str = ""  # how messages call it
    # The state's bytes per layer for planning, of (positions, hidden): the same as state_shape's, before
    # parameters exist.
    plan_state_bytes: Callable[[int, int], int] | None = None
    one_position_per_invoke: bool = False  # its values hold one position (a decoder step), not the sequence
    share_constants: bool = False  # equal constants stored once (a tied table read by two ops)

    def ops(self, layers: int, with_last: bool = True) -> list[OpDef]:
        """The op sequence of a model of `layers` layers: what its nodes are, known before parameters."""
        return [self.first, *self.layer * layers, *([self.last] if with_last or not self.last_optional else [])]

    def shape_of(self, ops: list[OpDef]) -> tuple[int, bool]:
        """(layers, ends with the last op) of an op sequence; a ValueError names how it is not this topology."""
        with_last = ops[-1:] == [self.last]
        layers = (len(ops) - 1 - with_last) // len(self.layer) if ops else 0
        if layers < 1 or ops != self.ops(layers, with_last):
            last = f"{'optional ' if self.last_optional else ''}{self.last.code}"
            raise ValueError(
                f"op sequence {[o.code for o in ops]} is not {self.first.code}, "
                f"({', '.join(o.code for o in self.layer)}) x L >= 1, {last}"
            )
        return layers, with_last

    def steps(self, layers: int, with_last: bool = True) -> list[tuple[OpDef, str, tuple[str, ...]]]:
        """(op, node name, the graph values its run-time inputs read) of each op in run order: what a
        planner needs before the model has parameters."""
        out, seen = [], {}
        for op in self.ops(layers, with_last):
            layer = seen[op.kind] = seen.get(op.kind, -1) + 1
            out.append((op, op.node_name(layer), tuple(self.value_of_input(n, layer) for n in op.runtime_inputs)))
        return out

    def value_of_input(self, name: str, layer: int) -> str:
        """The graph value an op's run-time input `name` reads in layer `layer`."""
        if name == self.state_input:
            return self.state_name(layer)
        return dict(self.values_of_inputs).get(name, name)

    def state_name(self, layer: int) -> str:
        return f"{self.state_input}{layer}"

    def is_state(self, value: str) -> bool:
        return self.state_input is not None and value.startswith(self.state_input)


_INT32, _INT8 = np.dtype(np.int32), np.dtype(np.int8)

ENCODER = Topology(
    name="encoder",
    description="MCUBERT int8 BERT (tflm-mcubert)",
    first=op_of(contract.EMBEDDING),
    layer=(op_of(contract.ATTENTION), op_of(contract.MLP)),
    last=op_of(contract.CLASSIFIER_HEAD),
    last_optional=True,
    inputs=(
        GraphInput("input_ids", _INT32, True),
        GraphInput("attention_mask", _INT8, True),
        GraphInput("token_type_ids", _INT32, True),
    ),
    values_of_inputs=(("mask", "attention_mask"),),
)

DECODER = Topology(
    name="decoder",
    description="MCUBERT int8 decoder step with KV caches (tflm-mcubert)",
    first=op_of(contract.DECODER_EMBEDDING),
    layer=(op_of(contract.CAUSAL_ATTENTION), op_of(contract.DECODER_MLP)),
    last=op_of(contract.LM_HEAD),
    last_optional=False,
    inputs=(GraphInput("input_id", _INT32, False), GraphInput("position", _INT32, False)),
    state_input="cache",
    state_shape=lambda attention: (2, attention.context, attention.hidden),
    state_noun="KV cache",
    plan_state_bytes=lambda positions, hidden: 2 * positions * hidden,
    one_position_per_invoke=True,
    share_constants=True,  # the LM head reads the embedding's tables
)

TOPOLOGIES = (ENCODER, DECODER)


def topology_of(first: OpDef) -> Topology:
    """The topology whose graphs start with `first` (a ValueError if none does)."""
    for topology in TOPOLOGIES:
        if topology.first is first:
            return topology
    raise ValueError(f"no topology starts with {first.code} (known: {', '.join(t.first.code for t in TOPOLOGIES)})")
