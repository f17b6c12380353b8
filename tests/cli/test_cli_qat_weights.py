"""Quantization-aware training of the encoder's weights from the front door: `export`/`evaluate --qat-steps`
at `--weight-bits`, `search`/`distill --qat-weight-bits`, and their refusals."""

import json

import numpy as np
import pytest

from .cli_helpers import assert_one_clean_error, run_cli
from .test_cli_compress import write_reviews


def test_export_qat_fake_quantizes_the_weights_at_the_exported_width(capsys, tmp_path):
    out = tmp_path / "w4qat"
    code, _, err = run_cli(capsys, "export", "--seq-len", 32, "--weight-bits", 4, "--qat-steps", 2, "--out", out)
    assert code == 0, err
    qat = json.loads((out / "report.json").read_text())["calibration_fidelity"]["qat"]
    assert qat["steps"] == 2 and qat["weight_bits"] == 4


def test_evaluate_qat_at_int4_weights(capsys, tmp_path, make_hf_checkpoint):
    ckpt = make_hf_checkpoint(tmp_path, classifier=True)
    results = tmp_path / "eval.json"
    argv = ["evaluate", "--checkpoint", ckpt, "--task", "rotten_tomatoes", "--samples", 8, "--seq-len", 16]
    argv += ["--calibration-samples", 8, "--weight-bits", 4, "--qat-steps", 3, "--json", results]
    code, printed, err = run_cli(capsys, *argv)
    assert code == 0, err
    assert "QAT (8-bit word tables, 4-bit weights)" in printed
    assert "int8+w4" in json.loads(results.read_text())["predictions"]


@pytest.fixture(scope="module")
def tiny_task(tmp_path_factory):
    from tests.conftest import build_hf_checkpoint

    tmp_path = tmp_path_factory.mktemp("qat-weights")
    checkpoint = build_hf_checkpoint(tmp_path, classifier=True, vocab_size=30, num_labels=2)
    return tmp_path, checkpoint, write_reviews(tmp_path / "reviews.csv", count=48)


def test_search_fine_tunes_with_int4_weights(capsys, tiny_task):
    """The same search with and without --qat-weight-bits 4: only the fine-tune's forward differs, so the
    written encoders differ, and metrics.json says the accuracies are the int4 weights'."""
    from tflm_mcubert.model.hf_import import load_checkpoint

    tmp_path, checkpoint, data = tiny_task
    common = ["search", "--checkpoint", checkpoint, "--task", data, "--mode", "adaptive", "--quiet"]
    common += ["--target-embedding-params", 480, "--epochs", 0.5, "--finetune-epochs", 0.5, "--batch-size", 16]
    kernels, metrics = {}, {}
    for name, extra in (("float", []), ("w4", ["--qat-weight-bits", 4])):
        out = tmp_path / f"search-{name}"
        code, _, err = run_cli(capsys, *common, "--out", out, *extra)
        assert code == 0, err
        metrics[name] = json.loads((out / "metrics.json").read_text())
        kernels[name] = load_checkpoint(str(out)).model.encoder_layers[0].feed_forward.intermediate.kernel.numpy()
    assert metrics["float"]["accuracy_weights"] == "float" and metrics["w4"]["accuracy_weights"] == 4
    assert not np.array_equal(kernels["float"], kernels["w4"])


@pytest.mark.parametrize("command", ["search", "distill"])
def test_a_qat_weight_width_the_export_cannot_store_is_refused(capsys, tiny_task, command):
    tmp_path, checkpoint, data = tiny_task
    source = ["--checkpoint", checkpoint, "--mode", "adaptive"] if command == "search" else ["--teacher", checkpoint]
    argv = [command, *source, "--task", data, "--out", tmp_path / f"bad-{command}", "--qat-weight-bits", 5]
    code, _, err = run_cli(capsys, *argv)
    assert code != 0
    assert_one_clean_error(err, "--qat-weight-bits 5", "choose 4")
