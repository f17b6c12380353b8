"""Executed translated blocks of a firmware run under qemu-system-arm, from QEMU's own log.

unicorn (measure/arm_emulator.py) has no Cortex-M55; QEMU's mps3-an547 has, with MVE. With
`-d in_asm,exec,nochain` QEMU logs every block it translates (its instructions' addresses and bytes) and,
chaining off, every execution of one. The block profile this reads from that log has the form the unicorn
runner gives, {(address, size): executions}, so measure/instruction_classes.py turns it into executed
instructions per class and estimated cycles:

    run = traced_run(elf, machine="mps3-an547")
    cycles = InstructionProfile(elf, "armv8.1-m.main").cycles(run.blocks, "cortex-m55")

The log holds a line per executed block: a run of 10^7 instructions writes about a gigabyte, read as a
stream and deleted.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
import tempfile
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

_EXECUTED = re.compile(r"^Trace \d+: 0x[0-9a-f]+ \[[0-9a-f]+/([0-9a-f]+)/")
_INSTRUCTION = re.compile(r"^0x([0-9a-f]+):  (.{10})")


@dataclasses.dataclass(frozen=True)
class TracedRun:
    status: int
    console: str
    segments: list[dict[tuple[int, int], int]]  # per segment: (address, size in bytes) -> executions

    @property
    def blocks(self) -> dict[tuple[int, int], int]:
        """The whole run's block profile."""
        total: Counter[tuple[int, int]] = Counter()
        for segment in self.segments:
            total.update(segment)
        return dict(total)


def block_profile(log: Iterable[str]) -> dict[tuple[int, int], int]:
    """{(address, size): executions} from the lines of a `-d in_asm,exec,nochain` log. A block translated
    again (after a flush, or with other flags) counts under the translation current when it ran."""
    return segment_profiles(log, marks=frozenset())[0]


def segment_profiles(log: Iterable[str], marks: frozenset[int]) -> list[dict[tuple[int, int], int]]:
    """Block profiles of the run's segments: a new one starts each time a block at one of `marks` (say, a
    noinline function the firmware calls between the regions it measures) runs; the mark's own block
    counts in the segment it opens."""
    translated: dict[int, int] = {}  # start address -> size
    segments: list[Counter[tuple[int, int]]] = [Counter()]
    in_block, start, end = False, None, 0
    for line in log:
        if in_block:
            found = _INSTRUCTION.match(line)
            if found:
                address = int(found[1], 16)
                start = address if start is None else start
                end = address + len(found[2].replace(" ", "")) // 2
                continue
            if start is not None:
                translated[start] = end - start
            in_block, start = False, None
        if line.startswith("IN:"):
            in_block = True
            continue
        executed = _EXECUTED.match(line)
        if executed and int(executed[1], 16) in translated:
            address = int(executed[1], 16)
            if address in marks:
                segments.append(Counter())
            segments[-1][(address, translated[address])] += 1
    return [dict(segment) for segment in segments]


def traced_run(
    elf: str | Path,
    *,
    machine: str,
    command_line: str | None = None,
    marks: frozenset[int] = frozenset(),
    timeout: float = 1800,
) -> TracedRun:
    """Run `elf` under qemu-system-arm's `machine` with semihosting, logging its blocks; the exit status,
    the console and the block profile of each segment (`segment_profiles`; one without `marks`)."""
    with tempfile.TemporaryDirectory(prefix="mcubert-qemu-") as work:
        log = Path(work) / "blocks.log"
        command = [
            "qemu-system-arm", "-M", machine, "-nographic", "-monitor", "none", "-serial", "none",
            "-semihosting-config", "enable=on,target=native", "-kernel", str(elf),
            "-d", "in_asm,exec,nochain", "-D", str(log),
        ]  # fmt: skip
        if command_line is not None:
            command += ["-append", command_line]
        proc = subprocess.run(command, capture_output=True, text=True, errors="replace", timeout=timeout)
        with log.open(errors="replace") as lines:
            segments = segment_profiles(lines, marks)
    return TracedRun(proc.returncode, proc.stderr + proc.stdout, segments)
