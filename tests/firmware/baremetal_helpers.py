"""What the examples/baremetal tests share: the firmware build script (examples/baremetal/firmware_sizes.py,
loaded once), the tools' skip, QEMU runs, and the layer check on QEMU's boards."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests import qemu

REPO = Path(__file__).resolve().parents[2]
BAREMETAL = REPO / "examples" / "baremetal"


def _load_firmware_sizes():
    if "firmware_sizes" not in sys.modules:
        spec = importlib.util.spec_from_file_location("firmware_sizes", BAREMETAL / "firmware_sizes.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["firmware_sizes"] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
    return sys.modules["firmware_sizes"]


firmware_sizes = _load_firmware_sizes()


def need(*tools: str) -> None:
    for tool in tools:
        if shutil.which(tool) is None:
            pytest.skip(
                f"{tool} not found (Debian: apt-get install gcc-arm-none-eabi libnewlib-arm-none-eabi "
                f"cmake ninja-build qemu-system-arm)"
            )


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
