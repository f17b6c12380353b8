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


@pytest.fixture(scope="module")
def added_export(added_tokenizer, tmp_path_factory):
    """An export's tokenizer files (blob and tokenizer/) for a checkpoint with added tokens ([URL], <s>, ...)."""
    from tflm_mcubert.tokenizer import reference, vocab_blob

    out = tmp_path_factory.mktemp("added_export")
    added_tokenizer.save_pretrained(str(out / "tokenizer"))
    (out / "model_vocab.bin").write_bytes(vocab_blob.pack(reference.spec_from_hf(added_tokenizer)))
    return out


def test_added_tokens_are_identical_in_a_second_without_torch_or_transformers(added_export):
    import subprocess
    import resource
    import sys

    probe = (
        "import sys; from tflm_mcubert.cli import main; code = main(sys.argv[1:]); "
        "heavy = [m for m in ('torch', 'transformers', 'tensorflow') if m in sys.modules]; "
        "print('heavy', heavy); raise SystemExit(code)"
    )
    texts = ["see [URL] now", "a<mask>b <emoji>", "[E1] Paris [/E1]", "<s> NAÏVE"]

    def child_cpu_seconds() -> float:  # CPU, not wall: the other test worker's load is not the command's
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        return usage.ru_utime + usage.ru_stime

    start = child_cpu_seconds()
    done = subprocess.run(
        [sys.executable, "-c", probe, "tokenize", "--export", str(added_export), *texts],
        capture_output=True,
        text=True,
    )
    elapsed = child_cpu_seconds() - start
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("identical") == len(texts) and "DIFFERENT" not in done.stdout
    assert "heavy []" in done.stdout
    assert elapsed < 3.0  # the target; about 0.6 s measured on the 2-core CI machine


def test_a_folder_with_only_vocab_txt_is_compared_through_its_options(capsys, added_export, tmp_path):
    import json
    import shutil

    from tflm_mcubert.cli.tokenize import tokenizer_from_files

    (tmp_path / "tokenizer").mkdir()
    shutil.copy(added_export / "model_vocab.bin", tmp_path)
    vocab = json.loads((added_export / "tokenizer" / "tokenizer.json").read_text())["model"]["vocab"]
    ordered = sorted(vocab, key=vocab.get)
    (tmp_path / "tokenizer" / "vocab.txt").write_text("".join(f"{t}\n" for t in ordered), encoding="utf-8")
    (tmp_path / "tokenizer" / "tokenizer_config.json").write_text('{"do_lower_case": false}')
    cased = tokenizer_from_files(tmp_path / "tokenizer")
    assert cased.encode("Hello", add_special_tokens=False).tokens != ["hello"]  # the option is read
    (tmp_path / "tokenizer" / "tokenizer_config.json").write_text('{"do_lower_case": true}')
    code, out, err = run_cli(capsys, "tokenize", "--export", tmp_path, "Crème brûlée, CAFÉ!")
    assert code == 0 and "identical" in out, out + err


def test_a_gpt2_folder_runs_the_bpe_tokenizer_and_detokenizer(capsys, tmp_path):
    """`tokenize --gpt2 DIR`: the C byte-level BPE next to Hugging Face, on a GPT-2 folder trained here."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tokenizer.train_from_iterator(["The cat sat on the mat.", "It's a very good film!"] * 50, trainer)
    tokenizer.model.save(str(tmp_path))
    code, out, err = run_cli(capsys, "tokenize", "--gpt2", str(tmp_path), "The cat's mat 😀", "x\udcff<|endoftext|>")
    assert code == 0, err
    assert out.count("identical") == 4 and "DIFFERENT" not in out and "one U+FFFD" in out
    code, _, err = run_cli(capsys, "tokenize", "--gpt2", str(tmp_path / "missing"), "text")
    assert code == 2 and "neither tokenizer.json nor vocab.json + merges.txt" in err
    code, _, err = run_cli(capsys, "tokenize", "text")
    assert code == 2 and "give --export OUT" in err
    (tmp_path / "merges.txt").write_text("#version: 0.2\nnot-a-pair\n")
    code, _, err = run_cli(capsys, "tokenize", "--gpt2", str(tmp_path), "text")
    assert code == 2 and "merges.txt line 2" in err
