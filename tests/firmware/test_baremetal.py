"""examples/baremetal: linker scripts, the QEMU layer check, per-board sizes, and the TFLM app's guards.

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
* mcubert_app: CMake stops with a message naming what is missing (TFLM_DIR, TFLM_LIB); with TFLM_DIR set
  in the environment, its main.cc compiles against that TFLM (-fsyntax-only).
* mcubert_app under QEMU, with a user's TFLM library for cortex-m7 hard-float (TFLM_DIR, TFLM_LIB_CORTEX_M7,
  TFLM_THIRD_PARTY_INCLUDES or FLATBUFFERS_INCLUDE + GEMMLOWP_DIR): a fresh BERT-tiny export's logits equal
  the reference byte for byte, TFLM's arena_used_bytes() on the 32-bit core is within the exported arena,
  and the least arena that works (found with `-append arena=<bytes>`) is printed (pytest -s). With a library
  for the Cortex-M55 (TFLM_LIB_CORTEX_M55), the app profiled on emulator-m55 counts its ops in instructions.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests import qemu

from tflm_mcubert.boards import BOARDS, get_board
from tflm_mcubert.firmware.layer_check import layer_check_from_export, write_layer_data
from tflm_mcubert.export.pipeline import ExportRequest, run_export
from tflm_mcubert.measure.arm_emulator import ElfImage
from tflm_mcubert.runtime.tflm_binding import TflmSources

REPO = Path(__file__).resolve().parents[2]
BAREMETAL = REPO / "examples" / "baremetal"
_spec = importlib.util.spec_from_file_location("firmware_sizes", BAREMETAL / "firmware_sizes.py")
firmware_sizes = importlib.util.module_from_spec(_spec)
sys.modules["firmware_sizes"] = firmware_sizes  # dataclasses look their module up there
_spec.loader.exec_module(firmware_sizes)

RP2040_BOOT2_STAND_IN = """\
/* A stand-in with the layout of the Pico SDK's boot stage 2 (256 bytes in .boot2, CRC last): not bootable */
.section .boot2, "ax"
.space 252, 0
.word 0
"""


def need(*tools: str) -> None:
    for tool in tools:
        if shutil.which(tool) is None:
            pytest.skip(
                f"{tool} not found (Debian: apt-get install gcc-arm-none-eabi libnewlib-arm-none-eabi "
                f"cmake ninja-build qemu-system-arm)"
            )


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
def export_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("bert-tiny-128")
    run_export(ExportRequest(out_dir=out, board=get_board("nucleo-f746zg"), seq_len=128))
    return out


@pytest.fixture(scope="module")
def layer_check(export_dir):
    return layer_check_from_export(export_dir)


@pytest.fixture(scope="module")
def layer_data(layer_check, tmp_path_factory):
    out = tmp_path_factory.mktemp("layer-data")
    write_layer_data(layer_check, out)
    return out


def run_qemu(elf: Path, command_line: str = "", machine: str = "mps2-an500") -> tuple[int, str]:
    """(exit status, console) of the app on QEMU's `machine` (default the Cortex-M7's); `command_line` is its argv."""
    return qemu.run_qemu(elf, command_line=command_line, machine=machine)


# The emulated boards the C apps run on: (board, QEMU machine, the kernels' path there).
QEMU_BOARDS = [("qemu-mps2-an500", "mps2-an500", "DSP path"), ("qemu-mps3-an547", "mps3-an547", "MVE path")]
QEMU_BOARD_IDS = ["cortex-m7", "cortex-m55"]


KERNEL_STACK_BOUND = int(
    re.search(
        r"#define MCUBERT_STACK_BOUND_BYTES (\d+)", (REPO / "custom_ops/include/mcubert/mcubert_ops.h").read_text()
    )[1]
)


def stack_use(console: str) -> tuple[int, int]:
    """(high-water mark, reserved stack) from the firmware's "stack used: N of M B" line."""
    found = re.search(r"stack used: (\d+) of (\d+) B", console)
    assert found, console
    return int(found[1]), int(found[2])


def run_layer_check(board, machine, layer_data, tmp_path, *, seq_len: int, hidden: int, path: str) -> str:
    """Build the layer check of `layer_data` for `board`, run it on QEMU's `machine`; its console, once it
    passed on the kernels' `path` within their stack bound."""
    elf = firmware_sizes.build(board, tmp_path / "build", layer_data=layer_data)
    status, console = run_qemu(elf, machine=machine)
    assert status == 0, console
    assert f"seq_len {seq_len}, hidden {hidden}, {path}" in console
    assert "PASS: the layer's output matches the reference byte for byte" in console
    # The kernels' own stack is bounded (MCUBERT_STACK_BOUND_BYTES); main and printing add a little.
    used, reserved = stack_use(console)
    assert 0 < used <= KERNEL_STACK_BOUND + 1024 < reserved, console
    return console


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


# ---- mcubert_app -------------------------------------------------------------------------------


def configure_error(tmp_path: Path, *args: str) -> str:
    result = subprocess.run(
        [
            "cmake",
            "-S",
            str(BAREMETAL),
            "-B",
            str(tmp_path / "build"),
            "-G",
            "Ninja",
            f"-DCMAKE_TOOLCHAIN_FILE={firmware_sizes.TOOLCHAIN_FILE}",
            "-DMCUBERT_BOARD=nucleo-f767zi",
            *args,
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0, result.stdout
    return " ".join(result.stderr.split())


def test_app_without_tflm_stops_with_a_clear_error(tmp_path, export_dir):
    need("arm-none-eabi-gcc", "cmake", "ninja")
    message = configure_error(tmp_path, f"-DTFLM_DIR={tmp_path / 'no-tflm'}", f"-DMCUBERT_EXPORT_DIR={export_dir}")
    assert "mcubert_app needs -DTFLM_DIR=<tflite-micro checkout>" in message
    fake_tflm = tmp_path / "tflm" / "tensorflow" / "lite" / "micro"
    fake_tflm.mkdir(parents=True)
    (fake_tflm / "micro_interpreter.h").write_text("")
    message = configure_error(tmp_path, f"-DTFLM_DIR={tmp_path / 'tflm'}", f"-DMCUBERT_EXPORT_DIR={export_dir}")
    assert "mcubert_app needs -DTFLM_LIB=<libtensorflow-microlite.a>" in message
    message = configure_error(tmp_path, "-DMCUBERT_BOARD=nucleo-f303re")
    assert "MCUBERT_BOARD=nucleo-f303re is not one of" in message


def tflm_third_party_includes() -> str:
    """';'-separated flatbuffers and gemmlowp include dirs: TFLM_THIRD_PARTY_INCLUDES, else what the
    real-TFLM check resolves (FLATBUFFERS_INCLUDE / GEMMLOWP_DIR, default: TFLM's downloads folder)."""
    if os.environ.get("TFLM_THIRD_PARTY_INCLUDES"):
        return os.environ["TFLM_THIRD_PARTY_INCLUDES"]
    sources = TflmSources.from_environment()
    return f"{sources.flatbuffers_include};{sources.gemmlowp_dir}"


@pytest.mark.parametrize("text", [0, 1], ids=["test-sequence", "text-in"])
def test_app_main_compiles_against_tflm(export_dir, text, tmp_path):
    tflm = os.environ.get("TFLM_DIR")
    if not tflm:
        pytest.skip(
            "set TFLM_DIR (and TFLM_THIRD_PARTY_INCLUDES, ';'-separated, or FLATBUFFERS_INCLUDE and "
            "GEMMLOWP_DIR; default: the Makefile's downloads/) to syntax-check mcubert_app"
        )
    need("arm-none-eabi-g++")
    if text:  # the export's tokenizer blob, as export writes it for a checkpoint with a tokenizer
        from tflm_mcubert.firmware.c_array import write_c_array

        write_c_array(b"\0" * 64, tmp_path, name="model_vocab")
    includes = [
        export_dir,
        tmp_path,
        REPO / "custom_ops" / "tflm",
        REPO / "custom_ops" / "include",
        BAREMETAL / "src",
        tflm,
        *tflm_third_party_includes().split(";"),
    ]
    result = subprocess.run(
        [
            "arm-none-eabi-g++",
            "-mcpu=cortex-m7",
            "-mthumb",
            "-mfloat-abi=hard",
            "-mfpu=fpv5-d16",
            "-std=gnu++17",
            "-fno-exceptions",
            "-fno-rtti",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-Wno-unused-parameter",
            "-fsyntax-only",
            "-DTF_LITE_STATIC_MEMORY",
            f"-DMCUBERT_APP_TEXT={text}",
            *[f"-I{path}" for path in includes],
            str(BAREMETAL / "src" / "mcubert_app_main.cc"),
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr


def tflm_cmake_args() -> tuple[str, ...]:
    """mcubert_app's TFLM arguments from the environment; skips naming the variables that are missing."""
    missing = [name for name in ("TFLM_DIR", "TFLM_LIB_CORTEX_M7") if not os.environ.get(name)]
    if missing:
        pytest.skip(
            f"set {', '.join(missing)} to run mcubert_app under QEMU: a tflite-micro checkout and its "
            f"libtensorflow-microlite.a built for cortex-m7 hard-float (flatbuffers and gemmlowp headers: "
            f"TFLM_THIRD_PARTY_INCLUDES, or FLATBUFFERS_INCLUDE and GEMMLOWP_DIR; examples/baremetal/README.md)"
        )
    return (
        f"-DTFLM_DIR={os.environ['TFLM_DIR']}",
        f"-DTFLM_LIB={os.environ['TFLM_LIB_CORTEX_M7']}",
        f"-DTFLM_THIRD_PARTY_INCLUDES={tflm_third_party_includes()}",
    )


def exported_arena_bytes(export_dir: Path) -> int:
    settings = (export_dir / "model_settings.h").read_text()
    return int(re.search(r"^#define MCUBERT_MODEL_ARENA_BYTES (\d+)", settings, re.MULTILINE)[1])


def app_runs(elf: Path, arena_bytes: int) -> bool:
    status, console = run_qemu(elf, f"arena={arena_bytes}")
    return status == 0 and "output matches the reference: yes" in console


def least_working_arena(elf: Path, failing: int, working: int) -> int:
    """Bisects the arena TFLM is given (`arena=<bytes>`) between one that fails and one that works."""
    assert app_runs(elf, working) and not app_runs(elf, failing)
    while working - failing > 1:
        middle = (failing + working) // 2
        if app_runs(elf, middle):
            working = middle
        else:
            failing = middle
    return working


def test_app_matches_the_reference_under_qemu(export_dir, tmp_path):
    cmake_args = tflm_cmake_args()
    need("arm-none-eabi-g++", "cmake", "ninja", "qemu-system-arm")
    elf = firmware_sizes.build(
        "qemu-mps2-an500",
        tmp_path / "build",
        target="mcubert_app",
        cmake_args=(f"-DMCUBERT_EXPORT_DIR={export_dir}", *cmake_args),
    )
    status, console = run_qemu(elf)
    assert status == 0, console
    assert "output matches the reference: yes" in console
    # The firmware compares with its own copy of the expected output; check the printed values here too.
    expected = json.loads((export_dir / "model_test_input.json").read_text())["expected_output"]
    printed = [int(q) for q in re.findall(r"^  \[\d+\] (-?\d+) = ", console, re.MULTILINE)]
    assert printed == expected, console

    exported = exported_arena_bytes(export_dir)
    used, given = map(int, re.search(r"arena used: (\d+) of (\d+) B", console).groups())
    assert given == exported
    assert used <= exported, f"TFLM used {used} B of the arena, the export states {exported} B"
    least = least_working_arena(elf, failing=used // 2, working=exported)
    # The 16 KB the boards reserve for stack and runtime (boards.py) must hold TFLM's deepest path.
    stack, reserved = stack_use(console)
    assert 0 < stack < reserved, console
    print(
        f"\nmcubert_app under QEMU (Cortex-M7): arena exported {exported} B, TFLM arena_used_bytes() {used} B, "
        f"least that works {least} B; stack high-water {stack} of {reserved} B"
    )


def test_app_profiles_its_ops_in_instructions_on_emulator_m55(export_dir, tmp_path):
    """mcubert_app with MicroProfiler on emulator-m55 (QEMU -icount shift=0; TFLM_LIB_CORTEX_M55: TFLM built
    TARGET_ARCH=cortex-m55): the output matches, and TFLM's ticks (tflm_ticks_icount.cc) are the board's
    instruction counts, the four ops adding up to Invoke (bench/whole_model.py --core cortex-m55 relies on it)."""
    missing = [name for name in ("TFLM_DIR", "TFLM_LIB_CORTEX_M55") if not os.environ.get(name)]
    if missing:
        pytest.skip(f"set {', '.join(missing)}: a tflite-micro checkout and its microlite built for cortex-m55")
    need("arm-none-eabi-g++", "cmake", "ninja", "qemu-system-arm")
    cmake_args = (
        f"-DTFLM_DIR={os.environ['TFLM_DIR']}",
        f"-DTFLM_LIB={os.environ['TFLM_LIB_CORTEX_M55']}",
        f"-DTFLM_THIRD_PARTY_INCLUDES={tflm_third_party_includes()}",
        "-DMCUBERT_APP_PROFILE=ON",
    )
    elf = firmware_sizes.build(
        "emulator-m55",
        tmp_path / "build",
        target="mcubert_app",
        cmake_args=(f"-DMCUBERT_EXPORT_DIR={export_dir}", *cmake_args),
    )
    status, console = qemu.run_qemu(elf, machine="mps3-an547", icount=True)
    assert status == 0 and "output matches the reference: yes" in console, console
    invoke = int(re.search(r"invoke: (\d+) cycles", console)[1])
    ops = {tag: int(n) for tag, n in re.findall(r"^(MCUBERT_[A-Z_]+), (\d+)\r?$", console, re.MULTILINE)}
    assert set(ops) == {"MCUBERT_EMBEDDING", "MCUBERT_ATTENTION", "MCUBERT_MLP", "MCUBERT_CLASSIFIER_HEAD"}, console
    assert min(ops.values()) > 0 and 0.99 * invoke < sum(ops.values()) <= invoke, console


TEXTS = ["The cat sat on the mat.", "This film is very good!", "not bad, and happy", "Ünïcödé — 東京 [MASK]"]


def test_text_in_matches_the_reference_under_qemu(tmp_path):
    """Sentences go in as text (`text=` on the command line), are tokenized on the device, and the printed
    logits equal the reference run on the ids the Python reference tokenizer gives."""
    cmake_args = tflm_cmake_args()
    need("arm-none-eabi-g++", "cmake", "ninja", "qemu-system-arm")
    pytest.importorskip("torch")
    from tests.conftest import build_hf_checkpoint
    from tflm_mcubert.runtime.reference import run_reference
    from tflm_mcubert.tflite.mcubert_reader import read_model
    from tflm_mcubert.tokenizer import reference, vocab_blob

    checkpoint = build_hf_checkpoint(tmp_path, classifier=True, num_labels=2)
    out = tmp_path / "export"
    run_export(ExportRequest(out_dir=out, board=get_board("nucleo-f767zi"), seq_len=16, checkpoint=str(checkpoint)))
    elf = firmware_sizes.build(
        "qemu-mps2-an500",
        tmp_path / "build",
        target="mcubert_app",
        cmake_args=(f"-DMCUBERT_EXPORT_DIR={out}", *cmake_args),
    )
    spec = vocab_blob.unpack((out / "model_vocab.bin").read_bytes())
    model = read_model((out / "model.tflite").read_bytes())
    for text in TEXTS:
        status, console = run_qemu(elf, f"text={text}")
        assert status == 0, console
        encoded = reference.encode(spec, text, 16)
        inputs = {"input_ids": encoded.ids, "attention_mask": encoded.mask, "token_type_ids": encoded.token_types}
        expected = run_reference(model, inputs).outputs["logits"].reshape(-1)
        printed = [int(q) for q in re.findall(r"^  \[\d+\] (-?\d+) = ", console, re.MULTILINE)]
        assert printed == list(expected), (text, console)
        assert f"tokens: {encoded.valid} of 16" in console
        label = int(np.argmax(expected))
        assert f"label LABEL_{label} ({label})" in console  # a checkpoint without names: HF's default


# ---- custom_ops/CMakeLists.txt ------------------------------------------------------------------


def test_the_kernels_cmake_description_builds_on_its_own_for_the_host(tmp_path):
    """The `mcubert` target any CMake project takes with add_subdirectory(custom_ops), here with host gcc."""
    need("cmake", "ninja", "gcc")
    build = tmp_path / "build"
    for command in (
        ["cmake", "-S", str(REPO / "custom_ops"), "-B", str(build), "-G", "Ninja"],
        ["cmake", "--build", str(build)],
    ):
        done = subprocess.run(command, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    program = tmp_path / "uses_mcubert.c"
    program.write_text(
        '#include "mcubert/mcubert_ops.h"\n'
        "int main(void) { return mcubert_status_name(MCUBERT_ERROR_MODEL)[0] == 'm' ? 0 : 1; }\n"
    )
    linked = subprocess.run(
        [
            "gcc",
            "-std=c99",
            "-I",
            str(REPO / "custom_ops" / "include"),
            str(program),
            str(build / "libmcubert.a"),
            "-o",
            str(tmp_path / "uses_mcubert"),
        ],
        capture_output=True,
        text=True,
    )
    assert linked.returncode == 0, linked.stderr
    assert subprocess.run([str(tmp_path / "uses_mcubert")]).returncode == 0


def test_the_binding_target_builds_for_cortex_m7_against_tflm(tmp_path):
    """mcubert_tflm (custom_ops/CMakeLists.txt) through the bare-metal project, TFLM headers only."""
    need("arm-none-eabi-g++", "cmake", "ninja")
    tflm = os.environ.get("TFLM_DIR")
    if not tflm:
        pytest.skip("set TFLM_DIR (a tflite-micro checkout; FLATBUFFERS_INCLUDE and GEMMLOWP_DIR) to build the binding")
    build = tmp_path / "build"
    configure = [
        "cmake",
        "-S",
        str(BAREMETAL),
        "-B",
        str(build),
        "-G",
        "Ninja",
        f"-DCMAKE_TOOLCHAIN_FILE={BAREMETAL / 'cmake' / 'arm-none-eabi.cmake'}",
        f"-DTFLM_DIR={tflm}",
        f"-DTFLM_THIRD_PARTY_INCLUDES={tflm_third_party_includes()}",
        "-DMCUBERT_BUILD_APP=OFF",
    ]
    for command in (configure, ["cmake", "--build", str(build), "--target", "mcubert_tflm"]):
        done = subprocess.run(command, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (build / "mcubert" / "libmcubert_tflm.a").is_file()
