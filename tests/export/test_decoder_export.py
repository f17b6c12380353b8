"""`export` of a causal LM (issue 26): the decoder's .tflite (caches as offline-planned variable tensors,
the tied table stored once), read back and run token for token like the reference, the board as the budget
(the word table compressed to what the Flash leaves), and encoder-only options refused by name."""

from __future__ import annotations

import json

import flatbuffers
import numpy as np
import pytest
from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as schema

from tests.cli.cli_helpers import assert_one_clean_error, run_cli
from tests.export.mcubert_models import small_export
from tflm_mcubert.model.decoder import build_decoder
from tflm_mcubert.model.decoder_config import DecoderConfig
from tflm_mcubert.ops.linear import stored_size
from tflm_mcubert.ops.widths import Widths
from tflm_mcubert.quantize.quantized_decoder import calibrate_decoder
from tflm_mcubert.export.decoder_export import decoder_planned_bytes
from tflm_mcubert.schedule.planner import plan_of
from tflm_mcubert.tflite.integrity import add_integrity_record
from tflm_mcubert.tflite.mcubert_reader import ModelFormatError, read_decoder, read_model
from tflm_mcubert.tflite.mcubert_writer import model_to_tflite

VOCAB = 97


@pytest.fixture(scope="module")
def decoder():
    raw = {"model_type": "gpt2", "vocab_size": VOCAB, "n_positions": 48, "n_embd": 32, "n_layer": 2, "n_head": 4}
    model = build_decoder(DecoderConfig.from_hf_dict(raw), seed=5)
    rng = np.random.default_rng(0)
    return calibrate_decoder(model, [rng.integers(0, VOCAB, 40) for _ in range(6)], top_k=3)


@pytest.fixture(scope="module")
def tflite(decoder) -> bytes:
    return model_to_tflite(decoder, plan_of(decoder, 1 << 20))


def assert_decodes_as(read, decoder) -> None:
    """The model read back steps through the whole context exactly as `decoder`, greedy id fed back."""
    caches, read_caches = decoder.new_caches(), read.quantized.new_caches()
    token = 4
    for position in range(decoder.context):
        expected = decoder.step(token, position, caches)
        assert np.array_equal(read.quantized.step(token, position, read_caches), expected), position
        token = int(expected[0, 0])


def test_the_written_decoder_reads_back_and_decodes_as_the_reference(decoder, tflite):
    read = read_decoder(tflite)
    assert read.inputs.keys() == {"input_id", "position"} and read.outputs.keys() == {"top_k"}
    assert_decodes_as(read, decoder)
    assert read.quantized.logit_scale == pytest.approx(decoder.logit_scale)
    assert read.quantized.z_scale == pytest.approx(decoder.z_scale)


def test_the_caches_are_variable_tensors_alive_across_the_step_and_the_plan_is_the_formula(decoder, tflite):
    read = read_decoder(tflite)
    caches = [t for t in read.tensors if t.variable]
    assert [t.name for t in caches] == ["cache0", "cache1"]
    assert all(t.shape == (2, decoder.context, decoder.hidden) and t.offset >= 0 for t in caches)
    assert read.planned_bytes == decoder_planned_bytes(plan_of(decoder, 1 << 20).dims, decoder.context, top_k=3)
    # any other buffer overlapping a cache would be caught: caches are live at every step
    spans = sorted((t.offset, t.offset + t.nbytes) for t in caches)
    assert spans[0][1] <= spans[1][0]


def test_the_tied_table_is_stored_once(decoder, tflite):
    model = schema.ModelT.InitFromPackedBuf(bytearray(tflite), 0)
    tensors = {t.name.decode(): t.buffer for t in model.subgraphs[0].tensors}
    assert tensors["embedding/word_rows"] == tensors["lm_head/word_rows"]


def test_int4_weights_read_back_decode_as_the_reference_and_shrink_the_blocks(decoder):
    raw = {"model_type": "gpt2", "vocab_size": VOCAB, "n_positions": 48, "n_embd": 32, "n_layer": 2, "n_head": 4}
    model = build_decoder(DecoderConfig.from_hf_dict(raw), seed=5)
    rng = np.random.default_rng(0)
    int4 = calibrate_decoder(model, [rng.integers(0, VOCAB, 40) for _ in range(6)], top_k=3, widths=Widths.uniform(4))
    written = model_to_tflite(int4, plan_of(int4, 1 << 20))
    read = read_decoder(written)
    blocks = [n for n in read.quantized.nodes() if n.op.per_layer]
    assert [n.params.options()["int4_layers"] for n in blocks] == [0b1111, 0b11, 0b1111, 0b11]
    assert_decodes_as(read, int4)
    block_bytes = lambda d: sum(n.op.constant_bytes(n.params) for n in d.nodes() if n.op.per_layer)  # noqa: E731
    matrices = [(32, 32)] * 4 + [(128, 32), (32, 128)]  # Q, K, V, O; FC1, FC2 of each of the 2 layers
    saved = 2 * sum(stored_size(n, k, 8) - stored_size(n, k, 4) for n, k in matrices)
    assert block_bytes(decoder) - block_bytes(int4) == saved == 12288  # the weights halve; the rest stays


def test_encoder_and_decoder_readers_refuse_each_other(decoder, tflite):
    with pytest.raises(ModelFormatError, match="a decoder .tflite.*read_decoder"):
        read_model(tflite)
    with pytest.raises(ModelFormatError, match="an encoder .tflite.*read_model"):
        read_decoder(small_export(16).tflite)


def test_a_cache_that_is_not_a_variable_tensor_is_refused(tflite):
    model = schema.ModelT.InitFromPackedBuf(bytearray(tflite), 0)
    for tensor in model.subgraphs[0].tensors:
        tensor.isVariable = False
    for metadata in model.metadata:  # the integrity record is recomputed for the edited file
        if metadata.name == b"MCUBERT_INTEGRITY":
            model.buffers[metadata.buffer].data = np.zeros_like(model.buffers[metadata.buffer].data)
    builder = flatbuffers.Builder(1 << 16)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    edited = add_integrity_record(bytes(builder.Output()))
    with pytest.raises(ModelFormatError, match="cache0: each layer's KV cache must be a variable tensor"):
        read_decoder(edited)


def test_export_of_the_d128_two_layer_preset_fits_the_f746zg_at_a_256_token_context(tmp_path, capsys):
    """The issue's target: the d 128 x 2-layer decoder with a 256-token context on the NUCLEO-F746ZG."""
    code, out, err = run_cli(capsys, "export", "--preset", "gpt2-d128x2", "--out", tmp_path / "dec")
    assert code == 0, err
    report = json.loads((tmp_path / "dec" / "report.json").read_text())
    assert report["model_kind"] == "decoder" and report["context"] == 256
    assert report["fits"]["ok"] and report["kv_cache_bytes"] == 2 * 2 * 256 * 128
    assert report["compression"]["method"] == "adaptive"
    assert report["flash_bytes"] == (tmp_path / "dec" / "model.tflite").stat().st_size
    assert "256-token context" in out and "fits" in out
    ids = np.load(tmp_path / "dec" / "model_ids.npy")
    assert np.array_equal(np.sort(ids), np.arange(50257))


def test_a_checkpoint_exports_with_its_table_compressed_to_the_flash_given(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(vocab_size=2000, n_positions=32, n_embd=32, n_layer=1, n_head=2)
    torch.manual_seed(0)
    transformers.GPT2LMHeadModel(config).save_pretrained(tmp_path / "gpt2")
    flash = 40 * 1024 + 160 * 1024  # 40 KB for the model after the code reserve: the dense table is 64 KB
    code, out, err = run_cli(
        capsys, "export", "--checkpoint", tmp_path / "gpt2", "--sram", "64KB", "--flash", flash, "--out", tmp_path / "o"
    )
    assert code == 0, err
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    assert report["compression"]["method"] == "adaptive" and report["fits"]["flash"]["ok"]
    assert report["calibration"]["source"] == "random ids"  # the checkpoint has no tokenizer
    read = read_decoder((tmp_path / "o" / "model.tflite").read_bytes())
    assert read.quantized.greedy([1, 2, 3], 8) == report["check"]["greedy_model_ids"]
    # the TFLM firmware files: the self-check the device compares with, the arena with the caches
    settings = (tmp_path / "o" / "model_settings.h").read_text()
    continuation = ", ".join(map(str, report["check"]["greedy_model_ids"]))
    assert f"#define MCUBERT_MODEL_CHECK_CONTINUATION {{{continuation}}}" in settings
    assert f"#define MCUBERT_MODEL_ARENA_BYTES {report['arena_bytes']}" in settings
    assert {"mcubert_generate.cc", "FIRMWARE.md", "model_data.cc"} <= set(report["files"])


@pytest.mark.parametrize(
    "args,named",
    [
        (("--schedule", "stock"), "--schedule"),
        (("--seq-len", "300"), "--seq-len 300"),
        (("--seq-len", "0"), "--seq-len 0"),
        (("--top-k", "0"), "--top-k 0"),
        (("--sample", "temperature=0"), "temperature must be > 0"),
        (("--sample", "top_k=65,top_p=1.5"), "top_k must be 1..64; top_p must be in (0, 1]"),
        (("--sample", "heat=2"), "'heat=2' is not one of key=value with temperature=1.0, top_k=40"),
        (("--sample", "seed=x"), "'seed=x' is not one of key=value"),
        (("--sram", "64KB", "--flash", "2MB"), "arena needs"),
    ],
)
def test_bad_decoder_exports_are_one_clear_error(tmp_path, capsys, args, named):
    code, _, err = run_cli(capsys, "export", "--preset", "gpt2-d128x2", *args, "--out", tmp_path / "x")
    assert code != 0
    assert_one_clean_error(err, named)


def test_an_encoder_refuses_to_sample(tmp_path, capsys):
    code, _, err = run_cli(capsys, "export", "--sample", "--out", tmp_path / "x")
    assert code != 0
    assert_one_clean_error(err, "--sample draws a decoder's next token: an encoder (a classifier) has none")


def test_a_sampling_export_draws_on_the_device_what_the_reference_draws(tmp_path, capsys):
    """--sample: MCUBERT_SAMPLE after the head, drawing among 8 candidates although --top-k is 1; the self-check
    is the drawn continuation, which the read-back model reproduces and greedy decoding does not."""
    args = ("--preset", "gpt2-d128x2", "--seq-len", "24", "--sample", "temperature=3,top_k=8,seed=5")
    code, _, _ = run_cli(capsys, "export", *args, "--out", tmp_path / "o")
    assert code == 0
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    assert report["model"]["sampling"] == {"temperature": 3.0, "top_k": 8, "top_p": 1.0, "seed": 5}
    read = read_decoder((tmp_path / "o" / "model.tflite").read_bytes()).quantized
    assert read.sample is not None and read.sample.keep == 8 and read.head.top_k == 8
    drawn = read.greedy([1, 2, 3], 8)
    assert drawn == report["check"]["greedy_model_ids"] != read.sampling(None).greedy([1, 2, 3], 8)
    settings = (tmp_path / "o" / "model_settings.h").read_text()
    assert "#define MCUBERT_MODEL_SAMPLES 1" in settings and "temperature 3.0, top_k 8" in settings
