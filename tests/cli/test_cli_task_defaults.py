"""Defaults that follow the user's task (issue 27, findings 3, 4 and 6): a checkpoint records the task it
was trained on, `export` and `evaluate` calibrate on that task's training text, `evaluate` measures the
whole split and what export stores, and `--dump` names the quantized model it traced."""

import json
import shutil

import numpy as np
import pytest

from tflm_mcubert.data.calibration import Calibration, task_texts
from tflm_mcubert.model.task_record import TASK_KEY

from .cli_helpers import assert_one_clean_error, run_cli
from .test_cli_labels import finetuned, write_named  # noqa: F401  (the module-wide fine-tuned teacher)


def test_finetune_records_the_task_by_its_absolute_path(finetuned):  # noqa: F811
    teacher, data = finetuned
    record = json.loads((teacher / "config.json").read_text())[TASK_KEY]
    columns = {"text_column": "text", "text_pair_column": None, "label_column": "label"}
    assert record == {"task": str(data.resolve()), **columns}


def test_export_calibrates_on_the_checkpoint_s_task_by_default(capsys, finetuned, tmp_path):  # noqa: F811
    teacher, data = finetuned
    out = tmp_path / "export"
    code, _, err = run_cli(capsys, "export", "--checkpoint", teacher, "--out", out, "--seq-len", 16)
    assert code == 0, err
    report = json.loads((out / "report.json").read_text())
    assert report["calibration"] == f"32 sentences from the training split of {data.resolve()} (the checkpoint's task)"
    assert report["model"]["task"]["task"] == str(data.resolve())
    # The samples are the task's first training texts, not the built-in movie-review sentences.
    calibration = Calibration.load(None, tokenizer=object(), vocab_size=30, task=report["model"]["task"])
    assert calibration.sentences == task_texts(report["model"]["task"], 32)
    assert calibration.sentences[0] in data.read_text()


def test_export_falls_back_to_built_in_text_when_the_task_is_gone(capsys, finetuned, tmp_path):  # noqa: F811
    teacher, data = finetuned
    moved = tmp_path / "teacher"
    shutil.copytree(teacher, moved)
    config = json.loads((moved / "config.json").read_text())
    config[TASK_KEY]["task"] = str(tmp_path / "gone.csv")
    (moved / "config.json").write_text(json.dumps(config))
    code, _, err = run_cli(capsys, "export", "--checkpoint", moved, "--out", tmp_path / "export", "--seq-len", 16)
    assert code == 0, err
    assert f"the checkpoint's task {tmp_path / 'gone.csv'} cannot be read here" in err
    report = json.loads((tmp_path / "export" / "report.json").read_text())
    assert report["calibration"].endswith("from built-in English sentences")


@pytest.mark.parametrize("record", [["not", "an", "object"], {"task": ""}, {"task": 3, "text_column": "text",
                                    "text_pair_column": None, "label_column": "label"}])  # fmt: skip
def test_a_malformed_task_record_is_refused_by_name(capsys, finetuned, tmp_path, record):  # noqa: F811
    teacher, _ = finetuned
    broken = tmp_path / "teacher"
    shutil.copytree(teacher, broken)
    config = json.loads((broken / "config.json").read_text())
    config[TASK_KEY] = record
    (broken / "config.json").write_text(json.dumps(config))
    code, _, err = run_cli(capsys, "export", "--checkpoint", broken, "--out", tmp_path / "export", "--seq-len", 16)
    assert code != 0
    assert_one_clean_error(err, TASK_KEY)


def test_evaluate_measures_the_whole_split_and_says_how_much_of_it(capsys, finetuned, tmp_path):  # noqa: F811
    teacher, data = finetuned
    common = ["evaluate", "--checkpoint", teacher, "--task", data, "--seq-len", 16, "--calibration-samples", 8]
    code, out, err = run_cli(capsys, *common)
    assert code == 0, err
    assert f"the {data} test split (10 of its 10 rows)" in out
    code, out, err = run_cli(capsys, *common, "--samples", 3)
    assert code == 0, err
    assert f"the {data} test split (3 of its 10 rows)" in out


def test_evaluate_measures_int4_weights_and_dumps_under_the_model_s_name(capsys, finetuned, tmp_path):  # noqa: F811
    teacher, data = finetuned
    results, dump = tmp_path / "eval.json", tmp_path / "dump"
    code, _, err = run_cli(capsys, "evaluate", "--checkpoint", teacher, "--task", data, "--seq-len", 16,
                           "--calibration-samples", 8, "--embedding-bits", 4, "--weight-bits", 8, 4,
                           "--dump", dump, "--json", results)  # fmt: skip
    assert code == 0, err
    figures = json.loads(results.read_text())
    assert sorted(figures["predictions"]) == ["float", "int4", "int4+w4"]
    assert 0.5 < figures["int4+w4_cosine"]["mean"] <= 1
    # int4 weights change the model: its outputs are not the int8-weight model's.
    assert figures["predictions"]["int4+w4"] != figures["predictions"]["int4"] or (
        figures["int4+w4_cosine"] != figures["int4_cosine"]
    )
    sample = np.load(dump / "sample_0000.npz")
    assert {"int4/layer0.attention", "int4_dequantized/layer1.mlp"} <= set(sample.files)
    assert not any(name.startswith("int8") for name in sample.files)
