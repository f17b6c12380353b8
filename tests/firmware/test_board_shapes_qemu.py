"""The shapes the boards pick run bit-exact on the cores: each reference shape `boards` prints
(tflm_mcubert/data/board_shapes.json, what `distill --preset auto` chose per board) and each shape the
board-shape benchmark's searches chose (bench/results/board_shape_layers_*.json), exported at its weight
width and 128 tokens for its board, and layer 0 of it (attention and MLP; the other layers repeat the same
ops at the same shape) run by `mcubert_layer_check` under qemu-system-arm on the Cortex-M7 (DSP path) and
the Cortex-M55 (MVE path), byte for byte equal to the numpy reference. Every width, head size and FFN ratio
of the space runs on the host's paths in tests/kernels/test_kernels_shape_space.py."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest

from tests.firmware.baremetal_helpers import QEMU_BOARD_IDS, QEMU_BOARDS, need, run_layer_check
from tflm_mcubert.boards import get_board
from tflm_mcubert.export.pipeline import ExportRequest, run_export
from tflm_mcubert.firmware.layer_check import layer_check_from_export, write_layer_data
from tflm_mcubert.model.config import preset

SEQ_LEN = 128
RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"


def reference_shapes() -> list[tuple[str, str, int]]:
    """(board, shape, weight bits) of each distinct shape the boards picked, the first board to pick it."""
    boards = json.loads(resources.files("tflm_mcubert.data").joinpath("board_shapes.json").read_text())["boards"]
    picked = [(board, entry["shape"]) for board, entry in boards.items()]
    for summary in sorted(RESULTS.glob("board_shape_layers_*.json")):
        search = json.loads(summary.read_text())["search"]
        picked.append((search["board"], search["chosen"]))
    first = {}
    for board, chosen in picked:
        shape, bits = chosen.rsplit("-w", 1)  # "<shape>-w<bits>"
        first.setdefault((shape, int(bits)), board)
    return [(board, shape, bits) for (shape, bits), board in first.items()]


SHAPES = reference_shapes()


@pytest.fixture(scope="module", params=SHAPES, ids=[f"{shape}-w{bits}" for _, shape, bits in SHAPES])
def shape_layer_data(request, tmp_path_factory):
    board, shape, bits = request.param
    out = tmp_path_factory.mktemp(f"{shape}-w{bits}")
    run_export(ExportRequest(out_dir=out, board=get_board(board), preset=shape, seq_len=SEQ_LEN, weight_bits=bits))
    data = tmp_path_factory.mktemp(f"{shape}-layer-data")
    write_layer_data(layer_check_from_export(out), data)
    return preset(shape), data


def test_the_boards_picked_more_than_one_shape():
    assert len(SHAPES) >= 2 and len({shape for _, shape, _ in SHAPES}) == len(SHAPES)


@pytest.mark.parametrize("board, machine, path", QEMU_BOARDS, ids=QEMU_BOARD_IDS)
def test_a_board_picked_shape_runs_bit_exact_under_qemu(shape_layer_data, tmp_path, board, machine, path):
    need("arm-none-eabi-gcc", "cmake", "ninja", "qemu-system-arm")
    config, data = shape_layer_data
    run_layer_check(board, machine, data, tmp_path, seq_len=SEQ_LEN, hidden=config.hidden_size, path=path)
