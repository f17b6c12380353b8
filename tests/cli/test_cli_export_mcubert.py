"""The front door with the default schedule: `export` (mcubert), its refusals, `plan` and `evaluate`."""

import json

import numpy as np

from tflm_mcubert.cli import main
from tflm_mcubert.errors import DoesNotFitError
from tflm_mcubert.export.mcubert_export import largest_fitting_seq_len
from tflm_mcubert.export.storage_report import encoder_storage_report
from tflm_mcubert.tflite.mcubert_reader import read_model
from tflm_mcubert.model.config import preset
from tflm_mcubert.runtime.reference import run_reference


def test_default_export_fits_the_default_board(capsys, tmp_path):
    out = tmp_path / "default"
    code = main(["export", "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    report = json.loads((out / "report.json").read_text())
    assert report["schedule"] == "mcubert" and report["board"]["name"] == "nucleo-f746zg"
    assert report["fits"]["ok"] is True
    assert report["compression"]["default"] is True and report["compression"]["ranks"] == [32, 8, 2]
    assert "embedding compressed by default" in captured.out
    model = (out / "model.tflite").read_bytes()
    assert report["flash_bytes"] == len(model) <= report["fits"]["flash"]["budget_bytes"]
    assert report["arena_bytes"] == report["planned_bytes"] + report["arena"]["overhead_bytes"]
    assert [op["name"] for op in report["ops"]][-1] == "head"
    assert all({"bytes", "tile", "scratch_bytes", "live_bytes"} <= set(op) for op in report["ops"])
    # Constant bytes per op add up to the model's constants, the embedding's are the compression block's.
    assert report["ops"][0]["name"] == "embedding"
    assert report["compression"]["int8_bytes"] == report["ops"][0]["bytes"]
    assert report["embedding"]["storage_bits"] == 8 and report["embedding"]["op_bytes"] == report["ops"][0]["bytes"]
    # ... of which the word-embedding tables (rows, Vᵀ, requantization, cluster table) are the budget's bytes
    assert report["params"]["stored_embedding_bytes"] == report["compression"]["bytes"]
    assert report["params"]["stored_embedding"] == report["compression"]["params"] == 318_420
    # 4 clusters' (end, rank) and requantization tables; the rank-2 Vᵀ is packed at rank 4
    assert report["compression"]["bytes"] == 318_420 + 4 * (8 + 8 * 128) + 128 * 2 == 322_804
    assert (
        sum(op["bytes"] for op in report["ops"])
        < report["flash_bytes"]
        < 1.05 * sum(op["bytes"] for op in report["ops"])
    )
    parsed = read_model(model)
    assert parsed.planned_bytes == report["planned_bytes"]
    ids = np.zeros((1, 128), np.int32)
    ids[0, :6] = [0, 17, 999, 30000, 5, 1]
    run = run_reference(parsed, {"input_ids": ids, "attention_mask": (np.arange(128) < 6)[None].astype(np.int8)})
    assert run.outputs["logits"].shape == (1, 2) and run.touched_bytes == report["planned_bytes"]
    assert "g_model_data" in (out / "model_data.h").read_text()


def test_int4_embedding_export_halves_the_word_tables_and_runs(capsys, tmp_path):
    out = tmp_path / "int4"
    code = main(["export", "--seq-len", "64", "--embedding-bits", "4", "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    report = json.loads((out / "report.json").read_text())
    storage = report["embedding"]
    assert storage["storage_bits"] == 4 and storage["embedding_bytes"] == storage["embedding_bytes_int4"]
    # Rows halve; V_i stays int8 and cluster-0 rows carry a 2-byte scale, so a bit over half.
    assert 0.5 < storage["embedding_bytes"] / storage["embedding_bytes_int8"] < 0.53, storage
    assert storage["op_bytes"] == report["ops"][0]["bytes"] and report["fits"]["ok"] is True
    parsed = read_model((out / "model.tflite").read_bytes())
    assert parsed.quantized.embedding.word_bits == 4
    assert parsed.quantized.embedding.storage_bytes == storage["embedding_bytes"]
    ids = np.zeros((1, 64), np.int32)
    ids[0, :6] = [0, 17, 999, 30000, 5, 1]
    run = run_reference(parsed, {"input_ids": ids, "attention_mask": (np.arange(64) < 6)[None].astype(np.int8)})
    assert run.outputs["logits"].shape == (1, 2) and run.touched_bytes == report["planned_bytes"]


def test_int4_weights_export_halves_the_encoder_weights_and_runs(capsys, tmp_path):
    """--weight-bits 4: every attention and MLP linear layer in w4row (version 3 options), the int8
    model's other bytes unchanged, and report.json's accounting follows the smaller weights."""
    outs = {}
    for bits in (8, 4):
        outs[bits] = tmp_path / f"w{bits}"
        code = main(["export", "--seq-len", "64", "--weight-bits", str(bits), "--out", str(outs[bits])])
        assert code == 0, capsys.readouterr().err
    reports = {bits: json.loads((out / "report.json").read_text()) for bits, out in outs.items()}
    assert "encoder" not in reports[8]  # an int8 export's report.json is as before version 3
    parsed8 = read_model((outs[8] / "model.tflite").read_bytes())
    w4, w8 = reports[4]["encoder"], encoder_storage_report(parsed8.quantized, {})
    assert (w4["weight_bits"], w8["weight_bits"]) == (4, 8)
    assert w4["linear_weight_bytes"] == w4["linear_weight_bytes_int4"] == w8["linear_weight_bytes"] // 2
    assert w8["linear_weight_bytes"] == w8["linear_weight_bytes_int8"] and w4["channel_bytes"] == w8["channel_bytes"]
    saved = w8["linear_weight_bytes"] - w4["linear_weight_bytes"]
    ops = {bits: {op["name"]: op["bytes"] for op in reports[bits]["ops"]} for bits in (8, 4)}
    encoder_ops = [name for name in ops[8] if "attention" in name or "mlp" in name]
    assert w4["op_bytes"] == sum(ops[4][name] for name in encoder_ops)
    assert sum(ops[8][name] - ops[4][name] for name in encoder_ops) == saved
    assert 0 < reports[8]["tflite_bytes"] - reports[4]["tflite_bytes"] <= saved + 1024
    assert reports[4]["embedding"] == reports[8]["embedding"]
    stalls = {  # the latency estimate's Flash model streams the smaller weights
        bits: reports[bits]["latency_estimate"]["boards"]["nucleo-f746zg"]["flash"]["per_layer_stall_cycles"]
        for bits in (8, 4)
    }
    assert all(0 < stalls[4][kind] < stalls[8][kind] for kind in stalls[8]), stalls
    parsed = read_model((outs[4] / "model.tflite").read_bytes())
    for attention, mlp in parsed.quantized.layers:
        assert attention.weight_bits == mlp.weight_bits == 4 and attention.options()["weight_bits"] == 4
        assert attention.query.weight_bits == mlp.fc2.weight_bits == 4
    ids = np.zeros((1, 64), np.int32)
    ids[0, :6] = [0, 17, 999, 30000, 5, 1]
    run = run_reference(parsed, {"input_ids": ids, "attention_mask": (np.arange(64) < 6)[None].astype(np.int8)})
    assert run.outputs["logits"].shape == (1, 2) and run.touched_bytes == reports[4]["planned_bytes"]


def test_int4_weights_need_the_mcubert_schedule(capsys, tmp_path):
    code = main(["export", "--schedule", "stock", "--weight-bits", "4", "--out", str(tmp_path / "x")])
    assert code == 2 and "--weight-bits 4" in capsys.readouterr().err


def test_int4_embedding_needs_the_mcubert_schedule(capsys, tmp_path):
    code = main(["export", "--schedule", "stock", "--embedding-bits", "4", "--out", str(tmp_path / "x")])
    assert code == 2 and "--embedding-bits 4" in capsys.readouterr().err


def test_a_model_that_cannot_fit_is_refused_with_the_longest_fitting_length(capsys, tmp_path):
    out = tmp_path / "small-sram"
    code = main(["export", "--seq-len", "512", "--sram", "56KB", "--flash", "2MB", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == DoesNotFitError.exit_code
    last = err.strip().splitlines()[-1]
    longest = largest_fitting_seq_len(preset("bert-tiny", num_labels=2), 512, 40 * 1024, 2)
    assert last.startswith("error: ") and f"--seq-len {longest} fits" in last and "SRAM" in last
    report = json.loads((out / "report.json").read_text())
    assert report["fits"]["sram"]["largest_fitting_seq_len"] == longest
    assert (out / "model.tflite").is_file()


def test_mcubert_refuses_other_precisions(capsys, tmp_path):
    code = main(["export", "--precision", "int16x8", "--out", str(tmp_path / "x")])
    assert code == 2 and "--schedule stock" in capsys.readouterr().err


def test_plan_prints_a_table_and_draws_it(capsys, tmp_path):
    png = tmp_path / "plan.png"
    code = main(["plan", "--seq-lens", "32,128,512", "--out", str(png)])
    out = capsys.readouterr().out
    assert code == 0
    assert "mcubert" in out and "cmsis-nn" in out and "burrello" in out and "flash" in out
    rows = [line.split() for line in out.splitlines() if line.strip().split(" ")[0] in ("32", "128", "512")]
    assert [r[0] for r in rows] == ["32", "128", "512"]
    assert float(rows[1][1]) == 42.7  # SPEC.md section 6: BERT-tiny @ 128, t = 4
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_evaluate_reports_accuracy_of_float_int8_and_stock(capsys, tmp_path, make_hf_checkpoint):
    ckpt = make_hf_checkpoint(tmp_path, classifier=True)
    results = tmp_path / "eval.json"
    dump = tmp_path / "dump"
    code = main(
        [
            "evaluate",
            "--checkpoint",
            str(ckpt),
            "--task",
            "rotten_tomatoes",
            "--samples",
            "8",
            "--seq-len",
            "16",
            "--calibration-samples",
            "8",
            "--stock",
            "--embedding-bits",
            "8",
            "4",
            "--dump",
            str(dump),
            "--json",
            str(results),
        ]
    )
    assert code == 0, capsys.readouterr().err
    data = json.loads(results.read_text())
    # Random weights make accuracy meaningless; what int8 must keep is the float model's decisions.
    for name in ("int8", "stock"):
        assert data[f"{name}_argmax_agreement"] >= 7 / 8, data
        assert abs(data[f"{name}_accuracy"] - data["float_accuracy"]) <= 1 / 8, data
    assert data["int8_cosine"]["min"] > 0.9
    # int4 word tables (everything else int8): reported beside int8, per example for paired tests.
    assert 0.5 < data["int4_cosine"]["mean"] <= 1 and "int4_accuracy" in data, data
    assert sorted(data["predictions"]) == ["float", "int4", "int8", "stock"]
    assert len(data["labels"]) == len(data["predictions"]["int4"]) == 8
    sample = np.load(dump / "sample_0000.npz")
    assert {
        "float/layer0.attention",
        "int8/layer0.attention",
        "int8_dequantized/layer1.mlp",
        "float/head",
        "int8/head",
    } <= set(sample.files)


def test_a_model_too_big_for_flash_says_which_part(capsys, tmp_path):
    code = main(["export", "--preset", "bert-mini", "--seq-len", "32", "--out", str(tmp_path / "mini")])
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == DoesNotFitError.exit_code
    assert "Flash" in last and "the encoder and head alone take" in last
    # The report still says where the arena fits (issue 27: arena_fits was false wherever Flash missed).
    boards = json.loads((tmp_path / "mini" / "report.json").read_text())["boards"]
    # Only the STM32N6570-DK's 128 MB external NOR holds BERT-mini's 3.9 MB.
    assert {name for name, fit in boards.items() if fit["flash_fits"]} == {"stm32n6570-dk"}
    assert boards["nucleo-f767zi"]["arena_fits"] and boards["nucleo-h7a3zi-q"]["arena_fits"]
    assert boards["nucleo-f767zi"]["longest_seq_len"] is None  # no sequence fits both
