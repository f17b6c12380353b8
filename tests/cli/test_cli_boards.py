"""`boards`: every known board, its memory, and the longest sequence whose arena it holds."""

from __future__ import annotations

import json

from tests.cli.cli_helpers import run_cli
from tflm_mcubert.boards import BOARDS
from tflm_mcubert.export.mcubert_export import arena_overhead
from tflm_mcubert.model.config import PRESETS
from tflm_mcubert.schedule.planner import SMALLEST_TILES, plan_model


def arena_fits(preset: str, seq_len: int, budget: int) -> bool:
    config = PRESETS[preset]
    plan = plan_model(config, seq_len, 1 << 40, tiles=SMALLEST_TILES, classifier_labels=2)
    return plan.planned_bytes + arena_overhead(config.num_hidden_layers, True, config.hidden_size) <= budget


def test_boards_lists_every_board_with_its_longest_sequence(capsys):
    code, out, err = run_cli(capsys, "boards", "--json")
    assert code == 0, err
    rows = {row["name"]: row for row in json.loads(out)}
    assert set(rows) == set(BOARDS)
    for name, row in rows.items():
        board = BOARDS[name]
        assert row["largest_sram_region"]["bytes"] == board.largest_contiguous_sram.size
        for preset, longest in row["longest_seq_len"].items():
            positions = PRESETS[preset].max_position_embeddings
            assert arena_fits(preset, longest, board.arena_budget())
            assert longest == positions or not arena_fits(preset, longest + 1, board.arena_budget())
    # The smaller boards cannot hold BERT-mini's whole 512 positions; the RP2040 runs plain C.
    assert rows["nano33ble"]["longest_seq_len"]["bert-mini"] < 512
    assert rows["pico"]["kernels"] == "plain C" and rows["pico2"]["kernels"] == "DSP"


def test_boards_table_names_each_board_once(capsys):
    code, out, _ = run_cli(capsys, "boards")
    assert code == 0
    lines = out.splitlines()
    for name in BOARDS:
        assert sum(line.startswith(name + " ") for line in lines) == 1
    assert "export --board NAME" in out
