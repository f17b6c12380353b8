"""A whole bare-metal firmware image run from its reset vector under unicorn: the boards QEMU has no
machine for (nRF52840, RP2040, RP2350), and instruction counts of a firmware QEMU cannot give.

    run = run_firmware(elf, "cortex-m7", regions, command_line="text=...")   # .status, .console, .instructions

Flash and SRAM are mapped as the caller says (a board's linker script, or a large emulator-only map);
the core's system control space is plain memory, except that a read of the DWT cycle counter returns the
instructions executed so far, so a firmware's own cycle printouts (and TFLM's profiler) report executed
instructions. Semihosting (BKPT 0xAB: SYS_WRITE0, SYS_GET_CMDLINE, SYS_EXIT_EXTENDED, and SYS_OPEN /
SYS_READ / SYS_CLOSE of host files for reading) works as under QEMU; where the firmware has no
semihosting, the run stops at mcubert_platform_exit, and the console is platform_memory.c's RAM buffer
when the image has one, or what the firmware sends through a modelled UART (`Stm32Usart`: a polled STM32
USART fed with input bytes, e.g. the NUCLEO boards' ST-LINK virtual COM port).
"""

from __future__ import annotations

import dataclasses
import struct
from pathlib import Path

from tflm_mcubert.measure.arm_emulator import ElfImage, EmulatorError, _thumb_instruction_count

SYSTEM_CONTROL_SPACE = (0xE000_0000, 0x10_0000)
DWT_CYCCNT = 0xE000_1004
SYS_WRITE0, SYS_GET_CMDLINE, SYS_EXIT_EXTENDED = 0x04, 0x15, 0x20
SYS_OPEN, SYS_CLOSE, SYS_READ = 0x01, 0x02, 0x06
READ_MODES = (0, 1)  # fopen's "r" and "rb": the firmware only reads host files
_MODELS = {"cortex-m7": "M7", "cortex-m4": "M4", "cortex-m33": "M33", "cortex-m0plus": "M0"}


@dataclasses.dataclass(frozen=True)
class Stm32Usart:
    """A polled STM32 USART (the F7/H7 register layout: ISR at 0x1C, RDR at 0x24, TDR at 0x28) whose
    receiver holds `input` and whose transmitter is the run's console; TXE is always set and RXNE while
    input is left (reading RDR past its end returns 0 and keeps RXNE clear). `plain`: the other register
    blocks the firmware's set-up writes (RCC, GPIO), (origin, length), mapped as memory."""

    base: int
    input: bytes
    plain: tuple[tuple[int, int], ...] = ()

    ISR, RDR, TDR = 0x1C, 0x24, 0x28
    RXNE, TC, TXE = 1 << 5, 1 << 6, 1 << 7


@dataclasses.dataclass(frozen=True)
class FirmwareRun:
    status: int
    console: str
    instructions: int


def _page(value: int, up: bool) -> int:
    return (value + 0xFFF) & ~0xFFF if up else value & ~0xFFF


class _Machine:
    def __init__(
        self, elf: Path, cpu: str, regions: list[tuple[int, int]], command_line: str, uart: Stm32Usart | None = None
    ):
        from unicorn import UC_ARCH_ARM, UC_MODE_MCLASS, UC_MODE_THUMB, Uc, arm_const

        if cpu not in _MODELS:
            raise EmulatorError(f"unsupported cpu {cpu!r} (known: {', '.join(_MODELS)})")
        self.arm = arm_const
        self.image = ElfImage.read(elf)
        self.uc = Uc(UC_ARCH_ARM, UC_MODE_THUMB | UC_MODE_MCLASS)
        self.uc.ctl_set_cpu_model(getattr(arm_const, f"UC_CPU_ARM_CORTEX_{_MODELS[cpu]}"))
        for origin, length in [*regions, SYSTEM_CONTROL_SPACE]:
            self.uc.mem_map(_page(origin, False), _page(origin + length, True) - _page(origin, False))
        for address, content, mem_size in self.image.segments:
            self.uc.mem_write(address, content + bytes(mem_size - len(content)))
        self.command_line = command_line.encode()
        self.console = bytearray()
        self.status: int | None = None
        self.instructions = 0
        self.files: dict[int, list] = {}  # handle -> [content, position]
        self._block_sizes: dict[tuple[int, int], int] = {}
        self.uart, self.uart_position = uart, 0
        if uart is not None:
            for origin, length in uart.plain:
                self.uc.mem_map(_page(origin, False), _page(origin + length, True) - _page(origin, False))
            page = _page(uart.base, False)
            self.uart_offset = uart.base - page
            self.uc.mmio_map(page, 0x1000, self.on_uart_read, None, self.on_uart_write, None)

    def on_uart_read(self, _uc, offset, _size, _data) -> int:
        register = offset - self.uart_offset
        if register == self.uart.ISR:
            ready = self.uart.RXNE if self.uart_position < len(self.uart.input) else 0
            return self.uart.TXE | self.uart.TC | ready
        if register == self.uart.RDR and self.uart_position < len(self.uart.input):
            self.uart_position += 1
            return self.uart.input[self.uart_position - 1]
        return 0

    def on_uart_write(self, _uc, offset, _size, value, _data) -> None:
        if offset - self.uart_offset == self.uart.TDR:
            self.console.append(value & 0xFF)

    def word(self, address: int) -> int:
        return struct.unpack("<I", self.uc.mem_read(address, 4))[0]

    def on_block(self, uc, address, size, _):
        key = (address, size)
        count = self._block_sizes.get(key)
        if count is None:
            count = self._block_sizes[key] = _thumb_instruction_count(bytes(uc.mem_read(address, size)))
        self.instructions += count

    def on_cycle_counter_read(self, uc, _access, _address, _size, _value, _):
        uc.mem_write(DWT_CYCCNT, struct.pack("<I", self.instructions & 0xFFFFFFFF))

    def on_semihosting(self, uc, _intno, _):
        pc = uc.reg_read(self.arm.UC_ARM_REG_PC)
        if bytes(uc.mem_read(pc, 2)) != b"\xab\xbe":  # BKPT 0xAB
            pc -= 2  # unicorn reports the breakpoint after it
            if bytes(uc.mem_read(pc, 2)) != b"\xab\xbe":
                self.status = -1
                uc.emu_stop()
                return
        operation, argument = uc.reg_read(self.arm.UC_ARM_REG_R0), uc.reg_read(self.arm.UC_ARM_REG_R1)
        result = 0
        if operation == SYS_WRITE0:
            end = argument
            while uc.mem_read(end, 1) != b"\0":
                end += 1
            self.console += uc.mem_read(argument, end - argument)
        elif operation == SYS_GET_CMDLINE:
            buffer, length = self.word(argument), self.word(argument + 4)
            text = self.command_line[: max(0, length - 1)]
            uc.mem_write(buffer, text + b"\0")
            uc.mem_write(argument + 4, struct.pack("<I", len(text)))
        elif operation in (SYS_OPEN, SYS_READ, SYS_CLOSE):
            result = self.file_call(operation, argument)
        elif operation == SYS_EXIT_EXTENDED:
            self.status = struct.unpack("<i", uc.mem_read(argument + 4, 4))[0]
            uc.emu_stop()
            return
        else:
            result = 0xFFFFFFFF
        uc.reg_write(self.arm.UC_ARM_REG_R0, result)
        uc.reg_write(self.arm.UC_ARM_REG_PC, (pc + 2) | 1)

    def file_call(self, operation: int, argument: int) -> int:
        """SYS_OPEN {name, mode, length} -> handle; SYS_READ {handle, buffer, size} -> bytes NOT read;
        SYS_CLOSE {handle} -> 0. Errors are 0xFFFFFFFF, as the semihosting spec has them."""
        if operation == SYS_OPEN:
            name, mode, length = (self.word(argument + 4 * i) for i in range(3))
            try:
                if mode not in READ_MODES:
                    raise OSError(f"mode {mode}")
                content = Path(bytes(self.uc.mem_read(name, length)).decode()).read_bytes()
            except (OSError, UnicodeDecodeError):
                return 0xFFFFFFFF
            handle = max(self.files, default=0) + 1
            self.files[handle] = [content, 0]
            return handle
        entry = self.files.get(self.word(argument))
        if entry is None:
            return 0xFFFFFFFF
        if operation == SYS_CLOSE:
            del self.files[self.word(argument)]
            return 0
        buffer, size = self.word(argument + 4), self.word(argument + 8)
        chunk = entry[0][entry[1] : entry[1] + size]
        self.uc.mem_write(buffer, chunk)
        entry[1] += len(chunk)
        return size - len(chunk)

    def on_exit(self, uc, _address, _size, _):
        self.status = struct.unpack("<i", struct.pack("<I", uc.reg_read(self.arm.UC_ARM_REG_R0)))[0]
        uc.emu_stop()


def run_firmware(
    elf: Path,
    cpu: str,
    regions: list[tuple[int, int]],
    *,
    command_line: str = "",
    uart: Stm32Usart | None = None,
    timeout_s: float = 900.0,
) -> FirmwareRun:
    """(exit status, console, executed instructions) of `elf` run from its reset vector."""
    from unicorn import UC_HOOK_BLOCK, UC_HOOK_CODE, UC_HOOK_INTR, UC_HOOK_MEM_READ

    machine = _Machine(Path(elf), cpu, regions, command_line, uart)
    uc, symbols = machine.uc, machine.image.symbols
    uc.hook_add(UC_HOOK_BLOCK, machine.on_block)
    uc.hook_add(UC_HOOK_MEM_READ, machine.on_cycle_counter_read, begin=DWT_CYCCNT, end=DWT_CYCCNT + 3)
    uc.hook_add(UC_HOOK_INTR, machine.on_semihosting)
    if "mcubert_platform_exit" in symbols:
        exit_at = symbols["mcubert_platform_exit"] & ~1
        uc.hook_add(UC_HOOK_CODE, machine.on_exit, begin=exit_at, end=exit_at)
    stack_top, reset = struct.unpack("<II", uc.mem_read(symbols["mcubert_vector_table"], 8))
    uc.reg_write(machine.arm.UC_ARM_REG_SP, stack_top)
    from unicorn import UcError

    try:
        uc.emu_start(reset | 1, 0xFFFF_FFFF, timeout=int(timeout_s * 1e6))
    except UcError as exc:
        pc = uc.reg_read(machine.arm.UC_ARM_REG_PC)
        raise EmulatorError(f"{Path(elf).name}: {exc} at pc=0x{pc:08x}") from None
    if machine.status is None:
        pc = uc.reg_read(machine.arm.UC_ARM_REG_PC)
        raise EmulatorError(f"{Path(elf).name} did not exit (stopped at pc=0x{pc:08x} after {timeout_s} s or a fault)")
    console = machine.console.decode(errors="replace")
    if "mcubert_console" in symbols and not console:
        length = machine.word(symbols["mcubert_console_length"])
        console = bytes(uc.mem_read(symbols["mcubert_console"], length)).decode(errors="replace")
    return FirmwareRun(machine.status, console, machine.instructions)
