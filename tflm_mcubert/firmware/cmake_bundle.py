"""`export --bundle cmake`: OUT/cmake/, a self-contained CMake project with the library target
`mcubert_model` — the kernels and their TFLM binding (a copy of custom_ops/, whose own
CMakeLists.txt describes them), this export's model data and settings, and an example (main.cpp).

A TFLM CMake build takes it with add_subdirectory; nothing else from this package is needed.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tflm_mcubert.firmware.firmware_files import SETTINGS_FILE, TEST_INPUT_HEADER, TEST_INPUT_SOURCE
from tflm_mcubert.firmware.template import fill
from tflm_mcubert.kernel_sources import custom_ops_dir

BUNDLE_DIR = "cmake"
MODEL_FILES = ("model_data.cc", "model_data.h", SETTINGS_FILE, TEST_INPUT_SOURCE, TEST_INPUT_HEADER)
# What a build of the kernels and the binding needs from custom_ops/ (the Python registerer and the
# standalone build's test harnesses stay behind).
KERNEL_PARTS = ("CMakeLists.txt", "include", "src", "tflm")
_LEFT_OUT = shutil.ignore_patterns("python", "build", "__pycache__")
# What the bundle writes in its folder (custom_ops/: KERNEL_PARTS as they are in the package).
BUNDLE_PARTS = ("CMakeLists.txt", "main.cpp", "model/", "custom_ops/")


def known_bundle_files() -> list[str]:
    """The bundle's files (relative to the export) that are known before it is written: where a user's
    file of the same name is refused before the export does its work."""
    return [f"{BUNDLE_DIR}/{name}" for name in (*BUNDLE_PARTS[:2], *(f"model/{n}" for n in MODEL_FILES))]


def write_cmake_bundle(export_dir: Path, summary: str) -> Path:
    """Write `export_dir`/cmake/ from the export's files (into the export's fresh staging folder: an earlier
    bundle's files are replaced, and the user's kept, by export/export_folder.py); returns the folder."""
    out = Path(export_dir) / BUNDLE_DIR
    (out / "model").mkdir(parents=True)
    for name in MODEL_FILES:
        shutil.copyfile(Path(export_dir) / name, out / "model" / name)
    source = custom_ops_dir()
    (out / "custom_ops").mkdir()
    for part in KERNEL_PARTS:
        if (source / part).is_dir():
            shutil.copytree(source / part, out / "custom_ops" / part, ignore=_LEFT_OUT)
        else:
            shutil.copyfile(source / part, out / "custom_ops" / part)
    (out / "CMakeLists.txt").write_text(fill("cmake_bundle_CMakeLists.txt.tmpl", summary=summary))
    (out / "main.cpp").write_text(fill("cmake_bundle_main.cpp.tmpl", summary=summary))
    return out
