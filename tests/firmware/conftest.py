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


@pytest.fixture(scope="session")
def arduino_lib_dir(tmp_path_factory):
    """arduino_lib/ with its src/ generated (src/ is not committed): a copy in a temporary folder, written
    by arduino_lib/extras/sync_from_custom_ops.py, the script a user runs."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    lib = tmp_path_factory.mktemp("arduino") / "arduino_lib"
    shutil.copytree(repo / "arduino_lib", lib, ignore=shutil.ignore_patterns("src", "__pycache__"))
    script = repo / "arduino_lib" / "extras" / "sync_from_custom_ops.py"
    done = subprocess.run([sys.executable, str(script), "--lib", str(lib)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return lib


@pytest.fixture(scope="session")
def export_dir(tmp_path_factory):
    """BERT-tiny (the preset's random weights) exported for the F746ZG at 128 tokens."""
    from tflm_mcubert.boards import get_board
    from tflm_mcubert.export.pipeline import ExportRequest, run_export

    out = tmp_path_factory.mktemp("bert-tiny-128")
    run_export(ExportRequest(out_dir=out, board=get_board("nucleo-f746zg"), seq_len=128))
    return out
