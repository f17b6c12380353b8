"""`train-lm` and a decoder's `evaluate` (issue 26): a GPT-2-style LM with its own byte-level BPE trained on a
local text, saved as a GPT2LMHeadModel that `transformers` reads with our logits, resumed with the same
settings only; perplexity float, int8 and int8 as exported."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.cli.cli_helpers import assert_one_clean_error, run_cli
from tflm_mcubert.data.calibration import builtin_sentences, evaluation_sentences

TINY = ("--vocab-size", "300", "--context", "32", "--hidden", "16", "--layers", "1", "--heads", "2")


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("lm-text") / "text.txt"
    path.write_text("\n".join(builtin_sentences() + evaluation_sentences()) * 3 + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def checkpoint(text_file, tmp_path_factory):
    from tflm_mcubert.cli import main

    out = tmp_path_factory.mktemp("lm") / "ckpt"
    argv = ["train-lm", "--task", str(text_file), *TINY, "--epochs", "2", "--batch-size", "8", "--out", str(out)]
    assert main(argv) == 0
    return out


def test_the_checkpoint_is_a_gpt2_that_transformers_reads_with_our_logits(checkpoint):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from tflm_mcubert.model.decoder_import import load_decoder

    tokenizer = transformers.AutoTokenizer.from_pretrained(str(checkpoint))
    text = "The film is quiet, and funny."
    ids = tokenizer.encode(text)
    assert tokenizer.decode(ids) == text and len(ids) <= 32  # the model's positions
    hf = transformers.GPT2LMHeadModel.from_pretrained(str(checkpoint)).eval()
    with torch.no_grad():
        expected = hf(torch.tensor([ids])).logits.numpy()[0]
    ours, _ = load_decoder(checkpoint)
    got = np.asarray(ours(np.asarray([ids], np.int32))[0])
    assert np.abs(got - expected).max() <= 1e-4 * np.abs(expected).max()
    metrics = json.loads((checkpoint / "metrics.json").read_text())
    assert 1 < metrics["dev_perplexity"] < 300  # below the uniform guess over the vocabulary
    assert metrics["epoch_kept"] in (1, 2)  # the epoch of the lowest held-out perplexity


def test_a_second_run_resumes_and_other_settings_are_refused(checkpoint, text_file, capsys):
    weights = (checkpoint / "model.safetensors").read_bytes()
    argv = ["train-lm", "--task", text_file, *TINY, "--epochs", "2", "--batch-size", "8", "--out", checkpoint]
    code, _, err = run_cli(capsys, *argv)
    assert code == 0 and "resuming after epoch 2 of 2" in err
    assert (checkpoint / "model.safetensors").read_bytes() == weights
    argv[argv.index("--epochs") + 1] = "3"
    argv[argv.index("--batch-size") + 1] = "4"
    code, _, err = run_cli(capsys, *argv)
    assert code != 0
    assert_one_clean_error(err, "a run with other settings is there")


@pytest.mark.parametrize(
    "change,named",
    [
        (("--vocab-size", "100"), "--vocab-size"),
        (("--hidden", "15"), "multiple of --heads"),
        (("--epochs", "0"), "--epochs"),
    ],
)
def test_bad_train_lm_settings_are_one_clear_error(text_file, tmp_path, capsys, change, named):
    argv = ["train-lm", "--task", text_file, *TINY, *change, "--out", tmp_path / "x"]
    code, _, err = run_cli(capsys, *argv)
    assert code != 0
    assert_one_clean_error(err, named)


def test_a_text_file_too_short_is_refused(tmp_path, capsys):
    (tmp_path / "short.txt").write_text("one line\n")
    code, _, err = run_cli(capsys, "train-lm", "--task", tmp_path / "short.txt", "--out", tmp_path / "x")
    assert code != 0
    assert_one_clean_error(err, "at least 20")


def test_evaluate_gives_float_int8_and_exported_perplexity(checkpoint, text_file, tmp_path, capsys):
    code, out, err = run_cli(
        capsys, "evaluate", "--checkpoint", checkpoint, "--text", text_file, "--samples", "2", "--weight-bits", "8",
        "4", "--json", tmp_path / "r",
    )  # fmt: skip
    assert code == 0, err
    result = json.loads((tmp_path / "r").read_text())
    assert result["int8_blocks"] == 2
    float_ppl = result["float_perplexity_int8_blocks"]
    # the int8 models score the same blocks within a few percent of the float model
    assert abs(result["int8_dense_perplexity"] / float_ppl - 1) < 0.05, result
    assert abs(result["int8_exported_perplexity"] / float_ppl - 1) < 0.05, result
    assert result["exported"]["compression"]["method"] == "dense"  # a 300 x 16 table fits the F746ZG whole
    # int4 weights: the same models with every block matrix int4, smaller and still close to the float model
    assert abs(result["int8+w4_dense_perplexity"] / float_ppl - 1) < 0.1, result
    assert abs(result["int8+w4_exported_perplexity"] / float_ppl - 1) < 0.1, result
    assert result["exported+w4"]["weight_bits"] == 4
    assert result["exported+w4"]["flash_bytes"] < result["exported"]["flash_bytes"]


def test_evaluate_with_qat_steps_reports_qat_beside_ptq(checkpoint, text_file, tmp_path, capsys):
    code, _, err = run_cli(
        capsys, "evaluate", "--checkpoint", checkpoint, "--text", text_file, "--samples", "2", "--qat-steps", "3",
        "--json", tmp_path / "r",
    )  # fmt: skip
    assert code == 0, err
    result = json.loads((tmp_path / "r").read_text())
    float_ppl = result["float_perplexity_int8_blocks"]
    for name in ("int8_dense_perplexity", "int8_dense_qat_perplexity", "int8_exported_ptq_perplexity"):
        assert abs(result[name] / float_ppl - 1) < 0.05, result
    assert result["qat_dense"]["steps"] == 3 and result["exported"]["qat"]["steps"] == 3
    code, _, err = run_cli(capsys, "evaluate", "--checkpoint", checkpoint, "--text", text_file, "--qat-steps", "-2")
    assert code != 0
    assert_one_clean_error(err, "--qat-steps must be 0 or more")


def test_evaluate_int4_word_tables_beside_int8(checkpoint, text_file, tmp_path, capsys):
    code, _, err = run_cli(
        capsys, "evaluate", "--checkpoint", checkpoint, "--text", text_file, "--samples", "2", "--embedding-bits", "8",
        "4", "--json", tmp_path / "r",
    )  # fmt: skip
    assert code == 0, err
    result = json.loads((tmp_path / "r").read_text())
    float_ppl = result["float_perplexity_int8_blocks"]
    # the tied table at int4, looked up and scored by the LM head: smaller, and still near the float model
    assert abs(result["int4_dense_perplexity"] / float_ppl - 1) < 0.15, result
    assert abs(result["int4_exported_perplexity"] / float_ppl - 1) < 0.15, result
    assert result["exported+int4"]["flash_bytes"] < result["exported"]["flash_bytes"]


def test_evaluate_refuses_what_export_refuses_for_a_decoder(checkpoint, text_file, capsys):
    argv = ("evaluate", "--checkpoint", checkpoint, "--text", text_file, "--stock")
    code, _, err = run_cli(capsys, *argv)
    assert code != 0
    assert_one_clean_error(err, "--stock: a decoder has no stock TFLite graph")


def test_a_decoder_evaluate_needs_held_out_text(checkpoint, capsys):
    code, _, err = run_cli(capsys, "evaluate", "--checkpoint", checkpoint)
    assert code != 0
    assert_one_clean_error(err, "needs --task")


def test_a_student_distils_from_a_teacher_decoder_and_takes_its_tokenizer(checkpoint, text_file, tmp_path, capsys):
    small = ("--vocab-size", "300", "--context", "32", "--hidden", "8", "--layers", "1", "--heads", "2")
    argv = ["train-lm", "--task", text_file, *small, "--epochs", "1", "--batch-size", "8"]
    code, _, err = run_cli(capsys, *argv, "--teacher", checkpoint, "--kd-weight", "0.7", "--out", tmp_path / "s")
    assert code == 0, err
    config = json.loads((tmp_path / "s" / "config.json").read_text())
    assert config["tflm_mcubert_distilled_from"] == str(checkpoint.resolve())
    transformers = pytest.importorskip("transformers")
    student_tokenizer = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "s"))
    assert student_tokenizer.get_vocab() == transformers.AutoTokenizer.from_pretrained(str(checkpoint)).get_vocab()
    assert json.loads((tmp_path / "s" / "metrics.json").read_text())["dev_perplexity"] < 300
    # a teacher of another vocabulary is refused by name
    other = [*argv, "--teacher", checkpoint, "--out", tmp_path / "t"]
    other[other.index("--vocab-size") + 1] = "400"
    code, _, err = run_cli(capsys, *other)
    assert code != 0
    assert_one_clean_error(err, "300 ids", "--vocab-size 300")


def test_the_distillation_loss_is_the_next_token_loss_without_weight_and_zero_kl_against_itself(checkpoint):
    import tensorflow as tf

    from tflm_mcubert.model.decoder_import import load_decoder
    from tflm_mcubert.train import language_model as lm

    model, _ = load_decoder(checkpoint)
    block = tf.constant(np.random.default_rng(0).integers(0, 300, (2, 32)), tf.int32)
    hard = float(lm._loss(model, block))
    settings = lm.LmSettings(kd_weight=0.0)
    assert float(lm._distillation_loss(model, model, block, settings)) == pytest.approx(hard, rel=1e-6)
    settings = lm.LmSettings(kd_weight=1.0)
    assert float(lm._distillation_loss(model, model, block, settings)) == pytest.approx(0.0, abs=1e-5)
