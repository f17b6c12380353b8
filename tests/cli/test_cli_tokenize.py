"""`tokenize --export OUT TEXT`: the export's on-device tokenizer (C, host build) next to the Hugging Face
tokenizer its ids must equal; clear errors for an export without a tokenizer and a damaged blob."""

from __future__ import annotations

import pytest

from tests.cli.cli_helpers import assert_one_clean_error, run_cli


@pytest.fixture(scope="module")
def export_dir(tmp_path_factory):
    pytest.importorskip("torch")
    from tests.conftest import build_hf_checkpoint
    from tflm_mcubert.boards import get_board
    from tflm_mcubert.export.pipeline import ExportRequest, run_export

    checkpoint = build_hf_checkpoint(tmp_path_factory.mktemp("ckpt"), classifier=True, num_labels=2)
    out = tmp_path_factory.mktemp("export")
    run_export(ExportRequest(out_dir=out, board=get_board("nucleo-f767zi"), seq_len=16, checkpoint=str(checkpoint)))
    return out


def test_the_device_ids_are_identical_to_hugging_face(capsys, export_dir):
    code, out, err = run_cli(capsys, "tokenize", "--export", str(export_dir), "The cat sat on the mat.", "Very good!")
    assert code == 0, err
    assert out.count("identical") == 2 and "DIFFERENT" not in out
    code, out, err = run_cli(capsys, "tokenize", "--export", str(export_dir), "--pair", "not bad", "happy movie")
    assert code == 0, err
    assert "token types: [0, 0, 0, 0, 1, 1, 1]" in out and "identical" in out


def test_an_export_without_a_tokenizer_is_a_clear_error(capsys, tmp_path):
    code, _, err = run_cli(capsys, "tokenize", "--export", str(tmp_path), "text")
    assert code == 2 and "model_vocab.bin not found" in err


def test_a_damaged_blob_is_a_clear_error(capsys, export_dir, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(export_dir, copy)
    blob = bytearray((copy / "model_vocab.bin").read_bytes())
    blob[200] ^= 0xFF
    (copy / "model_vocab.bin").write_bytes(bytes(blob))
    code, _, err = run_cli(capsys, "tokenize", "--export", str(copy), "text")
    assert code == 2 and "CRC-32 mismatch" in err


def damaged_copy(export_dir, tmp_path, report_text=None):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(export_dir, copy)
    if report_text is not None:
        (copy / "report.json").write_text(report_text)
    return copy


@pytest.mark.parametrize(
    "seq_len, fragments",
    [("-5", ["--seq-len", "-5", "from 2"]), ("3000000000", ["--seq-len", "3,000,000,000", "position embeddings"])],
)
def test_a_seq_len_outside_the_models_positions_is_a_clear_error(capsys, export_dir, seq_len, fragments):
    code, _, err = run_cli(capsys, "tokenize", "--export", export_dir, "--seq-len", seq_len, "text")
    assert code == 2
    assert_one_clean_error(err, *fragments)


def test_text_that_is_not_utf8_is_taken_as_bytes_as_the_device_takes_it(capsys, export_dir):
    # Python hands argv bytes that are not UTF-8 to the program as surrogate escapes: b"caf\xe9" is "caf\udce9".
    code, out, err = run_cli(
        capsys, "tokenize", "--export", export_dir, "the caf\udce9 was good", "--pair", "\udcff ok"
    )
    assert code == 0, err
    assert "not valid UTF-8" in out and "identical" in out and "DIFFERENT" not in out


@pytest.mark.parametrize(
    "report_text, fragments",
    [('{"seq_len": 16, "fi', ["report.json", "not a readable report.json"]), ("[1, 2]", ["report.json", "list"])],
)
def test_a_damaged_report_is_a_clear_error(capsys, export_dir, tmp_path, report_text, fragments):
    copy = damaged_copy(export_dir, tmp_path, report_text)
    code, _, err = run_cli(capsys, "tokenize", "--export", copy, "text")
    assert code == 2
    assert_one_clean_error(err, *fragments)


def test_a_blob_the_report_does_not_list_is_refused(capsys, export_dir, tmp_path):
    import json

    copy = damaged_copy(export_dir, tmp_path)
    report = json.loads((copy / "report.json").read_text())
    report["files"].remove("model_vocab.bin")
    (copy / "report.json").write_text(json.dumps(report))
    code, _, err = run_cli(capsys, "tokenize", "--export", copy, "text")
    assert code == 2
    assert_one_clean_error(err, "model_vocab.bin is not this export's")
