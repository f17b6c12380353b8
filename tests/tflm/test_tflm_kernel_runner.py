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
from pathlib import Path

import numpy as np
import pytest

from tests.tflm.op_nodes import (
    ENCODER_CASES,
    TFLITE_TYPES,
    causal_attention_step,
    decoder_embedding_node,
    decoder_mlp_node,
    encode_options_unchecked,
    encoder_node,
    head_node,
    lm_head_node,
    op_options,
)
from tflm_mcubert.ops import causal_attention, contract, testing
from tflm_mcubert.runtime.arena_search import TflmError
from tflm_mcubert.runtime.tflm_binding import TFLM_DEFINES, WHEEL_VERSION, InterpreterEnvironment, TflmSources
from tflm_mcubert.runtime.tflm_process import TflmProcess

pytestmark = pytest.mark.skipif(
    not os.environ.get("TFLM_DIR"),
    reason="TFLM_DIR is not set: the per-op KernelRunner tests compile TFLM's kernel_runner.cc from a "
    "tflite-micro checkout at commit 90b983c and run it in the matching wheel on Python 3.13",
)

RUNNER = Path(__file__).with_name("kernel_runner")


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
    (request, inputs), expected = head_node(scratch_tensor)
    response, _ = process.request({**request, "library": str(library)})
    np.testing.assert_array_equal(response[f"tensor_{inputs}"], expected)


@pytest.mark.parametrize("scratch_tensor", [False, True], ids=["scratch-from-tflm", "scratch-tensor"])
def test_lm_head_alone_in_tflm_equals_the_reference(tflm, scratch_tensor):
    process, library = tflm
    (request, inputs), expected = lm_head_node(scratch_tensor)
    response, _ = process.request({**request, "library": str(library)})
    np.testing.assert_array_equal(response[f"tensor_{inputs}"], expected)


def test_causal_attention_steps_in_tflm_carry_the_cache_as_the_reference_does(tflm):
    """Twelve decoding steps, each fed the cache TFLM left after the previous one: every step's
    residual stream and the cache equal the reference's."""
    process, library = tflm
    params, _, in_quant, x = testing.quantized_causal_attention(d=16, h=2, context=12, seed=5)
    xq = in_quant.quantize(x)
    cache_tflm = np.zeros((2, params.context, params.hidden), np.int8)
    cache_reference = cache_tflm.copy()
    for p, row in enumerate(xq):
        request, inputs = causal_attention_step(params, row, p, cache_tflm, scratch_tensor=p % 2 == 1)
        response, _ = process.request({**request, "library": str(library)})
        expected = causal_attention.run(params, row.copy(), np.array([p], np.int32), cache_reference)
        np.testing.assert_array_equal(response[f"tensor_{inputs}"].reshape(-1), expected, err_msg=f"step {p}")
        cache_tflm = response["tensor_2"]
        np.testing.assert_array_equal(cache_tflm, cache_reference, err_msg=f"cache after step {p}")


@pytest.mark.parametrize("scratch_tensor", [False, True], ids=["scratch-from-tflm", "scratch-tensor"])
def test_decoder_mlp_alone_in_tflm_equals_the_reference(tflm, scratch_tensor):
    process, library = tflm
    params, _, in_quant, x = testing.quantized_decoder_mlp(d=16, ffn=64, seed=6)
    for row in in_quant.quantize(x[:3]):
        (request, inputs), expected = decoder_mlp_node(params, row, scratch_tensor)
        response, _ = process.request({**request, "library": str(library)})
        np.testing.assert_array_equal(response[f"tensor_{inputs}"], expected)


@pytest.mark.parametrize("scratch_tensor", [False, True], ids=["scratch-from-tflm", "scratch-tensor"])
def test_decoder_embedding_alone_in_tflm_equals_the_reference(tflm, scratch_tensor):
    process, library = tflm
    params = testing.quantized_decoder_embedding(d=16, context=6, seed=7)[0]
    for token, position in ((0, 0), (45, 5), (199, 2)):
        (request, inputs), expected = decoder_embedding_node(params, token, position, scratch_tensor)
        response, _ = process.request({**request, "library": str(library)})
        np.testing.assert_array_equal(response[f"tensor_{inputs}"], expected)


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
