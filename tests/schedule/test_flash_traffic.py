"""Flash traffic of the weights and the stall estimate per board (schedule/flash_traffic.py)."""

from __future__ import annotations

import pytest

from tflm_mcubert.boards import BOARDS
from tflm_mcubert.ops import linear
from tflm_mcubert.schedule import flash_traffic, latency
from tflm_mcubert.schedule.cost import OpShape
from tflm_mcubert.schedule.memory import Dims

TINY = Dims(hidden=128, heads=2, ffn=512, layers=2)


def layer_bytes(out_features, in_features):
    return linear.packed_size(out_features, in_features) + 12 * out_features


def test_mlp_streams_both_layers_once_per_row_block():
    # s = 10, tile 4: tiles of 4, 4, 2 tokens -> 1 + 1 + 1 row blocks.
    shape = OpShape("mlp", 10, TINY, 4)
    assert flash_traffic.weight_traffic(shape) == 3 * (layer_bytes(512, 128) + layer_bytes(128, 512))


def test_attention_streams_k_and_v_per_sequence_block_and_q_and_output_per_tile_block():
    # s = 12: K and V over 3 blocks; tile 8 -> tiles of 8 and 4 tokens -> 2 + 1 blocks for Q and O.
    shape = OpShape("attention", 12, TINY, 8)
    assert flash_traffic.weight_traffic(shape) == (2 * 3 + 2 * 3) * layer_bytes(128, 128)


def test_traffic_is_the_same_for_every_multiple_of_four_and_larger_for_ragged_tiles():
    for kind in ("attention", "mlp"):
        traffic = {t: flash_traffic.weight_traffic(OpShape(kind, 128, TINY, t)) for t in (1, 3, 4, 5, 8, 64, 128)}
        assert traffic[4] == traffic[8] == traffic[64] == traffic[128]
        assert traffic[1] > traffic[3] > traffic[4] and traffic[5] > traffic[4]


def test_a_miss_costs_the_flash_accesses_that_fill_a_line():
    f746, h7 = BOARDS["nucleo-f746zg"].flash_timing, BOARDS["nucleo-h7a3zi-q"].flash_timing
    assert f746.miss_cycles == 1 * (7 + 1)  # one 256-bit read fills a 32-byte line
    assert h7.miss_cycles == 2 * (6 + 1)  # two 128-bit Flash words
    shape = OpShape("mlp", 128, TINY, 4)
    lines = -(-flash_traffic.weight_traffic(shape) // 32)
    assert flash_traffic.stall_cycles(shape, BOARDS["nucleo-f746zg"]) == lines * 8


def test_boards_without_a_flash_model_say_so():
    shape = OpShape("mlp", 128, TINY, 4)
    for name in ("nano33ble", "pico", "pico2"):
        assert BOARDS[name].flash_timing is None
        assert BOARDS[name].to_json()["flash_timing"] is None
        assert flash_traffic.stall_cycles(shape, BOARDS[name]) == 0


def test_latency_reports_the_flash_stalls_next_to_the_compute():
    estimate = latency.predict_latency(TINY, 128, "nucleo-f746zg", tiles={"attention": 4, "mlp": 4})
    flash = estimate.to_json()["flash"]
    assert flash["modelled"] and flash["timing"]["wait_states"] == 7
    stalls = flash["per_layer_stall_cycles"]
    assert stalls["mlp"] == flash_traffic.stall_cycles(OpShape("mlp", 128, TINY, 4), BOARDS["nucleo-f746zg"])
    assert flash["encoder_ms_with_flash"] == pytest.approx(
        estimate.to_json()["encoder_ms"] + 2 * (stalls["attention"] + stalls["mlp"]) / 216e3
    )


@pytest.mark.parametrize("board", ["nucleo-f746zg", "nucleo-f767zi", "nucleo-h7a3zi-q"])
def test_weight_traffic_adds_cost_but_does_not_move_the_chosen_tiles(board):
    tiles = flash_traffic.tiles_by_cost_model(TINY, 128, BOARDS[board])
    assert tiles["cycles_with_flash"] == tiles["cycles"] == tiles["instructions"] == {"attention": 4, "mlp": 4}


def test_int4_weights_halve_the_weight_stream_but_not_the_channel_tables():
    """weight_bits 4 (SPEC.md 3.1.1): w4row weights are half the pair4 bytes when 8 divides K; the
    12-byte channel rows stay, and the stalls follow."""
    import dataclasses

    tiny4 = dataclasses.replace(TINY, weight_bits=4)
    for kind in ("attention", "mlp"):
        eight, four = (flash_traffic.weight_traffic(OpShape(kind, 128, dims, 4)) for dims in (TINY, tiny4))
        assert 0.5 < four / eight < 0.6, (kind, four, eight)
    mlp_blocks = 128 // 4
    w4 = linear.stored_size(512, 128, 4) + 12 * 512 + linear.stored_size(128, 512, 4) + 12 * 128
    assert flash_traffic.weight_traffic(OpShape("mlp", 128, tiny4, 4)) == mlp_blocks * w4
    board = BOARDS["nucleo-f767zi"]
    stalls = {
        bits: flash_traffic.stall_cycles(OpShape("mlp", 128, dims, 4), board) for bits, dims in ((8, TINY), (4, tiny4))
    }
    assert stalls[4] < stalls[8]
