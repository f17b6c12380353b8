"""The TFLM arena model against the real interpreter (the tflite-micro wheel, 64-bit pointers).

Graphs of RESHAPE ops with an offline memory plan: their only kernel memory is TFLM's parsed
builtin options (TfLiteReshapeParams, 36 bytes), so the model's itemised tail plus its stated
margin must cover the measured minimum arena, and not by more than the margin.
"""

import flatbuffers
import numpy as np
import pytest
from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as schema

from tflm_mcubert.tflite.mcubert_writer import OFFLINE_PLAN_METADATA, _AlignedBufferT, offline_plan_buffer
from tflm_mcubert.export.tflm_arena import HOST_64, UNITEMISED_BYTES, GraphShape, IoTensor, estimate_arena
from tflm_mcubert.ops.scratch import align_up
from tflm_mcubert.runtime.tflm_runner import min_arena_bytes

RESHAPE_PARAMS_BYTES = 36  # TfLiteReshapeParams {int shape[8]; int num_dimensions}


def reshape_chain(ops: int, size: int, in_place: bool) -> tuple[bytes, int, GraphShape]:
    """input int8[1, size] -> RESHAPE x ops, at offline offsets (one buffer, or two in turn)."""
    tensors, buffers, offsets, operators = [], [_AlignedBufferT()], [], []
    slot = align_up(size)

    def tensor(name, shape, ttype, buffer=0, offset=-1):
        t = schema.TensorT()
        t.name, t.shape, t.type, t.buffer = name, list(shape), ttype, buffer
        if ttype == schema.TensorType.INT8:
            t.quantization = schema.QuantizationParametersT()
            t.quantization.scale, t.quantization.zeroPoint = [0.5], [1]
        tensors.append(t)
        offsets.append(offset)
        return len(tensors) - 1

    x = tensor("input", (1, size), schema.TensorType.INT8, offset=0)
    for i in range(ops):
        shape_buffer = _AlignedBufferT()
        shape_buffer.data = np.array([1, size], "<i4")
        buffers.append(shape_buffer)
        shape = tensor(f"shape{i}", (2,), schema.TensorType.INT32, buffer=len(buffers) - 1)
        y = tensor(f"t{i}", (1, size), schema.TensorType.INT8, offset=0 if in_place else ((i + 1) % 2) * slot)
        op = schema.OperatorT()
        op.opcodeIndex, op.inputs, op.outputs = 0, [x, shape], [y]
        operators.append(op)
        x = y
    code = schema.OperatorCodeT()
    code.builtinCode = code.deprecatedBuiltinCode = schema.BuiltinOperator.RESHAPE
    code.version = 1
    subgraph = schema.SubGraphT()
    subgraph.tensors, subgraph.inputs, subgraph.outputs, subgraph.operators = tensors, [0], [x], operators
    plan = _AlignedBufferT()
    plan.data = offline_plan_buffer(offsets)
    buffers.append(plan)
    metadata = schema.MetadataT()
    metadata.name, metadata.buffer = OFFLINE_PLAN_METADATA, len(buffers) - 1
    model = schema.ModelT()
    model.version, model.operatorCodes, model.subgraphs = 3, [code], [subgraph]
    model.buffers, model.metadata = buffers, [metadata]
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    shape = GraphShape(
        tensors=len(tensors),
        ops=ops,
        inputs=(IoTensor(True),),
        outputs=(IoTensor(True),),
        planned_buffers=ops + 1,
        builtin_data=(RESHAPE_PARAMS_BYTES,) * ops,
    )
    return bytes(builder.Output()), slot * (1 if in_place else 2), shape


@pytest.mark.parametrize("ops,size,in_place", [(1, 64, False), (16, 1000, False), (40, 333, True)])
def test_the_arena_model_covers_the_measured_arena_by_at_most_its_margin(ops, size, in_place):
    model, planned, shape = reshape_chain(ops, size, in_place)
    measured = min_arena_bytes(model)
    estimate = estimate_arena(shape, planned, HOST_64).arena_bytes
    assert 0 <= estimate - measured <= UNITEMISED_BYTES, (estimate, measured)
