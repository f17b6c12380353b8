"""`export --weight-bits auto` of a decoder (export/decoder_fit.py): the fewest int4 matrices that keep the
word table dense within the Flash, the least sensitive first; all int8 when it fits, all int4 and a
compressed table when nothing else does."""

from __future__ import annotations

import json

import pytest

from tests.cli.cli_helpers import run_cli
from tests.gpt2_helpers import random_gpt2
from tflm_mcubert.export.decoder_export import STRUCTURE_ALLOWANCE, _dense_bytes
from tflm_mcubert.tflite.mcubert_reader import read_decoder

CODE_RESERVE = 160 * 1024  # the default Flash reserve `--flash` is given on top of


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gpt2")
    return random_gpt2(folder, vocab_size=1500, n_positions=24, n_embd=32, n_layer=2, n_head=2)


def _export(capsys, checkpoint, out, *args):
    code, _, err = run_cli(capsys, "export", "--checkpoint", checkpoint, "--sram", "64KB", *args, "--out", out)
    assert code == 0, err
    return json.loads((out / "report.json").read_text()), (out / "model.tflite").read_bytes()


@pytest.fixture(scope="module")
def both_widths(checkpoint, tmp_path_factory):
    root = tmp_path_factory.mktemp("widths")
    return {
        bits: _export(_Capture(), checkpoint, root / f"w{bits}", "--weight-bits", str(bits), "--flash", "2MB")
        for bits in (8, 4)
    }


class _Capture:
    """run_cli's capsys for a module fixture: nothing to read back."""

    def readouterr(self):
        return type("Out", (), {"out": "", "err": ""})()


def _flash_for_missing(int8_tflite: bytes, missing: int) -> int:
    """The --flash at which the int8 model's dense word table misses the Flash left for it by `missing` B."""
    dense = _dense_bytes(read_decoder(int8_tflite).quantized)
    return dense + STRUCTURE_ALLOWANCE - missing + CODE_RESERVE


def test_with_room_auto_keeps_every_matrix_int8_and_writes_the_int8_model(capsys, checkpoint, both_widths, tmp_path):
    _, int8 = both_widths[8]
    report, tflite = _export(capsys, checkpoint, tmp_path / "o", "--weight-bits", "auto", "--flash", "2MB")
    assert tflite == int8
    assert report["weight_widths"]["int4_matrices"] == [] and len(report["weight_widths"]["int8_matrices"]) == 12


def test_a_little_short_auto_stores_the_least_sensitive_matrices_int4(capsys, checkpoint, both_widths, tmp_path):
    (_, int8), (_, int4) = both_widths[8], both_widths[4]
    saved = len(int8) - len(int4)
    flash = _flash_for_missing(int8, saved // 3)
    report, tflite = _export(capsys, checkpoint, tmp_path / "o", "--weight-bits", "auto", "--flash", flash)
    widths = report["weight_widths"]
    assert 0 < len(widths["int4_matrices"]) < 12 and report["compression"]["method"] == "dense"
    assert len(int4) < len(tflite) < len(int8) and report["fits"]["ok"]
    chosen = widths["int4_matrices"]
    # the least sensitive first, among matrices that save as much
    assert max(widths["sensitivity"][m] for m in chosen) <= max(widths["sensitivity"].values())
    read = read_decoder(tflite).quantized
    stored = {
        f"{node.name}.{layer}": getattr(node.params, layer).weight_bits
        for node in read.nodes()
        for layer in node.op.linear_layers
    }
    assert {m for m, bits in stored.items() if bits == 4} == set(chosen)
    assert read.greedy([1, 2, 3], 8) == report["check"]["greedy_model_ids"]


def test_far_short_auto_stores_every_matrix_int4_and_compresses_the_table(capsys, checkpoint, both_widths, tmp_path):
    (_, int8), (_, int4) = both_widths[8], both_widths[4]
    flash = _flash_for_missing(int8, 2 * (len(int8) - len(int4)))
    report, _ = _export(capsys, checkpoint, tmp_path / "o", "--weight-bits", "auto", "--flash", flash)
    assert len(report["weight_widths"]["int4_matrices"]) == 12
    assert report["compression"]["method"] == "adaptive" and report["fits"]["ok"]


def test_auto_with_qat_fine_tunes_at_the_chosen_widths(capsys, checkpoint, both_widths, tmp_path):
    """--qat-steps with --weight-bits auto: the QAT student is fake-quantized at the widths auto chose, and
    the export stores those widths and reads back."""
    (_, int8), (_, int4) = both_widths[8], both_widths[4]
    flash = _flash_for_missing(int8, (len(int8) - len(int4)) // 3)
    args = ("--weight-bits", "auto", "--qat-steps", "2", "--flash", flash)
    report, tflite = _export(capsys, checkpoint, tmp_path / "o", *args)
    chosen = report["weight_widths"]["int4_matrices"]
    assert 0 < len(chosen) < 12 and report["qat"]["steps"] == 2 and report["fits"]["ok"]
    read = read_decoder(tflite).quantized
    stored = {
        f"{node.name}.{layer}"
        for node in read.nodes()
        for layer in node.op.linear_layers
        if getattr(node.params, layer).weight_bits == 4
    }
    assert stored == set(chosen)
    assert read.greedy([1, 2, 3], 8) == report["check"]["greedy_model_ids"]
