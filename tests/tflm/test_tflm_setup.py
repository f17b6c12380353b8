"""Checks made before anything is built against a user's TFLM (no TFLM needed)."""

import sys

import pytest

from tflm_mcubert.runtime.tflm_binding import (
    FLATBUFFERS_VERSION,
    TflmSetupError,
    TflmSources,
    find_python313,
    flatbuffers_version,
)


def fake_checkout(root, flatbuffers=(25, 9, 23), gemmlowp=True):
    for relative in ("tensorflow/lite/micro/micro_interpreter.h", "python/tflite_micro/python_ops_resolver.h"):
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text("")
    downloads = root / "tensorflow/lite/micro/tools/make/downloads"
    base = downloads / "flatbuffers/include/flatbuffers/base.h"
    base.parent.mkdir(parents=True)
    major, minor, revision = flatbuffers
    base.write_text(
        f"#define FLATBUFFERS_VERSION_MAJOR {major}\n#define FLATBUFFERS_VERSION_MINOR {minor}\n"
        f"#define FLATBUFFERS_VERSION_REVISION {revision}\n"
    )
    if gemmlowp:
        (downloads / "gemmlowp/fixedpoint").mkdir(parents=True)
        (downloads / "gemmlowp/fixedpoint/fixedpoint.h").write_text("")
    return root


def test_no_tflm_dir_means_no_sources():
    assert TflmSources.from_environment({}) is None


def test_a_checkout_with_its_downloads_is_accepted(tmp_path):
    sources = TflmSources.from_environment({"TFLM_DIR": str(fake_checkout(tmp_path))})
    assert sources.flatbuffers_include.name == "include" and sources.gemmlowp_dir.name == "gemmlowp"
    assert flatbuffers_version(sources.flatbuffers_include / "flatbuffers/base.h") == FLATBUFFERS_VERSION


def test_a_folder_that_is_not_tflm_is_named(tmp_path):
    with pytest.raises(
        TflmSetupError, match=r"is not a tflite-micro checkout \(no tensorflow/lite/micro/micro_interpreter.h\)"
    ):
        TflmSources.from_environment({"TFLM_DIR": str(tmp_path)})


def test_flatbuffers_of_another_version_are_refused_naming_both(tmp_path):
    fake_checkout(tmp_path, flatbuffers=(23, 5, 26))  # Debian's libflatbuffers-dev
    with pytest.raises(TflmSetupError, match=r"are v23\.5\.26; TFLM 90b983c pins v25\.9\.23"):
        TflmSources.from_environment({"TFLM_DIR": str(tmp_path)})


def test_overrides_and_missing_gemmlowp(tmp_path):
    fake_checkout(tmp_path, gemmlowp=False)
    with pytest.raises(TflmSetupError, match="no gemmlowp at .*set GEMMLOWP_DIR"):
        TflmSources.from_environment({"TFLM_DIR": str(tmp_path)})
    with pytest.raises(TflmSetupError, match="no flatbuffers headers at .*nowhere"):
        TflmSources.from_environment({"TFLM_DIR": str(tmp_path), "FLATBUFFERS_INCLUDE": str(tmp_path / "nowhere")})


def test_tflm_python_must_be_3_13():
    if sys.version_info[:2] == (3, 13):
        pytest.skip("this interpreter is 3.13")
    with pytest.raises(TflmSetupError, match="is not a working Python 3.13"):
        find_python313({"TFLM_PYTHON": sys.executable})
