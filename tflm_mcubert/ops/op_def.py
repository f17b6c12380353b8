"""OpDef: one MCUBERT op declared once; Node: one use of an op in a model.

Every op module (embedding.py, attention.py, mlp.py, classifier_head.py) ends with its `DEFINITION`,
and `registry.OPS` collects them. The writer, reader, reference runner, kernel ABI, firmware data and
op resolver read an op's facts from here instead of switching on its name, so a new op is a new
module plus one registry line (docs/adding-an-op.md).

A model is a list of `Node`s (a topology builder makes it: `QuantizedBert.nodes()` for BERT). A node
names the graph values its run-time inputs read ("input_ids", "token_type_ids", "attention_mask",
"hidden") and writes its op's output value ("hidden" or "logits").
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import numpy as np

from tflm_mcubert.ops.contract import CONTRACTS, OpContract
from tflm_mcubert.ops.quantization import TensorQuant

# The value the encoder rewrites op after op: one tensor per writer (each with its own quantization),
# all at one arena offset. Other values are one tensor each.
CHAINED_VALUE = "hidden"
# The model's output tensor name, by the value the last node writes.
MODEL_OUTPUT_NAMES = {"hidden": "last_hidden_state", "logits": "logits", "top": "top_k"}

# reference(params, run-time inputs in contract order, output buffer, scratch or None) -> output
Reference = Callable[[Any, Sequence[np.ndarray], np.ndarray, "np.ndarray | None"], np.ndarray]


@dataclasses.dataclass(frozen=True)
class OpDef:
    code: str  # custom code in the .tflite, TFLM registration name (Register_<code>)
    kind: str  # the op's name everywhere else: plan steps, report.json, --tile, node names
    c_name: str  # stem of the C API: mcubert_<c_name>_s8 / _validate / _get_buffer_size / _params
    params_type: type  # the reference's validated parameters: options(), tensors(), from_serialized()
    runtime_inputs: tuple[str, ...]  # inputs computed at run time (kernel arguments); the rest are constants
    output: str  # the value the op writes: "hidden" or "logits"
    in_place: bool  # the output overwrites run-time input 0 (one arena buffer)
    per_layer: bool  # used once per encoder layer: nodes are named "layer<i>.<kind>"
    tiled: bool  # its schedule has a token tile (--tile <kind>=t)
    reference: Reference
    scratch_bytes: Callable[[Any], int]  # of validated params
    # of the shape alone, for planning before parameters exist: (seq_len, dims (hidden, heads, ffn), tile)
    plan_scratch: Callable[[int, Any, "int | None"], int]
    buffer_size_args: Callable[[Any], tuple[int, ...]]  # arguments of mcubert_<c_name>_get_buffer_size
    output_shape: Callable[[Any], tuple[int, ...]]  # of the output tensor, batch dimension included
    # The cost model's terms (ops/kernel_events.py), of (seq_len, dims, tile); None: no formula yet.
    cost_features: Callable[[int, Any, int], dict[str, float]] | None = None  # loop-nest event counts
    weight_traffic: Callable[[int, Any, int], int] | None = None  # weight bytes one call reads from Flash
    # Its linear layers whose storage width is an option (params attributes, SPEC 3.1.2), in input order.
    linear_layers: tuple[str, ...] = ()

    @property
    def contract(self) -> OpContract:
        return CONTRACTS[self.code]

    @property
    def tensor_names(self) -> list[str]:
        """The kernel's tensor list (validate's views): the contract's inputs, then "output"."""
        return [t.name for t in self.contract.inputs] + ["output"]

    @property
    def weight_fields(self) -> list[str]:
        """Fields of mcubert_<c_name>_weights, in struct order (the constant inputs, contract order)."""
        return [t.name for t in self.contract.inputs if t.name not in self.runtime_inputs]

    @property
    def kernel_symbol(self) -> str:
        return f"mcubert_{self.c_name}_s8"

    @property
    def validate_symbol(self) -> str:
        return f"mcubert_{self.c_name}_validate"

    @property
    def buffer_size_symbol(self) -> str:
        return f"mcubert_{self.c_name}_get_buffer_size"

    @property
    def registration(self) -> str:
        return f"Register_{self.code}"

    def node_name(self, layer: int) -> str:
        return f"layer{layer}.{self.kind}" if self.per_layer else self.kind

    def constant_bytes(self, params) -> int:
        """Flash bytes of the op's constant tensors."""
        return sum(int(a.nbytes) for a in params.tensors().values())

    @property
    def output_dtype(self) -> np.dtype:
        return np.dtype(self.contract.outputs[0].dtype)

    def output_elements(self, params) -> int:
        return int(np.prod(self.output_shape(params)))


def hidden_shape(params) -> tuple[int, ...]:
    return (1, params.seq_len, params.hidden)


@dataclasses.dataclass(frozen=True, eq=False)
class Node:
    name: str  # "embedding", "layer0.attention", ..., "head"
    op: OpDef
    params: Any  # op.params_type, validated
    inputs: tuple[str, ...]  # the graph value each run-time input reads, in op.runtime_inputs order
    output_quant: TensorQuant | None  # of the value it writes

    def run(self, values: dict[str, np.ndarray], scratch: np.ndarray | None = None) -> np.ndarray:
        """The reference on separate arrays: reads `values`, stores the output there, returns it."""
        inputs = [values[name] for name in self.inputs]
        if self.op.in_place:
            output = inputs[0]
        else:
            output = np.zeros(self.op.output_shape(self.params)[1:], self.op.output_dtype)
        values[self.op.output] = self.op.reference(self.params, inputs, output, scratch)
        return values[self.op.output]
