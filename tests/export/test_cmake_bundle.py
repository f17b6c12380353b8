"""`export --bundle cmake`, and the report's board table.

OUT/cmake/ is a self-contained CMake project (library target mcubert_model: kernels, TFLM binding,
this model) that builds on the host and for Cortex-M7 (DSP path) and Cortex-M0+ (plain path) with
nothing else of this repository; with TFLM_DIR, also its binding and the example application
against the user's TFLM tree."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.cli.cli_helpers import run_cli
from tflm_mcubert.cli import main
from tflm_mcubert.kernel_sources import custom_ops_dir

REPO = Path(__file__).resolve().parents[2]
TOOLCHAIN = REPO / "custom_ops" / "cmake" / "arm-none-eabi.cmake"
ARM_FLAGS = {
    "cortex-m7": "-mcpu=cortex-m7 -mthumb -mfloat-abi=hard -mfpu=fpv5-d16",
    "cortex-m0plus": "-mcpu=cortex-m0plus -mthumb -mfloat-abi=soft",
}


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    if shutil.which("cmake") is None:
        pytest.skip("needs cmake (Debian: cmake); .ci/run installs it")
    out = tmp_path_factory.mktemp("export") / "out"
    assert main(["export", "--seq-len", "32", "--bundle", "cmake", "--out", str(out)]) == 0
    return out


def build(source: Path, build_dir: Path, *options: str) -> None:
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    for command in (
        ["cmake", "-S", str(source), "-B", str(build_dir), *generator, *options],
        ["cmake", "--build", str(build_dir)],
    ):
        result = subprocess.run(command, capture_output=True, text=True)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


def test_the_bundle_holds_the_model_and_a_copy_of_the_kernels(bundle):
    project = bundle / "cmake"
    for name in ("model_data.cc", "model_data.h", "model_settings.h", "model_test_input.cc", "model_test_input.h"):
        assert (project / "model" / name).read_bytes() == (bundle / name).read_bytes(), name
    source = custom_ops_dir()
    copied = sorted(p.relative_to(project / "custom_ops") for p in (project / "custom_ops").rglob("*") if p.is_file())
    expected = sorted(
        p.relative_to(source)
        for part in ("include", "src", "tflm")
        for p in (source / part).rglob("*")
        if p.is_file() and "python" not in p.parts and "__pycache__" not in p.parts
    )
    assert copied == sorted([Path("CMakeLists.txt"), *expected])
    assert "bert-tiny, mcubert schedule, seq 32, nucleo-f746zg" in (project / "CMakeLists.txt").read_text()
    assert "cmake/" in json.loads((bundle / "report.json").read_text())["files"]


def test_the_bundle_builds_on_the_host(bundle, tmp_path):
    build(bundle / "cmake", tmp_path / "host")
    assert (tmp_path / "host" / "libmcubert_model.a").is_file()


@pytest.mark.parametrize("cpu", sorted(ARM_FLAGS))
def test_the_bundle_builds_for_cortex_m(bundle, tmp_path, cpu):
    if shutil.which("arm-none-eabi-gcc") is None:
        pytest.skip("needs arm-none-eabi-gcc (Debian: gcc-arm-none-eabi)")
    flags = ARM_FLAGS[cpu]
    build(
        bundle / "cmake",
        tmp_path / cpu,
        f"-DCMAKE_TOOLCHAIN_FILE={TOOLCHAIN}",
        *(f"-DCMAKE_{lang}_FLAGS={flags}" for lang in ("C", "CXX", "ASM")),
    )
    library = tmp_path / cpu / "custom_ops" / "libmcubert.a"
    symbols = subprocess.run(["arm-none-eabi-nm", str(library)], capture_output=True, text=True, check=True).stdout
    assert ("mcubert_dsp_4xn_step8" in symbols) == (cpu == "cortex-m7")  # DSP micro-kernel / plain path
    assert (tmp_path / cpu / "libmcubert_model.a").is_file()


@pytest.mark.parametrize("path", ["dsp", "mve"])
def test_on_a_cortex_m55_the_bundle_takes_the_mve_path_when_asked(bundle, tmp_path, path):
    """MCUBERT_KERNEL_PATH=mve before the kernels' CMakeLists.txt: the linear layers' gemm on Helium (VMLADAV);
    by default the kernels keep to the general registers (the DSP path) whatever the project's flags."""
    if shutil.which("arm-none-eabi-gcc") is None:
        pytest.skip("needs arm-none-eabi-gcc (Debian: gcc-arm-none-eabi)")
    flags = "-mcpu=cortex-m55 -mthumb -mfloat-abi=hard"
    options = [f"-DMCUBERT_KERNEL_PATH={path}"] if path == "mve" else []
    build(
        bundle / "cmake",
        tmp_path / path,
        f"-DCMAKE_TOOLCHAIN_FILE={TOOLCHAIN}",
        *(f"-DCMAKE_{lang}_FLAGS={flags}" for lang in ("C", "CXX", "ASM")),
        *options,
    )
    library = tmp_path / path / "custom_ops" / "libmcubert.a"
    code = subprocess.run(
        ["arm-none-eabi-objdump", "-d", "-m", "armv8.1-m.main", str(library)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert bool(re.search(r"\tvml\w*av\w*\.s8\t", code)) == (path == "mve")  # VMLAV/VMLADAV: multiply-add across
    assert "<mcubert_dsp_4xn_step8>:" in code  # the DSP micro-kernel for the rest


@pytest.mark.skipif(
    not os.environ.get("TFLM_DIR"), reason="TFLM_DIR is not set: the binding and the example need a TFLM tree"
)
def test_with_a_tflm_tree_the_binding_and_the_example_build_for_cortex_m7(bundle, tmp_path):
    from tflm_mcubert.runtime.tflm_binding import TflmSources

    if shutil.which("arm-none-eabi-g++") is None:
        pytest.skip("needs arm-none-eabi-g++ (Debian: gcc-arm-none-eabi)")
    sources = TflmSources.from_environment().checked()
    tflm = ";".join(str(d) for d in (sources.tflm_dir, sources.flatbuffers_include, sources.gemmlowp_dir))
    flags = ARM_FLAGS["cortex-m7"]
    build(
        bundle / "cmake",
        tmp_path / "m7",
        f"-DCMAKE_TOOLCHAIN_FILE={TOOLCHAIN}",
        *(f"-DCMAKE_{lang}_FLAGS={flags}" for lang in ("C", "CXX", "ASM")),
        f"-DMCUBERT_TFLM_INCLUDE_DIRS={tflm}",
    )
    assert (tmp_path / "m7" / "custom_ops" / "libmcubert_tflm.a").is_file()
    assert list((tmp_path / "m7").rglob("main.cpp.o*"))


def test_an_unknown_bundle_is_named(tmp_path, capsys):
    code, _, err = run_cli(capsys, "export", "--bundle", "zephyr", "--out", tmp_path / "out")
    assert code == 2 and "--bundle 'zephyr' is not available (choose from: arduino, cmake)" in err


def test_the_report_says_which_boards_the_export_fits(bundle):
    from tflm_mcubert.boards import BOARDS
    from tflm_mcubert.cli.boards import longest_sequence

    report = json.loads((bundle / "report.json").read_text())
    assert set(report["boards"]) == set(BOARDS)
    for name, fit in report["boards"].items():
        assert fit["longest_seq_len"] == longest_sequence(BOARDS[name], "bert-tiny")  # the same default model
        assert fit["arena_fits"] == (fit["longest_seq_len"] >= 32)
        assert fit["flash_fits"] == (report["flash_bytes"] <= BOARDS[name].flash_budget())
