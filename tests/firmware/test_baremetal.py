"""examples/baremetal: linker scripts, boot blocks, the layer check under QEMU and unicorn, per-board sizes.

* Each board's linker script declares the application's Flash (the board's, less a bootloader's share)
  and SRAM regions whose address-contiguous runs equal tflm_mcubert/boards.py's (the source of truth),
  and puts the arena in the largest run.
* The boot blocks: the Pico's boot stage 2 (the Pico SDK's; a stand-in of its size here) fills the first
  256 bytes of Flash with the vector table after it; the Pico 2's IMAGE_DEF follows the vector table
  inside the first 4 KB; the Nano 33 BLE's image starts above the Arduino bootloader. Pico without a
  boot stage 2 stops at configure time, saying where to get one.
* The layer check built for the Nano 33 BLE (Cortex-M4F), Pico (M0+, plain C) and Pico 2 (M33, DSP)
  runs from its reset vector under unicorn (no QEMU machine has these parts) and passes.
* `mcubert_layer_check` with layer 0 of an exported BERT-tiny (seq 128): under qemu-system-arm
  (mps2-an500, semihosting) it prints PASS and exits 0; with one corrupted expected byte it prints FAIL
  naming it and exits 1. Built for emulator-m55 and run with `-icount shift=0`, its counts are executed
  instructions.
* Built with each board's linker script, text + data fits the board's Flash and data + bss its SRAM
  (the per-board table is printed: pytest -s).
* mcubert_app (the whole model through TFLM) and custom_ops' CMake targets: test_baremetal_app.py.
"""

from __future__ import annotations

import dataclasses
import re
import struct
from pathlib import Path

import pytest

from tests import qemu
from tests.firmware.baremetal_helpers import BAREMETAL, KERNEL_STACK_BOUND, QEMU_BOARD_IDS, QEMU_BOARDS
from tests.firmware.baremetal_helpers import configure_error, firmware_sizes, need, run_layer_check, run_qemu
from tests.firmware.baremetal_helpers import stack_use
from tflm_mcubert.boards import BOARDS, get_board
from tflm_mcubert.export.pipeline import ExportRequest, run_export
from tflm_mcubert.firmware.layer_check import layer_check_from_export, write_layer_data
from tflm_mcubert.measure.arm_emulator import ElfImage

RP2040_BOOT2_STAND_IN = """\
/* A stand-in with the layout of the Pico SDK's boot stage 2 (256 bytes in .boot2, CRC last): not bootable */
.section .boot2, "ax"
.space 252, 0
.word 0
"""


def contiguous_runs(regions: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """(origin, length) regions merged where one ends at the next one's origin."""
    runs: list[list[int]] = []
    for origin, length in sorted(regions):
        if runs and runs[-1][0] + runs[-1][1] == origin:
            runs[-1][1] += length
        else:
            runs.append([origin, length])
    return [tuple(run) for run in runs]


@pytest.mark.parametrize("board", firmware_sizes.BOARDS)
def test_linker_script_agrees_with_boards_py(board):
    spec = BOARDS[board]
    memory = firmware_sizes.linker_memory(BAREMETAL / "boards" / f"{board}.ld")
    text = memory.aliases["REGION_TEXT"]
    application_flash = (
        firmware_sizes.FLASH_ORIGIN[board] + spec.bootloader_bytes,
        spec.flash_bytes - spec.bootloader_bytes,
    )
    assert memory.regions[text] == application_flash
    script_ram = [r for name, r in memory.regions.items() if name != text]
    assert contiguous_runs(script_ram) == contiguous_runs([(r.address, r.size) for r in spec.sram_regions])
    largest = spec.largest_contiguous_sram
    arena = memory.region("REGION_ARENA")
    assert arena[0] <= largest.address and arena[0] + arena[1] >= largest.address + largest.size


# ---- firmware builds ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def layer_check(export_dir):
    return layer_check_from_export(export_dir)


@pytest.fixture(scope="module")
def layer_data(layer_check, tmp_path_factory):
    out = tmp_path_factory.mktemp("layer-data")
    write_layer_data(layer_check, out)
    return out


@pytest.mark.parametrize("board, machine, path", QEMU_BOARDS, ids=QEMU_BOARD_IDS)
def test_layer_check_passes_under_qemu(layer_data, tmp_path, board, machine, path):
    need("arm-none-eabi-gcc", "cmake", "ninja", "qemu-system-arm")
    console = run_layer_check(board, machine, layer_data, tmp_path, seq_len=128, hidden=128, path=path)
    assert "layer:     0 cycles" in console  # QEMU does not model the DWT cycle counter


def test_emulator_m55_counts_executed_instructions(layer_data, tmp_path):
    """emulator-m55 (mps3-an547 under -icount shift=0, code in the DDR): the layer check passes on the MVE path and
    mcubert_cycles() reads executed instructions (SysTick, calibrated), the two ops adding up to the layer."""
    need("arm-none-eabi-gcc", "cmake", "ninja", "qemu-system-arm")
    elf = firmware_sizes.build("emulator-m55", tmp_path / "build", layer_data=layer_data)
    status, console = qemu.run_qemu(elf, machine="mps3-an547", icount=True)
    assert status == 0 and "PASS: the layer's output matches the reference byte for byte" in console, console
    assert "seq_len 128, hidden 128, MVE path" in console
    attention, mlp, layer = (
        int(re.search(rf"{op}: +(\d+) cycles", console)[1]) for op in ("attention", "mlp", "layer")
    )
    # About 1.9 * 10^7 instructions: the bounds catch a counter that reads 0, SysTick ticks (31 times fewer) or a wrap
    assert 5_000_000 < layer < 100_000_000 and abs(attention + mlp - layer) < 200, console


@pytest.fixture(scope="module")
def layer_data_w4(tmp_path_factory):
    """Layer 0 of a BERT-tiny export with int4 attention and MLP weights (spec version 3, SPEC 3.1.1)."""
    out = tmp_path_factory.mktemp("bert-tiny-128-w4")
    run_export(ExportRequest(out_dir=out, board=get_board("nucleo-f746zg"), seq_len=128, weight_bits=4))
    data = tmp_path_factory.mktemp("layer-data-w4")
    write_layer_data(layer_check_from_export(out), data)
    return data


@pytest.mark.parametrize("board, machine, path", QEMU_BOARDS, ids=QEMU_BOARD_IDS)
def test_int4_weights_layer_check_passes_under_qemu(layer_data_w4, tmp_path, board, machine, path):
    need("arm-none-eabi-gcc", "cmake", "ninja", "qemu-system-arm")
    run_layer_check(board, machine, layer_data_w4, tmp_path, seq_len=128, hidden=128, path=path)


SOAK_RUNS = 1000


@pytest.fixture(scope="module")
def soak_check(tmp_path_factory):
    """Layer 0 of a BERT-tiny export at seq 32 with the digests of SOAK_RUNS varied inputs."""
    out = tmp_path_factory.mktemp("bert-tiny-32")
    run_export(ExportRequest(out_dir=out, board=get_board("nucleo-f746zg"), seq_len=32))
    return layer_check_from_export(out, soak_runs=SOAK_RUNS)


def test_layer_check_soak_under_qemu(soak_check, tmp_path):
    """1,000 varied inputs on Cortex-M7: every output as the reference's, stack and scratch use constant."""
    need("arm-none-eabi-gcc", "cmake", "ninja", "qemu-system-arm")
    write_layer_data(soak_check, tmp_path / "data")
    elf = firmware_sizes.build("qemu-mps2-an500", tmp_path / "build", layer_data=tmp_path / "data")
    status, console = run_qemu(elf)
    assert status == 0, console
    assert (
        f"soak: {SOAK_RUNS} runs with varied inputs match the reference; stack high-water" in console
        and "the scratch guard is intact" in console
    ), console
    used, reserved = stack_use(console)
    assert 0 < used <= KERNEL_STACK_BOUND + 1024 < reserved, console


def test_a_soak_run_whose_output_differs_fails(soak_check, tmp_path):
    need("arm-none-eabi-gcc", "cmake", "ninja", "qemu-system-arm")
    crcs = soak_check.soak_crcs.copy()
    crcs[3] ^= 1
    write_layer_data(dataclasses.replace(soak_check, soak_crcs=crcs), tmp_path / "data")
    elf = firmware_sizes.build("qemu-mps2-an500", tmp_path / "build", layer_data=tmp_path / "data")
    status, console = run_qemu(elf)
    assert status == 1, console
    assert "FAIL: soak run 3: the output differs from the reference" in console


def test_corrupted_expected_output_fails(layer_check, tmp_path):
    need("arm-none-eabi-gcc", "cmake", "ninja", "qemu-system-arm")
    expected = layer_check.expected_hidden.copy()
    expected[1000] ^= 0x10
    write_layer_data(dataclasses.replace(layer_check, expected_hidden=expected), tmp_path / "data")
    elf = firmware_sizes.build("qemu-mps2-an500", tmp_path / "build", layer_data=tmp_path / "data")
    status, console = run_qemu(elf)
    assert status == 1, console
    assert "FAIL: 1 of 16384 bytes differ from the reference, the first at 1000" in console
    assert "PASS" not in console


@pytest.fixture(scope="module")
def rp2040_boot2(tmp_path_factory):
    path = tmp_path_factory.mktemp("boot2") / "bs2_stand_in.S"
    path.write_text(RP2040_BOOT2_STAND_IN)
    return path


@pytest.fixture(scope="module")
def board_builds(layer_data, rp2040_boot2, tmp_path_factory):
    """mcubert_layer_check built for every board: board -> ELF."""
    need("arm-none-eabi-gcc", "arm-none-eabi-size", "cmake", "ninja")
    work = tmp_path_factory.mktemp("boards")
    return {
        board: firmware_sizes.build(
            board,
            work / board,
            layer_data=layer_data,
            cmake_args=(f"-DMCUBERT_RP2040_BOOT2={rp2040_boot2}",) if board == "pico" else (),
        )
        for board in firmware_sizes.BOARDS
    }


def test_layer_check_fits_every_board(board_builds):
    rows = [firmware_sizes.board_size(board, elf) for board, elf in board_builds.items()]
    print(
        "\nmcubert_layer_check (BERT-tiny layer 0, seq 128), arm-none-eabi-size:\n" + firmware_sizes.format_table(rows)
    )
    for row in rows:
        board = BOARDS[row.board]
        assert row.flash_bytes == board.flash_bytes - board.bootloader_bytes
        assert row.flash_used <= row.flash_bytes, row
        assert row.sram_used <= row.sram_bytes <= board.sram_bytes, row
        # layer 0's weights and both hidden states are in Flash; the working state and scratch in SRAM
        assert row.text > 190_000 and row.bss >= 2 * 128 * 128


def words_at(elf: Path, address: int, count: int) -> list[int]:
    image = ElfImage.read(elf)
    for start, content, _ in image.segments:
        if start <= address < start + len(content):
            return list(struct.unpack_from(f"<{count}I", content, address - start))
    raise AssertionError(f"{address:#x} is in no loaded segment of {elf}")


def test_boot_blocks_sit_where_each_bootrom_looks(board_builds):
    pico = ElfImage.read(board_builds["pico"]).symbols
    assert pico["__boot_block_start__"] == 0x1000_0000 and pico["mcubert_vector_table"] == 0x1000_0100
    pico2_elf = board_builds["pico2"]
    pico2 = ElfImage.read(pico2_elf).symbols
    assert pico2["mcubert_vector_table"] == 0x1000_0000
    image_def = pico2["mcubert_rp2350_image_def"]
    assert image_def + 20 <= 0x1000_1000
    assert words_at(pico2_elf, image_def, 5) == [0xFFFFDED3, 0x10210142, 0x000001FF, 0, 0xAB123579]
    nano = ElfImage.read(board_builds["nano33ble"]).symbols
    assert nano["mcubert_vector_table"] == 0x1_0000  # above the Arduino bootloader
    for board, elf in board_builds.items():  # the initial stack pointer is the top of the data region
        memory = firmware_sizes.linker_memory(BAREMETAL / "boards" / f"{board}.ld")
        origin, length = memory.region("REGION_DATA")
        assert words_at(elf, ElfImage.read(elf).symbols["mcubert_vector_table"], 1) == [origin + length], board


@pytest.mark.parametrize(
    "board, cpu, path",
    [("nano33ble", "cortex-m4", "DSP"), ("pico", "cortex-m0plus", "plain C"), ("pico2", "cortex-m33", "DSP")],
)
def test_layer_check_runs_from_reset_on_the_hobbyist_boards(board_builds, board, cpu, path):
    pytest.importorskip("unicorn")
    memory = firmware_sizes.linker_memory(BAREMETAL / "boards" / f"{board}.ld")
    from tflm_mcubert.measure.firmware_emulator import run_firmware

    run = run_firmware(board_builds[board], cpu, list(memory.regions.values()))
    status, console = run.status, run.console
    assert status == 0, console
    if board != "nano33ble":  # the Nano's console is ITM (SWO), which nothing reads here
        assert f"{path} path" in console, console
        assert "PASS: the layer's output matches the reference byte for byte" in console, console


def test_pico_without_a_boot_stage_2_stops_with_a_clear_error(tmp_path):
    need("arm-none-eabi-gcc", "cmake", "ninja")
    message = configure_error(tmp_path, "-DMCUBERT_BOARD=pico")
    assert "MCUBERT_BOARD=pico needs -DMCUBERT_RP2040_BOOT2=<bs2_default_padded_checksummed.S>" in message
