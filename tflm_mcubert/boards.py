"""The microcontroller boards we target: their SRAM regions, Flash and core, and the fit check.

The tensor arena is one contiguous buffer, so what matters is the largest contiguous SRAM region, not the
total: the STM32H7A3's 1.4 MB is split over several buses and address ranges, the largest 1 MB (AXI SRAM).
On the F7 parts DTCM, SRAM1 and SRAM2 are adjacent in the address map, so a linker script can place one
buffer across them.
"""

from __future__ import annotations

import dataclasses
import re

from tflm_mcubert.errors import UserError

KB = 1024
MB = 1024 * 1024

# SRAM kept out of the arena for the stack, the TFLM interpreter object, the op resolver and the
# application's own data. 16 KB is a typical bare-metal stack + runtime budget; override with --reserve.
DEFAULT_SRAM_RESERVE = 16 * KB
# Flash kept for code: the TFLM interpreter with the ops a BERT needs, our kernels, the HAL and startup
# (a Cortex-M7 -O2 TFLM build of this size is typically 100-150 KB); override with --flash-reserve.
DEFAULT_FLASH_RESERVE = 160 * KB


@dataclasses.dataclass(frozen=True)
class MemoryRegion:
    name: str
    address: int
    size: int


@dataclasses.dataclass(frozen=True)
class FlashTiming:
    """How reading constants from internal Flash stalls the core (schedule/flash_traffic.py).

    A data-cache miss on Flash fills one `cache_line_bytes` line with `cache_line_bytes * 8 /
    read_bits` Flash accesses of `wait_states + 1` clock cycles each (the reference manuals'
    read-latency tables at the board's clock and 2.7-3.6 V)."""

    wait_states: int
    read_bits: int  # Flash access width
    cache_line_bytes: int  # L1 data cache line (Cortex-M7: 32 B)
    data_cache_bytes: int
    source: str

    @property
    def miss_cycles(self) -> int:
        reads = -(-self.cache_line_bytes * 8 // self.read_bits)
        return reads * (self.wait_states + 1)

    def to_json(self) -> dict:
        return {**dataclasses.asdict(self), "miss_cycles": self.miss_cycles}


@dataclasses.dataclass(frozen=True)
class Board:
    name: str
    mcu: str
    core: str
    clock_hz: int
    flash_bytes: int
    sram_regions: tuple[MemoryRegion, ...]
    bootloader_bytes: int = 0  # Flash a factory bootloader keeps at its start (not the application's)
    # None where weights are not read from on-chip Flash through a cache this model describes
    # (the RP2040/RP2350 execute in place from QSPI Flash; the nRF52840's NVMC timing is not
    # specified per access): their latency estimates leave Flash out and say so.
    flash_timing: FlashTiming | None = None

    @property
    def sram_bytes(self) -> int:
        return sum(r.size for r in self.sram_regions)

    @property
    def largest_contiguous_sram(self) -> MemoryRegion:
        """The largest run of address-adjacent regions (merged), where one arena can live."""
        runs: list[MemoryRegion] = []
        for region in sorted(self.sram_regions, key=lambda r: r.address):
            if runs and runs[-1].address + runs[-1].size == region.address:
                last = runs.pop()
                region = MemoryRegion(f"{last.name}+{region.name}", last.address, last.size + region.size)
            runs.append(region)
        return max(runs, key=lambda r: r.size)

    def arena_budget(self, reserve: int = DEFAULT_SRAM_RESERVE) -> int:
        """Bytes for the tensor arena: the largest contiguous SRAM region less `reserve` (stack, runtime)."""
        return max(0, self.largest_contiguous_sram.size - reserve)

    def flash_budget(self, reserve: int = DEFAULT_FLASH_RESERVE) -> int:
        """Bytes for the model in Flash: less the bootloader's and `reserve` for code."""
        return max(0, self.flash_bytes - self.bootloader_bytes - reserve)

    def to_json(self) -> dict:
        largest = self.largest_contiguous_sram
        return {
            "name": self.name,
            "mcu": self.mcu,
            "core": self.core,
            "clock_hz": self.clock_hz,
            "flash_bytes": self.flash_bytes,
            "bootloader_bytes": self.bootloader_bytes,
            "sram_bytes": self.sram_bytes,
            "sram_regions": [dataclasses.asdict(r) for r in self.sram_regions],
            "largest_sram_region": {"name": largest.name, "bytes": largest.size},
            "flash_timing": self.flash_timing.to_json() if self.flash_timing else None,
        }


# Memory maps from the vendors' manuals: STM32F74x/F76x/H7A3 reference manuals (RM0385, RM0410,
# RM0455); the others are cited at their entries.
BOARDS: dict[str, Board] = {
    "nucleo-f746zg": Board(
        name="nucleo-f746zg",
        mcu="STM32F746ZG",
        core="cortex-m7",
        clock_hz=216_000_000,
        flash_bytes=1 * MB,
        sram_regions=(
            MemoryRegion("DTCM", 0x2000_0000, 64 * KB),
            MemoryRegion("SRAM1", 0x2001_0000, 240 * KB),
            MemoryRegion("SRAM2", 0x2004_C000, 16 * KB),
        ),
        flash_timing=FlashTiming(
            wait_states=7,
            read_bits=256,
            cache_line_bytes=32,
            data_cache_bytes=4 * KB,
            source="RM0385 (STM32F75xxx/74xxx), Embedded Flash memory: read access latency table "
            "(7 WS for 210 < HCLK <= 216 MHz at 2.7-3.6 V), 256-bit Flash reads; DS10916: 4 KB L1 data cache",
        ),
    ),
    "nucleo-f767zi": Board(
        name="nucleo-f767zi",
        mcu="STM32F767ZI",
        core="cortex-m7",
        clock_hz=216_000_000,
        flash_bytes=2 * MB,
        sram_regions=(
            MemoryRegion("DTCM", 0x2000_0000, 128 * KB),
            MemoryRegion("SRAM1", 0x2002_0000, 368 * KB),
            MemoryRegion("SRAM2", 0x2007_C000, 16 * KB),
        ),
        flash_timing=FlashTiming(
            wait_states=7,
            read_bits=256,
            cache_line_bytes=32,
            data_cache_bytes=16 * KB,
            source="RM0410 (STM32F76xxx/77xxx), Embedded Flash memory: read access latency table "
            "(7 WS for 210 < HCLK <= 216 MHz at 2.7-3.6 V), 256-bit reads in single-bank mode (the "
            "factory default); DS11532: 16 KB L1 data cache",
        ),
    ),
    "nucleo-h7a3zi-q": Board(
        name="nucleo-h7a3zi-q",
        mcu="STM32H7A3ZIT6Q",
        core="cortex-m7",
        clock_hz=280_000_000,
        flash_bytes=2 * MB,
        sram_regions=(
            MemoryRegion("DTCM", 0x2000_0000, 128 * KB),
            MemoryRegion("AXI-SRAM", 0x2400_0000, 1024 * KB),
            MemoryRegion("AHB-SRAM1+2", 0x3000_0000, 128 * KB),
            MemoryRegion("SRD-SRAM", 0x3800_0000, 32 * KB),
            MemoryRegion("ITCM", 0x0000_0000, 64 * KB),
        ),
        flash_timing=FlashTiming(
            wait_states=6,
            read_bits=128,
            cache_line_bytes=32,
            data_cache_bytes=16 * KB,
            source="RM0455 (STM32H7A3/7B3/7B0), Embedded Flash memory: recommended wait states at VOS0 "
            "(6 WS for 252 < ACLK <= 280 MHz), 128-bit Flash words; DS13195: 16 KB L1 data cache",
        ),
    ),
    # nRF52840 Product Specification (v1.7), "Memory" chapter: 1 MB Flash, 256 KB RAM at
    # 0x2000_0000, 64 MHz Cortex-M4F. The one board the TFLM Arduino library supports. The Arduino
    # bootloader keeps Flash below 0x1_0000 (the Arduino mbed core links sketches from there).
    "nano33ble": Board(
        name="nano33ble",
        mcu="nRF52840",
        core="cortex-m4",
        clock_hz=64_000_000,
        flash_bytes=1 * MB,
        sram_regions=(MemoryRegion("RAM", 0x2000_0000, 256 * KB),),
        bootloader_bytes=64 * KB,
    ),
    # RP2040 Datasheet section 2.6.2: 256 KB striped over SRAM0-3 at 0x2000_0000, then SRAM4 and
    # SRAM5 (4 KB each) at 0x2004_0000 and 0x2004_1000; 133 MHz Cortex-M0+ (no DSP extension).
    # Raspberry Pi Pico Datasheet: 2 MB QSPI Flash.
    "pico": Board(
        name="pico",
        mcu="RP2040",
        core="cortex-m0plus",
        clock_hz=133_000_000,
        flash_bytes=2 * MB,
        sram_regions=(
            MemoryRegion("SRAM0-3", 0x2000_0000, 256 * KB),
            MemoryRegion("SRAM4", 0x2004_0000, 4 * KB),
            MemoryRegion("SRAM5", 0x2004_1000, 4 * KB),
        ),
    ),
    # RP2350 Datasheet, "SRAM" in the address map chapter: 512 KB striped over SRAM0-7 at 0x2000_0000, SRAM8 and
    # SRAM9 (4 KB each) at 0x2008_0000 and 0x2008_1000; 150 MHz Cortex-M33 with the DSP extension.
    # Raspberry Pi Pico 2 Datasheet: 4 MB QSPI Flash.
    "pico2": Board(
        name="pico2",
        mcu="RP2350",
        core="cortex-m33",
        clock_hz=150_000_000,
        flash_bytes=4 * MB,
        sram_regions=(
            MemoryRegion("SRAM0-7", 0x2000_0000, 512 * KB),
            MemoryRegion("SRAM8", 0x2008_0000, 4 * KB),
            MemoryRegion("SRAM9", 0x2008_1000, 4 * KB),
        ),
    ),
    # STM32N6570-DK: STM32N657X0H3Q, Cortex-M55 with Helium (MVE) at up to 800 MHz (the STM32N657 reference
    # manual's memory map; the board's user manual for the NOR). No
    # internal Flash: the boot ROM loads the first-stage bootloader (FSBL) from the board's 128 MB octo-SPI
    # NOR (MX66UW1G45G on XSPI2, memory-mapped at 0x7000_0000) into AXISRAM2; the FSBL maps the NOR and
    # jumps to the application, which executes in place from 0x7010_0400 (the FSBL's 1 MB slot, then the
    # 1 KB header of a signed image), so the weights are read from external Flash through the M55's data
    # cache. SRAM at reset (secure aliases): AXISRAM1 (its first 400 KB the FLEXRAM) and AXISRAM2, 1 MB each
    # and adjacent, and AHBSRAM1/2. AXISRAM3-6 (4 x 448 KB at 0x3420_0000, the NPU's RAMs) are powered
    # down at reset and not counted: an application that enables them through RAMCFG has 1.75 MB more
    # after AXISRAM2.
    "stm32n6570-dk": Board(
        name="stm32n6570-dk",
        mcu="STM32N657X0H3Q",
        core="cortex-m55",
        clock_hz=800_000_000,
        flash_bytes=128 * MB,
        sram_regions=(
            MemoryRegion("AXISRAM1", 0x3400_0000, 1024 * KB),
            MemoryRegion("AXISRAM2", 0x3410_0000, 1024 * KB),
            MemoryRegion("AHBSRAM1+2", 0x3800_0000, 32 * KB),
        ),
        bootloader_bytes=1 * MB + 1 * KB,
    ),
}

_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMG]?I?B?)?\s*$", re.IGNORECASE)
_UNITS = {
    "": 1,
    "B": 1,
    "K": KB,
    "KB": KB,
    "KIB": KB,
    "M": MB,
    "MB": MB,
    "MIB": MB,
    "G": 1024 * MB,
    "GB": 1024 * MB,
    "GIB": 1024 * MB,
}


def parse_size(text: str | int, *, what: str = "size") -> int:
    """'512KB', '2MB', '1.5M', '327680' → bytes (binary units: 1 KB = 1024 B, as MCU datasheets use)."""
    if isinstance(text, int):
        value = text
    else:
        match = _SIZE_RE.match(str(text))
        unit = (match.group(2) or "").upper() if match else None
        if not match or unit not in _UNITS:
            raise UserError(f"{what}: cannot read {text!r} as a size (examples: 512KB, 2MB, 327680)")
        value = int(float(match.group(1)) * _UNITS[unit])
    if value <= 0:
        raise UserError(f"{what}: must be positive, got {text!r}")
    return value


def get_board(name: str) -> Board:
    try:
        return BOARDS[name.lower()]
    except KeyError:
        raise UserError(
            f"unknown board {name!r} (choose from: {', '.join(BOARDS)}, or give --sram and --flash for any other MCU)"
        ) from None


def custom_board(sram: str | int, flash: str | int) -> Board:
    """A board known only by its sizes: one contiguous SRAM region and its Flash."""
    sram_bytes = parse_size(sram, what="--sram")
    flash_bytes = parse_size(flash, what="--flash")
    return Board(
        name="custom",
        mcu="custom",
        core="cortex-m7",
        clock_hz=216_000_000,
        flash_bytes=flash_bytes,
        sram_regions=(MemoryRegion("SRAM", 0x2000_0000, sram_bytes),),
    )


@dataclasses.dataclass(frozen=True)
class FitReport:
    """Whether a model's arena and Flash image fit a board, and by how much they miss."""

    arena_bytes: int
    arena_budget: int
    flash_bytes: int
    flash_budget: int
    sram_reserve: int
    flash_reserve: int
    region: str

    @property
    def sram_ok(self) -> bool:
        return self.arena_bytes <= self.arena_budget

    @property
    def flash_ok(self) -> bool:
        return self.flash_bytes <= self.flash_budget

    @property
    def ok(self) -> bool:
        return self.sram_ok and self.flash_ok

    def to_json(self) -> dict:
        return {
            "ok": self.ok,
            "sram": {
                "ok": self.sram_ok,
                "arena_bytes": self.arena_bytes,
                "budget_bytes": self.arena_budget,
                "region": self.region,
                "reserve_bytes": self.sram_reserve,
                "miss_bytes": max(0, self.arena_bytes - self.arena_budget),
            },
            "flash": {
                "ok": self.flash_ok,
                "model_bytes": self.flash_bytes,
                "budget_bytes": self.flash_budget,
                "code_reserve_bytes": self.flash_reserve,
                "miss_bytes": max(0, self.flash_bytes - self.flash_budget),
            },
        }


def check_fit(
    board: Board,
    *,
    arena_bytes: int,
    flash_bytes: int,
    sram_reserve: int = DEFAULT_SRAM_RESERVE,
    flash_reserve: int = DEFAULT_FLASH_RESERVE,
) -> FitReport:
    region = board.largest_contiguous_sram
    return FitReport(
        arena_bytes=arena_bytes,
        arena_budget=board.arena_budget(sram_reserve),
        flash_bytes=flash_bytes,
        flash_budget=board.flash_budget(flash_reserve),
        sram_reserve=sram_reserve,
        flash_reserve=flash_reserve,
        region=region.name,
    )


def human_bytes(n: int) -> str:
    if n >= MB:
        return f"{n / MB:.2f} MB"
    if n >= KB:
        return f"{n / KB:.1f} KB"
    return f"{n} B"
