"""Fixtures shared by the firmware tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def text_export_dir(tmp_path_factory):
    """A tiny sequence classifier (3 labels, seq_len 16) whose checkpoint has a BERT tokenizer, exported
    for the F767ZI: the export writes model_vocab.* (the on-device tokenizer's vocabulary), so the
    firmware front ends build their text-in paths."""
    pytest.importorskip("torch")
    from tests.conftest import build_hf_checkpoint
    from tflm_mcubert.boards import get_board
    from tflm_mcubert.export.pipeline import ExportRequest, run_export

    root = tmp_path_factory.mktemp("text-classifier")
    checkpoint = build_hf_checkpoint(root, classifier=True, num_labels=3)
    out = root / "export"
    run_export(ExportRequest(out_dir=out, board=get_board("nucleo-f767zi"), seq_len=16, checkpoint=str(checkpoint)))
    assert (out / "model_vocab.cc").is_file() and (out / "model_vocab.h").is_file()
    return out
