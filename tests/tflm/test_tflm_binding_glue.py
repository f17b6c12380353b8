"""The TFLM binding's glue without TFLM: custom_ops/tflm/ built by custom_ops/CMakeLists.txt against
the stand-in TFLM of tests/tflm/host_stub/, and each op's registration run through Init (options),
Prepare (validation, scratch) and Invoke the way KernelRunner does. Always runs (a host C++
compiler and cmake are all it needs), so a change to the glue is tested in every CI run; the same
nodes run in the real TFLM in tests/tflm/test_tflm_kernel_runner.py when TFLM_DIR is set.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.tflm.op_nodes import (
    ENCODER_CASES,
    SCRATCH,
    TFLITE_TYPES,
    encode_options_unchecked,
    encoder_node,
    head_node,
    op_options,
)
from tflm_mcubert.ops import contract
from tflm_mcubert.runtime.tflm_child import STATUS_DONE, STATUS_TFLM_ERROR, run_kernel

HARNESS = Path(__file__).with_name("host_stub")
LOG = {}


@pytest.fixture(scope="module")
def glue(tmp_path_factory):
    if shutil.which("cmake") is None or shutil.which("c++") is None:
        pytest.skip("needs cmake and a host C++ compiler (Debian: cmake g++); .ci/run installs them")
    build = tmp_path_factory.mktemp("glue")
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    for command in (
        ["cmake", "-S", str(HARNESS), "-B", str(build), *generator, "-DCMAKE_C_FLAGS=-O2", "-DCMAKE_CXX_FLAGS=-O2"],
        ["cmake", "--build", str(build)],
    ):
        result = subprocess.run(command, capture_output=True, text=True)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    path = build / "libmcubert_glue_harness.so"
    library = ctypes.CDLL(str(path))
    library.mcubert_glue_log.restype = ctypes.c_char_p
    yield path, library
    library.mcubert_glue_set_arena_bytes(1 << 20)


def run(glue, request: dict, arena_bytes: int = 1 << 20) -> tuple[int, dict, str]:
    """(status, response, the binding's log) of one node through the harness."""
    path, library = glue
    assert library.mcubert_glue_set_arena_bytes(arena_bytes) == 0
    arrays = {k: np.asarray(v) for k, v in {**request, "library": str(path), "entry": "mcubert_glue_run"}.items()}
    response: dict = {}
    status = run_kernel(arrays, response, {str(path): library})
    return status, response, library.mcubert_glue_log().decode()


@pytest.mark.parametrize("scratch_tensor", [False, True], ids=["scratch-requested", "scratch-tensor"])
@pytest.mark.parametrize("name", sorted(ENCODER_CASES))
def test_each_encoder_op_through_its_registration_equals_the_reference(glue, name, scratch_tensor):
    (request, inputs), expected = encoder_node(ENCODER_CASES[name](), scratch_tensor)
    status, response, log = run(glue, request)
    assert status == STATUS_DONE, log
    np.testing.assert_array_equal(response[f"tensor_{inputs}"], expected)


@pytest.mark.parametrize("scratch_tensor", [False, True], ids=["scratch-requested", "scratch-tensor"])
def test_the_classifier_head_through_its_registration_equals_the_reference(glue, scratch_tensor):
    (request, inputs), expected = head_node(scratch_tensor)
    status, response, log = run(glue, request)
    assert status == STATUS_DONE, log
    np.testing.assert_array_equal(response[f"tensor_{inputs}"], expected)


def mlp_request(**changes):
    case = ENCODER_CASES["mlp"]()
    (request, inputs), _ = encoder_node(case, scratch_tensor=False)
    if changes:
        options = {**op_options(case.call), **changes}
        request["options"] = np.frombuffer(encode_options_unchecked(contract.MLP, options), np.uint8)
    return request, inputs, op_options(case.call)


@pytest.mark.parametrize("blob", [b"", b"\x00\x01\x02", b"\xff" * 64])
def test_options_that_are_no_flexbuffer_map_are_rejected_at_init(glue, blob):
    request, _, _ = mlp_request()
    request["options"] = np.frombuffer(blob, np.uint8)
    status, _, log = run(glue, request)
    assert status == STATUS_TFLM_ERROR
    assert log.startswith("MCUBERT_MLP") and "custom options rejected (reason above)" in log, log


@pytest.mark.parametrize(
    "change, message",
    [
        ({"tile": 0}, "MCUBERT_MLP: tile: 0 is outside [1, 1024]"),
        ({"spec_hash": 1}, "MCUBERT_MLP: spec_hash: 0x00000001 does not match this build's contract"),
        ({"seq_len": 9}, "MCUBERT_MLP: hidden: expected 144 elements, got 128"),
    ],
)
def test_options_out_of_contract_stop_prepare_naming_the_field(glue, change, message):
    request, _, _ = mlp_request(**change)
    status, _, log = run(glue, request)
    assert status == STATUS_TFLM_ERROR and message in log, log


def test_a_constant_with_the_wrong_contents_is_refused_naming_the_tensor(glue):
    request, _, _ = mlp_request()
    names = [t.name for t in contract.CONTRACTS[contract.MLP].inputs]
    index = names.index("fc1_channels")
    channels = request[f"tensor_{index}"].copy().reshape(-1, 3)
    channels[0, 2] = 99  # a shift no requantization has
    request[f"tensor_{index}"] = channels
    status, _, log = run(glue, request)
    assert status == STATUS_TFLM_ERROR and "fc1_channels" in log, log


@pytest.mark.parametrize("name", ["embedding", "attention", "mlp"])
def test_a_weight_the_model_computes_at_run_time_is_refused_naming_the_input(glue, name):
    """A model whose constant input (here the first one after the run-time inputs) is an arena tensor would
    hand the kernel contents Prepare never checked (the TFLM-binding fuzzer's finding: an embedding
    table's shift of -1828 reached the kernel); the binding refuses it at Prepare."""
    (request, inputs), _ = encoder_node(ENCODER_CASES[name](), scratch_tensor=False)
    first_constant = request["constant"].index(1)
    request["constant"] = [0 if i == first_constant else c for i, c in enumerate(request["constant"])]
    status, _, log = run(glue, request)
    assert status == STATUS_TFLM_ERROR and f"input {first_constant} must be a constant of the model" in log, log


def test_a_third_output_is_refused(glue):
    (request, _), _ = encoder_node(ENCODER_CASES["mlp"](), scratch_tensor=True)
    count = len(request["types"])
    request[f"tensor_{count}"] = np.zeros(4, np.int8)
    request["types"] = [*request["types"], TFLITE_TYPES[np.dtype(np.int8)]]
    status, _, log = run(glue, request)
    assert status == STATUS_TFLM_ERROR and "expected 1 or 2 outputs" in log, log


def test_a_scratch_tensor_too_small_names_both_sizes(glue):
    case = ENCODER_CASES["mlp"]()
    (request, inputs), _ = encoder_node(case, scratch_tensor=True)
    needed = SCRATCH[contract.MLP](op_options(case.call))
    request[f"tensor_{inputs + 1}"] = np.zeros(needed - 1, np.int8)
    status, _, log = run(glue, request)
    assert status == STATUS_TFLM_ERROR and f"scratch: {needed - 1} bytes, the op needs {needed}" in log, log


def test_an_arena_too_small_for_the_scratch_is_refused_naming_the_size(glue):
    request, _, options = mlp_request()
    needed = SCRATCH[contract.MLP](options)
    status, _, log = run(glue, request, arena_bytes=needed // 2)
    assert status == STATUS_TFLM_ERROR and f"scratch: TFLM refused {needed} bytes" in log, log


def test_no_room_for_the_op_data_says_so(glue):
    request, _, _ = mlp_request()
    status, _, log = run(glue, request, arena_bytes=0)
    assert status == STATUS_TFLM_ERROR and "no memory for the op's parameters" in log, log


def test_add_mcubert_ops_needs_room_for_every_op(glue):
    _, library = glue
    assert library.mcubert_glue_add_ops(1) == 0  # kOpCount slots: every op registered
    assert library.mcubert_glue_add_ops(0) == 1  # one slot too few: refused


# ---- mcubert::TextInput (custom_ops/tflm/mcubert_tflm_text.cc) -----------------------------------


def text_fill(glue, blob: bytes, text: bytes, seq_len: int, types=(2, 2, 9)):
    """(status, ids, token types, mask, valid, message) of TextInput::Fill on stand-in inputs."""
    _, library = glue
    ids, token_types = np.zeros(seq_len, np.int32), np.zeros(seq_len, np.int32)
    mask = np.zeros(seq_len, np.int8)
    data = (ctypes.c_void_p * 3)(*(a.ctypes.data for a in (ids, token_types, mask)))
    valid, message = ctypes.c_uint32(), ctypes.create_string_buffer(128)
    status = library.mcubert_glue_text_fill(
        blob, len(blob), text, len(text), (ctypes.c_int32 * 3)(*types), data, seq_len, ctypes.byref(valid), message
    )
    return status, ids, token_types, mask, valid.value, message.value.decode()


def test_text_input_fills_the_three_inputs_as_the_reference_tokenizer(glue, minilm_blob, minilm_spec):
    from tflm_mcubert.tokenizer import reference

    for text in ("A gripping, funny film.", "Crème brûlée, 東京 and 😀", "", "word " * 50):
        status, ids, token_types, mask, valid, message = text_fill(glue, minilm_blob, text.encode(), 32)
        want = reference.encode(minilm_spec, text.encode(), 32)
        assert status == 0, message
        assert (ids == want.ids).all() and (token_types == want.token_types).all() and (mask == want.mask).all()
        assert valid == want.valid


def test_text_input_refuses_inputs_it_cannot_fill_and_a_damaged_blob(glue, minilm_blob):
    status, *_, message = text_fill(glue, minilm_blob, b"text", 32, types=(2, 2, 2))  # an int32 mask
    assert status == 1 and "attention_mask is not the INT8 tensor" in message
    damaged = bytearray(minilm_blob)
    damaged[len(damaged) // 2] ^= 0xFF
    status, *_, message = text_fill(glue, bytes(damaged), b"text", 32)
    assert status == 1 and "CRC-32 mismatch" in message
