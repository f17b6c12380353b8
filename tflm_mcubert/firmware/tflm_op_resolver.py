"""Which `tflite::MicroMutableOpResolver` calls register a model's operators.

A firmware sizes its resolver (`MicroMutableOpResolver<N>`) and registers exactly the ops its model
uses: each builtin has its own `Add...()` method, and the MCUBERT custom ops come together through
`mcubert::AddMcubertOps()` (custom_ops/tflm/mcubert_tflm.h). The table is TFLM's
(micro_mutable_op_resolver.h at commit 90b983c, the revision the binding is written against);
tests/export/test_firmware_files.py checks it against a checkout when TFLM_DIR is set.
"""

from __future__ import annotations

from tflm_mcubert.errors import UserError
from tflm_mcubert.ops.registry import OPS

# Builtin operator name (as tflite/graph.py reports it) -> resolver method.
BUILTIN_ADD_METHODS = {
    "ABS": "AddAbs",
    "ADD": "AddAdd",
    "ADD_N": "AddAddN",
    "ARG_MAX": "AddArgMax",
    "ARG_MIN": "AddArgMin",
    "ASSIGN_VARIABLE": "AddAssignVariable",
    "AVERAGE_POOL_2D": "AddAveragePool2D",
    "BATCH_MATMUL": "AddBatchMatMul",
    "BATCH_TO_SPACE_ND": "AddBatchToSpaceNd",
    "BROADCAST_ARGS": "AddBroadcastArgs",
    "BROADCAST_TO": "AddBroadcastTo",
    "CALL_ONCE": "AddCallOnce",
    "CAST": "AddCast",
    "CEIL": "AddCeil",
    "CONCATENATION": "AddConcatenation",
    "CONV_2D": "AddConv2D",
    "COS": "AddCos",
    "CUMSUM": "AddCumSum",
    "DEPTHWISE_CONV_2D": "AddDepthwiseConv2D",
    "DEPTH_TO_SPACE": "AddDepthToSpace",
    "DEQUANTIZE": "AddDequantize",
    "DIV": "AddDiv",
    "DYNAMIC_UPDATE_SLICE": "AddDynamicUpdateSlice",
    "ELU": "AddElu",
    "EMBEDDING_LOOKUP": "AddEmbeddingLookup",
    "EQUAL": "AddEqual",
    "EXP": "AddExp",
    "EXPAND_DIMS": "AddExpandDims",
    "FILL": "AddFill",
    "FLOOR": "AddFloor",
    "FLOOR_DIV": "AddFloorDiv",
    "FLOOR_MOD": "AddFloorMod",
    "FULLY_CONNECTED": "AddFullyConnected",
    "GATHER": "AddGather",
    "GATHER_ND": "AddGatherNd",
    "GREATER": "AddGreater",
    "GREATER_EQUAL": "AddGreaterEqual",
    "HARD_SWISH": "AddHardSwish",
    "IF": "AddIf",
    "L2_NORMALIZATION": "AddL2Normalization",
    "L2_POOL_2D": "AddL2Pool2D",
    "LEAKY_RELU": "AddLeakyRelu",
    "LESS": "AddLess",
    "LESS_EQUAL": "AddLessEqual",
    "LOG": "AddLog",
    "LOGICAL_AND": "AddLogicalAnd",
    "LOGICAL_NOT": "AddLogicalNot",
    "LOGICAL_OR": "AddLogicalOr",
    "LOGISTIC": "AddLogistic",
    "LOG_SOFTMAX": "AddLogSoftmax",
    "MAXIMUM": "AddMaximum",
    "MAX_POOL_2D": "AddMaxPool2D",
    "MEAN": "AddMean",
    "MINIMUM": "AddMinimum",
    "MIRROR_PAD": "AddMirrorPad",
    "MUL": "AddMul",
    "NEG": "AddNeg",
    "NOT_EQUAL": "AddNotEqual",
    "PACK": "AddPack",
    "PAD": "AddPad",
    "PADV2": "AddPadV2",
    "PRELU": "AddPrelu",
    "QUANTIZE": "AddQuantize",
    "READ_VARIABLE": "AddReadVariable",
    "REDUCE_ALL": "AddReduceAll",
    "REDUCE_MAX": "AddReduceMax",
    "REDUCE_MIN": "AddReduceMin",
    "RELU": "AddRelu",
    "RELU6": "AddRelu6",
    "RESHAPE": "AddReshape",
    "RESIZE_BILINEAR": "AddResizeBilinear",
    "RESIZE_NEAREST_NEIGHBOR": "AddResizeNearestNeighbor",
    "REVERSE_V2": "AddReverseV2",
    "ROUND": "AddRound",
    "RSQRT": "AddRsqrt",
    "SELECT_V2": "AddSelectV2",
    "SHAPE": "AddShape",
    "SIN": "AddSin",
    "SLICE": "AddSlice",
    "SOFTMAX": "AddSoftmax",
    "SPACE_TO_BATCH_ND": "AddSpaceToBatchNd",
    "SPACE_TO_DEPTH": "AddSpaceToDepth",
    "SPLIT": "AddSplit",
    "SPLIT_V": "AddSplitV",
    "SQRT": "AddSqrt",
    "SQUARE": "AddSquare",
    "SQUARED_DIFFERENCE": "AddSquaredDifference",
    "SQUEEZE": "AddSqueeze",
    "STRIDED_SLICE": "AddStridedSlice",
    "SUB": "AddSub",
    "SUM": "AddSum",
    "SVDF": "AddSvdf",
    "TANH": "AddTanh",
    "TRANSPOSE": "AddTranspose",
    "TRANSPOSE_CONV": "AddTransposeConv",
    "UNIDIRECTIONAL_SEQUENCE_LSTM": "AddUnidirectionalSequenceLSTM",
    "UNPACK": "AddUnpack",
    "VAR_HANDLE": "AddVarHandle",
    "WHILE": "AddWhile",
    "ZEROS_LIKE": "AddZerosLike",
}

MCUBERT_OPS = tuple(OPS)
# Slots mcubert::AddMcubertOps() takes (mcubert::kOpCount): every op, whichever the model uses.
MCUBERT_RESOLVER_SLOTS = len(MCUBERT_OPS)
MCUBERT_REGISTRATION = "mcubert::AddMcubertOps"


class UnsupportedOpError(UserError):
    """The model uses an operator that TFLM's op resolver cannot register."""


def registration(op_names) -> tuple[list[str], int]:
    """(resolver calls in first-use order, resolver slots they take) for a model's operator names.

    A call is a resolver method name ("AddFullyConnected") or MCUBERT_REGISTRATION for the custom ops.
    """
    calls: list[str] = []
    slots = 0
    unknown: list[str] = []
    for name in op_names:
        if name in MCUBERT_OPS:
            call, size = MCUBERT_REGISTRATION, MCUBERT_RESOLVER_SLOTS
        elif name in BUILTIN_ADD_METHODS:
            call, size = BUILTIN_ADD_METHODS[name], 1
        else:
            if name not in unknown:
                unknown.append(name)
            continue
        if call not in calls:
            calls.append(call)
            slots += size
    if unknown:
        raise UnsupportedOpError(
            f"the model uses {', '.join(unknown)}, which TFLM's MicroMutableOpResolver has no Add method "
            f"for (builtins of TFLM commit 90b983c; custom ops: {', '.join(MCUBERT_OPS)})"
        )
    return calls, slots


def register_expression(calls: list[str], resolver: str = "resolver", line_break: str = " ") -> str:
    """A C++ expression that registers `calls` on `resolver` and is kTfLiteOk when all succeed, else
    kTfLiteError (it stops at the first failure: a full resolver, or an op registered twice).
    `line_break` goes between the calls (a macro body passes " \\\n    ")."""
    checks = [
        f"{call}({resolver}) == kTfLiteOk" if call == MCUBERT_REGISTRATION else f"({resolver}).{call}() == kTfLiteOk"
        for call in calls
    ]
    if not checks:
        return "kTfLiteOk"
    return "((" + (" &&" + line_break).join(checks) + ") ? kTfLiteOk : kTfLiteError)"
