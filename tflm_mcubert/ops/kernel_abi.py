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

from tflm_mcubert.ops import c_contract, contract, contract_versions
from tflm_mcubert.ops.registry import OP_SPEC_HASHES, OPS

# mcubert_dtype: TfLiteType numbering.
DTYPE_INT32, DTYPE_INT16, DTYPE_INT8 = 2, 7, 9
DTYPE_CODES = {np.dtype(np.int8): DTYPE_INT8, np.dtype(np.int16): DTYPE_INT16, np.dtype(np.int32): DTYPE_INT32}

# mcubert_status
STATUS_NAMES = {
    0: "ok",
    1: "argument",
    2: "spec",
    3: "option",
    4: "tensor",
    5: "input",
    6: "model",
    7: "unverified",
}
OK, ERROR_ARGUMENT, ERROR_SPEC, ERROR_OPTION, ERROR_TENSOR, ERROR_INPUT, ERROR_MODEL, UNVERIFIED = range(8)

# mcubert_op_id (host_runner.c): the registry's order.
OP_IDS = {code: index for index, code in enumerate(OPS)}
KERNEL_SYMBOLS = {code: op.kernel_symbol for code, op in OPS.items()}
VALIDATE_SYMBOLS = {code: op.validate_symbol for code, op in OPS.items()}
MESSAGE_CAPACITY = 128


class ModelIntegrityC(ctypes.Structure):
    """mcubert_model_integrity: what mcubert_verify_model found."""

    _fields_ = [
        ("verified", ctypes.c_int32),
        ("corrupt_buffer", ctypes.c_int32),
        ("corrupt_tensor", ctypes.c_int32),
        ("corrupt_operator", ctypes.c_int32),
    ]


# mcubert_<op>_params, by custom code: the same layout as the generated C structs (ops/c_contract.py).
PARAMS_STRUCTS = {code: c_contract.ctypes_struct(code) for code in OPS}

# Tensors of validate's list: the contract's inputs then its output.
TENSOR_NAMES = {code: op.tensor_names for code, op in OPS.items()}
# Run-time inputs (kernel arguments); the other inputs are the weights struct, in order.
RUNTIME_INPUTS = {code: op.runtime_inputs for code, op in OPS.items()}


def weight_fields(op: str) -> list[str]:
    """Fields of mcubert_<op>_weights, in struct order (= contract order of the constant inputs)."""
    return OPS[op].weight_fields


def make_params(op: str, options: dict[str, int], spec_hash: int | None = None, **overrides) -> ctypes.Structure:
    """The params struct of `op` from its option dict, plus spec version and hash: the lowest version
    with every option (an int4 embedding's is 2), its hash by default the Python contract's; pass
    the hash (of that version) a kernel build was made for to test its numerics while the contract
    text is being changed elsewhere. Absent optional fields (word_bits of version 1) are 0."""
    version = contract_versions.options_version(op, {k: v for k, v in options.items() if k != c_contract.RESERVED})
    values = {"spec_version": version, "spec_hash": OP_SPEC_HASHES[op][version], **options, **overrides}
    if spec_hash is not None:
        values["spec_hash"] = spec_hash
    required = {f.name for f in contract_versions.option_fields(op, version)}
    struct = PARAMS_STRUCTS[op]()
    for name, _ in struct._fields_:
        # Reserved words and the fields of later versions are 0; the version's own fields must be given.
        setattr(struct, name, int(values[name] if name in required else values.get(name, 0)))
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
        """The buffer holding the result after the call (in-place ops: their run-time input 0)."""
        op = OPS[self.op]
        return op.runtime_inputs[0] if op.in_place else "output"

    @property
    def options(self) -> dict[str, int]:
        """The params' fields of the call's spec version (a later version's fields, 0 in the struct, are
        absent, so `{**call.options, ...}` keeps the version); every field for a version the op lacks."""
        version = self.params.spec_version
        if version not in contract_versions.op_versions(self.op):
            return {name: getattr(self.params, name) for name, _ in self.params._fields_}
        known = {f.name for f in contract_versions.option_fields(self.op, version)} | {c_contract.RESERVED}
        return {name: getattr(self.params, name) for name, _ in self.params._fields_ if name in known}

    def dims(self) -> tuple[int, ...]:
        """Arguments of the op's get_buffer_size."""
        return OPS[self.op].buffer_size_args(self.params)


def _contiguous(array: np.ndarray, dtype) -> np.ndarray:
    array = np.ascontiguousarray(array)
    if array.dtype != np.dtype(dtype):
        raise TypeError(f"expected {np.dtype(dtype).name}, got {array.dtype.name}")
    return array.reshape(-1)


def _call(params, tensors: dict[str, np.ndarray], spec_hash: int | None) -> KernelCall:
    """The call of `params`' op: the run-time `tensors` given, its constants, then its output buffer
    (empty for an in-place op: the result overwrites run-time input 0)."""
    op = next(d for d in OPS.values() if isinstance(params, d.params_type))
    tensors.update({k: _contiguous(v, v.dtype) for k, v in params.tensors().items()})
    tensors["output"] = np.zeros(0 if op.in_place else op.output_elements(params), op.output_dtype)
    return KernelCall(op.code, make_params(op.code, params.options(), spec_hash), tensors)


def attention_call(params, hidden: np.ndarray, mask: np.ndarray, spec_hash: int | None = None) -> KernelCall:
    """From ops.attention.AttentionParams (validated), hidden int8[s, d], mask int8[s] or int32[1]."""
    mask = _contiguous(mask, np.int8 if params.mask_mode == 0 else np.int32)
    return _call(params, {"hidden": _contiguous(hidden, np.int8).copy(), "mask": mask}, spec_hash)


def mlp_call(params, hidden: np.ndarray, spec_hash: int | None = None) -> KernelCall:
    return _call(params, {"hidden": _contiguous(hidden, np.int8).copy()}, spec_hash)


def embedding_call(
    params, input_ids: np.ndarray, token_type_ids: np.ndarray, spec_hash: int | None = None
) -> KernelCall:
    ids = {"input_ids": _contiguous(input_ids, np.int32), "token_type_ids": _contiguous(token_type_ids, np.int32)}
    return _call(params, ids, spec_hash)


def classifier_head_call(params, hidden: np.ndarray, spec_hash: int | None = None) -> KernelCall:
    """From ops.classifier_head.ClassifierHeadParams (validated) and hidden int8[s, d]."""
    return _call(params, {"hidden": _contiguous(hidden, np.int8)}, spec_hash)


def lm_head_call(params, hidden: np.ndarray, spec_hash: int | None = None) -> KernelCall:
    """From ops.lm_head.LmHeadParams (validated) and one token's hidden int8[d]."""
    return _call(params, {"hidden": _contiguous(hidden, np.int8)}, spec_hash)


def causal_attention_call(
    params, hidden: np.ndarray, position: np.ndarray, cache: np.ndarray, spec_hash: int | None = None
) -> KernelCall:
    """From ops.causal_attention.CausalAttentionParams (validated), one token's hidden int8[d], the
    position int32[1] and the cache int8[2, n, d] (copied: the call's own state)."""
    inputs = {
        "hidden": _contiguous(hidden, np.int8).copy(),
        "position": _contiguous(position, np.int32),
        "cache": _contiguous(cache, np.int8).copy(),
    }
    return _call(params, inputs, spec_hash)


def decoder_mlp_call(params, hidden: np.ndarray, spec_hash: int | None = None) -> KernelCall:
    """From ops.decoder_mlp.DecoderMlpParams (validated) and one token's residual stream int8[d]."""
    return _call(params, {"hidden": _contiguous(hidden, np.int8).copy()}, spec_hash)


def decoder_embedding_call(params, input_id: int, position: int, spec_hash: int | None = None) -> KernelCall:
    """From ops.decoder_embedding.DecoderEmbeddingParams (validated), one token id and its position."""
    inputs = {"input_id": np.array([input_id], np.int32), "position": np.array([position], np.int32)}
    return _call(params, inputs, spec_hash)


def op_call(params, spec_hash: int | None = None, **runtime_inputs: np.ndarray) -> KernelCall:
    """The call of any op from its validated params and its run-time inputs by name, each copied (an op may
    write its inputs: the call keeps its own state)."""
    return _call(params, {k: _contiguous(v, v.dtype).copy() for k, v in runtime_inputs.items()}, spec_hash)


def output_elements(call: KernelCall) -> int:
    """Element count of the output tensor (validate checks it; an in-place op's aliases its input)."""
    return OPS[call.op].output_elements(call.params)


# The classifier head's names in the head's own kernel tests.
_HEAD = OPS[contract.CLASSIFIER_HEAD]
CLASSIFIER_HEAD_OP_ID = OP_IDS[_HEAD.code]
CLASSIFIER_HEAD_SYMBOLS = {
    "s8": _HEAD.kernel_symbol,
    "validate": _HEAD.validate_symbol,
    "get_buffer_size": _HEAD.buffer_size_symbol,
}
CLASSIFIER_HEAD_TENSOR_NAMES = TENSOR_NAMES[_HEAD.code]
CLASSIFIER_HEAD_WEIGHT_FIELDS = _HEAD.weight_fields
ClassifierHeadCall = KernelCall


def make_classifier_head_params(options: dict[str, int], spec_hash: int | None = None, **overrides):
    return make_params(_HEAD.code, options, spec_hash, **overrides)
