"""What the firmware benchmarks share: examples/baremetal/firmware_sizes.py (its build()) and the memory map
of the emulator-only `emulator-m7` board they run under unicorn (16 MiB of "Flash" at 0, 16 MiB of SRAM)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

if "firmware_sizes" not in sys.modules:
    _spec = importlib.util.spec_from_file_location(
        "firmware_sizes", ROOT / "examples" / "baremetal" / "firmware_sizes.py"
    )
    _module = importlib.util.module_from_spec(_spec)
    sys.modules["firmware_sizes"] = _module  # dataclasses look their module up there
    _spec.loader.exec_module(_module)
firmware_sizes = sys.modules["firmware_sizes"]

EMULATOR_REGIONS = [(0x0000_0000, 16 << 20), (0x2000_0000, 16 << 20)]
