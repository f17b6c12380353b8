"""`export --bundle`: the self-contained projects written next to an export's files, for either model
kind. A kind says what it puts in each (`BundleKind`); the writing is one path for both."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from tflm_mcubert.errors import UserError
from tflm_mcubert.firmware import arduino_library, cmake_bundle
from tflm_mcubert.kernel_sources import custom_ops_dir

BUNDLES = ("arduino", "cmake")


def check_names(names: tuple[str, ...]) -> None:
    unknown = [name for name in names if name not in BUNDLES]
    if unknown:
        raise UserError(f"--bundle {unknown[0]!r} is not available (choose from: {', '.join(BUNDLES)})")


@dataclasses.dataclass(frozen=True)
class BundleKind:
    """What one model kind puts in the CMake project and in the Arduino library."""

    cmake: cmake_bundle.BundleContents
    arduino: arduino_library.LibraryContents


ENCODER = BundleKind(cmake_bundle.ENCODER_BUNDLE, arduino_library.ENCODER_LIBRARY)
DECODER = BundleKind(cmake_bundle.DECODER_BUNDLE, arduino_library.DECODER_LIBRARY)


def known_files(bundles: tuple[str, ...], kind: BundleKind) -> list[str]:
    """The bundles' files known before the export runs: a user's file of the same name is refused first."""
    return cmake_bundle.known_bundle_files(kind.cmake) if "cmake" in bundles else []


def write_bundles(out_dir: Path, bundles: tuple[str, ...], model: str, summary: str, kind: BundleKind) -> list[str]:
    """Write the asked-for bundles into `out_dir` (the export's staging folder); the names report.json lists."""
    written = []
    if "cmake" in bundles:
        cmake_bundle.write_cmake_bundle(out_dir, summary, kind.cmake)
        written.append(f"{cmake_bundle.BUNDLE_DIR}/")
    if "arduino" in bundles:
        library = arduino_library.library_name(model)
        zip_path = arduino_library.write_arduino_bundle(out_dir, custom_ops_dir(), library, summary, kind.arduino)
        written.append(zip_path.name)
    return written
