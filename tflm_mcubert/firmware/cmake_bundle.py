"""`export --bundle cmake`: OUT/cmake/, a self-contained CMake project with the library target
`mcubert_model` — the kernels and their TFLM binding (a copy of custom_ops/, whose own
CMakeLists.txt describes them), this export's model data and settings, and an example: an encoder's
main.cpp (its test input through the interpreter), a decoder's mcubert_generate.cc (greedy generation).

A TFLM CMake build takes it with add_subdirectory; nothing else from this package is needed.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

from tflm_mcubert.firmware import decoder_firmware
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
BUNDLE_PARTS = ("CMakeLists.txt", "main.cpp", decoder_firmware.GENERATE_FILE, "model/", "custom_ops/")


@dataclasses.dataclass(frozen=True)
class BundleContents:
    """What a model kind puts in the bundle: the export's files copied into model/ (the .cc among them are
    the library's sources; `optional` ones only when the export wrote them) and the example application,
    written from `example_template`, or without one copied from the export."""

    model_files: tuple[str, ...]
    example: str
    example_template: str | None = None
    optional: tuple[str, ...] = ()

    def present(self, export_dir: Path) -> list[str]:
        """The model files this export has: every required one, and the optional ones it wrote."""
        return [*self.model_files, *(n for n in self.optional if (Path(export_dir) / n).is_file())]


ENCODER_BUNDLE = BundleContents(MODEL_FILES, "main.cpp", example_template="cmake_bundle_main.cpp.tmpl")
# A decoder's: its settings and generation loop, and the BPE blob's C array when the checkpoint has a tokenizer.
DECODER_BUNDLE = BundleContents(
    ("model_data.cc", "model_data.h", decoder_firmware.SETTINGS_FILE),
    decoder_firmware.GENERATE_FILE,
    optional=("model_vocab.cc", "model_vocab.h"),
)


def known_bundle_files(contents: BundleContents = ENCODER_BUNDLE) -> list[str]:
    """The bundle's files (relative to the export) that are known before it is written: where a user's
    file of the same name is refused before the export does its work."""
    names = ("CMakeLists.txt", contents.example, *(f"model/{n}" for n in contents.model_files))
    return [f"{BUNDLE_DIR}/{name}" for name in names]


def write_cmake_bundle(export_dir: Path, summary: str, contents: BundleContents = ENCODER_BUNDLE) -> Path:
    """Write `export_dir`/cmake/ from the export's files (into the export's fresh staging folder: an earlier
    bundle's files are replaced, and the user's kept, by export/export_folder.py); returns the folder."""
    out = Path(export_dir) / BUNDLE_DIR
    (out / "model").mkdir(parents=True)
    names = contents.present(export_dir)
    for name in names:
        shutil.copyfile(Path(export_dir) / name, out / "model" / name)
    source = custom_ops_dir()
    (out / "custom_ops").mkdir()
    for part in KERNEL_PARTS:
        if (source / part).is_dir():
            shutil.copytree(source / part, out / "custom_ops" / part, ignore=_LEFT_OUT)
        else:
            shutil.copyfile(source / part, out / "custom_ops" / part)
    sources = " ".join(f"model/{name}" for name in names if name.endswith(".cc"))
    (out / "CMakeLists.txt").write_text(
        fill("cmake_bundle_CMakeLists.txt.tmpl", summary=summary, sources=sources, example=contents.example)
    )
    if contents.example_template:
        (out / contents.example).write_text(fill(contents.example_template, summary=summary))
    else:
        shutil.copyfile(Path(export_dir) / contents.example, out / contents.example)
    return out
