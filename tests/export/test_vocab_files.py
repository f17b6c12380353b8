"""The export's tokenizer files: model_vocab.cc/.h hold the tokenizer blob in the export's id space (the
permuted vocabulary when the embedding is compressed), counted in flash_bytes and report.json."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil

import pytest

from tflm_mcubert.boards import get_board
from tflm_mcubert.export.pipeline import ExportRequest, run_export
from tflm_mcubert.tokenizer import reference, vocab_blob

SENTENCES = ["The cat sat on the mat.", "This film is very good!", "not bad, and happy", "A dog was sad."]


def blob_of(export_dir) -> bytes:
    source = (export_dir / "model_vocab.cc").read_text()
    body = source[source.index("{") + 1 : source.index("};")]
    blob = bytes(int(h, 16) for h in re.findall(r"0x([0-9a-f]{2})", body))
    assert f"g_model_vocab_len = {len(blob)};" in source
    return blob


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    pytest.importorskip("torch")
    from tests.conftest import build_hf_checkpoint

    return build_hf_checkpoint(tmp_path_factory.mktemp("ckpt"), classifier=True, num_labels=2)


@pytest.mark.parametrize("schedule", ["mcubert", "stock"])
def test_the_blob_tokenizes_as_the_exports_own_tokenizer(checkpoint, tmp_path, schedule):
    from transformers import AutoTokenizer

    out = tmp_path / schedule
    report = run_export(
        ExportRequest(
            out_dir=out, board=get_board("nucleo-f767zi"), seq_len=16, checkpoint=str(checkpoint), schedule=schedule
        )
    )
    blob = blob_of(out)
    assert report["vocab_bytes"] == len(blob) == report["tokenizer"]["vocab_bytes"]
    assert (
        report["flash_bytes"] == report["tflite_bytes"] + len(blob) == (out / "model.tflite").stat().st_size + len(blob)
    )
    assert {"model_vocab.cc", "model_vocab.h"} <= set(report["files"])
    assert json.loads((out / "report.json").read_text())["vocab_bytes"] == len(blob)
    guide = (out / "FIRMWARE.md").read_text()  # the text-in section: this blob's figures and how to call it
    assert f"format version {vocab_blob.VERSION}, {len(blob):,} B of Flash" in guide
    assert ("mcubert::TextInput" in guide) == (schedule == "mcubert")
    cost = report["tokenizer"]["cost"]  # measured on the board's core when the emulator can be built
    if shutil.which("arm-none-eabi-gcc") and shutil.which("cmake") and importlib.util.find_spec("unicorn"):
        assert cost["core"] == "cortex-m7" and cost["tokens"] == 16 and 1_000 < cost["instructions"] < 200_000
        assert cost["stack_bytes"] <= 1024
    else:
        assert cost["instructions"] is None and cost["measured"] is False and "not measured" in cost["note"]
    # the ids the model takes: the permuted tokenizer's when the export wrote one, else the checkpoint's
    tokenizer_dir = out / "tokenizer" if (out / "tokenizer").is_dir() else checkpoint
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    spec = vocab_blob.unpack(blob)
    for text in SENTENCES:
        encoded = reference.encode(spec, text, 16)
        assert list(encoded.ids[: encoded.valid]) == tokenizer(text, truncation=True, max_length=16)["input_ids"]


def test_a_cost_this_machine_cannot_measure_is_absent_with_the_reason(monkeypatch):
    from tflm_mcubert.firmware.vocab_files import measured_cost
    from tflm_mcubert.measure import kernel_build

    monkeypatch.setattr(kernel_build, "missing_tools", lambda variant: "arm-none-eabi-gcc not found")
    cost = measured_cost(b"", 16, "cortex-m7")
    assert cost["core"] == "cortex-m7" and cost["instructions"] is None and cost["measured"] is False
    assert cost["note"].startswith("not measured: ")


def test_an_export_without_a_tokenizer_says_so(tmp_path):
    report = run_export(ExportRequest(out_dir=tmp_path / "o", board=get_board("nucleo-f767zi"), seq_len=16))
    assert report["vocab_bytes"] == 0 and "no tokenizer" in report["tokenizer"]["note"]
    assert report["flash_bytes"] == report["tflite_bytes"]
    assert not (tmp_path / "o" / "model_vocab.cc").exists()
    assert "Text in" not in (tmp_path / "o" / "FIRMWARE.md").read_text()


def test_the_report_gives_the_cost_of_the_longest_words_of_one_letter_pieces(minilm_spec):
    from tflm_mcubert.firmware.vocab_files import longest_words_text, measured_cost
    from tflm_mcubert.measure import kernel_build

    text = longest_words_text(minilm_spec, 128)
    words = text.split()
    assert len(words) == 3 and {len(w) for w in words} == {minilm_spec.max_chars_per_word}
    pieces = reference.pieces(minilm_spec, words[0].encode())
    assert len(pieces) == len(words[0]) and minilm_spec.specials["unk"] not in pieces  # one piece a letter
    if kernel_build.missing_tools(kernel_build.Variant("cortex-m7")) or not importlib.util.find_spec("unicorn"):
        pytest.skip("no emulator image on this machine")
    cost = measured_cost(vocab_blob.pack(minilm_spec), 128, "cortex-m7", minilm_spec)
    longest = cost["longest_words"]
    assert "one piece a letter" in longest["input"] and longest["stack_bytes"] <= 1024
    assert cost["worst_case_instructions"] == max(cost["instructions"], longest["instructions"]) <= 2_500_000
