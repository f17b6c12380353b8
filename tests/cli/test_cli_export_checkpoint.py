"""A BertForSequenceClassification checkpoint with a config nobody tuned for goes through `export`."""

import json

import numpy as np

from tflm_mcubert.cli import main
from tflm_mcubert.runtime.tflm_runner import run_tflm

# Odd sizes on purpose: 3 heads of 32, 1 layer, FFN 200, 3 token types, 3 labels.
UNTUNED = dict(
    hidden_size=96,
    num_attention_heads=3,
    num_hidden_layers=1,
    intermediate_size=200,
    vocab_size=500,
    max_position_embeddings=64,
    type_vocab_size=3,
    num_labels=3,
)
# The float .tflite computes GELU as x*sigmoid(1.5957691(x+0.044715x^3)) (TFLM has no erf GELU), which
# differs from HF's erf GELU by up to 4.7e-4 per activation; on this model the logits moved by 3.2e-5 at
# most, so the parity target of 1e-4 holds for the exported file too (the Keras model's own parity: tests/model).
FLOAT_TFLITE_VS_TRANSFORMERS = 1e-4


def test_untuned_classifier_exports_and_matches_transformers(tmp_path, make_hf_checkpoint, random_batch, hf_forward):
    ckpt = make_hf_checkpoint(tmp_path, classifier=True, seed=3, **UNTUNED)
    for precision in ("float32", "int8"):
        out = tmp_path / precision
        code = main(
            [
                "export",
                "--checkpoint",
                str(ckpt),
                "--schedule",
                "stock",
                "--precision",
                precision,
                "--seq-len",
                "16",
                "--sram",
                "8MB",
                "--flash",
                "64MB",
                "--out",
                str(out),
            ]
        )
        assert code == 0
        report = json.loads((out / "report.json").read_text())
        assert report["model"]["config"]["num_labels"] == 3 and report["seq_len"] == 16

    from tflm_mcubert.model.config import BertConfig

    batch = random_batch(BertConfig(**{k: v for k, v in UNTUNED.items()}), seed=5, lengths=(16, 9))
    expected = hf_forward(ckpt, batch)["logits"]
    model = (tmp_path / "float32" / "model.tflite").read_bytes()
    arena = json.loads((tmp_path / "float32" / "report.json").read_text())["arena_bytes"]
    for row in range(len(expected)):
        single = {name: value[row : row + 1] for name, value in batch.items()}
        logits = np.asarray(run_tflm(model, single, arena_bytes=arena)["logits"], np.float32)
        np.testing.assert_allclose(logits[0], expected[row], atol=FLOAT_TFLITE_VS_TRANSFORMERS)
