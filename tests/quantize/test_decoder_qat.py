"""The decoder's quantization-aware fine-tune (quantize/decoder_qat.py): its fake-quant forward follows the
int8 reference, the KD loss falls, and `export --qat-steps` writes a decoder that reads back."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tensorflow as tf

from tests.cli.cli_helpers import assert_one_clean_error, run_cli
from tflm_mcubert.model.decoder import build_decoder
from tflm_mcubert.model.decoder_config import DecoderConfig
from tflm_mcubert.quantize.decoder_qat import (
    decoder_qat_settings,
    decoder_ranges,
    distill_decoder,
    fake_quant_logits,
    fake_quant_op,
    int4_weights,
    table_of_clusters,
)
from tflm_mcubert.ops.widths import Widths
from tflm_mcubert.quantize.quantized_decoder import calibrate_decoder, float_blocks
from tflm_mcubert.tflite.mcubert_reader import read_decoder

VOCAB = 61


@pytest.fixture(scope="module")
def model():
    raw = {"model_type": "gpt2", "vocab_size": VOCAB, "n_positions": 24, "n_embd": 32, "n_layer": 2, "n_head": 2}
    return build_decoder(DecoderConfig.from_hf_dict(raw), seed=3)


@pytest.fixture(scope="module")
def sequences():
    rng = np.random.default_rng(1)
    return [rng.integers(0, VOCAB, int(n)).astype(np.int32) for n in rng.integers(8, 24, 12)]


def _int8_streams(decoder, sequence) -> list[np.ndarray]:
    """The int8 reference's residual stream (dequantized) after each op but the head, every position."""
    caches, rows = decoder.new_caches(), []
    for position, token in enumerate(sequence):
        values = {"input_id": np.array([token], np.int32), "position": np.array([position], np.int32), **caches}
        row = []
        for node in decoder.nodes()[:-1]:
            node.run(values)
            row.append(node.output_quant.dequantize(values["hidden"]))
        rows.append(row)
    return [np.stack([row[j] for row in rows]) for j in range(len(rows[0]))]


def test_each_fake_quant_op_follows_its_int8_op_far_closer_than_float(model, sequences):
    """Fed the int8 model's own input, each fake-quantized op lands within a fraction of the float op's
    distance from the integer op (end to end the roundings drift apart, as any two int8 runs would)."""
    decoder = calibrate_decoder(model, sequences)
    ranges = decoder_ranges(model, sequences, decoder)
    streams = _int8_streams(decoder, sequences[0])
    for op, block in enumerate(op for layer in float_blocks(model) for op in layer):
        fake = fake_quant_op(model, tf.constant(streams[op][None], tf.float32), ranges, op).numpy()[0]
        floating = block.forward(streams[op])
        expected = streams[op + 1]
        assert np.abs(fake - expected).mean() < 0.3 * np.abs(floating - expected).mean(), op
    logits = fake_quant_logits(model, sequences[0][None], ranges).numpy()[0]
    caches = decoder.new_caches()
    int8 = np.stack([decoder.logits(int(t), p, caches) for p, t in enumerate(sequences[0])])
    assert np.abs(logits - int8).mean() < 0.1 * np.abs(int8).mean()


def test_the_kd_loss_falls_and_a_compressed_table_stays_frozen(model, sequences):
    decoder = calibrate_decoder(model, sequences)
    ranges = decoder_ranges(model, sequences, decoder)
    settings = decoder_qat_settings(30, seed=0)
    student, losses = distill_decoder(model, sequences, ranges, settings)
    assert np.mean(losses[-5:]) < np.mean(losses[:5])
    assert not np.allclose(student.token_embeddings.numpy(), model.token_embeddings.numpy())
    table = model.token_embeddings.numpy() * 0.5
    frozen, _ = distill_decoder(model, sequences, ranges, decoder_qat_settings(3), table=table)
    assert np.array_equal(frozen.token_embeddings.numpy(), table.astype(np.float32))


def test_int4_matrices_are_fake_quantized_as_the_export_stores_them(model, sequences):
    """Each row of an int4 matrix's fake-quantized kernel is the export's stored int4 row times one scale
    (w4row: the MSE clip ratio the export chooses); only the matrices the widths name are int4."""
    widths = Widths.uniform(4)
    decoder = calibrate_decoder(model, sequences, widths=widths)
    fake = int4_weights(model, widths)
    stored = [
        linear
        for attention, mlp in decoder.layers
        for linear in (attention.query, attention.key, attention.value, attention.output, mlp.fc1, mlp.fc2)
    ]
    for m, linear in zip(fake.matrices, stored, strict=True):
        kernel = fake.kernel(m, m.dense.kernel).numpy().astype(np.float64).T  # [N out, K in]
        ints = linear.weight.astype(np.float64)
        step = np.abs(kernel).max(axis=1) / np.maximum(np.abs(ints).max(axis=1), 1)
        np.testing.assert_allclose(kernel, ints * step[:, None], rtol=1e-6, atol=1e-12)
        assert np.abs(ints).max() == 7
    name = f"{fake.matrices[-1].dense.name}"
    one = int4_weights(model, Widths.per_matrix({"layer1.decoder_mlp.fc2": 4}))
    assert len(one.matrices) == 1 and one.matrices[0].dense is model.blocks[1].proj, name
    assert int4_weights(model, Widths.uniform(8)) is None


def test_int4_qat_trains_through_the_int4_forward(model, sequences):
    """The same steps at int4 start from a far larger KD loss (the coarser grid is in the forward the loss
    sees) and move the weights."""
    ranges = decoder_ranges(model, sequences, calibrate_decoder(model, sequences))
    settings = decoder_qat_settings(3)
    _, int8 = distill_decoder(model, sequences, ranges, settings)
    student, int4 = distill_decoder(model, sequences, ranges, settings, widths=Widths.uniform(4))
    assert int4[0] > 5 * int8[0], (int4, int8)
    assert not np.allclose(student.blocks[0].fc.kernel.numpy(), model.blocks[0].fc.kernel.numpy())


def test_the_clusters_table_is_in_checkpoint_order():
    u0, u1, vt1 = np.ones((2, 3)), np.arange(6.0).reshape(3, 2), np.eye(2, 3)
    permutation = np.array([4, 0, 3, 1, 2])  # tokenizer id -> model id
    table = table_of_clusters(((u0, None), (u1, vt1)), permutation)
    model_order = np.concatenate([u0, u1 @ vt1])
    assert np.array_equal(table[0], model_order[4]) and np.array_equal(table[1], model_order[0])
    assert table_of_clusters(((u0, None),), None) is None


@pytest.mark.parametrize("weight_bits", ["8", "4"])
def test_export_with_qat_steps_writes_a_decoder_that_reads_back(tmp_path, capsys, weight_bits):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(vocab_size=2000, n_positions=32, n_embd=32, n_layer=1, n_head=2)
    torch.manual_seed(0)
    transformers.GPT2LMHeadModel(config).save_pretrained(tmp_path / "gpt2")
    flash = 40 * 1024 + 160 * 1024  # the dense table (64 KB) does not fit: compressed, frozen during QAT
    code, _, err = run_cli(
        capsys, "export", "--checkpoint", tmp_path / "gpt2", "--sram", "64KB", "--flash", flash,
        "--qat-steps", "4", "--weight-bits", weight_bits, "--out", tmp_path / "o",
    )  # fmt: skip
    assert code == 0, err
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    assert report["qat"]["steps"] == 4 and report["compression"]["method"] == "adaptive"
    read = read_decoder((tmp_path / "o" / "model.tflite").read_bytes())
    assert read.quantized.greedy([1, 2, 3], 8) == report["check"]["greedy_model_ids"]


def test_negative_qat_steps_are_one_clear_error(tmp_path, capsys):
    code, _, err = run_cli(capsys, "export", "--preset", "gpt2-d128x2", "--qat-steps", "-1", "--out", tmp_path / "x")
    assert code != 0
    assert_one_clean_error(err, "--qat-steps must be 0 or more")
