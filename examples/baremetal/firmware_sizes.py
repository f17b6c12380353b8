"""Build a firmware of examples/baremetal for every board and tabulate its Flash and SRAM use.

    python examples/baremetal/firmware_sizes.py --layer-data DIR [--build-dir DIR] [--rp2040-boot2 FILE]

builds `mcubert_layer_check` (layer_data.c/.h from `python -m tflm_mcubert.firmware.layer_check`) with each
board's linker script (the Pico only when given the Pico SDK's boot stage 2), reads `arm-none-eabi-size`
(Berkeley: text, data, bss) and compares them with the board's memory as its linker script declares it:
text + data against the Flash region, data + bss against the SRAM regions the script puts .data/.bss and
the arena in. The linker script parser here
is also what tests/firmware/test_baremetal.py uses to check the scripts against tflm_mcubert/boards.py.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import subprocess
import sys
from pathlib import Path

BAREMETAL = Path(__file__).resolve().parent
BOARDS_DIR = BAREMETAL / "boards"
TOOLCHAIN_FILE = BAREMETAL / "cmake" / "arm-none-eabi.cmake"
NUCLEO_BOARDS = ("nucleo-f746zg", "nucleo-f767zi", "nucleo-h7a3zi-q")
BOARDS = NUCLEO_BOARDS + ("nano33ble", "pico", "pico2", "stm32n6570-dk")
# Where each board's Flash starts in its address map (the application's part may start later:
# boards.py's bootloader_bytes).
FLASH_ORIGIN = {
    **dict.fromkeys(NUCLEO_BOARDS, 0x0800_0000),
    "nano33ble": 0x0,
    "pico": 0x1000_0000,
    "pico2": 0x1000_0000,
    "stm32n6570-dk": 0x7000_0000,  # the external NOR on XSPI2
}

_REGION = re.compile(
    r"^\s*(\w+)\s*\([rwx]+\)\s*:\s*ORIGIN\s*=\s*(0x[0-9A-Fa-f]+|\d+)\s*,\s*LENGTH\s*=\s*(\d+)([KM]?)", re.MULTILINE
)
_ALIAS = re.compile(r'REGION_ALIAS\("(\w+)",\s*(\w+)\)')
_UNITS = {"": 1, "K": 1024, "M": 1024 * 1024}


@dataclasses.dataclass(frozen=True)
class LinkerMemory:
    regions: dict[str, tuple[int, int]]  # name -> (origin, length)
    aliases: dict[str, str]  # REGION_TEXT / REGION_DATA / REGION_ARENA -> region name

    def region(self, alias: str) -> tuple[int, int]:
        return self.regions[self.aliases[alias]]


def linker_memory(script: Path) -> LinkerMemory:
    """The MEMORY regions and REGION_ALIAS lines of a board linker script."""
    text = re.sub(r"/\*.*?\*/", "", Path(script).read_text(), flags=re.DOTALL)
    regions = {
        name: (int(origin, 0), int(length) * _UNITS[unit]) for name, origin, length, unit in _REGION.findall(text)
    }
    aliases = dict(_ALIAS.findall(text))
    if not regions or not aliases:
        raise ValueError(f"{script}: no MEMORY regions or REGION_ALIAS lines found")
    return LinkerMemory(regions, aliases)


@dataclasses.dataclass(frozen=True)
class BoardSize:
    board: str
    text: int
    data: int
    bss: int
    flash_bytes: int  # the script's REGION_TEXT
    sram_bytes: int  # the script's REGION_DATA plus REGION_ARENA (one region on the F7 parts)

    @property
    def flash_used(self) -> int:
        return self.text + self.data

    @property
    def sram_used(self) -> int:
        return self.data + self.bss

    @property
    def fits(self) -> bool:
        return self.flash_used <= self.flash_bytes and self.sram_used <= self.sram_bytes


def build(
    board: str,
    build_dir: Path,
    *,
    layer_data: Path | None = None,
    target: str = "mcubert_layer_check",
    cmake_args: tuple[str, ...] = (),
) -> Path:
    """Configure and build `target` for `board`; returns the ELF. Raises RuntimeError with CMake's output."""
    configure = [
        "cmake",
        "-S",
        str(BAREMETAL),
        "-B",
        str(build_dir),
        "-G",
        "Ninja",
        f"-DCMAKE_TOOLCHAIN_FILE={TOOLCHAIN_FILE}",
        f"-DMCUBERT_BOARD={board}",
        *cmake_args,
    ]
    if layer_data is not None:
        configure.append(f"-DMCUBERT_LAYER_DATA_DIR={Path(layer_data).resolve()}")
    for command in (configure, ["cmake", "--build", str(build_dir), "--target", target]):
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}")
    return Path(build_dir) / f"{target}.elf"


def berkeley_size(elf: Path) -> tuple[int, int, int]:
    """(text, data, bss) of `arm-none-eabi-size` in its default (Berkeley) format."""
    out = subprocess.run(["arm-none-eabi-size", str(elf)], capture_output=True, text=True, check=True).stdout
    text, data, bss = out.splitlines()[1].split()[:3]
    return int(text), int(data), int(bss)


def board_size(board: str, elf: Path) -> BoardSize:
    memory = linker_memory(BOARDS_DIR / f"{board}.ld")
    sram = {memory.aliases["REGION_DATA"], memory.aliases["REGION_ARENA"]}
    return BoardSize(
        board,
        *berkeley_size(elf),
        flash_bytes=memory.region("REGION_TEXT")[1],
        sram_bytes=sum(memory.regions[name][1] for name in sram),
    )


def size_table(layer_data: Path, work_dir: Path, boards=BOARDS, rp2040_boot2: Path | None = None) -> list[BoardSize]:
    """Build mcubert_layer_check for each board under `work_dir` and measure it (the Pico needs a boot stage 2)."""
    rows = []
    for board in boards:
        if board == "pico" and rp2040_boot2 is None:
            continue
        extra = (f"-DMCUBERT_RP2040_BOOT2={Path(rp2040_boot2).resolve()}",) if board == "pico" else ()
        rows.append(board_size(board, build(board, Path(work_dir) / board, layer_data=layer_data, cmake_args=extra)))
    return rows


def format_table(rows: list[BoardSize]) -> str:
    lines = [
        "| board | text | data | bss | Flash used / region | SRAM used / regions | fits |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.board} | {r.text:,} | {r.data:,} | {r.bss:,} | {r.flash_used:,} / {r.flash_bytes:,} "
            f"({100 * r.flash_used / r.flash_bytes:.1f}%) | {r.sram_used:,} / {r.sram_bytes:,} "
            f"({100 * r.sram_used / r.sram_bytes:.1f}%) | {'yes' if r.fits else 'NO'} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layer-data", required=True, type=Path, help="directory of layer_data.c/.h")
    parser.add_argument("--build-dir", type=Path, default=Path("build/firmware-sizes"))
    parser.add_argument(
        "--rp2040-boot2", type=Path, default=None, help="the Pico SDK's bs2_default_padded_checksummed.S (else no Pico)"
    )
    args = parser.parse_args(argv)
    try:
        rows = size_table(args.layer_data, args.build_dir, rp2040_boot2=args.rp2040_boot2)
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(format_table(rows))
    return 0 if all(r.fits for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
