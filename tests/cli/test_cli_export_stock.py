"""The front door end to end: `export --schedule stock` on the default random BERT-tiny."""

import json

import numpy as np
import pytest

from tflm_mcubert.cli import main
from tflm_mcubert.errors import DoesNotFitError
from tflm_mcubert.runtime.tflm_runner import TflmError, run_tflm

STOCK_ARENA_CEILING = 260_000  # BERT-tiny, seq 128, int8: a careful stock graph needs ~251,488 B


def test_stock_export_arena_is_exact_and_small(capsys, tmp_path):
    out = tmp_path / "tiny128"
    code = main(
        ["export", "--schedule", "stock", "--seq-len", "128", "--sram", "8MB", "--flash", "64MB", "--out", str(out)]
    )
    assert code == 0, capsys.readouterr().err
    report = json.loads((out / "report.json").read_text())
    for key in ("schedule", "board", "seq_len", "precision", "arena_bytes", "flash_bytes", "params", "fits", "ops"):
        assert key in report
    assert report["schedule"] == "stock" and report["seq_len"] == 128 and report["precision"] == "int8"
    assert report["fits"]["ok"] is True
    assert report["params"] == {"embedding": 3_972_864, "total": 4_386_178}
    model = (out / "model.tflite").read_bytes()
    assert report["flash_bytes"] == len(model)
    assert {"name", "bytes"} <= set(report["ops"][0])
    arena = report["arena_bytes"]
    assert arena <= STOCK_ARENA_CEILING

    ids = np.zeros((1, 128), np.int32)
    ids[0, :10] = [101, 2023, 3185, 2001, 1037, 3835, 2000, 3926, 1012, 102]
    inputs = {"input_ids": ids, "attention_mask": (ids > 0).astype(np.int32), "token_type_ids": np.zeros_like(ids)}
    outputs = run_tflm(model, inputs, arena_bytes=arena)
    assert np.all(np.isfinite(np.asarray(list(outputs.values())[0], np.float32)))
    with pytest.raises(TflmError):
        run_tflm(model, inputs, arena_bytes=arena - 1)

    header = (out / "model_data.h").read_text()
    assert "g_model_data" in header and (out / "model_data.cc").stat().st_size > 5 * len(model)


def test_model_that_misses_the_board_still_writes_files(capsys, tmp_path):
    out = tmp_path / "f746"
    code = main(["export", "--schedule", "stock", "--seq-len", "32", "--board", "nucleo-f746zg", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == DoesNotFitError.exit_code
    last = err.strip().splitlines()[-1]
    assert "Traceback" not in err and last.startswith("error: ")
    assert "Flash" in last and "misses by" in last and "embedding" in last
    report = json.loads((out / "report.json").read_text())
    assert report["fits"]["ok"] is False and report["fits"]["flash"]["ok"] is False
    assert (out / "model.tflite").is_file() and (out / "model_data.cc").is_file()
