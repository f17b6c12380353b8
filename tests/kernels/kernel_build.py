"""Building custom_ops/ for the kernel tests (shared by conftest.py and the test modules)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

CUSTOM_OPS = Path(__file__).resolve().parents[2] / "custom_ops"


def make(build: Path, *targets_and_vars: str) -> None:
    cmd = ["make", "-C", str(CUSTOM_OPS), f"BUILD={build}", "WERROR=1", "-j2", *targets_and_vars]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}")


def need_tool(tool: str, why: str):
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} not found ({why})")


def need_arm_toolchain():
    need_tool("arm-none-eabi-gcc", "Cortex-M builds; apt-get install gcc-arm-none-eabi libnewlib-arm-none-eabi")
