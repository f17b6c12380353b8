"""Builds of custom_ops/ for the kernel tests, made once per session into a temporary directory.

Host tests need gcc (with libasan/libubsan); Cortex-M tests need arm-none-eabi-gcc with newlib
(Debian: gcc-arm-none-eabi, libnewlib-arm-none-eabi) and the `unicorn` Python package; firmware
tests need qemu-system-arm (Debian: qemu-system-arm). Each skips with the reason when its tool is
missing.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # kernel_cases.py, kernel_host.py, kernel_golden.py

from kernel_build import build, need_arm_toolchain, need_tool  # noqa: E402,F401 (re-exported)
from kernel_host import HostRunner  # noqa: E402


@pytest.fixture(scope="session")
def build_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("custom_ops_build")


@pytest.fixture(scope="session")
def host_runners(build_dir):
    """{"plain": HostRunner, "dsp": HostRunner}: ASan/UBSan drivers of both kernel paths."""
    need_tool("gcc", "host kernel tests")
    need_tool("cmake", "the kernels build with custom_ops/CMakeLists.txt")
    host = build(build_dir, "host", "mcubert_runner_plain", "mcubert_runner_emulate")
    runners = {
        variant: HostRunner(host.image(f"mcubert_runner_{dsp}"))
        for variant, dsp in (("plain", "plain"), ("dsp", "emulate"))
    }
    yield runners
    for runner in runners.values():
        runner.close()


@pytest.fixture(params=["plain", "dsp"])
def runner(request, host_runners) -> HostRunner:
    """Each host test runs on the plain C path and on the DSP path (emulated intrinsics)."""
    return host_runners[request.param]


@pytest.fixture(scope="session")
def host_library(build_dir) -> Path:
    need_tool("gcc", "host library")
    need_tool("cmake", "the kernels build with custom_ops/CMakeLists.txt")
    return build(build_dir, "host", "mcubert_shared").shared_library


@pytest.fixture(scope="session")
def arm_images(build_dir):
    """Factory: arm_images(cpu, plain=False, asm=True) -> path of mcubert_emu.elf (built once).
    plain: the portable C path (MCUBERT_FORCE_PLAIN); asm=False: the DSP path with the C
    version of the micro-kernel instead of the Thumb-2 assembly (MCUBERT_DSP_NO_ASM)."""
    need_arm_toolchain()
    built: dict[tuple[str, bool, bool], Path] = {}

    def get(cpu: str, plain: bool = False, asm: bool = True) -> Path:
        key = (cpu, plain, asm)
        if key not in built:
            path = "plain" if plain else ("dsp" if asm else "noasm")
            built[key] = build(build_dir, cpu, "mcubert_emu", path=path).image("mcubert_emu")
        return built[key]

    return get


# The builds every op's unicorn test runs: the DSP path as the M7 and the M4 build it, and the M7's plain path.
CORE_BUILDS = [("cortex-m7", False), ("cortex-m4", False), ("cortex-m7", True)]


@pytest.fixture(scope="module", params=CORE_BUILDS, ids=["m7-dsp", "m4-dsp", "m7-plain"])
def emulator(request, arm_images):
    """An op's kernels on one of CORE_BUILDS under unicorn (a test module may define its own `emulator`)."""
    pytest.importorskip("unicorn", reason="the `unicorn` package runs the Cortex-M tests")
    from tflm_mcubert.measure.arm_emulator import ArmEmulator

    cpu, plain = request.param
    return ArmEmulator(arm_images(cpu, plain), cpu)
