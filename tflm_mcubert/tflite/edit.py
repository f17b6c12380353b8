"""Rewrites of a converted .tflite that the converter cannot be asked for.

Edits go through the flatbuffer object API of the schema shipped in the tflite-micro wheel (weights stay
numpy arrays, so packing is fast), and the result is re-packed by the wheel's C++ aligner so that every
buffer is 16-byte aligned again, as TFLM expects of the converter's output.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import flatbuffers
import numpy as np
from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as schema
from tflite_micro.tensorflow.lite.micro.tools import tflite_flatbuffer_align_wrapper

from tflm_mcubert.tflite.graph import FILE_IDENTIFIER


def int8_gather_tables(model_bytes: bytes) -> bytes:
    """Give every GATHER of a constant int16 table an int8 table, followed by QUANTIZE int8 -> int16.

    The int16x8 converter makes the embedding tables int16, because a GATHER's output is an activation
    and GATHER keeps its table's type. Stock TFLM's GATHER runs float32 and int8 only, and an int16 table
    doubles the Flash of the largest weight there is; everywhere else in an int16x8 model the weights are
    int8 already. The int8 table is symmetric per-tensor, like the int8 export's, and the QUANTIZE
    restores the int16 tensor the rest of the graph reads, unchanged.
    """
    model = schema.ModelT.InitFromPackedBuf(bytearray(model_bytes), 0)
    subgraph = model.subgraphs[0]
    gather = _opcode_indices(model, schema.BuiltinOperator.GATHER)
    rewritten, requantize = [], None
    for op in subgraph.operators:
        rewritten.append(op)
        if op.opcodeIndex not in gather or not _has_int16_table(model, subgraph, op):
            continue
        if requantize is None:
            requantize = _opcode_index(model, schema.BuiltinOperator.QUANTIZE)
        table = subgraph.tensors[op.inputs[0]]
        if sum(t.buffer == table.buffer for t in subgraph.tensors) > 1:
            raise ValueError(f"gather table {table.name!r} shares its buffer; not rewritten safely")
        int8_scale = _requantize_table_to_int8(table, model.buffers[table.buffer])
        int16_out = op.outputs[0]
        op.outputs = [_add_tensor(subgraph, like=subgraph.tensors[int16_out], scale=int8_scale)]
        rewritten.append(_operator(requantize, inputs=[op.outputs[0]], outputs=[int16_out]))
    subgraph.operators = rewritten
    return _aligned(_pack(model))


def _has_int16_table(model, subgraph, op) -> bool:
    table = subgraph.tensors[op.inputs[0]]
    data = model.buffers[table.buffer].data if table.buffer > 0 else None
    return table.type == schema.TensorType.INT16 and data is not None and len(data) > 0


def _requantize_table_to_int8(table, buffer) -> float:
    """int16 values -> int8 with the symmetric scale that maps the largest magnitude to 127; returns it."""
    quant = table.quantization
    if quant is None or len(quant.scale) != 1 or any(int(z) != 0 for z in (quant.zeroPoint or [])):
        raise ValueError(f"gather table {table.name!r} is not symmetric per-tensor quantized")
    values16 = np.frombuffer(np.asarray(buffer.data, np.uint8).tobytes(), np.int16).astype(np.float64)
    peak = max(float(np.abs(values16).max()), 1.0)
    scale = float(quant.scale[0]) * peak / 127.0
    values8 = np.clip(np.round(values16 * (127.0 / peak)), -127, 127).astype(np.int8)
    buffer.data = values8.view(np.uint8)
    table.type = schema.TensorType.INT8
    table.quantization = _per_tensor(scale)
    return scale


def _add_tensor(subgraph, *, like, scale: float) -> int:
    tensor = schema.TensorT()
    tensor.shape = np.array(like.shape, np.int32)
    tensor.type = schema.TensorType.INT8
    tensor.buffer = 0
    tensor.name = (like.name.decode() if isinstance(like.name, bytes) else like.name) + "/int8"
    tensor.quantization = _per_tensor(scale)
    subgraph.tensors.append(tensor)
    return len(subgraph.tensors) - 1


def _per_tensor(scale: float):
    params = schema.QuantizationParametersT()
    params.scale = [scale]
    params.zeroPoint = [0]
    return params


def _operator(opcode_index: int, *, inputs, outputs):
    op = schema.OperatorT()
    op.opcodeIndex = opcode_index
    op.inputs = list(inputs)
    op.outputs = list(outputs)
    return op


def _builtin_code(opcode) -> int:
    return max(opcode.builtinCode, opcode.deprecatedBuiltinCode)


def _opcode_indices(model, builtin: int) -> set[int]:
    return {i for i, opcode in enumerate(model.operatorCodes) if _builtin_code(opcode) == builtin}


def _opcode_index(model, builtin: int) -> int:
    """Index of the operator code for `builtin`, adding it when the model has none."""
    existing = _opcode_indices(model, builtin)
    if existing:
        return min(existing)
    opcode = schema.OperatorCodeT()
    opcode.builtinCode = builtin
    # Codes below 127 must be mirrored in the deprecated field, which old readers use.
    opcode.deprecatedBuiltinCode = min(builtin, 127)
    opcode.version = 1
    model.operatorCodes.append(opcode)
    return len(model.operatorCodes) - 1


def _pack(model) -> bytes:
    builder = flatbuffers.Builder(1024 * 1024)
    builder.Finish(model.Pack(builder), file_identifier=FILE_IDENTIFIER)
    return bytes(builder.Output())


def _aligned(model_bytes: bytes) -> bytes:
    with tempfile.TemporaryDirectory(prefix="tflm_align_") as tmp:
        source, target = Path(tmp, "in.tflite"), Path(tmp, "out.tflite")
        source.write_bytes(model_bytes)
        tflite_flatbuffer_align_wrapper.align_tflite_model(str(source), str(target))
        return target.read_bytes()
