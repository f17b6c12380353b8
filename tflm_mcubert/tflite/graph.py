"""Read a .tflite flatbuffer: its operators, tensors, named inputs/outputs and constant bytes.

Uses the schema module shipped in the tflite-micro wheel, through the flatbuffers reader API (the object
API would copy every weight into Python objects). Only the main subgraph (0) is read: that is the one
TFLM runs, and every model this package exports has no other.
"""

from __future__ import annotations

import dataclasses
from typing import Iterator

import numpy as np
from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as schema

FILE_IDENTIFIER = b"TFL3"  # the .tflite flatbuffer's file identifier (bytes 4..8)
_BUILTIN_NAMES = {code: name for name, code in vars(schema.BuiltinOperator).items() if not name.startswith("_")}
_TYPE_NAMES = {code: name for name, code in vars(schema.TensorType).items() if not name.startswith("_")}
_NUMPY_TYPES = {
    "FLOAT32": np.float32,
    "FLOAT16": np.float16,
    "FLOAT64": np.float64,
    "INT8": np.int8,
    "UINT8": np.uint8,
    "INT16": np.int16,
    "UINT16": np.uint16,
    "INT32": np.int32,
    "UINT32": np.uint32,
    "INT64": np.int64,
    "UINT64": np.uint64,
    "BOOL": np.bool_,
}


@dataclasses.dataclass(frozen=True)
class TensorInfo:
    index: int
    name: str
    type_name: str  # the schema's name: "INT8", "FLOAT32", ...
    shape: tuple[int, ...]
    scales: tuple[float, ...]  # empty when not quantized; one per channel when per-channel
    zero_points: tuple[int, ...]
    buffer: int  # index into the model's buffers; 0 is the empty sentinel buffer
    constant_bytes: int  # size of the data it carries in the flatbuffer (0 for activations)

    @property
    def dtype(self) -> np.dtype:
        try:
            return np.dtype(_NUMPY_TYPES[self.type_name])
        except KeyError:
            raise ValueError(f"tensor {self.name!r} has type {self.type_name}, which numpy cannot hold") from None

    @property
    def is_quantized(self) -> bool:
        return bool(self.scales)

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


@dataclasses.dataclass(frozen=True)
class OpInfo:
    index: int
    name: str  # builtin name ("FULLY_CONNECTED") or the custom code of a custom op
    is_custom: bool
    inputs: tuple[int, ...]  # tensor indices; -1 for an omitted optional input
    outputs: tuple[int, ...]
    options: dict  # decoded builtin options, for the operators this package inspects (BATCH_MATMUL)


@dataclasses.dataclass(frozen=True)
class IoTensor:
    """A signature input or output: its name, its position for set_input/get_output, and the tensor."""

    name: str
    position: int
    tensor: TensorInfo


@dataclasses.dataclass(frozen=True)
class TfliteGraph:
    tensors: tuple[TensorInfo, ...]
    ops: tuple[OpInfo, ...]
    inputs: tuple[IoTensor, ...]
    outputs: tuple[IoTensor, ...]

    def output_named(self, name: str) -> IoTensor:
        return _named(self.outputs, name, "output")

    def constant_inputs(self, op: OpInfo) -> Iterator[TensorInfo]:
        for index in op.inputs:
            if index >= 0 and self.tensors[index].constant_bytes:
                yield self.tensors[index]

    def op_rows(self) -> list[dict]:
        """One row per operator, in execution order: index, name (builtin name or custom code), bytes.

        `bytes` is the constant (weight, bias, shape...) data the operator reads from the flatbuffer.
        A constant read by several operators counts for the first of them only, so the rows add up to
        constant_bytes() exactly; the rest of the file (its Flash) is the graph structure."""
        seen_buffers: set[int] = set()
        rows = []
        for op in self.ops:
            constant = 0
            for tensor in self.constant_inputs(op):
                if tensor.buffer not in seen_buffers:
                    seen_buffers.add(tensor.buffer)
                    constant += tensor.constant_bytes
            rows.append({"index": op.index, "name": op.name, "bytes": constant})
        return rows

    def constant_bytes(self) -> int:
        """Bytes of constant data (each buffer once) the operators read."""
        buffers = {t.buffer: t.constant_bytes for op in self.ops for t in self.constant_inputs(op)}
        return sum(buffers.values())


def _named(items, name, kind):
    for item in items:
        if item.name == name:
            return item
    raise KeyError(f"the model has no {kind} named {name!r} (it has {', '.join(i.name for i in items)})")


def parse(model_bytes: bytes) -> TfliteGraph:
    if len(model_bytes) < 8 or not schema.Model.ModelBufferHasIdentifier(model_bytes, 0):
        raise ValueError("not a TFLite model (no TFL3 file identifier)")
    model = schema.Model.GetRootAs(model_bytes, 0)
    if model.SubgraphsLength() < 1:
        raise ValueError("not a TFLite model: no subgraph")
    subgraph = model.Subgraphs(0)
    tensors = tuple(_tensor_info(model, subgraph.Tensors(i), i) for i in range(subgraph.TensorsLength()))
    ops = tuple(_op_info(model, subgraph.Operators(i), i) for i in range(subgraph.OperatorsLength()))
    input_order = [int(i) for i in subgraph.InputsAsNumpy()] if subgraph.InputsLength() else []
    output_order = [int(i) for i in subgraph.OutputsAsNumpy()] if subgraph.OutputsLength() else []
    names_in, names_out = _signature_names(model)
    return TfliteGraph(
        tensors=tensors,
        ops=ops,
        inputs=tuple(IoTensor(names_in.get(t, tensors[t].name), pos, tensors[t]) for pos, t in enumerate(input_order)),
        outputs=tuple(
            IoTensor(names_out.get(t, tensors[t].name), pos, tensors[t]) for pos, t in enumerate(output_order)
        ),
    )


def _signature_names(model) -> tuple[dict[int, str], dict[int, str]]:
    """Tensor index -> signature name ("input_ids"), from the first signature; empty without one."""
    if model.SignatureDefsLength() < 1:
        return {}, {}
    signature = model.SignatureDefs(0)

    def names(length, get):
        return {get(i).TensorIndex(): get(i).Name().decode() for i in range(length)}

    return (names(signature.InputsLength(), signature.Inputs), names(signature.OutputsLength(), signature.Outputs))


def _buffer_bytes(model, index: int) -> int:
    if index <= 0 or index >= model.BuffersLength():
        return 0
    buffer = model.Buffers(index)
    # Models over 2 GB keep data outside the flatbuffer proper, described by offset + size.
    return max(buffer.DataLength(), buffer.Size() if buffer.Offset() > 1 else 0)


def _tensor_info(model, tensor, index: int) -> TensorInfo:
    quant = tensor.Quantization()
    scales = tuple(float(s) for s in quant.ScaleAsNumpy()) if quant is not None and quant.ScaleLength() else ()
    zero_points = (
        tuple(int(z) for z in quant.ZeroPointAsNumpy()) if quant is not None and quant.ZeroPointLength() else ()
    )
    shape = tuple(int(d) for d in tensor.ShapeAsNumpy()) if tensor.ShapeLength() else ()
    return TensorInfo(
        index=index,
        name=(tensor.Name() or b"").decode(),
        type_name=_TYPE_NAMES.get(tensor.Type(), str(tensor.Type())),
        shape=shape,
        scales=scales,
        zero_points=zero_points,
        buffer=tensor.Buffer(),
        constant_bytes=_buffer_bytes(model, tensor.Buffer()),
    )


def _op_info(model, op, index: int) -> OpInfo:
    opcode = model.OperatorCodes(op.OpcodeIndex())
    code = max(opcode.BuiltinCode(), opcode.DeprecatedBuiltinCode())
    is_custom = code == schema.BuiltinOperator.CUSTOM
    name = (opcode.CustomCode() or b"?").decode() if is_custom else _BUILTIN_NAMES.get(code, f"BUILTIN_{code}")
    return OpInfo(
        index=index,
        name=name,
        is_custom=is_custom,
        inputs=tuple(int(i) for i in op.InputsAsNumpy()) if op.InputsLength() else (),
        outputs=tuple(int(i) for i in op.OutputsAsNumpy()) if op.OutputsLength() else (),
        options=_decode_options(op),
    )


def _decode_options(op) -> dict:
    if op.BuiltinOptionsType() == schema.BuiltinOptions.BatchMatMulOptions:
        table = op.BuiltinOptions()
        options = schema.BatchMatMulOptions()
        options.Init(table.Bytes, table.Pos)
        return {"adj_x": bool(options.AdjX()), "adj_y": bool(options.AdjY())}
    return {}
