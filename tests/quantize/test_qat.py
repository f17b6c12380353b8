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
