"""The op-run fuzz harness's inputs on every kernel path: its seed corpus and seeded random inputs through
tests/fuzz/harnesses/fuzz_op_run.c (options, shapes and constants derived from the bytes, hostile run-time
inputs and saturated activations among them) on the host's plain C path, and under QEMU on the Cortex-M7's
DSP path and the Cortex-M55's MVE path: the bytes every kernel writes hash the same, input for input. The
host path is the numpy reference's byte for byte (the golden-case tests), so these inputs are too."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests import qemu

from kernel_build import CUSTOM_OPS, build, need_arm_cpu

ROOT = CUSTOM_OPS.parent
HARNESSES = ROOT / "tests" / "fuzz" / "harnesses"
CORPUS = ROOT / "tests" / "fuzz" / "corpus" / "fuzz_op_run"
RANDOM_INPUTS = 120
HOOK = "-DMCUBERT_FUZZ_OUTPUT_HOOK=mcubert_fuzz_output"
SOURCES = (HARNESSES / "fuzz_op_run.c", HARNESSES / "op_run_inputs_main.c")
CORES = {  # core -> (its QEMU machine, the kernels' path, the linker script of custom_ops' images)
    "cortex-m7": ("mps2-an500", "dsp", "mps2.ld", ["-mfloat-abi=hard", "-mfpu=fpv5-d16"]),
    "cortex-m55": ("mps3-an547", "mve", "an547.ld", ["-mfloat-abi=hard", "-mfpu=auto"]),
}


def inputs() -> list[bytes]:
    """The committed seeds, then random inputs of every op and flag (the first two bytes pick them)."""
    rng = np.random.default_rng(2026)
    seeds = [path.read_bytes() for path in sorted(CORPUS.glob("*.bin"))]
    random = [
        bytes([k % 4, (k // 4) % 8]) + rng.integers(0, 256, int(rng.integers(16, 600)), dtype=np.uint8).tobytes()
        for k in range(RANDOM_INPUTS)
    ]
    return seeds + random


@pytest.fixture(scope="module")
def inputs_source(tmp_path_factory) -> Path:
    data = inputs()
    lines = ["#include <stdint.h>"]
    for i, blob in enumerate(data):
        lines.append(f"static const uint8_t input_{i}[] = {{{', '.join(map(str, blob))}}};")
    lines.append(f"const uint8_t *const fuzz_inputs[] = {{{', '.join(f'input_{i}' for i in range(len(data)))}}};")
    lines.append(f"const uint32_t fuzz_input_sizes[] = {{{', '.join(str(len(b)) for b in data)}}};")
    lines.append(f"const int32_t fuzz_input_count = {len(data)};")
    path = tmp_path_factory.mktemp("op-run-inputs") / "fuzz_inputs.c"
    path.write_text("\n".join(lines) + "\n")
    return path


def output_lines(console: str) -> list[str]:
    lines = [line for line in console.splitlines() if line.startswith("input ")]
    assert lines and "done" in console, console[-2000:]
    return lines


@pytest.fixture(scope="module")
def host_lines(inputs_source, tmp_path_factory) -> list[str]:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no host C compiler (Debian: gcc)")
    binary = tmp_path_factory.mktemp("op-run-host") / "op_run_inputs"
    kernels = sorted(str(p) for p in (CUSTOM_OPS / "src").glob("*.c"))
    include = ["-I", str(CUSTOM_OPS / "include"), "-I", str(CUSTOM_OPS / "src")]
    subprocess.run(
        [compiler, "-std=c99", "-O1", HOOK, *include, "-o", str(binary), *map(str, SOURCES), str(inputs_source)]
        + kernels,
        check=True,
    )
    return output_lines(subprocess.run([str(binary)], capture_output=True, text=True, check=True).stdout)


@pytest.mark.parametrize("cpu", sorted(CORES))
def test_every_input_writes_the_hosts_bytes_under_qemu(inputs_source, host_lines, build_dir, tmp_path, cpu):
    need_arm_cpu(cpu)
    machine, path, script, float_flags = CORES[cpu]
    problem = qemu.missing_machine(machine)
    if problem:
        pytest.skip(problem)
    library = build(build_dir, cpu, "mcubert", path=path).library
    arm = CUSTOM_OPS / "test" / "arm"
    arch = [f"-mcpu={cpu}", "-mthumb", *float_flags]
    include = ["-I", str(CUSTOM_OPS / "include"), "-I", str(CUSTOM_OPS / "src"), "-I", str(arm)]
    elf = tmp_path / "op_run_inputs.elf"
    subprocess.run(
        ["arm-none-eabi-gcc", *arch, "-std=c99", "-O2", HOOK, *include, str(arm / "startup.c"), *map(str, SOURCES)]
        + [str(inputs_source), str(library), "-nostartfiles", f"-T{arm / script}", "--specs=nano.specs"]
        + ["--specs=nosys.specs", "-Wl,--gc-sections", "-o", str(elf)],
        check=True,
    )
    status, console = qemu.run_qemu(elf, machine=machine, timeout=600)
    assert status == 0, console[-2000:]
    assert output_lines(console) == host_lines
    assert len(host_lines) == len(inputs())
