"""The optional KD quantization-aware fine-tune: its forward is the model's, and it learns."""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "export"))
from mcubert_models import small_model  # noqa: E402
from tflm_mcubert.data.calibration import random_samples  # noqa: E402
from tflm_mcubert.quantize.calibrate import calibrate, model_inputs  # noqa: E402
from tflm_mcubert.quantize.float_model import FloatBert  # noqa: E402
from tflm_mcubert.quantize.qat import QatSettings, distill, fake_quant_forward  # noqa: E402


def test_without_ranges_the_fake_quant_forward_is_the_model():
    model = small_model(labels=2)
    batch = {
        k: np.concatenate([s[k] for s in random_samples(300, 24, 3, seed=2)])
        for k in ("input_ids", "attention_mask", "token_type_ids")
    }
    want = model(batch)
    got = fake_quant_forward(model, batch, {})
    valid = batch["attention_mask"].astype(bool)
    np.testing.assert_allclose(
        np.asarray(got["last_hidden_state"])[valid], np.asarray(want["last_hidden_state"])[valid], atol=1e-4
    )
    np.testing.assert_allclose(np.asarray(got["logits"]), np.asarray(want["logits"]), atol=1e-4)


def test_distillation_lowers_the_fake_quant_loss_and_leaves_the_teacher_alone():
    model = small_model(labels=2)
    samples = random_samples(300, 24, 8, seed=3)
    before = [w.copy() for w in model.get_weights()]
    _, ranges = calibrate(FloatBert.from_keras(model), model_inputs(samples, 24), seq_len=24)
    student, losses = distill(model, samples, ranges, QatSettings(steps=25, learning_rate=2e-3))
    assert np.mean(losses[-5:]) < 0.8 * np.mean(losses[:5])
    assert all(np.array_equal(a, b) for a, b in zip(before, model.get_weights()))
    assert any(not np.array_equal(a, b) for a, b in zip(before, student.get_weights()))


def _compressed_small_model():
    from tflm_mcubert.compress.baselines import adaptive_embedding

    model = small_model(labels=2)
    table = model.embeddings.word_embeddings.numpy()
    layer = adaptive_embedding(table, -np.arange(table.shape[0], dtype=np.float64), cutoffs=(40, 120), ranks=(12, 5))
    return model.with_word_lookup(layer)


def test_int4_word_tables_are_fake_quantized_as_the_exporter_stores_them():
    """The QAT's int4 word vectors equal the int4 tables the reference builds (up to the uint16 row
    scale's rounding), and gradients reach the tables straight through."""
    import tensorflow as tf

    from tflm_mcubert.ops.embedding import EmbeddingParams
    from tflm_mcubert.ops.quantization import TensorQuant
    from tflm_mcubert.quantize.qat import int4_word_vectors

    model = _compressed_small_model()
    lookup = model.embeddings.word_lookup
    ids = tf.constant(np.arange(300, dtype=np.int32)[None])
    with tf.GradientTape() as tape:
        vectors = int4_word_vectors(lookup, ids)
        loss = tf.reduce_sum(vectors**2)
    grads = tape.gradient(loss, [lookup.table, *lookup.us])
    assert all(g is not None and float(tf.reduce_max(tf.abs(g))) > 0 for g in grads)
    exact = np.asarray(lookup(ids))[0]
    fake = np.asarray(vectors)[0]
    assert 0 < np.abs(fake - exact).max() < 0.3 * np.abs(exact).max()
    # The reference's int4 word terms, dequantized, are the same vectors.
    emb = FloatBert.from_keras(model).embedding_for(24)
    params = EmbeddingParams.quantize(emb, TensorQuant(1.0), word_bits=4)
    for view, (u, vt) in zip(params.cluster_views, emb.clusters):
        ours = fake[view.start : view.end]
        if vt is None:  # q * row_scale * unit * s_c (SPEC 4.1.1), unit = the largest row step / 65535
            channel = np.abs(u).max(axis=0)
            unit = (np.abs(u / channel).max(axis=1) / 7).max() / 65535
            dequantized = view.rows * view.row_scale[:, None] * unit * channel
            np.testing.assert_allclose(ours, dequantized, atol=1e-3 * np.abs(u).max())
        else:
            folded = (np.abs(u).max(axis=0) / 7)[:, None] * vt  # column scales folded into Vᵀ, int8 per channel
            step = np.abs(folded).max(axis=0) / 127
            stored_vt = np.round(folded / step) * step
            np.testing.assert_allclose(ours, view.rows @ stored_vt, atol=1e-5 * max(np.abs(u @ vt).max(), 1))


def test_int4_distillation_learns():
    model = _compressed_small_model()
    samples = random_samples(300, 24, 8, seed=4)
    _, ranges = calibrate(FloatBert.from_keras(model), model_inputs(samples, 24), seq_len=24)
    settings = QatSettings(steps=25, learning_rate=2e-3, embedding_bits=4)
    student, losses = distill(model, samples, ranges, settings)
    assert np.mean(losses[-5:]) < 0.8 * np.mean(losses[:5])
