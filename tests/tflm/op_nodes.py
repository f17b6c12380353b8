"""MCUBERT op nodes as TFLM's single-kernel harnesses take them: the node's tensors (inputs in
contract order, then the result and optionally the scratch tensor), the op's flexbuffer options,
and the numpy reference's output, from the kernel tests' cases (tests/kernels/kernel_cases.py).
Shared by the KernelRunner test (real TFLM) and the glue test (the stand-in TFLM)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parents[1] / "kernels"))  # the kernel tests' cases, as their conftest does
import kernel_cases  # noqa: E402
from test_kernels_classifier_head import extreme_case as head_case  # noqa: E402
from tflm_mcubert.ops import (  # noqa: E402
    attention,
    causal_attention,
    classifier_head,
    contract,
    contract_versions,
    decoder_embedding,
    decoder_mlp,
    embedding,
    lm_head,
    mlp,
)
from tflm_mcubert.ops.kernel_abi import RUNTIME_INPUTS  # noqa: E402
from tflm_mcubert.ops.options import encode_options  # noqa: E402

TFLITE_TYPES = {np.dtype(np.float32): 1, np.dtype(np.int32): 2, np.dtype(np.int16): 7, np.dtype(np.int8): 9}
SCRATCH = {
    contract.EMBEDDING: lambda o: embedding.scratch_bytes(o["seq_len"], o["hidden"]),
    contract.ATTENTION: lambda o: attention.scratch_bytes(o["seq_len"], o["hidden"], o["heads"], o["tile"]),
    contract.MLP: lambda o: mlp.scratch_bytes(o["seq_len"], o["hidden"], o["ffn"], o["tile"]),
    contract.CLASSIFIER_HEAD: lambda o: classifier_head.scratch_bytes(o["hidden"]),
    contract.LM_HEAD: lambda o: lm_head.scratch_bytes(o["hidden"]),
    contract.CAUSAL_ATTENTION: lambda o: causal_attention.scratch_bytes(o["context"], o["hidden"]),
    contract.DECODER_MLP: lambda o: decoder_mlp.scratch_bytes(o["hidden"], o["ffn"]),
    contract.DECODER_EMBEDDING: lambda o: decoder_embedding.scratch_bytes(o["hidden"]),
}


def node(op: str, options: dict, runtime: list[np.ndarray], constants: dict, output: np.ndarray, scratch_tensor: bool):
    """The request of one KernelRunner run: inputs in contract order, then the outputs."""
    names = [t.name for t in contract.CONTRACTS[op].inputs]
    inputs = [*runtime, *(np.ascontiguousarray(constants[n]) for n in names[len(runtime) :])]
    outputs = [np.zeros_like(output)]
    if scratch_tensor:
        outputs.append(np.zeros(SCRATCH[op](options), np.int8))
    tensors = inputs + outputs
    request = {
        "mode": "kernel",
        "op": op,
        "options": np.frombuffer(encode_options(op, options), np.uint8),
        "input_count": len(inputs),
        "types": [TFLITE_TYPES[t.dtype] for t in tensors],
        "constant": [0] * len(runtime) + [1] * (len(inputs) - len(runtime)),
    }
    return request | {f"tensor_{i}": t for i, t in enumerate(tensors)}, len(inputs)


def op_options(call) -> dict:
    """The fields the exporter writes for the call's spec version (encode_options adds the spec header
    itself; a version-1 call's absent word_bits, 0 in the kernel ABI, is not one of them)."""
    fields = {f.name for f in contract_versions.option_fields(call.op, call.options["spec_version"])}
    header = ("spec_version", "spec_hash", "reserved")
    return {k: v for k, v in call.options.items() if k in fields and k not in header}


def encoder_node(case: kernel_cases.Case, scratch_tensor: bool):
    call = case.call
    options = op_options(call)
    runtime = [call.tensors[n] for n in RUNTIME_INPUTS[call.op]]
    if call.op != contract.EMBEDDING:
        runtime[0] = runtime[0].reshape(options["seq_len"], options["hidden"])
    expected = case.expected.reshape(options["seq_len"], options["hidden"])
    return node(call.op, options, runtime, call.tensors, expected, scratch_tensor), expected


ENCODER_CASES = {
    "embedding": lambda: kernel_cases.embedding_case(8, 16),
    "embedding-realistic": lambda: kernel_cases.embedding_case(12, 32, kind="realistic"),
    "attention": lambda: kernel_cases.attention_case(8, 16, 2, 3),
    "attention-valid-length": lambda: kernel_cases.attention_case(9, 16, 4, 4, mask_mode=1),
    "attention-realistic": lambda: kernel_cases.attention_case(12, 32, 2, 5, kind="realistic"),
    "mlp": lambda: kernel_cases.mlp_case(8, 16, 64, 3),
    "mlp-realistic": lambda: kernel_cases.mlp_case(12, 32, 128, 4, kind="realistic"),
}


def head_node(scratch_tensor: bool, labels: int = 3):
    case = head_case(8, 16, labels)
    params = case.params
    request, inputs = node(
        contract.CLASSIFIER_HEAD, params.options(), [case.hidden], params.tensors(), case.expected, scratch_tensor
    )
    return (request, inputs), case.expected


def encode_options_unchecked(op: str, values: dict) -> bytes:
    """The flexbuffer as the exporter writes it, without its range checks (what a corrupt or foreign
    model would carry)."""
    from flatbuffers import flexbuffers

    from tflm_mcubert.ops.registry import SPEC_HASH, SPEC_VERSION

    return bytes(flexbuffers.Dumps({"spec_version": SPEC_VERSION, "spec_hash": SPEC_HASH, **values}))


def lm_head_node(scratch_tensor: bool):
    """The LM head tied to a quantized embedding (tests/kernels' tied case): its node and expected int32[2, k]."""
    from test_kernels_lm_head import tied_case

    case, _ = tied_case(32, (20, 60, 120), (8, 2), 6, seed=4)
    params = case.params
    expected = case.expected.reshape(2, params.top_k)
    return node(contract.LM_HEAD, params.options(), [case.hidden], params.tensors(), expected, scratch_tensor), expected


def causal_attention_step(params, hidden: np.ndarray, position: int, cache: np.ndarray, scratch_tensor: bool):
    """One decoding step's node (the cache as the run-time input it is in a model: a variable tensor)."""
    runtime = [hidden.reshape(1, -1), np.array([position], np.int32), cache]
    return node(
        contract.CAUSAL_ATTENTION, params.options(), runtime, params.tensors(), hidden.reshape(1, -1), scratch_tensor
    )


def decoder_mlp_node(params, hidden: np.ndarray, scratch_tensor: bool):
    """One token through the decoder MLP: its node and the reference's residual stream after it."""
    expected = decoder_mlp.run(params, hidden.copy()).reshape(1, -1)
    runtime = [hidden.reshape(1, -1)]
    return node(contract.DECODER_MLP, params.options(), runtime, params.tensors(), expected, scratch_tensor), expected


def decoder_embedding_node(params, token: int, position: int, scratch_tensor: bool):
    """One token's embedding: its node and the reference's residual stream."""
    ids = np.array([token], np.int32), np.array([position], np.int32)
    expected = decoder_embedding.run(params, *ids, np.zeros(params.hidden, np.int8)).reshape(1, -1)
    return node(
        contract.DECODER_EMBEDDING, params.options(), list(ids), params.tensors(), expected, scratch_tensor
    ), expected
