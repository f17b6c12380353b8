"""Read an MCUBERT .tflite back into op parameters, verifying everything a kernel would rely on.

The reader trusts nothing: the flatbuffer, every custom options buffer (ops/options.py), every
tensor's type, shape and size against the op contracts, the op sequence and how tensors chain, the
quantization of the hidden states, and the offline memory plan — present, the right length, aligned,
hidden states sharing one offset, and no two buffers that are alive together overlapping. Errors
name the op (and the op's field or tensor): "layer1.attention: MCUBERT_ATTENTION: tile: ...".

First of all, the integrity record (tflite/integrity.py) is checked, so a corrupted model is named
as such (and where it was hit) before anything is parsed; a model with MCUBERT ops must carry it (a
missing record is a corruption), and one without them (another tool's) is read with a warning.
Whatever a corrupted model does to the parser ends as a ModelFormatError, never another exception.
"""

from __future__ import annotations

import dataclasses
import struct
import warnings

import numpy as np
from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as schema

from tflm_mcubert.errors import UserError
from tflm_mcubert.tflite.graph import FILE_IDENTIFIER
from tflm_mcubert.tflite.integrity import INTEGRITY_METADATA, IntegrityError, verify_integrity
from tflm_mcubert.tflite.mcubert_writer import (
    OFFLINE_PLAN_METADATA,
    OFFLINE_PLAN_VERSION,
    ONLINE_PLANNED,
)
from tflm_mcubert.ops import contract
from tflm_mcubert.ops.op_def import CHAINED_VALUE, MODEL_OUTPUT_NAMES, Node, OpDef
from tflm_mcubert.ops.options import decode_options
from tflm_mcubert.ops.quantization import TensorQuant
from tflm_mcubert.ops.scratch import ALIGNMENT, align_up
from tflm_mcubert.ops.registry import op as op_of, OPS
from tflm_mcubert.ops.validation import OpSpecError
from tflm_mcubert.ops.topology import DECODER, ENCODER, Topology, topology_of
from tflm_mcubert.quantize.holders import model_from_nodes

_DTYPES = {
    schema.TensorType.INT8: np.dtype(np.int8),
    schema.TensorType.INT16: np.dtype(np.int16),
    schema.TensorType.INT32: np.dtype(np.int32),
}


class ModelFormatError(UserError):
    """The .tflite is not a valid MCUBERT model (corrupt, truncated, or from another contract)."""


@dataclasses.dataclass(frozen=True)
class ArenaTensor:
    index: int
    name: str
    dtype: np.dtype
    shape: tuple[int, ...]
    offset: int  # offline arena offset; -1 for constants
    variable: bool = False  # state kept between invokes (a decoder's KV cache)

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


@dataclasses.dataclass(frozen=True)
class OpNode:
    """A model node placed in the .tflite: its tensors by index."""

    node: Node
    inputs: tuple[int, ...]  # every input, contract order
    outputs: tuple[int, ...]  # (hidden or logits, scratch)

    @property
    def name(self) -> str:  # "embedding", "layer0.attention", ..., "head"
        return self.node.name

    @property
    def op(self) -> str:  # custom code
        return self.node.op.code

    @property
    def definition(self) -> OpDef:
        return self.node.op

    @property
    def scratch(self) -> int:
        return self.outputs[1]

    @property
    def runtime_inputs(self) -> list[int]:
        """Tensor indices of the run-time inputs, in OpDef.runtime_inputs order."""
        sigs = self.definition.contract.inputs
        return [i for sig, i in zip(sigs, self.inputs) if sig.name in self.definition.runtime_inputs]


@dataclasses.dataclass(frozen=True, eq=False)
class McubertModel:
    quantized: object  # the topology's parameter holder (quantize/holders.py)
    tensors: tuple[ArenaTensor, ...]
    nodes: tuple[OpNode, ...]
    inputs: dict[str, int]
    outputs: dict[str, int]
    planned_bytes: int

    def tensor(self, index: int) -> ArenaTensor:
        return self.tensors[index]


def _fail(where: str, problem: str) -> ModelFormatError:
    return ModelFormatError(f"{where}: {problem}")


# What the flatbuffers reader and numpy raise on bytes that a corrupt offset points at.
_PARSE_ERRORS = (IndexError, KeyError, ValueError, TypeError, OverflowError, struct.error, UnicodeDecodeError)


def _check_integrity(data: bytes) -> None:
    try:
        verified = verify_integrity(data)
    except IntegrityError as exc:
        raise _fail("model", f"corrupted: {exc}") from None
    except _PARSE_ERRORS as exc:
        raise _fail("model", f"corrupt flatbuffer ({type(exc).__name__}: {exc})") from None
    if not verified:
        warnings.warn(
            f"the model has no {INTEGRITY_METADATA} record and no MCUBERT ops (not an MCUBERT export): "
            "it cannot be checked for corruption",
            stacklevel=3,
        )


def _unpack(model_bytes: bytes):
    data = bytes(model_bytes)
    if len(data) < 8 or data[4:8] != FILE_IDENTIFIER:
        raise _fail("model", f"not a .tflite flatbuffer (file identifier {data[4:8]!r}, expected TFL3)")
    _check_integrity(data)
    try:
        return schema.ModelT.InitFromPackedBuf(bytearray(data), 0)
    except Exception as exc:  # the generated reader indexes wherever corrupt offsets point
        raise _fail("model", f"corrupt flatbuffer ({type(exc).__name__}: {exc})") from None


def _name(value) -> str:
    if not isinstance(value, bytes):
        return str(value or "")
    try:
        return value.decode()
    except UnicodeDecodeError:
        raise _fail("model", f"a name is not UTF-8 ({value[:24]!r})") from None


def _offline_offsets(model, tensor_count: int) -> list[int]:
    for meta in model.metadata or []:
        if _name(meta.name) != OFFLINE_PLAN_METADATA:
            continue
        if not 0 <= meta.buffer < len(model.buffers or []):
            raise _fail(OFFLINE_PLAN_METADATA, f"buffer index {meta.buffer} is out of range")
        raw = model.buffers[meta.buffer].data
        raw = np.zeros(0, np.uint8) if raw is None else np.asarray(raw, np.uint8)
        if raw.size % 4 or raw.size < 12:
            raise _fail(OFFLINE_PLAN_METADATA, f"{raw.size} bytes is not a [version, subgraphs, n, ...] int32 list")
        words = raw.view("<i4")
        if words[0] != OFFLINE_PLAN_VERSION:
            raise _fail(OFFLINE_PLAN_METADATA, f"version {words[0]} (expected {OFFLINE_PLAN_VERSION})")
        if words[1] != 1:
            raise _fail(OFFLINE_PLAN_METADATA, f"{words[1]} subgraphs (expected 1)")
        if words[2] != tensor_count or words.size != 3 + tensor_count:
            raise _fail(
                OFFLINE_PLAN_METADATA, f"{words[2]} offsets in {words.size - 3} words for {tensor_count} tensors"
            )
        return [int(w) for w in words[3:]]
    raise _fail(OFFLINE_PLAN_METADATA, "missing: an MCUBERT model carries its arena plan")


def _tensor_table(model, subgraph, offsets) -> tuple[list[ArenaTensor], dict[int, np.ndarray]]:
    tensors, constants = [], {}
    buffers = model.buffers or []
    for i, t in enumerate(subgraph.tensors or []):
        name = _name(t.name) or f"tensor {i}"
        if t.type not in _DTYPES:
            raise _fail(name, f"tensor type {t.type} is not int8, int16 or int32")
        dtype = _DTYPES[t.type]
        shape = tuple(int(n) for n in (t.shape if t.shape is not None else ()))
        if any(n < 0 for n in shape):
            raise _fail(name, f"negative dimension in shape {shape}")
        tensor = ArenaTensor(i, name, dtype, shape, offsets[i], bool(t.isVariable))
        if not 0 <= t.buffer < len(buffers):
            raise _fail(name, f"buffer index {t.buffer} is out of range")
        data = buffers[t.buffer].data if t.buffer > 0 else None
        if tensor.nbytes == 0 and offsets[i] == ONLINE_PLANNED:  # an empty table (no low-rank cluster)
            constants[i] = np.zeros(shape, dtype)
        elif data is not None and len(data):
            if len(data) != tensor.nbytes:
                raise _fail(name, f"{len(data)} data bytes for shape {shape} of {dtype.name}")
            if offsets[i] != ONLINE_PLANNED:
                raise _fail(name, "a constant tensor must not have an arena offset")
            constants[i] = (
                np.frombuffer(np.asarray(data, np.uint8).tobytes(), dtype.newbyteorder("<"))
                .astype(dtype)
                .reshape(shape)
            )
        elif offsets[i] < 0 or offsets[i] % ALIGNMENT:
            raise _fail(name, f"arena offset {offsets[i]} is not a non-negative multiple of {ALIGNMENT}")
        tensors.append(tensor)
    return tensors, constants


def _quant(subgraph, index: int, where: str) -> TensorQuant:
    q = subgraph.tensors[index].quantization
    scale = [] if q is None or q.scale is None else list(q.scale)
    zero = [] if q is None or q.zeroPoint is None else list(q.zeroPoint)
    shape = list(subgraph.tensors[index].shape)
    if len(scale) == len(zero) == 1:
        return _checked_quant(where, float(scale[0]), int(zero[0]))
    if not (len(scale) == len(zero) == shape[-1] > 1 and q.quantizedDimension == len(shape) - 1):
        raise _fail(
            where,
            "expected per-tensor quantization (one scale, one zero point) or one per channel of the last dimension",
        )
    return _checked_quant(where, np.asarray(scale, np.float64), np.asarray(zero, np.int64))


def _checked_quant(where: str, scale, zero_point) -> TensorQuant:
    try:
        return TensorQuant(scale, zero_point)
    except ValueError as exc:
        raise _fail(where, str(exc)) from None


def _expect(tensor: ArenaTensor, where: str, dtype, elements: int) -> None:
    if tensor.dtype != np.dtype(dtype) or int(np.prod(tensor.shape)) != elements:
        raise _fail(
            where,
            f"tensor {tensor.name!r} is {tensor.dtype.name}{list(tensor.shape)}, expected "
            f"{np.dtype(dtype).name} with {elements} elements",
        )


def read_model(model_bytes: bytes, topology: Topology | None = ENCODER) -> McubertModel:
    """Parse and verify an MCUBERT .tflite (see the module docstring) of `topology` (None: any); any defect
    is a ModelFormatError, a model of another topology too."""
    model = _unpack(model_bytes)
    try:
        return _read_unpacked(model, topology)
    except _PARSE_ERRORS as exc:  # a defect no named check anticipated: still one clear error
        raise _fail("model", f"malformed ({type(exc).__name__}: {exc})") from None


def read_decoder(model_bytes: bytes) -> McubertModel:
    """Parse and verify an MCUBERT decoder .tflite (`quantized` is a QuantizedDecoder)."""
    return read_model(model_bytes, DECODER)


# How each topology is read in a message that names the right call.
_READER_OF = {ENCODER.name: "read_model", DECODER.name: "read_decoder"}


def _read_unpacked(model, expected: Topology | None) -> McubertModel:
    if not model.subgraphs or len(model.subgraphs) != 1:
        raise _fail("model", f"{len(model.subgraphs or [])} subgraphs (expected 1)")
    subgraph = model.subgraphs[0]
    offsets = _offline_offsets(model, len(subgraph.tensors or []))
    tensors, constants = _tensor_table(model, subgraph, offsets)
    codes = model.operatorCodes or []

    ops = [_operator_def(operator, codes, position) for position, operator in enumerate(subgraph.operators or [])]
    topology = _topology(ops, expected)
    nodes, layers = [], {}
    for operator, op in zip(subgraph.operators or [], ops):
        layer = layers.get(op.kind, 0)
        layers[op.kind] = layer + 1
        nodes.append(_read_node(subgraph, operator, op, layer, tensors, constants, topology))
    quantized, values = _assemble(topology, nodes, tensors)
    graph_inputs, graph_outputs = _io(subgraph, nodes, values, tuple(i.name for i in topology.inputs))
    planned = _check_plan(nodes, tensors, graph_inputs, graph_outputs)
    return McubertModel(quantized, tuple(tensors), tuple(nodes), graph_inputs, graph_outputs, planned)


def _topology(ops: list[OpDef], expected: Topology | None) -> Topology:
    """The topology the first op starts (else the expected one, whose check then names the sequence)."""
    try:
        found = topology_of(ops[0]) if ops else None
    except ValueError:
        found = None
    if found is None:
        return expected or ENCODER
    if expected is not None and found is not expected:
        raise _fail(
            "model",
            f"this is {'an' if found.name[0] in 'aeiou' else 'a'} {found.name} .tflite (its first op is "
            f"{ops[0].code}): read it with {_READER_OF[found.name]}",
        )
    return found


def _operator_def(operator, codes, position: int) -> OpDef:
    if not 0 <= operator.opcodeIndex < len(codes):
        raise _fail(f"operator {position}", f"opcode index {operator.opcodeIndex} is out of range")
    code = codes[operator.opcodeIndex]
    builtin = max(code.builtinCode, code.deprecatedBuiltinCode)
    name = _name(code.customCode)
    if builtin != schema.BuiltinOperator.CUSTOM or name not in OPS:
        raise _fail(f"operator {position}", f"{name or f'builtin {builtin}'} is not an MCUBERT op")
    return op_of(name)


def _read_node(subgraph, operator, op: OpDef, layer: int, tensors, constants, topology: Topology) -> OpNode:
    """One operator (the `layer`-th of its kind): its tensor counts, options, constant/run-time inputs and
    validated parameters."""
    spec = op.contract
    name = op.node_name(layer)
    where = f"{name}: {op.code}"
    inputs = [int(i) for i in (operator.inputs if operator.inputs is not None else [])]
    outputs = [int(i) for i in (operator.outputs if operator.outputs is not None else [])]
    if len(inputs) != len(spec.inputs) or len(outputs) != len(spec.outputs) + 1:
        raise _fail(
            where,
            f"{len(inputs)} inputs and {len(outputs)} outputs, expected "
            f"{len(spec.inputs)} and {len(spec.outputs) + 1} (the last output is the scratch)",
        )
    if any(not 0 <= i < len(tensors) for i in inputs + outputs):
        raise _fail(where, "tensor index out of range")
    options_raw = operator.customOptions
    options_bytes = b"" if options_raw is None else np.asarray(options_raw, np.uint8).tobytes()
    try:
        options = decode_options(op.code, options_bytes)
    except OpSpecError as exc:
        raise _fail(name, str(exc)) from None
    arrays = {}
    for sig, index in zip(spec.inputs, inputs):
        runtime = sig.name in op.runtime_inputs
        if runtime == (index in constants):
            raise _fail(
                f"{where}: {sig.name}",
                "must be " + ("computed at run time, not constant" if runtime else "a constant tensor"),
            )
        if not runtime:
            arrays[sig.name] = constants[index]
    try:
        params = op.params_type.from_serialized(options, arrays)
    except (OpSpecError, KeyError, ValueError) as exc:
        raise _fail(name, str(exc)) from None
    values = tuple(topology.value_of_input(n, layer) for n in op.runtime_inputs)
    output_quant = _quant(subgraph, outputs[0], f"{name}: {op.output}")
    return OpNode(Node(name, op, params, values, output_quant), tuple(inputs), tuple(outputs))


def _assemble(topology: Topology, nodes: list[OpNode], tensors) -> tuple[object, dict[str, int]]:
    """Each node's tensors against its parameters, how the tensors chain (graph inputs shared by every
    reader, each layer's state a variable tensor of its own, the rest read from the op that last wrote
    them), then the topology's model."""
    first = nodes[0].node.params if nodes else None
    values: dict[str, int] = {}  # graph value -> the tensor that last wrote it
    for node in nodes:
        op, p = node.definition, node.node.params
        if hasattr(p, "seq_len") and (p.seq_len, p.hidden) != (first.seq_len, first.hidden):
            raise _fail(
                node.name,
                f"seq_len/hidden {p.seq_len}/{p.hidden} differ from the first op's {first.seq_len}/{first.hidden}",
            )
        _expect(tensors[node.scratch], f"{node.name}: scratch", np.int8, op.scratch_bytes(p))
        if getattr(p, "mask_mode", contract.MASK_MODE_KEY_MASK) != contract.MASK_MODE_KEY_MASK:
            raise _fail(f"{node.name}: mask_mode", "this runtime reads key-mask models (mask_mode 0)")
        for value, index in zip(node.node.inputs, node.runtime_inputs):
            _check_value(topology, node, value, index, values, tensors)
        _expect(tensors[node.outputs[0]], f"{node.name}: {op.output}", op.output_dtype, op.output_elements(p))
        values[op.output] = node.outputs[0]
    try:
        return model_from_nodes(topology, [n.node for n in nodes]), values
    except ValueError as exc:
        raise _fail("model", str(exc)) from None


def _check_value(topology: Topology, node: OpNode, value: str, index: int, values: dict[str, int], tensors) -> None:
    """A run-time input reads the tensor that last wrote its value; a graph input is read as one tensor,
    a layer's state is a variable tensor of its own."""
    where, tensor = f"{node.name}: {value}", tensors[index]
    graph_input = next((i for i in topology.inputs if i.name == value), None)
    if graph_input is not None:
        if values.setdefault(value, index) != index:
            raise _fail(where, f"every op must read the same {value} tensor")
        _expect(tensor, where, graph_input.dtype, node.node.params.seq_len if graph_input.per_position else 1)
    elif (state := topology.state_of(value)) is not None:
        if value in values or not tensor.variable:
            raise _fail(where, f"each {state.noun} must be a variable tensor of its own")
        _expect(tensor, where, state.dtype, int(np.prod(state.shape(node.node.params))))
        values[value] = index
    elif values.get(value) != index:
        raise _fail(where, f"input is not the previous op's {value} output")


def _io(subgraph, nodes, values: dict[str, int], names: tuple[str, ...]) -> tuple[dict[str, int], dict[str, int]]:
    graph_inputs = [int(i) for i in (subgraph.inputs if subgraph.inputs is not None else [])]
    expected_inputs = [values.get(name) for name in names]
    if graph_inputs != expected_inputs:
        raise _fail("model", f"graph inputs {graph_inputs} are not ({', '.join(names)}) = {expected_inputs}")
    graph_outputs = [int(i) for i in (subgraph.outputs if subgraph.outputs is not None else [])]
    if graph_outputs != [nodes[-1].outputs[0]]:
        raise _fail("model", f"graph outputs {graph_outputs} are not the last op's output")
    output_name = MODEL_OUTPUT_NAMES[nodes[-1].definition.output]
    return dict(zip(names, graph_inputs)), {output_name: graph_outputs[0]}


def _check_plan(nodes, tensors, graph_inputs, graph_outputs) -> int:
    """Lifetimes (op steps) of every arena buffer; buffers alive together must not overlap, except
    the hidden states, which are one buffer updated in place, and any other output written in place over
    its op's first input."""
    hidden = {n.outputs[0] for n in nodes if n.definition.output == CHAINED_VALUE}
    in_place = {n.outputs[0]: n.inputs[0] for n in nodes if n.definition.in_place and n.outputs[0] not in hidden}
    life: dict[object, list[int]] = {}

    def touch(index: int, step: int):
        while index in in_place and tensors[index].offset == tensors[in_place[index]].offset:
            index = in_place[index]  # one buffer with the value it rewrites
        key = "hidden" if index in hidden else index
        span = life.setdefault(key, [step, step])
        span[0], span[1] = min(span[0], step), max(span[1], step)

    for index in graph_inputs.values():
        touch(index, 0)
    for step, node in enumerate(nodes):
        for index in node.inputs + node.outputs:
            if tensors[index].offset != ONLINE_PLANNED:
                touch(index, step)
    for index in graph_outputs.values():
        touch(index, len(nodes) - 1)
    for tensor in tensors:
        if tensor.variable:  # state: kept across every step (and every invoke)
            touch(tensor.index, 0)
            touch(tensor.index, len(nodes) - 1)
    offsets = {tensors[i].offset for i in hidden}
    if len(offsets) != 1:
        raise _fail(OFFLINE_PLAN_METADATA, f"the hidden states must share one arena offset (found {sorted(offsets)})")
    extent = {}
    for key in life:
        index = next(iter(hidden)) if key == "hidden" else key
        t = tensors[index]
        extent[key] = (t.offset, t.offset + align_up(t.nbytes))
    keys = list(life)
    for a_pos, a in enumerate(keys):
        for b in keys[a_pos + 1 :]:
            alive_together = life[a][0] <= life[b][1] and life[b][0] <= life[a][1]
            overlap = extent[a][0] < extent[b][1] and extent[b][0] < extent[a][1]
            if alive_together and overlap:
                names = [("hidden states" if k == "hidden" else tensors[k].name) for k in (a, b)]
                raise _fail(
                    OFFLINE_PLAN_METADATA, f"{names[0]} and {names[1]} are alive together but overlap in the arena"
                )
    return max(end for _, end in extent.values())
