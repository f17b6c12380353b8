"""Bad input to the CLI ends in one clear line and a non-zero exit, never a traceback."""

import json

import pytest

from .cli_helpers import assert_one_clean_error, run_cli


@pytest.mark.parametrize(
    "argv, fragments",
    [
        (["--board", "nucleo-x"], ["unknown board", "nucleo-f746zg"]),
        (["--preset", "bert-huge"], ["unknown preset", "bert-tiny"]),
        (["--seq-len", "600"], ["--seq-len 600", "512 position"]),
        (["--seq-len", "0"], ["--seq-len"]),
        (["--sram", "512KB"], ["--sram and --flash go together"]),
        (["--sram", "lots", "--flash", "2MB"], ["--sram", "lots"]),
        (["--board", "nucleo-f767zi", "--sram", "1MB", "--flash", "2MB"], ["either --board or --sram"]),
        (["--checkpoint", "/nonexistent/bert"], ["/nonexistent/bert"]),
        (["--schedule", "magic"], ["--schedule"]),
        (["--precision", "int4"], ["--precision"]),
        (["--seed", "-1"], ["--seed", "outside 0..4294967295"]),
        (["--seed", "12x"], ["--seed", "not an integer"]),
    ],
)
def test_export_bad_input(capsys, tmp_path, argv, fragments):
    code, _, err = run_cli(capsys, "export", "--out", str(tmp_path / "o"), *argv)
    assert code == 2
    assert_one_clean_error(err, *fragments)
    assert not (tmp_path / "o" / "model.tflite").exists()


def test_checkpoint_that_is_not_bert(capsys, tmp_path):
    ckpt = tmp_path / "gpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}))
    code, _, err = run_cli(capsys, "export", "--checkpoint", str(ckpt), "--out", str(tmp_path / "o"))
    assert code == 2
    assert_one_clean_error(err, "gpt2")


def test_malformed_checkpoint(capsys, tmp_path):
    ckpt = tmp_path / "broken"
    ckpt.mkdir()
    (ckpt / "config.json").write_text("{not json")
    code, _, err = run_cli(capsys, "export", "--checkpoint", str(ckpt), "--out", str(tmp_path / "o"))
    assert code == 2
    assert_one_clean_error(err, "malformed JSON")


def test_missing_calibration_file(capsys, tmp_path):
    code, _, err = run_cli(
        capsys,
        "export",
        "--calibration",
        str(tmp_path / "nope.txt"),
        "--seq-len",
        "16",
        "--sram",
        "8MB",
        "--flash",
        "64MB",
        "--out",
        str(tmp_path / "o"),
    )
    assert code == 2
    assert_one_clean_error(err, "nope.txt")


def test_evaluate_names_text_for_a_missing_text_file(capsys, tmp_path):
    code, _, err = run_cli(capsys, "evaluate", "--text", str(tmp_path / "missing.txt"), "--seq-len", "16")
    assert code == 2
    assert_one_clean_error(err, "--text", "missing.txt")
    assert "--calibration" not in err


@pytest.mark.parametrize(
    "argv, fragments",
    [
        (["--split", "validation"], ["--split goes with --task"]),
        (["--task", "rotten_tomatoes", "--split", "validation", "test", "--dump", "d"], ["--dump", "one --split"]),
    ],
)
def test_evaluate_split_misuse(capsys, tmp_path, monkeypatch, argv, fragments):
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(capsys, "evaluate", "--seq-len", "16", *argv)
    assert code == 2
    assert_one_clean_error(err, *fragments)
    assert not (tmp_path / "d").exists()  # refused before anything is written
