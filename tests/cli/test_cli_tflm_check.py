"""`tflm-check`: an export run in the real TFLM with the MCUBERT ops, compared with the reference."""

import os

import pytest

from .cli_helpers import assert_one_clean_error, run_cli


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    from tflm_mcubert.boards import get_board
    from tflm_mcubert.export.pipeline import ExportRequest, run_export

    out = tmp_path_factory.mktemp("export")
    run_export(ExportRequest(out_dir=out, board=get_board("nucleo-f746zg"), seq_len=64))
    return out


def test_needs_tflm_dir(capsys, exported, monkeypatch):
    monkeypatch.delenv("TFLM_DIR", raising=False)
    code, _, err = run_cli(capsys, "tflm-check", exported)
    assert code == 2
    assert_one_clean_error(err, "TFLM_DIR is not set", "90b983c")


@pytest.mark.parametrize(
    "make_bad, fragments",
    [
        (lambda tmp: tmp / "missing", ["no such model"]),
        (
            lambda tmp: (tmp / "model.tflite").write_bytes(b"TFL3 but not a model") or tmp / "model.tflite",
            ["model.tflite"],
        ),
    ],
)
def test_bad_models_are_named(capsys, tmp_path, make_bad, fragments):
    code, _, err = run_cli(capsys, "tflm-check", make_bad(tmp_path))
    assert code == 2
    assert_one_clean_error(err, *fragments)


@pytest.mark.skipif(not os.environ.get("TFLM_DIR"), reason="TFLM_DIR is not set (a tflite-micro checkout at 90b983c)")
def test_an_export_matches_the_reference_in_real_tflm(capsys, exported, tmp_path, monkeypatch):
    if not os.environ.get("TFLM_PYTHON_ENV"):
        monkeypatch.setenv("TFLM_PYTHON_ENV", str(tmp_path / "env"))
    code, out, err = run_cli(capsys, "tflm-check", exported, "--samples", "2")
    assert code == 0, err
    assert out.count("equal to the reference byte for byte") == 2
    assert "least arena TFLM runs in" in out
