"""Building custom_ops/ for the kernel tests (shared by conftest.py and the test modules): the package's
one build (tflm_mcubert/measure/kernel_build.py), warnings as errors."""

from __future__ import annotations

import functools
import shutil
import subprocess
from pathlib import Path

import pytest

from tflm_mcubert.measure import kernel_build

CUSTOM_OPS = Path(__file__).resolve().parents[2] / "custom_ops"


def build(build_dir: Path, cpu: str, *targets: str, path: str = "dsp", defines=None) -> kernel_build.KernelBuild:
    """`targets` of the host ("host") or of one Cortex-M core (`path`: dsp, plain or noasm) in
    build_dir/<variant>/, with -Werror."""
    variant = kernel_build.Variant(cpu, path=path, werror=True)
    return kernel_build.build(variant, build_dir, *targets, defines=defines)


def need_tool(tool: str, why: str):
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} not found ({why})")


def need_arm_toolchain():
    need_tool("cmake", "the kernels build with custom_ops/CMakeLists.txt")
    need_tool("arm-none-eabi-gcc", "Cortex-M builds; apt-get install gcc-arm-none-eabi libnewlib-arm-none-eabi")


@functools.lru_cache(maxsize=None)
def _compiler_knows(cpu: str) -> bool:
    probe = ["arm-none-eabi-gcc", f"-mcpu={cpu}", "-mthumb", "-E", "-x", "c", "-"]
    return subprocess.run(probe, input="", capture_output=True, text=True).returncode == 0


def need_arm_cpu(cpu: str):
    """need_arm_toolchain(), and a compiler that knows `cpu` (cortex-m55: GCC 10 or later)."""
    need_arm_toolchain()
    if not _compiler_knows(cpu):
        pytest.skip(f"this arm-none-eabi-gcc does not know -mcpu={cpu}")
