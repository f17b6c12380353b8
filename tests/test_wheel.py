"""The wheel carries the kernels: built from this checkout, installed outside it (not editable), it
has custom_ops/ byte for byte, builds the kernels with their CMake project, and exports a model.

The wheel is installed with `pip install --no-deps --target` and run with this environment's
dependencies (PYTHONPATH first), from a directory outside the checkout, so nothing of the
checkout can stand in for what the wheel lacks.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def tracked(folder: str) -> dict[str, bytes]:
    names = subprocess.run(["git", "ls-files", "-z", folder], cwd=REPO, capture_output=True, text=True)
    if names.returncode != 0:
        pytest.skip("not a git checkout")
    return {name: (REPO / name).read_bytes() for name in names.stdout.split("\0") if name}


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, Path]:
    """The wheel, built and installed into a folder outside the checkout: (wheel, install folder)."""
    out = tmp_path_factory.mktemp("wheel")
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(REPO)],
        capture_output=True,
        text=True,
    )
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    shutil.rmtree(REPO / "build", ignore_errors=True)  # setuptools' staging folder
    (wheel,) = out.glob("tflm_mcubert-*.whl")
    target = tmp_path_factory.mktemp("site")
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)],
        capture_output=True,
        text=True,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    return wheel, target


def run_installed(target: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(target)}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=900)


def test_the_wheel_carries_custom_ops_byte_for_byte(installed):
    wheel, _ = installed
    with zipfile.ZipFile(wheel) as archive:
        packaged = {
            name.removeprefix("tflm_mcubert/"): archive.read(name)
            for name in archive.namelist()
            if name.startswith("tflm_mcubert/custom_ops/")
        }
    sources = tracked("custom_ops")
    assert packaged == sources


def test_installed_package_finds_and_builds_its_kernels(installed, tmp_path):
    _, target = installed
    found = run_installed(target, tmp_path, "-c", "import tflm_mcubert.kernel_sources as k; print(k.custom_ops_dir())")
    assert found.returncode == 0, found.stderr
    custom_ops = Path(found.stdout.strip())
    assert custom_ops == target / "tflm_mcubert" / "custom_ops"
    if shutil.which("cmake") is None:
        pytest.skip("cmake is not installed (Debian: cmake)")
    # The one kernel build (measure/kernel_build.py), as export's measurements and the tests use it.
    code = (
        "import sys\nfrom tflm_mcubert.measure import kernel_build as k\n"
        "print(k.build(k.Variant(), sys.argv[1]).library)"
    )
    built = run_installed(target, tmp_path, "-c", code, str(tmp_path / "build"))
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    assert Path(built.stdout.strip()).is_file()


def test_installed_package_exports(installed, tmp_path):
    _, target = installed
    out = tmp_path / "out"
    result = run_installed(
        target,
        tmp_path,
        "-m",
        "tflm_mcubert",
        "export",
        "--seq-len",
        "32",
        "--bundle",
        "arduino",
        "--bundle",
        "cmake",
        "--out",
        str(out),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    names = ("model.tflite", "model_data.cc", "model_settings.h", "FIRMWARE.md", "report.json")
    for name in (*names, "bert_tiny_mcubert.zip", "cmake/CMakeLists.txt", "cmake/custom_ops/src/mcubert_mlp_s8.c"):
        assert (out / name).is_file(), name
