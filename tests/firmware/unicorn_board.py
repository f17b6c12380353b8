"""Running a whole bare-metal firmware image from reset under unicorn, for the boards QEMU has no machine
for (nRF52840, RP2040, RP2350): Flash and SRAM mapped as the board's linker script declares them, the
core's system control space as plain memory (the startup code only writes it), and the run stopped
where the firmware calls mcubert_platform_exit. The console is the RAM buffer of platform_memory.c, where
the image has one."""

from __future__ import annotations

import struct
from pathlib import Path

from tflm_mcubert.measure.arm_emulator import ElfImage

SYSTEM_CONTROL_SPACE = (0xE000_0000, 0x10_0000)


def _page(value: int, up: bool) -> int:
    return (value + 0xFFF) & ~0xFFF if up else value & ~0xFFF


def run_from_reset(elf: Path, cpu: str, regions: list[tuple[int, int]], max_instructions: int = 2_000_000_000):
    """(exit status, console text) of `elf` run from its reset vector."""
    from unicorn import UC_ARCH_ARM, UC_HOOK_CODE, UC_MODE_MCLASS, UC_MODE_THUMB, Uc, arm_const

    models = {
        "cortex-m4": arm_const.UC_CPU_ARM_CORTEX_M4,
        "cortex-m33": arm_const.UC_CPU_ARM_CORTEX_M33,
        "cortex-m0plus": arm_const.UC_CPU_ARM_CORTEX_M0,  # no M0+ model: the same ARMv6-M ISA
    }
    image = ElfImage.read(elf)
    uc = Uc(UC_ARCH_ARM, UC_MODE_THUMB | UC_MODE_MCLASS)
    uc.ctl_set_cpu_model(models[cpu])
    for origin, length in regions + [SYSTEM_CONTROL_SPACE]:
        uc.mem_map(_page(origin, False), _page(origin + length, True) - _page(origin, False))
    for address, content, mem_size in image.segments:
        uc.mem_write(address, content + bytes(mem_size - len(content)))
    vectors = image.symbols["mcubert_vector_table"]
    stack_top, reset = struct.unpack("<II", uc.mem_read(vectors, 8))
    exit_at = image.symbols["mcubert_platform_exit"] & ~1
    stopped = {}

    def on_exit(uc, address, size, _):
        stopped["status"] = struct.unpack("<i", struct.pack("<I", uc.reg_read(arm_const.UC_ARM_REG_R0)))[0]
        uc.emu_stop()

    uc.hook_add(UC_HOOK_CODE, on_exit, begin=exit_at, end=exit_at)
    uc.reg_write(arm_const.UC_ARM_REG_SP, stack_top)
    uc.emu_start(reset | 1, 0xFFFF_FFFF, count=max_instructions)
    if "status" not in stopped:
        raise AssertionError(f"{elf.name} did not reach mcubert_platform_exit in {max_instructions:,} instructions")
    console = ""
    if "mcubert_console" in image.symbols:
        length = struct.unpack("<I", uc.mem_read(image.symbols["mcubert_console_length"], 4))[0]
        console = bytes(uc.mem_read(image.symbols["mcubert_console"], length)).decode(errors="replace")
    return stopped["status"], console
