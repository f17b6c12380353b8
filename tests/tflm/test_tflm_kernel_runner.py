"""Each MCUBERT op alone in TFLM, the way TFLM tests its own kernels: tflite::micro::KernelRunner
with the op's registration, the node's tensors and the flexbuffer options the exporter writes as
init data — no model, no interpreter (tests/tflm/kernel_runner/). The output must equal the numpy
reference byte for byte, with the scratch taken from TFLM (RequestScratchBufferInArena) and from a
scratch output tensor; bad options and tensors are refused at Prepare, naming the op.

Needs TFLM_DIR, as tests/tflm/test_tflm_binding.py does (its module docstring says what else).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "kernels"))  # the kernel tests' cases, as their conftest does
import kernel_cases  # noqa: E402
from test_kernels_classifier_head import extreme_case as head_case  # noqa: E402
from tflm_mcubert.ops import attention, classifier_head, contract, embedding, mlp  # noqa: E402
from tflm_mcubert.ops.kernel_abi import RUNTIME_INPUTS  # noqa: E402
from tflm_mcubert.ops.options import encode_options  # noqa: E402
from tflm_mcubert.runtime.arena_search import TflmError  # noqa: E402
from tflm_mcubert.runtime.tflm_binding import (  # noqa: E402
    TFLM_DEFINES,
    WHEEL_VERSION,
    InterpreterEnvironment,
    TflmSources,
)
from tflm_mcubert.runtime.tflm_process import TflmProcess  # noqa: E402

pytestmark = pytest.mark.skipif(
    not os.environ.get("TFLM_DIR"),
    reason="TFLM_DIR is not set: the per-op KernelRunner tests compile TFLM's kernel_runner.cc from a "
    "tflite-micro checkout at commit 90b983c and run it in the matching wheel on Python 3.13",
)

RUNNER = Path(__file__).with_name("kernel_runner")
TFLITE_TYPES = {np.dtype(np.float32): 1, np.dtype(np.int32): 2, np.dtype(np.int16): 7, np.dtype(np.int8): 9}
SCRATCH = {
    contract.EMBEDDING: lambda o: embedding.scratch_bytes(o["seq_len"], o["hidden"]),
    contract.ATTENTION: lambda o: attention.scratch_bytes(o["seq_len"], o["hidden"], o["heads"], o["tile"]),
    contract.MLP: lambda o: mlp.scratch_bytes(o["seq_len"], o["hidden"], o["ffn"], o["tile"]),
    contract.CLASSIFIER_HEAD: lambda o: classifier_head.scratch_bytes(o["hidden"]),
}


@pytest.fixture(scope="module")
def tflm(tmp_path_factory):
    sources = TflmSources.from_environment().checked()
    env_dir = os.environ.get("TFLM_PYTHON_ENV") or tmp_path_factory.mktemp("tflm-python") / "env"
    environment = InterpreterEnvironment.ensure(Path(env_dir), log=lambda _: None)
    build = tmp_path_factory.mktemp("kernel-runner")
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    configure = [
        "cmake",
        "-S",
        str(RUNNER),
        "-B",
        str(build),
        *generator,
        f"-DTFLM_DIR={sources.tflm_dir}",
        "-DMCUBERT_TFLM_INCLUDE_DIRS=" + ";".join(str(d) for d in sources.include_dirs),
        "-DMCUBERT_TFLM_DEFINES=" + ";".join(TFLM_DEFINES),
        f"-DMCUBERT_TFLM_PYTHON_RUNTIME_DIR={environment.runtime_dir}",
        "-DCMAKE_CXX_FLAGS=-O2",
        "-DCMAKE_C_FLAGS=-O2",
    ]
    for command in (configure, ["cmake", "--build", str(build), "--target", "mcubert_kernel_runner"]):
        result = subprocess.run(command, capture_output=True, text=True)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    with TflmProcess(environment.python, WHEEL_VERSION) as process:
        yield process, build / "libmcubert_kernel_runner.so"


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
    """The fields the exporter writes (encode_options adds the spec header itself)."""
    return {k: v for k, v in call.options.items() if k not in ("spec_version", "spec_hash", "reserved")}


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


@pytest.mark.parametrize("scratch_tensor", [False, True], ids=["scratch-from-tflm", "scratch-tensor"])
@pytest.mark.parametrize("name", sorted(ENCODER_CASES))
def test_encoder_op_alone_in_tflm_equals_the_reference(tflm, name, scratch_tensor):
    process, library = tflm
    (request, inputs), expected = encoder_node(ENCODER_CASES[name](), scratch_tensor)
    response, _ = process.request({**request, "library": str(library)})
    np.testing.assert_array_equal(response[f"tensor_{inputs}"], expected)


@pytest.mark.parametrize("scratch_tensor", [False, True], ids=["scratch-from-tflm", "scratch-tensor"])
def test_classifier_head_alone_in_tflm_equals_the_reference(tflm, scratch_tensor):
    process, library = tflm
    case = head_case(8, 16, 3)
    params = case.params
    request, inputs = node(
        contract.CLASSIFIER_HEAD, params.options(), [case.hidden], params.tensors(), case.expected, scratch_tensor
    )
    response, _ = process.request({**request, "library": str(library)})
    np.testing.assert_array_equal(response[f"tensor_{inputs}"], case.expected)


def test_options_out_of_contract_are_refused_at_prepare_naming_the_op_and_field(tflm):
    process, library = tflm
    case = ENCODER_CASES["mlp"]()
    (request, _), _ = encoder_node(case, scratch_tensor=False)
    options = op_options(case.call)
    options["tile"] = options["seq_len"] + 1
    request["options"] = np.frombuffer(encode_options_unchecked(contract.MLP, options), np.uint8)
    with pytest.raises(TflmError, match=r"(?s)MCUBERT_MLP.*tile.*InitAndPrepare failed"):
        process.request({**request, "library": str(library)})


def test_a_constant_of_the_wrong_dtype_is_refused_at_prepare(tflm):
    process, library = tflm
    (request, inputs), _ = encoder_node(ENCODER_CASES["attention"](), scratch_tensor=False)
    request["tensor_3"] = request["tensor_3"].astype(np.int8)  # query_channels: int32 in the contract
    request["types"] = list(request["types"])
    request["types"][3] = TFLITE_TYPES[np.dtype(np.int8)]
    with pytest.raises(TflmError, match=r"(?s)MCUBERT_ATTENTION.*query_channels.*InitAndPrepare failed"):
        process.request({**request, "library": str(library)})


def encode_options_unchecked(op: str, values: dict) -> bytes:
    """The flexbuffer as the exporter writes it, without its range checks (what a corrupt or foreign
    model would carry)."""
    from flatbuffers import flexbuffers

    from tflm_mcubert.ops.registry import SPEC_HASH, SPEC_VERSION

    return bytes(flexbuffers.Dumps({"spec_version": SPEC_VERSION, "spec_hash": SPEC_HASH, **values}))
