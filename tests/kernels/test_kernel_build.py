"""tflm_mcubert/measure/kernel_build.py, the one build of the kernels: variants and their folders and
cache entries, the reason a machine cannot build one, and a cache folder per source revision."""

from __future__ import annotations

import shutil

import pytest

from tflm_mcubert.measure import kernel_build
from tflm_mcubert.measure.kernel_build import KernelBuildError, Variant


def test_variants_name_their_folders_and_cache_entries():
    assert [Variant(c, path=p).name for c, p in (("host", "dsp"), ("cortex-m7", "dsp"), ("cortex-m7", "plain"))] == [
        "host",
        "cortex-m7",
        "cortex-m7-plain",
    ]
    assert Variant("cortex-m4", path="noasm", float_abi="soft").name == "cortex-m4-noasm-soft"
    arm = Variant("cortex-m33", path="plain", werror=True).cache_entries()
    assert arm["MCUBERT_CPU"] == "cortex-m33" and arm["MCUBERT_KERNEL_PATH"] == "plain"
    assert arm["MCUBERT_WERROR"] == "ON" and arm["CMAKE_TOOLCHAIN_FILE"].endswith(
        "custom_ops/cmake/arm-none-eabi.cmake"
    )
    assert arm["CMAKE_C_FLAGS"] == "" and arm["CMAKE_BUILD_TYPE"] == ""  # the build's own flags only
    assert "CMAKE_TOOLCHAIN_FILE" not in Variant().cache_entries()
    with pytest.raises(ValueError):
        Variant("cortex-m85")
    with pytest.raises(ValueError):
        Variant("cortex-m7", path="fast")


def test_a_missing_tool_is_named_with_how_to_install_it(monkeypatch):
    monkeypatch.setattr(kernel_build.shutil, "which", lambda tool: None if tool == "arm-none-eabi-gcc" else tool)
    assert kernel_build.missing_tools(Variant()) is None
    reason = kernel_build.missing_tools(Variant("cortex-m7"))
    assert reason.startswith("arm-none-eabi-gcc not found") and "gcc-arm-none-eabi" in reason
    with pytest.raises(KernelBuildError, match="cannot build the kernels for cortex-m7: arm-none-eabi-gcc"):
        kernel_build.build(Variant("cortex-m7"), "/nonexistent", "mcubert_emu")


def test_the_cache_folder_follows_the_sources(monkeypatch, tmp_path):
    source = tmp_path / "custom_ops"
    (source / "src").mkdir(parents=True)
    (source / "src" / "k.c").write_text("int k;\n")
    (source / "CMakeLists.txt").write_text("project(x)\n")
    monkeypatch.setattr(kernel_build, "custom_ops_dir", lambda: source)
    first = kernel_build.sources_digest()
    (source / "build" / "CMakeFiles").mkdir(parents=True)
    (source / "build" / "CMakeFiles" / "id.c").write_text("int id;\n")  # build output: not a source
    (source / "notes.txt").write_text("not read by the build\n")
    assert kernel_build.sources_digest() == first
    (source / "src" / "k.c").write_text("int k2;\n")
    changed = kernel_build.sources_digest()
    assert changed != first
    other = tmp_path / "another checkout" / "custom_ops"
    shutil.copytree(source, other)
    monkeypatch.setattr(kernel_build, "custom_ops_dir", lambda: other)
    assert kernel_build.sources_digest() != changed  # a CMake build folder serves one source folder
