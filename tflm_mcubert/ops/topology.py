"""A model's topology: which ops run in which order, the graph's inputs, the state kept between invokes,
and how a .tflite says which topology it holds.

    ENCODER   MCUBERT_EMBEDDING, (MCUBERT_ATTENTION, MCUBERT_MLP) x L, optional MCUBERT_CLASSIFIER_HEAD
    DECODER   MCUBERT_DECODER_EMBEDDING, (MCUBERT_CAUSAL_ATTENTION, MCUBERT_DECODER_MLP) x L, MCUBERT_LM_HEAD,
              optional MCUBERT_SAMPLE

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
class State:
    """State kept between invokes: a TFLM variable tensor, zeroed by ResetVariableTensors, one per op that reads
    it (a decoder's KV cache per layer). `input` is the op's run-time input that reads and writes it; its graph
    value is `input` + the op's layer index."""

    input: str
    dtype: np.dtype
    shape: Callable[[Any], tuple[int, ...]]  # of the params of the op that reads it
    plan_bytes: Callable[[int, int], int]  # of (positions, hidden), before parameters exist: shape's bytes
    noun: str  # how messages call it


@dataclasses.dataclass(frozen=True)
class Topology:
    name: str  # "encoder", "decoder": how messages and report.json call it
    description: str  # the .tflite's description
    first: OpDef  # the op before the layers (the one a reader tells topologies apart by)
    layer: tuple[OpDef, ...]  # one layer's ops, in order
    # The ops after the layers: a model ends with ending[:n], n from least_ending to len(ending) (an encoder
    # without a classifier: n = 0; a decoder that samples its next token: n = 2).
    ending: tuple[OpDef, ...]
    least_ending: int
    inputs: tuple[GraphInput, ...]  # the graph's inputs, in the .tflite's order
    # The graph value each op's run-time input of this name reads, where the names differ.
    values_of_inputs: tuple[tuple[str, str], ...] = ()
    state: tuple[State, ...] = ()  # the run-time inputs that read state kept between invokes
    one_position_per_invoke: bool = False  # its values hold one position (a decoder step), not the sequence
    share_constants: bool = False  # equal constants stored once (a tied table read by two ops)

    @property
    def last(self) -> OpDef:
        """The first op after the layers (the encoder's classifier head, the decoder's LM head)."""
        return self.ending[0]

    def ops(self, layers: int, ends: int = 1) -> list[OpDef]:
        """The op sequence of a model of `layers` layers and the first `ends` ops of the ending (at least
        least_ending): what its nodes are, known before parameters."""
        ends = max(self.least_ending, min(int(ends), len(self.ending)))
        return [self.first, *self.layer * layers, *self.ending[:ends]]

    def shape_of(self, ops: list[OpDef]) -> tuple[int, int]:
        """(layers, ops of the ending) of an op sequence; a ValueError names how it is not this topology."""
        for ends in range(len(self.ending), self.least_ending - 1, -1):
            layers = (len(ops) - 1 - ends) // len(self.layer)
            if layers >= 1 and ops == self.ops(layers, ends):
                return layers, ends
        endings = " | ".join(", ".join(o.code for o in self.ending[:n]) or "nothing" for n in self._endings())
        raise ValueError(
            f"op sequence {[o.code for o in ops]} is not {self.first.code}, "
            f"({', '.join(o.code for o in self.layer)}) x L >= 1, then {endings}"
        )

    def _endings(self) -> range:
        return range(self.least_ending, len(self.ending) + 1)

    def steps(self, layers: int, ends: int = 1) -> list[tuple[OpDef, str, tuple[str, ...]]]:
        """(op, node name, the graph values its run-time inputs read) of each op in run order: what a
        planner needs before the model has parameters."""
        out, seen = [], {}
        for op in self.ops(layers, ends):
            layer = seen[op.kind] = seen.get(op.kind, -1) + 1
            out.append((op, op.node_name(layer), tuple(self.value_of_input(n, layer) for n in op.runtime_inputs)))
        return out

    def value_of_input(self, name: str, layer: int) -> str:
        """The graph value an op's run-time input `name` reads in layer `layer`."""
        if any(state.input == name for state in self.state):
            return f"{name}{layer}"
        return dict(self.values_of_inputs).get(name, name)

    def state_of(self, value: str) -> State | None:
        """The state a graph value holds (None: it is not state)."""
        return next((s for s in self.state if value.startswith(s.input) and value[len(s.input) :].isdigit()), None)

    def is_state(self, value: str) -> bool:
        return self.state_of(value) is not None


_INT32, _INT8 = np.dtype(np.int32), np.dtype(np.int8)

ENCODER = Topology(
    name="encoder",
    description="MCUBERT int8 BERT (tflm-mcubert)",
    first=op_of(contract.EMBEDDING),
    layer=(op_of(contract.ATTENTION), op_of(contract.MLP)),
    ending=(op_of(contract.CLASSIFIER_HEAD),),
    least_ending=0,
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
    ending=(op_of(contract.LM_HEAD), op_of(contract.SAMPLE)),  # the next token: the best id, or one drawn
    least_ending=1,
    inputs=(GraphInput("input_id", _INT32, False), GraphInput("position", _INT32, False)),
    state=(
        State(
            "cache",
            _INT8,
            shape=lambda attention: (2, attention.context, attention.hidden),
            plan_bytes=lambda positions, hidden: 2 * positions * hidden,
            noun="layer's KV cache",
        ),
        State("rng_state", _INT32, shape=lambda p: (1,), plan_bytes=lambda positions, hidden: 4, noun="sampling state"),
    ),
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
