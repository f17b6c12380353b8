"""examples/baremetal/CMakeLists.txt's board table (its MCUBERT_BOARD if-chain) against
tflm_mcubert/boards.py, the source of truth: every board of boards.py is in the table with its core
(-mcpu), a hard-float ABI exactly where the core has an FPU, and a linker script of its name. (The
linker scripts' memory regions: test_baremetal.py's test_linker_script_agrees_with_boards_py.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tflm_mcubert.boards import BOARDS

BAREMETAL = Path(__file__).resolve().parents[2] / "examples" / "baremetal"
CORES_WITH_FPU = {"cortex-m4", "cortex-m7", "cortex-m33", "cortex-m55"}
# Targets of the table that are not boards of boards.py: emulators.
EMULATED = {"qemu-mps2-an500", "qemu-mps3-an547", "emulator-m7", "emulator-m55"}


def board_table(cmake_text: str) -> dict[str, list[str]]:
    """Board name -> its board_arch_flags, from the if/elseif chain on MCUBERT_BOARD."""
    table = {}
    branches = re.split(r"^(?:if|elseif)\(", cmake_text, flags=re.MULTILINE)
    for branch in branches[1:]:
        condition = branch.split("\n", 1)[0]
        names = re.findall(r'MCUBERT_BOARD STREQUAL "([^"]+)"', condition)
        flags = re.search(r"set\(board_arch_flags ([^)]*)\)", branch.split("\nelse", 1)[0])
        if names and flags:
            table.update(dict.fromkeys(names, flags.group(1).split()))
    return table


@pytest.fixture(scope="module")
def table():
    text = (BAREMETAL / "CMakeLists.txt").read_text()
    table = board_table(text)
    listed = re.search(r"set\(MCUBERT_BOARDS ([^)]*)\)", text).group(1).split()
    assert sorted(table) == sorted(listed), "MCUBERT_BOARDS and the if-chain name different boards"
    return table


def test_every_board_of_boards_py_is_in_the_table(table):
    assert set(BOARDS) <= set(table), sorted(set(BOARDS) - set(table))
    assert set(table) - set(BOARDS) == EMULATED


@pytest.mark.parametrize("board", sorted(BOARDS))
def test_the_tables_core_and_float_abi_are_boards_py_s(table, board):
    flags = table[board]
    assert f"-mcpu={BOARDS[board].core}" in flags and "-mthumb" in flags
    hard = "-mfloat-abi=hard" in flags
    assert hard == (BOARDS[board].core in CORES_WITH_FPU), flags
    assert hard == any(flag.startswith("-mfpu=") for flag in flags)


@pytest.mark.parametrize("board", sorted(BOARDS) + sorted(EMULATED))
def test_each_board_has_its_linker_script(board):
    assert (BAREMETAL / "boards" / f"{board}.ld").is_file()


def test_the_parser_reads_a_shared_branch():
    text = (
        'if(MCUBERT_BOARD STREQUAL "a" OR MCUBERT_BOARD STREQUAL "b")\n'
        "  set(board_arch_flags -mcpu=x -mthumb)\nendif()\n"
    )
    assert board_table(text) == {"a": ["-mcpu=x", "-mthumb"], "b": ["-mcpu=x", "-mthumb"]}
