"""Running a semihosting firmware under qemu-system-arm (mps2 boards, and mps3-an547 for the
Cortex-M55, linked with custom_ops/test/arm/an547.ld), as the kernel, Arduino and bare-metal tests
do. Semihosting writes go to QEMU's stderr, so the console is stderr + stdout."""

from __future__ import annotations

import functools
import shutil
import subprocess
from pathlib import Path

MACHINES = {"cortex-m7": "mps2-an500", "cortex-m4": "mps2-an386", "cortex-m55": "mps3-an547"}


@functools.lru_cache(maxsize=None)
def missing_machine(machine: str) -> str | None:
    """Why `machine` cannot run here (None: it can): no qemu-system-arm, or one too old to model it
    (mps3-an547 came with QEMU 6.0)."""
    if shutil.which("qemu-system-arm") is None:
        return "qemu-system-arm not found (Debian: apt-get install qemu-system-arm)"
    listing = subprocess.run(["qemu-system-arm", "-M", "help"], capture_output=True, text=True, errors="replace")
    if machine not in listing.stdout.split():
        return f"this qemu-system-arm has no {machine} machine"
    return None


def run_qemu(
    elf: Path | str,
    *,
    machine: str = "mps2-an500",
    command_line: str | None = None,
    timeout: float = 300,
    icount: bool = False,
):
    """(exit status, console text) of one run; `command_line` is -append's (the firmware's argv). `icount`:
    `-icount shift=0`, the virtual clock advancing 1 ns per executed instruction (what the emulator-m55
    board's counter reads)."""
    command = [
        "qemu-system-arm",
        "-M",
        machine,
        *(["-icount", "shift=0"] if icount else []),
        "-nographic",
        "-monitor",
        "none",
        "-serial",
        "none",
        "-semihosting-config",
        "enable=on,target=native",
        "-kernel",
        str(elf),
    ]
    if command_line is not None:
        command += ["-append", command_line]
    proc = subprocess.run(command, capture_output=True, text=True, errors="replace", timeout=timeout)
    return proc.returncode, proc.stderr + proc.stdout
