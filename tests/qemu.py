"""Running a semihosting firmware under qemu-system-arm (mps2 boards), as the kernel, Arduino and
bare-metal tests do. Semihosting writes go to QEMU's stderr, so the console is stderr + stdout."""

from __future__ import annotations

import subprocess
from pathlib import Path

MACHINES = {"cortex-m7": "mps2-an500", "cortex-m4": "mps2-an386"}


def run_qemu(elf: Path | str, *, machine: str = "mps2-an500", command_line: str | None = None, timeout: float = 300):
    """(exit status, console text) of one run; `command_line` is -append's (the firmware's argv)."""
    command = [
        "qemu-system-arm",
        "-M",
        machine,
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
