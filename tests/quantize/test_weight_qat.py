"""Quantization-aware fine-tuning of the encoder's weights: fake-quantized exactly as the export stores them,
gradients straight through, and the int4 model closer to float after it."""

import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "export"))
from mcubert_models import small_model  # noqa: E402
from tflm_mcubert.data.calibration import random_samples  # noqa: E402
from tflm_mcubert.errors import UserError  # noqa: E402
from tflm_mcubert.ops.widths import Widths  # noqa: E402
from tflm_mcubert.quantize.calibrate import CalibrationSettings, calibrate, model_inputs  # noqa: E402
from tflm_mcubert.quantize.float_model import FloatBert  # noqa: E402
from tflm_mcubert.quantize.qat import QatSettings, distill  # noqa: E402
from tflm_mcubert.quantize.weight_fake_quant import (  # noqa: E402
    WeightFakeQuant,
    column_scales_of,
    encoder_matrices,
    fake_quantized,
)

SEQ = 24


def _calibrated(model, bits: int, samples):
    settings = CalibrationSettings(widths=Widths.uniform(bits))
    return calibrate(FloatBert.from_keras(model), model_inputs(samples, SEQ), seq_len=SEQ, settings=settings)


def _stored_layers(quantized):
    """The export's Linear of every encoder matrix, in encoder_matrices' order."""
    return [
        linear
        for attention, mlp in quantized.layers
        for linear in (attention.query, attention.key, attention.value, attention.output, mlp.fc1, mlp.fc2)
    ]


@pytest.mark.parametrize("bits", [4, 8])
def test_fake_quantized_weights_are_the_exported_weights(bits):
    """Each row of every fake-quantized kernel (the hidden state's channel scales folded in) is the export's
    stored int row times one scale: the same integers, the same grid."""
    model = small_model(labels=2)
    quantized, _ = _calibrated(model, bits, random_samples(300, SEQ, 6, seed=5))
    fake = WeightFakeQuant(model, Widths.uniform(bits), column_scales_of(quantized))
    scales = column_scales_of(quantized)
    assert set(scales) == {f"layer{i}.{op}" for i in range(2) for op in ("attention", "mlp")}
    for m, (op, name, dense), linear in zip(fake.matrices, encoder_matrices(model), _stored_layers(quantized)):
        kernel = np.asarray(fake.kernel(m, dense.kernel), np.float64).T  # [N, K]
        folded = kernel * scales[op][None, :] if name in ("query", "key", "value", "fc1") else kernel
        stored = linear.weight.astype(np.float64)
        step = np.abs(folded).max(axis=1) / np.maximum(np.abs(stored).max(axis=1), 1)
        np.testing.assert_allclose(folded, stored * step[:, None], rtol=1e-6, atol=1e-12, err_msg=f"{op}.{name}")
        assert np.abs(stored).max() == (7 if bits == 4 else 127)


def test_the_gradient_goes_straight_through():
    kernel = tf.Variable(np.random.default_rng(0).normal(size=(16, 8)).astype(np.float32))
    upstream = tf.constant(np.random.default_rng(1).normal(size=(16, 8)).astype(np.float32))
    for bits, ratios in ((8, None), (4, tf.constant(np.full(8, 0.8)))):
        with tf.GradientTape() as tape:
            out = fake_quantized(kernel, bits, ratios)
            loss = tf.reduce_sum(out * upstream)
        np.testing.assert_array_equal(tape.gradient(loss, kernel).numpy(), upstream.numpy())
        assert 0 < float(tf.reduce_max(tf.abs(out - kernel))) < 0.5 * float(tf.reduce_max(tf.abs(kernel)))


def test_install_switches_the_models_forward_and_remove_restores_it():
    model = small_model(labels=2)
    batch = {k: np.concatenate([s[k] for s in random_samples(300, SEQ, 2, seed=1)]) for k in ("input_ids",)}
    plain = np.asarray(model(batch)["logits"])
    fake = WeightFakeQuant(model, Widths.uniform(4)).install()
    quantized = np.asarray(model(batch)["logits"])
    fake.remove()
    assert not np.allclose(plain, quantized, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(model(batch)["logits"]), plain)
    assert len(model.get_weights()) == len(small_model(labels=2).get_weights())  # no ratio became a weight


def test_int4_weight_qat_lowers_the_int4_models_error():
    model = small_model(labels=2)
    samples = random_samples(300, SEQ, 8, seed=3)
    quantized, ranges = _calibrated(model, 4, samples)
    settings = QatSettings(steps=40, learning_rate=1e-4, widths=Widths.uniform(4))
    student, losses = distill(model, samples, ranges, settings, quantized)
    assert np.mean(losses[-5:]) < 0.8 * np.mean(losses[:5])
    # The student, calibrated again, against the *teacher's* float outputs.
    after, _ = _calibrated(student, 4, samples)
    teacher = FloatBert.from_keras(model)
    before_error, after_error = [], []
    for x in model_inputs(samples, SEQ):
        want = teacher.forward(x.input_ids, x.token_type_ids, x.valid)["last_hidden_state"][x.valid]
        for q, errors in ((quantized, before_error), (after, after_error)):
            got = q.dequantized(q.run(x.input_ids, x.token_type_ids, x.mask(0)))["last_hidden_state"][x.valid]
            errors.append(np.mean((want - got) ** 2))
    assert np.mean(after_error) < 0.85 * np.mean(before_error)  # measured 0.75
    assert all(dense.kernel_quantizer is None for _, _, dense in encoder_matrices(student))


@pytest.mark.parametrize("bits", [5, 0, "4", True])
def test_a_weight_width_the_export_cannot_store_is_refused(bits):
    with pytest.raises(UserError, match="choose 4"):
        Widths.uniform(bits)
    with pytest.raises(UserError, match="layer0.mlp.fc1: weight bits .*choose 4"):
        Widths.per_matrix({"layer0.mlp.fc1": bits})


def test_the_widths_of_an_auto_export_are_the_qat_widths():
    """export --weight-bits auto gives one width per matrix: the QAT fake-quantizes each at its own."""
    fc = {"layer1.mlp.fc1": 4, "layer1.mlp.fc2": 4}
    widths = Widths.per_matrix(fc)
    assert widths.of_op("layer1.mlp", ("fc1", "fc2")) == 4 and widths.of_op("layer0.mlp", ("fc1", "fc2")) == 8
    fake = WeightFakeQuant(small_model(labels=2), widths)
    assert [m.bits for m in fake.matrices] == [8] * 4 + [8] * 2 + [8] * 4 + [4] * 2
    assert [m.bits for m in WeightFakeQuant(small_model(labels=2), Widths.uniform(4)).matrices] == [4] * 12
    # and mixed inside an op (SPEC 3.1.2)
    attention = {"layer0.attention.query": 4, "layer0.attention.output": 4, "layer1.mlp.fc2": 4}
    mixed = Widths.per_matrix(attention)
    assert mixed.of_op("layer0.attention", ("query", "key", "value", "output")) == (4, 8, 8, 4)
    fake = WeightFakeQuant(small_model(labels=2), mixed)
    assert [m.bits for m in fake.matrices] == [4, 8, 8, 4] + [8] * 2 + [8] * 4 + [8, 4]
    assert mixed.traffic_bits() == 8 and Widths.uniform(4).traffic_bits() == 4
