import pytest

from tflm_mcubert.boards import BOARDS, KB, MB, check_fit, custom_board, get_board, parse_size
from tflm_mcubert.errors import UserError


@pytest.mark.parametrize(
    "text, expected",
    [
        ("512KB", 512 * KB),
        ("2MB", 2 * MB),
        ("1.5M", int(1.5 * MB)),
        ("327680", 327680),
        ("64 kib", 64 * KB),
        (4096, 4096),
    ],
)
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "lots", "12XB", "-5KB", "0", "KB"])
def test_parse_size_rejects_nonsense(text):
    with pytest.raises(UserError, match="--sram"):
        parse_size(text, what="--sram")


def test_board_totals_match_datasheets():
    assert BOARDS["nucleo-f746zg"].sram_bytes == 320 * KB
    assert BOARDS["nucleo-f767zi"].sram_bytes == 512 * KB
    assert BOARDS["nucleo-h7a3zi-q"].sram_bytes == 1376 * KB  # "1.4 MB", ITCM included
    assert BOARDS["nucleo-f746zg"].flash_bytes == 1 * MB


def test_hobbyist_boards_match_their_datasheets():
    nano, pico, pico2 = (BOARDS[n] for n in ("nano33ble", "pico", "pico2"))
    assert (nano.core, nano.sram_bytes, nano.flash_bytes, nano.clock_hz) == ("cortex-m4", 256 * KB, 1 * MB, 64_000_000)
    assert (pico.core, pico.sram_bytes, pico.flash_bytes) == ("cortex-m0plus", 264 * KB, 2 * MB)
    assert (pico2.core, pico2.sram_bytes, pico2.flash_bytes) == ("cortex-m33", 520 * KB, 4 * MB)
    # The RP2040/RP2350 banks follow one another in the address map: one arena spans them all.
    assert pico.largest_contiguous_sram.size == 264 * KB
    assert pico2.largest_contiguous_sram.size == 520 * KB


def test_adjacent_f7_regions_merge_but_h7_regions_do_not():
    assert BOARDS["nucleo-f746zg"].largest_contiguous_sram.size == 320 * KB
    assert BOARDS["nucleo-f767zi"].largest_contiguous_sram.size == 512 * KB
    largest = BOARDS["nucleo-h7a3zi-q"].largest_contiguous_sram
    assert (largest.name, largest.size) == ("AXI-SRAM", 1024 * KB)


def test_fit_reports_misses():
    fit = check_fit(
        get_board("NUCLEO-F746ZG"),
        arena_bytes=400 * KB,
        flash_bytes=512 * KB,
        sram_reserve=16 * KB,
        flash_reserve=160 * KB,
    )
    assert not fit.sram_ok and fit.flash_ok and not fit.ok
    assert fit.to_json()["sram"]["miss_bytes"] == 400 * KB - (320 - 16) * KB


def test_unknown_board_names_the_choices():
    with pytest.raises(UserError, match="nucleo-f746zg"):
        get_board("arduino-uno")


def test_custom_board_is_one_region():
    board = custom_board("8MB", "64MB")
    assert board.largest_contiguous_sram.size == 8 * MB and board.flash_bytes == 64 * MB
