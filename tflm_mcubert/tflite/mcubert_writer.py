"""Write an MCUBERT int8 model as a .tflite: its custom ops, an offline memory plan, aligned buffers.

One writer for every topology (ops/topology.py): the graph inputs, the state tensors and the op order come
from the model's topology and nodes. The encoder's graph (one subgraph):

    inputs   input_ids int32[1, s], attention_mask int8[1, s] (0 = padding), token_type_ids int32[1, s]
    MCUBERT_EMBEDDING        (input_ids, token_type_ids, tables...)   -> hidden_0, scratch
    MCUBERT_ATTENTION  x L   (hidden_2l, attention_mask, weights...)  -> hidden_2l+1, scratch
    MCUBERT_MLP        x L   (hidden_2l+1, weights...)                -> hidden_2l+2, scratch
    MCUBERT_CLASSIFIER_HEAD  (hidden_2L, weights...)                  -> logits int8[1, n], scratch
    outputs  logits (a classifier) or last_hidden_state int8[1, s, d]

A decoder step's: inputs input_id and position int32[1], each layer's KV cache a variable tensor (state
kept between invokes), DECODER_EMBEDDING, (CAUSAL_ATTENTION, DECODER_MLP) x L, LM_HEAD -> top_k int32[1, 2, k],
the LM head's tables shared with the embedding's.

Every hidden_k is its own tensor (with its own per-channel scales and zero points along d, so a
reader can dequantize any of them), but all share one arena offset: the ops work in place. Each op's scratch is an extra
output tensor (int8[scratch bytes]) at an offline offset, rather than a RequestScratchBufferInArena:
TFLM's planner places offline buffers first and plans requested scratch online around them, which
could only cost memory. The offsets of every non-constant tensor are the planner's
(schedule/planner.py), stored as TFLM's "OfflineMemoryAllocation" metadata
([version 1, subgraphs 1, tensor count, offset per tensor], -1 for constants).

Buffers are 16-byte aligned inside the flatbuffer (TFLM reads weights in place; the Python
flatbuffers builder ignores the schema's force_align, so buffers are packed here with an explicit
alignment). The bytes depend only on the model: packing is deterministic.
"""

from __future__ import annotations

import dataclasses

import flatbuffers
import numpy as np
from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as schema

from tflm_mcubert.ops import contract
from tflm_mcubert.ops.op_def import CHAINED_VALUE, MODEL_OUTPUT_NAMES, Node
from tflm_mcubert.ops.options import encode_options
from tflm_mcubert.ops.quantization import TensorQuant
from tflm_mcubert.ops.topology import ENCODER
from tflm_mcubert.schedule.planner import Plan
from tflm_mcubert.tflite.graph import FILE_IDENTIFIER
from tflm_mcubert.tflite.integrity import INTEGRITY_METADATA, add_integrity_record, record_words

SCHEMA_VERSION = 3
BUFFER_ALIGNMENT = 16
OFFLINE_PLAN_METADATA = "OfflineMemoryAllocation"
OFFLINE_PLAN_VERSION = 1
ONLINE_PLANNED = -1
SIGNATURE_KEY = "serving_default"
INPUT_NAMES = tuple(i.name for i in ENCODER.inputs)

TENSOR_TYPES = {
    np.dtype(np.int8): schema.TensorType.INT8,
    np.dtype(np.int16): schema.TensorType.INT16,
    np.dtype(np.int32): schema.TensorType.INT32,
}


class _AlignedBufferT(schema.BufferT):
    """A Buffer whose data vector starts on a BUFFER_ALIGNMENT boundary of the final file."""

    def Pack(self, builder):
        data = None
        if self.data is not None:
            raw = np.ascontiguousarray(self.data).reshape(-1).view(np.uint8).tobytes()
            builder.StartVector(1, len(raw), BUFFER_ALIGNMENT)
            builder.head -= len(raw)
            builder.Bytes[builder.head : builder.head + len(raw)] = raw
            data = builder.EndVector()
        schema.BufferStart(builder)
        if data is not None:
            schema.BufferAddData(builder, data)
        return schema.BufferEnd(builder)


def constant_key(array: np.ndarray) -> tuple:
    """Equal constants (a tied table read by two ops) share one buffer when the builder shares them."""
    return (array.dtype.str, array.shape, np.ascontiguousarray(array).tobytes())


class _GraphBuilder:
    def __init__(self, plan: Plan, share_constants: bool = False):
        self.plan = plan
        self.shared: dict[tuple, int] | None = {} if share_constants else None
        self.tensors: list[schema.TensorT] = []
        self.buffers: list[schema.BufferT] = [_AlignedBufferT()]  # buffer 0: the empty sentinel
        self.offsets: list[int] = []
        self.operators: list[schema.OperatorT] = []
        self.opcodes: dict[str, int] = {}
        self.codes: list[schema.OperatorCodeT] = []

    def _tensor(self, name: str, dtype, shape, buffer: int, offset: int, quant: TensorQuant | None = None) -> int:
        tensor = schema.TensorT()
        tensor.name = name
        tensor.type = TENSOR_TYPES[np.dtype(dtype)]
        tensor.shape = [int(n) for n in shape]
        tensor.buffer = buffer
        if quant is not None:
            params = schema.QuantizationParametersT()
            params.scale = [float(v) for v in np.atleast_1d(quant.scale)]
            params.zeroPoint = [int(v) for v in np.atleast_1d(quant.zero_point)]
            if quant.per_channel:  # hidden states: one (scale, zero point) per channel of d
                params.quantizedDimension = len(shape) - 1
            tensor.quantization = params
        self.tensors.append(tensor)
        self.offsets.append(offset)
        return len(self.tensors) - 1

    def variable(self, name: str, dtype, shape) -> int:
        """State kept between invokes (a TFLM variable tensor) at its planned offset."""
        index = self.activation(name, dtype, shape, name)
        self.tensors[index].isVariable = True
        return index

    def constant(self, name: str, array: np.ndarray) -> int:
        key = constant_key(array) if self.shared is not None and array.size else None
        if key is not None and key in self.shared:
            return self._tensor(name, array.dtype, array.shape, self.shared[key], ONLINE_PLANNED)
        buffer = _AlignedBufferT()
        buffer.data = np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<"), copy=False)
        self.buffers.append(buffer)
        if key is not None:
            self.shared[key] = len(self.buffers) - 1
        return self._tensor(name, array.dtype, array.shape, len(self.buffers) - 1, ONLINE_PLANNED)

    def activation(self, name: str, dtype, shape, arena_buffer: str, quant=None) -> int:
        planned = self.plan.buffer(arena_buffer)
        nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
        if nbytes > planned.nbytes:
            raise AssertionError(f"{name}: {nbytes} bytes do not fit planned buffer {arena_buffer}")
        return self._tensor(name, dtype, shape, 0, planned.offset, quant)

    def scratch(self, op_name: str) -> int:
        op = self.plan.op(op_name)
        return self.activation(f"{op_name}/scratch", np.int8, (op.scratch_bytes,), op.scratch)

    def operator(self, op: str, options: dict[str, int], inputs: list[int], outputs: list[int]):
        if op not in self.opcodes:
            code = schema.OperatorCodeT()
            code.builtinCode = schema.BuiltinOperator.CUSTOM
            code.deprecatedBuiltinCode = schema.BuiltinOperator.CUSTOM
            code.customCode = op
            code.version = 1
            self.opcodes[op] = len(self.opcodes)
            self.codes.append(code)
        operator = schema.OperatorT()
        operator.opcodeIndex = self.opcodes[op]
        operator.inputs = inputs
        operator.outputs = outputs
        operator.customOptions = np.frombuffer(encode_options(op, options), np.uint8)
        operator.customOptionsFormat = schema.CustomOptionsFormat.FLEXBUFFERS
        self.operators.append(operator)


def _inputs(graph: _GraphBuilder, node: Node, values: dict[str, int]) -> list[int]:
    """The node's input tensor indices in contract order: run-time ones read from `values`, constants created."""
    runtime = dict(zip(node.op.runtime_inputs, node.inputs))
    constants = node.params.tensors()
    return [
        values[runtime[sig.name]]
        if sig.name in runtime
        else graph.constant(f"{node.name}/{sig.name}", constants[sig.name])
        for sig in node.op.contract.inputs
    ]


def _output(graph: _GraphBuilder, node: Node) -> int:
    """The node's output tensor: a chained value, or a value rewritten in place, gets one tensor per writer,
    named after it."""
    value = node.op.output
    name = f"{node.name}/{value}" if value == CHAINED_VALUE or node.op.in_place else value
    return graph.activation(name, node.op.output_dtype, node.op.output_shape(node.params), value, node.output_quant)


def _add_nodes(graph: _GraphBuilder, nodes: list[Node], values: dict[str, int]) -> None:
    """Each node's constants, output and scratch tensors and its operator; `values` maps graph values to
    the tensor that last wrote them."""
    for node in nodes:
        node_inputs = _inputs(graph, node, values)
        values[node.op.output] = _output(graph, node)
        graph.operator(
            node.op.code, node.params.options(), node_inputs, [values[node.op.output], graph.scratch(node.name)]
        )


def model_to_tflite(model, plan: Plan) -> bytes:
    """The .tflite bytes of `model` (a topology's parameters: its `topology`, `nodes()`, `graph_inputs()`
    and `variables()`), every arena tensor at the offsets of `plan`."""
    if getattr(model, "mask_mode", contract.MASK_MODE_KEY_MASK) != contract.MASK_MODE_KEY_MASK:
        raise ValueError("the exporter writes key-mask models (mask_mode 0)")
    if plan.seq_len != model.seq_len or plan.dims.hidden != model.hidden:
        raise ValueError(
            f"plan is for s={plan.seq_len}, d={plan.dims.hidden}; model s={model.seq_len}, d={model.hidden}"
        )
    nodes = model.nodes()
    for node in nodes:
        if node.op.tiled and node.params.tile != plan.tiles[node.op.kind]:
            raise ValueError("model tiles differ from the plan's")
    graph = _GraphBuilder(plan, share_constants=model.topology.share_constants)
    values = {name: graph.variable(name, dtype, shape) for name, (dtype, shape) in model.variables().items()}
    inputs = {name: graph.activation(name, dtype, shape, name) for name, (dtype, shape) in model.graph_inputs().items()}
    values.update(inputs)
    _add_nodes(graph, nodes, values)
    last = nodes[-1].op.output
    return _pack(graph, inputs, {MODEL_OUTPUT_NAMES[last]: values[last]}, model.topology.description)


def offline_plan_buffer(offsets: list[int]) -> np.ndarray:
    return np.array([OFFLINE_PLAN_VERSION, 1, len(offsets), *offsets], dtype="<i4")


def _pack(graph: _GraphBuilder, inputs: dict[str, int], outputs: dict[str, int], description: str) -> bytes:
    subgraph = schema.SubGraphT()
    subgraph.tensors = graph.tensors
    subgraph.inputs = list(inputs.values())
    subgraph.outputs = list(outputs.values())
    subgraph.operators = graph.operators
    subgraph.name = "main"

    plan_buffer = _AlignedBufferT()
    plan_buffer.data = offline_plan_buffer(graph.offsets)
    graph.buffers.append(plan_buffer)
    metadata = schema.MetadataT()
    metadata.name = OFFLINE_PLAN_METADATA
    metadata.buffer = len(graph.buffers) - 1
    # Zeros of the record's final size; filled in once the file's bytes are known.
    record_buffer = _AlignedBufferT()
    record_buffer.data = np.zeros(record_words(len(graph.buffers) + 1, len(graph.operators)), "<u4")
    graph.buffers.append(record_buffer)
    record = schema.MetadataT()
    record.name = INTEGRITY_METADATA
    record.buffer = len(graph.buffers) - 1

    signature = schema.SignatureDefT()
    signature.signatureKey = SIGNATURE_KEY
    signature.subgraphIndex = 0
    signature.inputs = [_tensor_map(name, index) for name, index in inputs.items()]
    signature.outputs = [_tensor_map(name, index) for name, index in outputs.items()]

    model = schema.ModelT()
    model.version = SCHEMA_VERSION
    model.description = description
    model.operatorCodes = graph.codes
    model.subgraphs = [subgraph]
    model.buffers = graph.buffers
    model.metadata = [metadata, record]
    model.signatureDefs = [signature]
    builder = flatbuffers.Builder(1 << 20)
    builder.Finish(model.Pack(builder), file_identifier=FILE_IDENTIFIER)
    return add_integrity_record(bytes(builder.Output()))


def _tensor_map(name: str, index: int) -> schema.TensorMapT:
    entry = schema.TensorMapT()
    entry.name = name
    entry.tensorIndex = index
    return entry


@dataclasses.dataclass(frozen=True)
class OpBytes:
    """Flash (constant) bytes of each op, for the report."""

    name: str
    op: str
    constant_bytes: int


def unique_constant_bytes(nodes: list[Node]) -> int:
    """Flash bytes of the nodes' constants with equal ones stored once (as a topology that shares constants
    stores them)."""
    arrays = {constant_key(a): a.nbytes for node in nodes for a in node.params.tensors().values() if a.size}
    return sum(arrays.values())


def constant_bytes_by_op(model) -> list[OpBytes]:
    return [OpBytes(node.name, node.op.code, node.op.constant_bytes(node.params)) for node in model.nodes()]
