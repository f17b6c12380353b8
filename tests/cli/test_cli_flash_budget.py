"""One Flash budget for the whole model: `search --board` / `--target-flash-bytes` give the word tables what
the rest of the model leaves, and the export that follows fits that budget with at most 2% of it unused
(export/flash_budget.py, issues #25 and #27)."""

import json

import pytest

from tflm_mcubert.boards import DEFAULT_FLASH_RESERVE
from tflm_mcubert.export.flash_budget import FlashTarget, tokenizer_blob_bytes, whole_model_budget
from tflm_mcubert.model.hf_import import load_checkpoint

from .cli_helpers import assert_one_clean_error, run_cli
from .test_cli_compress import write_reviews

SEQ = 16
TABLE_SHARE = 1_800  # bytes left for the word tables: above the smallest embedding (1,118 B), below the dense (2,016 B)


@pytest.fixture
def classifier_checkpoint(tmp_path, make_hf_checkpoint):
    return make_hf_checkpoint(tmp_path, classifier=True, vocab_size=30, num_labels=2)


def rest_of_model(checkpoint, bits: int) -> int:
    """What the model takes in Flash besides its word tables, as the budget counts it."""
    loaded = load_checkpoint(checkpoint)
    whole = whole_model_budget(
        loaded.model.config,
        FlashTarget(1 << 30, "probe"),
        seq_len=SEQ,
        embedding_bits=bits,
        vocab_bytes=tokenizer_blob_bytes(loaded.tokenizer, 4),
    )
    return sum(whole.items.values())


@pytest.mark.parametrize("bits", [8, 4])
def test_search_to_a_flash_budget_then_export_fills_it(capsys, tmp_path, classifier_checkpoint, bits):
    target = rest_of_model(classifier_checkpoint, bits) + TABLE_SHARE
    out = tmp_path / "small"
    code, printed, err = run_cli(
        capsys, "search", "--checkpoint", classifier_checkpoint, "--task", write_reviews(tmp_path / "r.csv", count=60),
        "--out", out, "--quiet", "--target-flash-bytes", target, "--export-seq-len", SEQ, "--embedding-bits", bits,
        "--epochs", 0.5, "--finetune-epochs", 0.5,
    )  # fmt: skip
    assert code == 0, err
    split = json.loads((out / "metrics.json").read_text())["flash_budget"]
    assert split["budget_bytes"] == target and split["source"] == "--target-flash-bytes"
    assert split["embedding_bytes"] == target - sum(split[k] for k in split if k.endswith("_bytes") and k not in (
        "budget_bytes", "embedding_bytes"))  # fmt: skip
    assert f"flash_embedding_bytes {split['embedding_bytes']}" in printed

    code, _, err = run_cli(
        capsys, "export", "--checkpoint", out, "--seq-len", SEQ, "--sram", "8MB",
        "--flash", target + DEFAULT_FLASH_RESERVE, "--out", tmp_path / "fw",
    )  # fmt: skip
    assert code == 0, err
    report = json.loads((tmp_path / "fw" / "report.json").read_text())
    assert report["fits"]["flash"]["ok"] and report["fits"]["flash"]["budget_bytes"] == target
    unused = target - report["flash_bytes"]
    assert 0 <= unused <= 0.02 * target, (unused, target)
    # every item the budget counted is what the export stored, but for the .tflite structure's slack
    embedding_op = next(op["bytes"] for op in report["ops"] if op["name"] == "embedding")
    assert embedding_op - report["params"]["stored_embedding_bytes"] == split["embedding_fixed_bytes"]
    assert sum(op["bytes"] for op in report["ops"] if op["op"] in ("attention", "mlp")) == split["encoder_bytes"]
    assert report["params"]["stored_embedding_bytes"] <= split["embedding_bytes"]
    # the report says what the searched checkpoint stores and what its search was given, with the budget's parts
    compression = report["compression"]
    assert compression["method"] == "searched" and compression["params"] == report["params"]["stored_embedding"]
    assert compression["search"]["flash_budget"] == split and compression["search"]["embedding_storage_bits"] == bits


@pytest.mark.parametrize(
    "extra, fragments",
    [
        (["--board", "nucleo-f767zi", "--target-embedding-bytes", "5k"], ["not allowed with argument"]),
        (["--target-flash-bytes", "10k", "--lambda", "1"], ["not allowed with argument"]),
        (["--flash-reserve", "100KB", "--target-flash-bytes", "1M"], ["--flash-reserve goes with --board"]),
        (["--board", "nosuchboard"], ["unknown board 'nosuchboard'"]),
        (["--target-flash-bytes", "10k"], ["less than the smallest embedding of 30 tokens", "encoder"]),
        (["--board", "nucleo-f746zg", "--export-seq-len", "1"], ["--export-seq-len"]),
    ],
)
def test_bad_flash_budgets_end_in_one_clear_line(capsys, tmp_path, classifier_checkpoint, extra, fragments):
    code, _, err = run_cli(
        capsys, "search", "--checkpoint", classifier_checkpoint, "--task", write_reviews(tmp_path / "r.csv"),
        "--out", tmp_path / "o", "--quiet", *extra,
    )  # fmt: skip
    assert code == 2
    assert_one_clean_error(err, *fragments)


def test_weight_bits_auto_searches_each_width_and_keeps_the_best_integer_model_on_dev(
    capsys, tmp_path, classifier_checkpoint
):
    """search --weight-bits auto: one search per encoder width at the share of the same budget it leaves the
    word tables, each candidate's integer model evaluated as the firmware computes it, the best on
    validation kept and copied to --out (compress/width_search.py)."""
    target = rest_of_model(classifier_checkpoint, 8) + TABLE_SHARE
    out = tmp_path / "widths"
    command = [
        "search", "--checkpoint", classifier_checkpoint, "--task", write_reviews(tmp_path / "r.csv", count=60),
        "--out", out, "--quiet", "--target-flash-bytes", target, "--export-seq-len", SEQ, "--embedding-bits", 8,
        "--weight-bits", "auto", "--epochs", 0.5, "--finetune-epochs", 0.5, "--max-seq-len", SEQ,
    ]  # fmt: skip
    code, printed, err = run_cli(capsys, *command)
    assert code == 0, err
    report = json.loads((out / "metrics.json").read_text())["width_search"]
    rows = {row["name"]: row for row in report["candidates"]}
    assert set(rows) == {"w8-e8", "w4-e8"}
    assert rows["w4-e8"]["integer_model"] == "int8+w4" and rows["w8-e8"]["integer_model"] == "int8"
    eight, four = rows["w8-e8"]["flash_budget"], rows["w4-e8"]["flash_budget"]
    assert four["encoder_bytes"] < eight["encoder_bytes"] and four["embedding_bytes"] > eight["embedding_bytes"]
    best = max(report["candidates"], key=lambda row: row["validation_accuracy"])["validation_accuracy"]
    assert rows[report["chosen"]]["validation_accuracy"] == best
    for name in rows:
        evaluation = json.loads((out / "widths" / name / "evaluate.json").read_text())
        key = f"{rows[name]['integer_model']}_accuracy"
        assert evaluation["by_split"]["validation"][key] == rows[name]["validation_accuracy"]
    assert f"widths chosen: {report['chosen']}" in printed
    chosen = out / "widths" / report["chosen"]
    assert (out / "config.json").read_bytes() == (chosen / "config.json").read_bytes()

    code, again, err = run_cli(capsys, *command)  # resumes: every candidate is reused, the choice is the same
    assert code == 0, err
    assert json.loads((out / "metrics.json").read_text())["width_search"] == report

    bits = rows[report["chosen"]]["weight_bits"]
    code, _, err = run_cli(
        capsys, "export", "--checkpoint", out, "--seq-len", SEQ, "--sram", "8MB", "--weight-bits", bits,
        "--flash", target + DEFAULT_FLASH_RESERVE, "--out", tmp_path / "fw",
    )  # fmt: skip
    assert code == 0, err
    assert json.loads((tmp_path / "fw" / "report.json").read_text())["fits"]["flash"]["ok"]


def test_a_width_search_needs_a_whole_model_budget(capsys, tmp_path, classifier_checkpoint):
    code, _, err = run_cli(
        capsys, "search", "--checkpoint", classifier_checkpoint, "--task", write_reviews(tmp_path / "r.csv"),
        "--out", tmp_path / "o", "--quiet", "--weight-bits", "auto",
    )  # fmt: skip
    assert code == 2
    assert_one_clean_error(err, "--weight-bits auto and --embedding-bits auto need --board or --target-flash-bytes")
