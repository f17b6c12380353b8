"""The C ABI of the MCUBERT kernels (custom_ops/include/mcubert/mcubert_ops.h), mirrored in Python.

One `KernelCall` describes one kernel invocation built from the numpy reference's parameter objects
(ops/attention.py, ops/mlp.py, ops/embedding.py): the params struct (its bytes are identical on the
host and on 32-bit Arm: only int32/uint32 fields and one 8-byte aligned int64), and every tensor
in contract order (inputs, then the output) with its dtype code. The host test driver, the
unicorn runner (measure/arm_emulator.py) and the QEMU golden-firmware generator all lay out calls
from this one description, so they cannot disagree about field order.
"""

from __future__ import annotations

import ctypes
import dataclasses

import numpy as np

from tflm_mcubert.ops import contract
from tflm_mcubert.ops.registry import SPEC_HASH, SPEC_HASHES, SPEC_VERSION

# mcubert_dtype: TfLiteType numbering.
DTYPE_INT32, DTYPE_INT16, DTYPE_INT8 = 2, 7, 9
DTYPE_CODES = {np.dtype(np.int8): DTYPE_INT8, np.dtype(np.int16): DTYPE_INT16, np.dtype(np.int32): DTYPE_INT32}

# mcubert_status
STATUS_NAMES = {0: "ok", 1: "argument", 2: "spec", 3: "option", 4: "tensor", 5: "input", 6: "model"}
OK, ERROR_ARGUMENT, ERROR_SPEC, ERROR_OPTION, ERROR_TENSOR, ERROR_INPUT, ERROR_MODEL = range(7)

OP_IDS = {contract.EMBEDDING: 0, contract.ATTENTION: 1, contract.MLP: 2}
KERNEL_SYMBOLS = {
    contract.EMBEDDING: "mcubert_embedding_s8",
    contract.ATTENTION: "mcubert_attention_s8",
    contract.MLP: "mcubert_mlp_s8",
}
VALIDATE_SYMBOLS = {op: sym.replace("_s8", "_validate") for op, sym in KERNEL_SYMBOLS.items()}
MESSAGE_CAPACITY = 128


class ModelIntegrityC(ctypes.Structure):
    """mcubert_model_integrity: what mcubert_verify_model found."""

    _fields_ = [
        ("verified", ctypes.c_int32),
        ("corrupt_buffer", ctypes.c_int32),
        ("corrupt_tensor", ctypes.c_int32),
        ("corrupt_operator", ctypes.c_int32),
    ]


class EmbeddingParamsC(ctypes.Structure):
    _fields_ = [
        ("spec_version", ctypes.c_int32),
        ("spec_hash", ctypes.c_uint32),
        ("seq_len", ctypes.c_int32),
        ("hidden", ctypes.c_int32),
        ("vocab_size", ctypes.c_int32),
        ("cluster_count", ctypes.c_int32),
        ("type_vocab_size", ctypes.c_int32),
        ("word_bits", ctypes.c_int32),  # 0 (version 1: int8), 4 or 8
        ("ln_eps", ctypes.c_int64),
    ]


class AttentionParamsC(ctypes.Structure):
    _fields_ = [
        ("spec_version", ctypes.c_int32),
        ("spec_hash", ctypes.c_uint32),
        ("seq_len", ctypes.c_int32),
        ("hidden", ctypes.c_int32),
        ("heads", ctypes.c_int32),
        ("tile", ctypes.c_int32),
        ("mask_mode", ctypes.c_int32),
        ("score_multiplier", ctypes.c_int32),
        ("score_shift", ctypes.c_int32),
        ("context_multiplier", ctypes.c_int32),
        ("context_shift", ctypes.c_int32),
        ("ln_eps", ctypes.c_int64),
    ]


class MLPParamsC(ctypes.Structure):
    _fields_ = [
        ("spec_version", ctypes.c_int32),
        ("spec_hash", ctypes.c_uint32),
        ("seq_len", ctypes.c_int32),
        ("hidden", ctypes.c_int32),
        ("ffn", ctypes.c_int32),
        ("tile", ctypes.c_int32),
        ("fc1_output_zero_point", ctypes.c_int32),
        ("reserved", ctypes.c_int32),
        ("ln_eps", ctypes.c_int64),
    ]


PARAMS_STRUCTS = {contract.EMBEDDING: EmbeddingParamsC, contract.ATTENTION: AttentionParamsC, contract.MLP: MLPParamsC}

# Tensors of validate's list: the contract's inputs then its output.
TENSOR_NAMES = {op: [t.name for t in contract.CONTRACTS[op].inputs] + ["output"] for op in OP_IDS}
# Run-time inputs (kernel arguments); the other inputs are the weights struct, in order.
RUNTIME_INPUTS = {
    contract.EMBEDDING: ("input_ids", "token_type_ids"),
    contract.ATTENTION: ("hidden", "mask"),
    contract.MLP: ("hidden",),
}


def weight_fields(op: str) -> list[str]:
    """Fields of mcubert_<op>_weights, in struct order (= contract order of the constant inputs)."""
    return [n for n in TENSOR_NAMES[op][:-1] if n not in RUNTIME_INPUTS[op]]


def make_params(op: str, options: dict[str, int], spec_hash: int | None = None, **overrides) -> ctypes.Structure:
    """The params struct of `op` from its option dict, plus spec version and hash: the lowest version
    with every option (an int4 embedding's is 2), its hash by default the Python contract's; pass
    the hash (of that version) a kernel build was made for to test its numerics while the contract
    text is being changed elsewhere. Absent optional fields (word_bits of version 1) are 0."""
    version = contract.options_version(op, dict(options))
    values = {"spec_version": version, "spec_hash": SPEC_HASHES[version], "word_bits": 0, **options, **overrides}
    if spec_hash is not None:
        values["spec_hash"] = spec_hash
    struct = PARAMS_STRUCTS[op]()
    for name, _ in struct._fields_:
        if name != "reserved":
            setattr(struct, name, int(values[name]))
    return struct


@dataclasses.dataclass
class KernelCall:
    """One kernel invocation: params, all tensors in contract order, which tensor is the result."""

    op: str
    params: ctypes.Structure
    tensors: dict[str, np.ndarray]  # by contract name; "output" last

    @property
    def tensor_list(self) -> list[tuple[str, np.ndarray]]:
        return [(name, self.tensors[name]) for name in TENSOR_NAMES[self.op]]

    @property
    def result_name(self) -> str:
        """The buffer holding the result after the call (attention/MLP work in place)."""
        return "output" if self.op == contract.EMBEDDING else "hidden"

    @property
    def options(self) -> dict[str, int]:
        return {name: getattr(self.params, name) for name, _ in self.params._fields_}

    def dims(self) -> tuple[int, ...]:
        """Arguments of the op's get_buffer_size."""
        p = self.params
        if self.op == contract.EMBEDDING:
            return (p.seq_len, p.hidden)
        if self.op == contract.ATTENTION:
            return (p.seq_len, p.hidden, p.heads, p.tile)
        return (p.seq_len, p.hidden, p.ffn, p.tile)


def _contiguous(array: np.ndarray, dtype) -> np.ndarray:
    array = np.ascontiguousarray(array)
    if array.dtype != np.dtype(dtype):
        raise TypeError(f"expected {np.dtype(dtype).name}, got {array.dtype.name}")
    return array.reshape(-1)


def attention_call(params, hidden: np.ndarray, mask: np.ndarray, spec_hash: int | None = None) -> KernelCall:
    """From ops.attention.AttentionParams (validated), hidden int8[s, d], mask int8[s] or int32[1]."""
    tensors = {
        "hidden": _contiguous(hidden, np.int8).copy(),
        "mask": _contiguous(mask, np.int8 if params.mask_mode == 0 else np.int32),
    }
    tensors.update({k: _contiguous(v, v.dtype) for k, v in params.tensors().items()})
    tensors["output"] = np.zeros(0, np.int8)  # aliases hidden
    return KernelCall(contract.ATTENTION, make_params(contract.ATTENTION, params.options(), spec_hash), tensors)


def mlp_call(params, hidden: np.ndarray, spec_hash: int | None = None) -> KernelCall:
    tensors = {"hidden": _contiguous(hidden, np.int8).copy()}
    tensors.update({k: _contiguous(v, v.dtype) for k, v in params.tensors().items()})
    tensors["output"] = np.zeros(0, np.int8)
    return KernelCall(contract.MLP, make_params(contract.MLP, params.options(), spec_hash), tensors)


def embedding_call(
    params, input_ids: np.ndarray, token_type_ids: np.ndarray, spec_hash: int | None = None
) -> KernelCall:
    tensors = {"input_ids": _contiguous(input_ids, np.int32), "token_type_ids": _contiguous(token_type_ids, np.int32)}
    tensors.update({k: _contiguous(v, v.dtype) for k, v in params.tensors().items()})
    tensors["output"] = np.zeros(params.seq_len * params.hidden, np.int8)
    return KernelCall(contract.EMBEDDING, make_params(contract.EMBEDDING, params.options(), spec_hash), tensors)


def output_elements(call: KernelCall) -> int:
    """Element count of the output tensor (validate checks it; attention/MLP alias hidden)."""
    return call.params.seq_len * call.params.hidden


# ---------------------------------------------------------------------------------------------
# MCUBERT_CLASSIFIER_HEAD (SPEC 4.4). Kept out of the per-op tables above for now (OP_IDS,
# PARAMS_STRUCTS, TENSOR_NAMES, ...), which the existing kernel tests iterate with cases of the
# three encoder ops only; tests/kernels/test_kernels_classifier_head.py uses the names below.
# ---------------------------------------------------------------------------------------------

CLASSIFIER_HEAD_OP_ID = 3  # host_runner.c OP_CLASSIFIER_HEAD
CLASSIFIER_HEAD_SYMBOLS = {
    "s8": "mcubert_classifier_head_s8",
    "validate": "mcubert_classifier_head_validate",
    "get_buffer_size": "mcubert_classifier_head_get_buffer_size",
}


class ClassifierHeadParamsC(ctypes.Structure):
    _fields_ = [
        ("spec_version", ctypes.c_int32),
        ("spec_hash", ctypes.c_uint32),
        ("seq_len", ctypes.c_int32),
        ("hidden", ctypes.c_int32),
        ("labels", ctypes.c_int32),
        ("pooler_zero_point", ctypes.c_int32),
        ("logits_zero_point", ctypes.c_int32),
    ]


# validate's tensor list (MCUBERT_CLASSIFIER_HEAD_* enum): the contract's inputs, then the output.
CLASSIFIER_HEAD_TENSOR_NAMES = [t.name for t in contract.CONTRACTS[contract.CLASSIFIER_HEAD].inputs] + ["output"]
# mcubert_classifier_head_weights, in struct order (every input but the run-time `hidden`).
CLASSIFIER_HEAD_WEIGHT_FIELDS = [n for n in CLASSIFIER_HEAD_TENSOR_NAMES[:-1] if n != "hidden"]


def make_classifier_head_params(
    options: dict[str, int], spec_hash: int | None = None, **overrides
) -> ClassifierHeadParamsC:
    values = {"spec_version": SPEC_VERSION, "spec_hash": SPEC_HASH, **options, **overrides}
    if spec_hash is not None:
        values["spec_hash"] = spec_hash
    struct = ClassifierHeadParamsC()
    for name, _ in struct._fields_:
        setattr(struct, name, int(values[name]))
    return struct


@dataclasses.dataclass
class ClassifierHeadCall:
    """One mcubert_classifier_head_s8 invocation (KernelCall's shape; the result is `output`)."""

    params: ClassifierHeadParamsC
    tensors: dict[str, np.ndarray]  # by contract name; "output" (int8[labels]) last

    op = contract.CLASSIFIER_HEAD
    result_name = "output"

    @property
    def tensor_list(self) -> list[tuple[str, np.ndarray]]:
        return [(name, self.tensors[name]) for name in CLASSIFIER_HEAD_TENSOR_NAMES]

    @property
    def options(self) -> dict[str, int]:
        return {name: getattr(self.params, name) for name, _ in self.params._fields_}

    def dims(self) -> tuple[int, int, int]:
        """Arguments of mcubert_classifier_head_get_buffer_size."""
        return (self.params.seq_len, self.params.hidden, self.params.labels)


def classifier_head_call(params, hidden: np.ndarray, spec_hash: int | None = None) -> ClassifierHeadCall:
    """From ops.classifier_head.ClassifierHeadParams (validated) and hidden int8[s, d]."""
    tensors = {"hidden": _contiguous(hidden, np.int8)}
    tensors.update({k: _contiguous(v, v.dtype) for k, v in params.tensors().items()})
    tensors["output"] = np.zeros(params.labels, np.int8)
    return ClassifierHeadCall(make_classifier_head_params(params.options(), spec_hash), tensors)
