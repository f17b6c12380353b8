"""The MCUBERT ops inside the real TFLM interpreter: custom_ops/tflm/ built against a TFLM checkout
and run by the tflite-micro wheel that matches it (tflm_mcubert/runtime/tflm_binding.py).

Needs TFLM_DIR (a tflite-micro checkout at commit 90b983c; FLATBUFFERS_INCLUDE and GEMMLOWP_DIR
default to where TFLM's Makefile downloads them) and a Python 3.13; the interpreter environment is
created under the test's temporary folder unless TFLM_PYTHON_ENV names a kept one.
"""

import os

import flatbuffers
import numpy as np
import pytest
from flatbuffers import flexbuffers
from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as schema

from tflm_mcubert.boards import get_board
from tflm_mcubert.schedule.planner import plan_of
from tflm_mcubert.tflite.mcubert_reader import read_decoder, read_model
from tflm_mcubert.tflite.mcubert_writer import model_to_tflite
from tflm_mcubert.export.pipeline import ExportRequest, run_export
from tflm_mcubert.data.calibration import Calibration
from tflm_mcubert.export.mcubert_export import UNBOUNDED, arena_of, export_mcubert
from tflm_mcubert.model.bert import build_model
from tflm_mcubert.model.config import preset
from tflm_mcubert.export.tflm_arena import HOST_64
from tflm_mcubert.ops.contract import ATTENTION_LINEAR_LAYERS, MLP_LINEAR_LAYERS
from tflm_mcubert.ops.registry import SPEC_HASH
from tflm_mcubert.ops.widths import Widths
from tflm_mcubert.runtime.reference import run_reference
from tflm_mcubert.runtime.arena_search import TflmError, smallest_passing
from tflm_mcubert.runtime.tflm_binding import TflmBinding, TflmSources

pytestmark = pytest.mark.skipif(
    not os.environ.get("TFLM_DIR"),
    reason="TFLM_DIR is not set: these tests compile custom_ops/tflm against a tflite-micro checkout at "
    "commit 90b983c (with flatbuffers v25.9.23 and gemmlowp headers) and run it in the "
    "tflite-micro==0.dev20260820164721 wheel on Python 3.13",
)

SEQ = 128


@pytest.fixture(scope="module")
def binding(tmp_path_factory) -> TflmBinding:
    sources = TflmSources.from_environment()
    env_dir = os.environ.get("TFLM_PYTHON_ENV") or tmp_path_factory.mktemp("tflm-python") / "env"
    return TflmBinding.build(sources, env_dir, tmp_path_factory.mktemp("tflm-binding"), log=lambda _: None)


def _export(tmp_path_factory, labels, embedding_bits=8, weight_bits=8):
    out = tmp_path_factory.mktemp(f"bert-tiny-{labels}")
    request = ExportRequest(
        out_dir=out,
        board=get_board("nucleo-f746zg"),
        num_labels=labels,
        seq_len=SEQ,
        embedding_bits=embedding_bits,
        weight_bits=weight_bits,
    )
    run_export(request)
    return (out / "model.tflite").read_bytes()


@pytest.fixture(scope="module")
def classifier(tmp_path_factory) -> bytes:
    return _export(tmp_path_factory, 2)


@pytest.fixture(scope="module")
def encoder(tmp_path_factory) -> bytes:
    return _export(tmp_path_factory, None)


@pytest.fixture(scope="module")
def classifier_int4(tmp_path_factory) -> bytes:
    """int4 word tables (spec version 2 options on the embedding op, SPEC 4.1.1)."""
    return _export(tmp_path_factory, 2, embedding_bits=4)


@pytest.fixture(scope="module")
def classifier_w4(tmp_path_factory) -> bytes:
    """int4 attention and MLP weights (spec version 3 options on those ops, SPEC 3.1.1)."""
    return _export(tmp_path_factory, 2, weight_bits=4)


# A width per linear layer (SPEC 3.1.2, version 8 options) next to uniform ops of both widths.
_MIXED = {  # per op, its matrices' widths in the op's order
    "layer0.attention": (4, 8, 8, 4),
    "layer0.mlp": (8, 4),
    "layer1.attention": (8, 4, 4, 8),
    "layer1.mlp": (4, 4),
}
MIXED_WIDTHS = Widths.per_matrix(
    {
        f"{node}.{layer}": bits
        for node, widths in _MIXED.items()
        for layer, bits in zip(ATTENTION_LINEAR_LAYERS if node.endswith("attention") else MLP_LINEAR_LAYERS, widths)
    }
)


@pytest.fixture(scope="module")
def classifier_mixed() -> bytes:
    config = preset("bert-tiny", num_labels=2)
    samples, _ = Calibration.load("random", tokenizer=None, vocab_size=config.vocab_size, count=4).samples(SEQ)
    exported = export_mcubert(
        build_model(config, seed=1),
        None,
        seq_len=SEQ,
        arena_budget=UNBOUNDED,
        samples=samples,
        sentences=None,
        embedding="dense",
        widths=MIXED_WIDTHS,
        quiet=True,
    )
    return exported.tflite


def sample_inputs(seed: int, vocab_size: int = 30522, length: int | None = None) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    length = length if length is not None else int(rng.integers(1, SEQ + 1))
    ids = np.zeros((1, SEQ), np.int32)
    ids[0, :length] = rng.integers(0, vocab_size, length)
    mask = np.zeros((1, SEQ), np.int8)
    mask[0, :length] = 1
    types = np.zeros((1, SEQ), np.int32)
    types[0, length // 2 : length] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bert_tiny_logits_equal_the_reference_byte_for_byte(binding, classifier, seed):
    inputs = sample_inputs(seed)
    expected = run_reference(read_model(classifier), inputs).outputs["logits"]
    got = binding.run(classifier, inputs, arena_bytes=1 << 20).outputs["logits"]
    assert got.dtype == np.int8 and np.array_equal(got.reshape(expected.shape), expected)


@pytest.mark.parametrize("seed", [0, 1])
def test_bert_tiny_with_int4_word_tables_equals_the_reference_byte_for_byte(binding, classifier_int4, seed):
    inputs = sample_inputs(seed)
    model = read_model(classifier_int4)
    assert model.quantized.embedding.word_bits == 4
    expected = run_reference(model, inputs).outputs["logits"]
    got = binding.run(classifier_int4, inputs, arena_bytes=1 << 20).outputs["logits"]
    assert got.dtype == np.int8 and np.array_equal(got.reshape(expected.shape), expected)


@pytest.mark.parametrize("seed", [0, 1])
def test_bert_tiny_with_int4_weights_equals_the_reference_byte_for_byte(binding, classifier_w4, seed):
    inputs = sample_inputs(seed)
    model = read_model(classifier_w4)
    assert all(att.weight_bits == mlp.weight_bits == 4 for att, mlp in model.quantized.layers)
    expected = run_reference(model, inputs).outputs["logits"]
    got = binding.run(classifier_w4, inputs, arena_bytes=1 << 20).outputs["logits"]
    assert got.dtype == np.int8 and np.array_equal(got.reshape(expected.shape), expected)


@pytest.mark.parametrize("seed", [0, 1])
def test_bert_tiny_with_a_width_per_layer_equals_the_reference_byte_for_byte(binding, classifier_mixed, seed):
    inputs = sample_inputs(seed)
    model = read_model(classifier_mixed)
    widths = [(att.layer_widths, mlp.layer_widths) for att, mlp in model.quantized.layers]
    assert widths == [((4, 8, 8, 4), (8, 4)), ((8, 4, 4, 8), (4, 4))]
    expected = run_reference(model, inputs).outputs["logits"]
    got = binding.run(classifier_mixed, inputs, arena_bytes=1 << 20).outputs["logits"]
    assert got.dtype == np.int8 and np.array_equal(got.reshape(expected.shape), expected)


@pytest.mark.parametrize("length", [1, 77, SEQ])
def test_bert_tiny_hidden_state_equals_the_reference_byte_for_byte(binding, encoder, length):
    # Every byte of the last hidden state, not just two logits: all layers' kernels are covered.
    inputs = sample_inputs(10 + length, length=length)
    model = read_model(encoder)
    ((name, expected),) = run_reference(model, inputs).outputs.items()
    got = binding.run(encoder, inputs, arena_bytes=1 << 20).outputs[name]
    assert np.array_equal(got.reshape(expected.shape), expected)


def test_tflm_keeps_the_offline_plan_and_its_overhead_is_explained(binding, classifier):
    model = read_model(classifier)
    inputs = sample_inputs(3)
    run = binding.run(classifier, inputs, arena_bytes=1 << 20)
    # The non-persistent head is exactly our plan: TFLM placed every tensor and scratch at the
    # exported OfflineMemoryAllocation offsets and planned nothing of its own.
    assert run.arena["head"] == model.planned_bytes
    # The persistent tail is TFLM's bookkeeping, which export/tflm_arena.py itemises (64-bit host
    # struct sizes here; the exported arena_bytes uses Cortex-M's).
    estimate = arena_of(model, HOST_64)
    assert estimate.planned_bytes == model.planned_bytes
    assert 0 <= estimate.tail_bytes - run.arena["tail"] <= 256, (estimate.tail, run.arena)
    # And that is all of it: the least arena that runs is head + tail, which the estimate covers
    # (plus its 16 bytes for the arena start's alignment, which the wheel's buffer does not need).
    smallest = binding.min_arena_bytes(
        classifier, inputs, lower_failing=model.planned_bytes - 1, upper=estimate.arena_bytes + 4096
    )
    # (the recorded total may hold alignment padding of the last persistent allocation: < 16 bytes)
    assert run.arena["total"] == run.arena["head"] + run.arena["tail"]
    assert run.arena["total"] - 16 < smallest <= run.arena["total"], (smallest, run.arena)
    assert 0 <= estimate.arena_bytes - smallest <= 256 + 16, (smallest, estimate.arena_bytes)


def test_token_ids_out_of_range_fail_invoke_naming_the_input(binding, classifier):
    inputs = sample_inputs(4, length=SEQ)
    inputs["input_ids"][0, 5] = 30522
    with pytest.raises(TflmError, match=r"MCUBERT_EMBEDDING: input_ids: id 30522 at position 5 is outside"):
        binding.run(classifier, inputs, arena_bytes=1 << 20)


def _edited(model_bytes: bytes, edit) -> bytes:
    model = schema.ModelT.InitFromPackedBuf(bytearray(model_bytes), 0)
    edit(model.subgraphs[0])
    builder = flatbuffers.Builder(1 << 20)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def _with_options(model_bytes: bytes, op_index: int, raw: bytes) -> bytes:
    def edit(subgraph):
        subgraph.operators[op_index].customOptions = np.frombuffer(raw, np.uint8)

    return _edited(model_bytes, edit)


@pytest.mark.parametrize(
    "change,pattern",
    [
        ({"tile": 999}, r"MCUBERT_ATTENTION: tile: "),
        ({"spec_hash": 0xBAD}, r"MCUBERT_ATTENTION: spec_hash: 0x00000bad does not match"),
        ({"colour": 3}, r"MCUBERT_ATTENTION: colour: unknown option"),
    ],
)
def test_bad_options_stop_allocation_naming_op_and_field(binding, classifier, change, pattern):
    options = read_model(classifier).quantized.layers[0][0].options()
    raw = bytes(flexbuffers.Dumps({"spec_version": 1, "spec_hash": SPEC_HASH, **options, **change}))
    with pytest.raises(TflmError, match=pattern):
        binding.run(_with_options(classifier, 1, raw), sample_inputs(5), arena_bytes=1 << 20)


def test_without_planned_scratch_the_ops_request_it_and_compute_the_same(binding, classifier):
    # A model whose ops lack the scratch output (not what export writes) still runs: the binding asks
    # TFLM for the scratch (RequestScratchBufferInArena), which TFLM plans online around the offline
    # buffers. Same bytes; never less arena (for BERT-tiny TFLM finds room in the plan's gaps and only
    # its bookkeeping grows).
    def drop_scratch(subgraph):
        for operator in subgraph.operators:
            operator.outputs = operator.outputs[:1]

    unplanned = _edited(classifier, drop_scratch)
    model, inputs = read_model(classifier), sample_inputs(7)
    expected = run_reference(model, inputs).outputs["logits"]
    run = binding.run(unplanned, inputs, arena_bytes=1 << 20)
    assert np.array_equal(run.outputs["logits"].reshape(expected.shape), expected)
    planned = binding.run(classifier, inputs, arena_bytes=1 << 20)
    assert run.arena["head"] >= planned.arena["head"] == model.planned_bytes, (run.arena, planned.arena)
    assert run.arena["total"] > planned.arena["total"], (run.arena, planned.arena)


def test_a_node_with_too_many_outputs_is_refused(binding, classifier):
    def extra_output(subgraph):
        subgraph.operators[2].outputs = [*subgraph.operators[2].outputs, subgraph.operators[2].outputs[0]]

    with pytest.raises(
        TflmError, match=r"MCUBERT_MLP: expected 1 or 2 outputs \(result, then scratch\), the model has 3"
    ):
        binding.run(_edited(classifier, extra_output), sample_inputs(7), arena_bytes=1 << 20)


def test_a_constant_of_the_wrong_type_is_refused_naming_it(binding, classifier):
    def exp_lut_as_int8(subgraph):
        subgraph.tensors[subgraph.operators[1].inputs[10]].type = schema.TensorType.INT8

    with pytest.raises(TflmError, match=r"MCUBERT_ATTENTION: exp_lut: "):
        binding.run(_edited(classifier, exp_lut_as_int8), sample_inputs(8), arena_bytes=1 << 20)


def test_an_arena_below_the_plan_is_refused(binding, classifier):
    with pytest.raises(TflmError):
        binding.run(classifier, sample_inputs(6), arena_bytes=read_model(classifier).planned_bytes // 2)


@pytest.fixture(scope="module")
def decoder_model():
    """A 2-layer GPT-2-shaped int8 decoder (d 32, 64 positions, top 3) and its .tflite."""
    from tflm_mcubert.model.decoder import build_decoder
    from tflm_mcubert.model.decoder_config import DecoderConfig
    from tflm_mcubert.quantize.quantized_decoder import calibrate_decoder

    raw = {"model_type": "gpt2", "vocab_size": 97, "n_positions": 64, "n_embd": 32, "n_layer": 2, "n_head": 4}
    model = build_decoder(DecoderConfig.from_hf_dict(raw), seed=7)
    rng = np.random.default_rng(1)
    decoder = calibrate_decoder(model, [rng.integers(0, 97, 48) for _ in range(8)], top_k=3)
    return decoder, model_to_tflite(decoder, plan_of(decoder, 1 << 20))


def test_a_decoder_generates_in_tflm_as_the_reference_with_its_caches_in_the_offline_plan(binding, decoder_model):
    """Every invoke one token; the KV caches are TFLM variable tensors at their exported offsets, kept by TFLM
    from invoke to invoke: each step's top-k equals the reference's over the whole context."""
    decoder, tflite = decoder_model
    run = assert_steps_as_the_reference(binding, decoder, tflite, decoder.context)
    assert run.arena["head"] == read_decoder(tflite).planned_bytes


def assert_steps_as_the_reference(binding, decoder, tflite: bytes, steps: int):
    """`steps` invokes of one interpreter from token 4, each next id fed back: every step's output equals the
    reference's; returns the run."""
    caches, inputs, expected, token = decoder.new_caches(), [], [], 4
    for position in range(steps):
        inputs.append({"input_id": np.array([token], np.int32), "position": np.array([position], np.int32)})
        expected.append(decoder.step(token, position, caches))
        token = int(expected[-1][0, 0])
    run = binding.run_steps(tflite, inputs, arena_bytes=1 << 20)
    assert np.array_equal(run.outputs["top_k"].reshape(steps, 2, -1), np.stack(expected))
    return run


def test_a_sampling_decoder_draws_in_tflm_as_the_reference(binding, decoder_model):
    """MCUBERT_SAMPLE after the head: the generator's state is a TFLM variable tensor kept from invoke to invoke,
    and each step's drawn id (moved to the front, in place) equals the reference's; greedy would differ."""
    from tflm_mcubert.ops.sample import SampleParams

    greedy, _ = decoder_model
    decoder = greedy.sampling(SampleParams.of(3, greedy.logit_scale, 2.0, seed=9))
    assert_steps_as_the_reference(binding, decoder, model_to_tflite(decoder, plan_of(decoder, 1 << 20)), 24)


def test_a_decoder_position_past_its_cache_fails_invoke(binding, decoder_model):
    decoder, tflite = decoder_model
    step = {"input_id": np.array([1], np.int32), "position": np.array([decoder.context], np.int32)}
    with pytest.raises(TflmError, match="position"):
        binding.run_steps(tflite, [step], arena_bytes=1 << 20)


def test_the_decoder_arena_estimate_covers_the_least_arena_tflm_runs_it_in(binding, decoder_model):
    from tflm_mcubert.export.decoder_export import decoder_arena

    decoder, tflite = decoder_model
    read = read_decoder(tflite)
    estimate = decoder_arena(len(decoder.layers), read.planned_bytes, HOST_64)
    step = [{"input_id": np.array([3], np.int32), "position": np.array([0], np.int32)}]
    run = binding.run_steps(tflite, step, arena_bytes=1 << 20)
    assert 0 <= estimate.tail_bytes - run.arena["tail"] <= 256, (estimate.tail, run.arena)
    smallest = smallest_passing(
        lambda n: _runs(binding, tflite, step, n), lower_failing=read.planned_bytes - 1, upper=estimate.arena_bytes
    )
    assert 0 <= estimate.arena_bytes - smallest <= 256 + 16, (smallest, estimate.arena_bytes)


def _runs(binding, tflite, steps, arena_bytes) -> bool:
    try:
        binding.run_steps(tflite, steps, arena_bytes)
    except TflmError:
        return False
    return True


def test_the_decoder_export_s_generate_source_compiles_against_tflm(decoder_model, tmp_path):
    """mcubert_generate.cc (firmware/decoder_firmware.py) against this TFLM checkout's headers."""
    import shutil
    import subprocess

    from tflm_mcubert.firmware.c_array import write_c_array
    from tflm_mcubert.firmware.decoder_firmware import GENERATE_FILE, write_decoder_firmware
    from tflm_mcubert.runtime.tflm_binding import TFLM_DEFINES

    if shutil.which("c++") is None:
        pytest.skip("needs a host C++ compiler (Debian: g++)")
    decoder, tflite = decoder_model
    report = {"check": {"prompt_model_ids": [1], "greedy_model_ids": [2]}, "arena_bytes": 1 << 16}
    write_decoder_firmware(
        tmp_path, report | {"kv_cache_bytes": 1, "model_ids": None}, tflite, decoder, get_board("nucleo-f746zg")
    )
    write_c_array(tflite, tmp_path, name="model_data")
    sources = TflmSources.from_environment()
    includes = [f"-I{d}" for d in (*sources.include_dirs, tmp_path)]
    defines = [f"-D{d}" for d in TFLM_DEFINES]
    command = [
        "c++",
        "-std=c++17",
        "-fsyntax-only",
        "-Wall",
        "-Werror",
        *defines,
        *includes,
        str(tmp_path / GENERATE_FILE),
    ]
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
