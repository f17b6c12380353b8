"""`boards`: every known board, its memory, and the longest sequence of the default export it holds
(arena in SRAM and .tflite in Flash)."""

from __future__ import annotations

import json

from tests.cli.cli_helpers import run_cli
from tflm_mcubert.boards import BOARDS
from tflm_mcubert.cli import boards as boards_command
from tflm_mcubert.export.decoder_export import decoder_arena, decoder_planned_bytes
from tflm_mcubert.export.mcubert_export import arena_overhead
from tflm_mcubert.model.config import PRESETS
from tflm_mcubert.schedule.memory import Dims
from tflm_mcubert.schedule.planner import SMALLEST_TILES, plan_model


def arena_fits(preset: str, seq_len: int, budget: int) -> bool:
    config = PRESETS[preset]
    plan = plan_model(config, seq_len, 1 << 40, tiles=SMALLEST_TILES, output_bytes=2)
    return plan.planned_bytes + arena_overhead(config.num_hidden_layers, True, config.hidden_size) <= budget


def fits(board, preset: str, seq_len: int) -> bool:
    flash = boards_command.flash_bytes_at(preset, seq_len)
    return arena_fits(preset, seq_len, board.arena_budget()) and flash <= board.flash_budget()


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
            if longest is None:
                assert not fits(board, preset, 1)
                continue
            assert fits(board, preset, longest)
            assert longest == positions or not fits(board, preset, longest + 1)
    # BERT-mini's default export (about 3.9 MB) fits only the STM32N6570-DK's 128 MB external NOR; BERT-tiny's
    # fits every board at 128 tokens, and all 512 except on the Nano 33 BLE, whose bootloader keeps 64 KB of its
    # 1 MB Flash.
    assert {name for name, row in rows.items() if row["longest_seq_len"]["bert-mini"]} == {"stm32n6570-dk"}
    assert all(row["longest_seq_len"]["bert-tiny"] >= 128 for row in rows.values())
    assert {name for name, row in rows.items() if row["longest_seq_len"]["bert-tiny"] < 512} == {"nano33ble"}
    assert rows["pico"]["kernels"] == "plain C" and rows["pico2"]["kernels"] == "DSP"
    assert rows["stm32n6570-dk"]["kernels"] == "DSP + MVE"
    # the reference shapes (data/board_shapes.json, bench/board_shapes.py's): the boards the search prices only
    shipped = boards_command.reference_shapes()
    assert {name for name, row in rows.items() if row["reference_shape"]} == set(shipped["boards"])
    for name, shape in shipped["boards"].items():
        assert rows[name]["reference_shape"] == {**shipped["settings"], **shape}
        assert BOARDS[name].core == "cortex-m7" and shape["latency_ms"] <= shipped["settings"]["max_latency_ms"]


def test_the_flash_model_is_the_exports_own_figure(tmp_path, capsys):
    code, _, err = run_cli(capsys, "export", "--seq-len", "32", "--board", "nucleo-h7a3zi-q", "--out", tmp_path / "o")
    assert code == 0, err
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    assert report["flash_bytes"] == boards_command.flash_bytes_at("bert-tiny", 32)


def test_boards_table_names_each_board_once(capsys):
    code, out, _ = run_cli(capsys, "boards")
    assert code == 0
    lines = out.splitlines()
    split = next(i for i, line in enumerate(lines) if line.startswith("board ") and "reference shape" in line)
    for name in BOARDS:
        assert sum(line.startswith(name + " ") for line in lines[:split]) == 1
    assert "whose .tflite fits Flash" in out
    # then the reference shapes: one line per board the shapes were chosen for, its shape and figures
    shipped = boards_command.reference_shapes()["boards"]
    rows = [line.split() for line in lines[split + 1 :] if line.split() and line.split()[0] in BOARDS]
    assert {row[0] for row in rows} == set(shipped) and len(rows) == len(shipped)
    for row in rows:
        shape = shipped[row[0]]
        assert row[1:5] == [shape["shape"], f"{shape['dev_accuracy']:.2f}", f"{shape['test_accuracy']:.2f}",
                            f"{shape['latency_ms']:.1f}"]  # fmt: skip
    assert "reference shape: what `distill --preset auto --recipe logits --board B --max-latency-ms 100" in out


def test_a_decoder_context_is_the_longest_whose_planned_arena_fits(tmp_path):
    """The `context` column: at n positions a decoder of the preset's shape, planned as export plans it
    (its caches included) plus TFLM's bookkeeping, fits the board's arena budget; at n + 1 it does not."""
    from tflm_mcubert.export.decoder_export import DECODER_PRESETS
    from tflm_mcubert.export.pipeline import ExportRequest, run_export

    board = BOARDS["nucleo-f746zg"]
    context = boards_command.decoder_context(board, "gpt2-d128x2")
    assert 256 <= context < 1024  # the preset's own 256 positions fit, the ops' 1,024 do not
    raw = DECODER_PRESETS["gpt2-d128x2"]
    dims = Dims(hidden=raw["n_embd"], heads=raw["n_head"], ffn=4 * raw["n_embd"], layers=raw["n_layer"])
    for n, fits_board in ((context, True), (context + 1, False)):
        arena = decoder_arena(dims.layers, decoder_planned_bytes(dims, n)).arena_bytes
        assert (arena <= board.arena_budget()) == fits_board, (n, arena)
    # and the formula is what export plans: the preset exported at 256 positions
    report = run_export(ExportRequest(out_dir=tmp_path / "d", board=board, preset="gpt2-d128x2"))
    assert report["arena_bytes"] == decoder_arena(dims.layers, decoder_planned_bytes(dims, 256)).arena_bytes


def test_boards_shapes_lists_what_fits_under_the_latency_cap_fastest_first(capsys):
    code, out, err = run_cli(capsys, "boards", "--shapes", "nucleo-f746zg", "--max-latency-ms", "60")
    assert code == 0, err
    rows = [line.split() for line in out.splitlines()[1:] if line.startswith("L")]
    assert rows, out
    latencies = [float(row[-1].replace(",", "")) for row in rows]
    assert latencies == sorted(latencies) and max(latencies) <= 60
    assert f"{len(rows)} of 240 shapes fit nucleo-f746zg at 128 tokens and under 60 ms" in out


def test_boards_shapes_refuses_bad_input_in_one_line(capsys):
    from tests.cli.cli_helpers import assert_one_clean_error

    for argv, fragment in (
        (("--shapes", "nucleo-f000"), "unknown board 'nucleo-f000'"),
        (("--shapes", "nucleo-f746zg", "--labels", "0"), "--labels must be at least 1"),
        (("--shapes", "nucleo-f746zg", "--seq-len", "0"), "seq"),
    ):
        code, _, err = run_cli(capsys, "boards", *argv)
        assert code != 0
        assert_one_clean_error(err, fragment)
