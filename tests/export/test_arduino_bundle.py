"""`export --bundle arduino`: OUT/<model>_mcubert.zip is an Arduino library (specification 1.5) that
"Add .ZIP Library" takes — one top folder with library.properties, src/ (the kernels and binding as
arduino_lib/extras/sync_from_custom_ops.py generates them, plus this model's files as .cpp/.h) and
examples/<name>/<name>.ino — and its sources compile for the Nano 33 BLE's Cortex-M4F and for Cortex-M7."""

from __future__ import annotations

import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from tests.cli.cli_helpers import run_cli
from tests.firmware.arduino_spec import CATEGORIES, SEMVER
from tflm_mcubert.cli import main
from tflm_mcubert.firmware.arduino_library import BUNDLE_GENERATOR, library_sources
from tflm_mcubert.kernel_sources import custom_ops_dir

LIBRARY = "bert_tiny_mcubert"
REQUIRED = ("name", "version", "author", "maintainer", "sentence", "paragraph", "category", "url", "architectures")
CPUS = {  # the Nano 33 BLE (nRF52840) and the NUCLEO boards, with their float ABI
    "cortex-m4": ["-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv4-sp-d16"],
    "cortex-m7": ["-mcpu=cortex-m7", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv5-d16"],
}


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("export") / "out"
    assert main(["export", "--seq-len", "32", "--bundle", "arduino", "--out", str(out)]) == 0
    extracted = tmp_path_factory.mktemp("library")
    with zipfile.ZipFile(out / f"{LIBRARY}.zip") as archive:
        assert {name.split("/")[0] for name in archive.namelist()} == {LIBRARY}
        archive.extractall(extracted)
    return extracted / LIBRARY


def test_the_library_follows_the_specification(bundle):
    fields = dict(
        line.split("=", 1) for line in (bundle / "library.properties").read_text().splitlines() if "=" in line
    )
    assert all(fields.get(key) for key in REQUIRED), fields
    assert fields["name"] == LIBRARY and SEMVER.match(fields["version"])
    assert fields["category"] in CATEGORIES
    assert (bundle / "examples" / LIBRARY / f"{LIBRARY}.ino").is_file()
    sketch = (bundle / "examples" / LIBRARY / f"{LIBRARY}.ino").read_text()
    assert f'"{LIBRARY}: "' in sketch and "#include <mcubert_tflm_arduino.h>" in sketch


def test_src_holds_the_kernels_and_this_model(bundle, tmp_path):
    for rel, data in library_sources(custom_ops_dir(), BUNDLE_GENERATOR).items():
        assert (bundle / rel).read_bytes() == data, rel
    for name in ("model_data.cpp", "model_data.h", "model_settings.h", "model_test_input.cpp", "model_test_input.h"):
        assert (bundle / "src" / name).is_file(), name
    assert not list(bundle.rglob("*.cc"))  # the Arduino builder does not compile .cc


def compile_library(src: Path, cpu: str, cwd: Path, extra_includes: tuple[Path, ...] = ()) -> None:
    """Every .c, .S and .cpp of a library's src/ compiled for `cpu` as the Arduino builder would, warnings as errors."""
    if shutil.which("arm-none-eabi-g++") is None:
        pytest.skip("needs arm-none-eabi-gcc/g++ (Debian: gcc-arm-none-eabi, libstdc++-arm-none-eabi-newlib)")
    includes = [flag for path in (src, *extra_includes) for flag in ("-I", str(path))]
    for source in sorted(p for p in src.rglob("*") if p.suffix in (".c", ".S", ".cpp")):
        compiler = "arm-none-eabi-g++" if source.suffix == ".cpp" else "arm-none-eabi-gcc"
        language = ["-std=gnu++17", "-fno-exceptions", "-fno-rtti"] if source.suffix == ".cpp" else ["-std=gnu11"]
        if source.suffix == ".S":
            language = ["-x", "assembler-with-cpp"]
        result = subprocess.run(
            [compiler, *CPUS[cpu], *language, "-O2", "-Wall", "-Werror", *includes, "-c", str(source)],
            cwd=cwd,
            capture_output=True,
            text=True,
        )
        assert result.returncode == 0, f"{source.name}:\n{result.stderr[-2000:]}"


@pytest.mark.parametrize("cpu", sorted(CPUS))
def test_the_sources_compile_for_the_boards(bundle, tmp_path, cpu):
    compile_library(bundle / "src", cpu, tmp_path)


def test_an_arduino_bundle_needs_the_mcubert_schedule(tmp_path, capsys):
    code, _, err = run_cli(capsys, "export", "--schedule", "stock", "--bundle", "arduino", "--out", tmp_path / "o")
    assert code == 2 and "--bundle arduino packs the MCUBERT ops' sketch: it needs --schedule mcubert" in err
