"""Label names end to end (issue 27): a task's string labels → finetune's config.json id2label → export's
report.json, model_settings.h, FIRMWARE.md and the bare-metal text check under QEMU ("label <name> (<id>)");
a checkpoint's own names kept; a disagreement said; `evaluate`'s per-label figures and confusion matrix."""

import csv
import json
import random
import shutil
import subprocess

import numpy as np
import pytest

from tflm_mcubert.cli.evaluate import per_label_figures
from tflm_mcubert.firmware.c_string import c_string_literal

from .cli_helpers import assert_one_clean_error, run_cli, run_text_check_under_qemu
from .test_cli_compress import WORDS

# Sorted order gives the ids: 'bad…' is 0, 'good…' is 1. Quotes, a backslash and non-ASCII on purpose.
NAMES = ['bad "really" \\ ✗', "good — très ✓"]


def write_named(path, names=NAMES, count=100, seed=0):
    """The test vocabulary's sentiment CSV, labelled by name (csv quoting for the quotes in the names)."""
    rng = random.Random(seed)
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["text", "label"])
        for i in range(count):
            good = i % 2
            words = [rng.choice(["good", "happy", "very"] if good else ["bad", "sad", "not"]) for _ in range(2)]
            words += [rng.choice(WORDS) for _ in range(rng.randint(1, 5))]
            rng.shuffle(words)
            writer.writerow([" ".join(words), names[good]])
    return path


def config_names(ckpt):
    config = json.loads((ckpt / "config.json").read_text())
    return config["id2label"], config["label2id"]


@pytest.fixture(scope="module")
def finetuned(tmp_path_factory):
    """A bare encoder fine-tuned on the named CSV (module-wide: several tests read it)."""
    from tests.conftest import build_hf_checkpoint

    root = tmp_path_factory.mktemp("labels")
    encoder = build_hf_checkpoint(root, vocab_size=30)
    data = write_named(root / "named.csv")
    code = _run("finetune", "--checkpoint", encoder, "--out", root / "teacher", "--task", data, "--epochs", 3,
                "--lr", 3e-3, "--batch-size", 16, "--quiet")  # fmt: skip
    assert code == 0
    return root / "teacher", data


def _run(*argv):
    from tflm_mcubert.cli import main

    return main([str(a) for a in argv])


def test_finetune_names_the_ids_by_the_task_s_string_labels_in_sorted_order(finetuned):
    teacher, _ = finetuned
    assert config_names(teacher) == ({"0": NAMES[0], "1": NAMES[1]}, {NAMES[0]: 0, NAMES[1]: 1})
    assert json.loads((teacher / "metrics.json").read_text())["label_names"] == NAMES
    import transformers  # the names as Hugging Face reads them

    assert transformers.AutoConfig.from_pretrained(teacher).id2label == {0: NAMES[0], 1: NAMES[1]}


def test_export_carries_the_names_into_the_report_and_the_firmware_files(finetuned, tmp_path):
    teacher, _ = finetuned
    out = tmp_path / "export"
    assert _run("export", "--checkpoint", teacher, "--out", out, "--seq-len", 16) == 0
    assert json.loads((out / "report.json").read_text())["model"]["labels"] == NAMES
    settings = (out / "model_settings.h").read_text()
    literals = ", ".join(c_string_literal(n) for n in NAMES)
    assert f"#define MCUBERT_MODEL_LABELS {{{literals}}}" in settings
    assert "#define MCUBERT_MODEL_LABEL_COUNT 2" in settings
    guide = (out / "FIRMWARE.md").read_text()
    assert f"| 0 | {json.dumps(NAMES[0], ensure_ascii=False)} |" in guide
    assert f"| 1 | {json.dumps(NAMES[1], ensure_ascii=False)} |" in guide
    # A C compiler reads model_settings.h's names back as the names' UTF-8 bytes.
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("needs gcc")
    (tmp_path / "labels.c").write_text(
        '#include <stdio.h>\n#include "model_settings.h"\n'
        "static const char *const kLabels[MCUBERT_MODEL_LABEL_COUNT] = MCUBERT_MODEL_LABELS;\n"
        "int main(void) {\n  for (int i = 0; i < MCUBERT_MODEL_LABEL_COUNT; ++i) {\n"
        '    for (const unsigned char *p = (const unsigned char *)kLabels[i]; *p; ++p) printf("%02x", *p);\n'
        '    printf("\\n");\n  }\n  return 0;\n}\n'
    )
    subprocess.run(
        [gcc, "-std=c99", "-Wall", "-Werror", "-pedantic", f"-I{out}", "labels.c", "-o", "labels"],
        cwd=tmp_path,
        check=True,
    )
    printed = subprocess.run([str(tmp_path / "labels")], check=True, capture_output=True, text=True).stdout.split()
    assert printed == [n.encode("utf-8").hex() for n in NAMES]


def test_the_bare_metal_text_check_prints_the_label_names_under_qemu(finetuned, tmp_path):
    teacher, data = finetuned
    out = tmp_path / "export"
    assert _run("export", "--checkpoint", teacher, "--out", out, "--seq-len", 16) == 0  # calibrated on the task
    sentences = ["good happy film", "bad sad movie", "the cat sat on the mat"]
    seen = run_text_check_under_qemu(out, sentences, NAMES, 16, tmp_path)
    assert seen == {0, 1}  # the fine-tuned model tells the two apart: both names are printed


def test_a_checkpoint_s_own_names_are_kept_and_a_disagreement_is_said(capsys, tmp_path, make_hf_checkpoint):
    ckpt = make_hf_checkpoint(tmp_path, classifier=True, vocab_size=30, num_labels=2)
    config = json.loads((ckpt / "config.json").read_text())
    config["id2label"], config["label2id"] = {"0": "negative", "1": "positive"}, {"negative": 0, "positive": 1}
    (ckpt / "config.json").write_text(json.dumps(config))
    ids = write_named(tmp_path / "ids.csv", names=["0", "1"])
    common = ["--epochs", 0.5, "--batch-size", 16, "--quiet"]
    code, _, err = run_cli(capsys, "finetune", "--checkpoint", ckpt, "--out", tmp_path / "a", "--task", ids, *common)
    assert code == 0 and "warning" not in err
    assert config_names(tmp_path / "a")[0] == {"0": "negative", "1": "positive"}  # integer labels: kept
    named = write_named(tmp_path / "named.csv")
    code, _, err = run_cli(capsys, "finetune", "--checkpoint", ckpt, "--out", tmp_path / "b", "--task", named, *common)
    assert code == 0
    assert f"the task's labels by id {NAMES} differ from --checkpoint's id2label ['negative', 'positive']" in err
    assert config_names(tmp_path / "b")[0] == {"0": NAMES[0], "1": NAMES[1]}  # trained on the task's ids
    # Distilling from a teacher whose names are the task's in another order would teach the wrong ids.
    swapped = write_named(tmp_path / "swapped.csv", names=["positive", "negative"])  # sorted: negative is 0
    config["id2label"], config["label2id"] = {"0": "positive", "1": "negative"}, {"positive": 0, "negative": 1}
    (ckpt / "config.json").write_text(json.dumps(config))
    code, _, err = run_cli(capsys, "distill", "--teacher", ckpt, "--out", tmp_path / "c", "--task", swapped, *common)
    assert code == 2
    assert_one_clean_error(err, "--teacher", "in another order")
    assert not (tmp_path / "c" / "config.json").exists()


def test_per_label_figures_and_the_confusion_matrix():
    labels = np.array([0, 0, 0, 1, 1, 2])
    predicted = np.array([0, 1, 0, 1, 0, 1])
    table = per_label_figures(predicted, labels, 3)
    assert table["confusion"] == [[2, 1, 0], [1, 1, 0], [0, 1, 0]]
    assert table["labels"][0] == {"precision": round(2 / 3, 4), "recall": round(2 / 3, 4), "support": 3}
    assert table["labels"][1] == {"precision": round(1 / 3, 4), "recall": 0.5, "support": 2}
    assert table["labels"][2] == {"precision": None, "recall": 0.0, "support": 1}  # never predicted


def test_evaluate_reports_per_label_figures_with_the_names(capsys, finetuned, tmp_path):
    teacher, data = finetuned
    results = tmp_path / "eval.json"
    code, out, err = run_cli(
        capsys, "evaluate", "--checkpoint", teacher, "--task", data, "--seq-len", 16, "--samples", 10,
        "--calibration-samples", 4, "--json", results,
    )  # fmt: skip
    assert code == 0, err
    report = json.loads(results.read_text())
    assert report["label_names"] == NAMES and report["model"]["labels"] == NAMES
    for model in ("float", "int8"):
        figures = report["per_label"][model]
        assert list(figures["labels"]) == NAMES
        confusion = np.zeros((2, 2), int)
        for truth, guess in zip(report["labels"], report["predictions"][model]):
            confusion[truth, guess] += 1
        assert figures["confusion"] == confusion.tolist()
        assert [figures["labels"][n]["support"] for n in NAMES] == confusion.sum(axis=1).tolist()
        assert np.trace(confusion) / confusion.sum() == pytest.approx(report[f"{model}_accuracy"], abs=1e-4)
    assert repr(NAMES[0]) in out and "confusion matrix" in out


def test_distill_and_search_keep_the_teacher_s_names(finetuned, tmp_path):
    teacher, data = finetuned
    common = ["--task", data, "--batch-size", 16, "--quiet"]
    assert _run("distill", "--teacher", teacher, "--out", tmp_path / "student", "--epochs", 0.5, *common) == 0
    assert config_names(tmp_path / "student")[0] == {"0": NAMES[0], "1": NAMES[1]}
    assert json.loads((tmp_path / "student" / "metrics.json").read_text())["label_names"] == NAMES
    stages = ["--epochs", 0.5, "--finetune-epochs", 0.5]
    budget = ["--target-embedding-params", 30 * 128 // 4]
    code = _run("search", "--checkpoint", tmp_path / "student", "--out", tmp_path / "small", *budget, *stages, *common)
    assert code == 0
    assert config_names(tmp_path / "small") == ({"0": NAMES[0], "1": NAMES[1]}, {NAMES[0]: 0, NAMES[1]: 1})
    assert json.loads((tmp_path / "small" / "metrics.json").read_text())["label_names"] == NAMES


def test_evaluate_reads_the_task_s_labels_by_the_checkpoint_s_names(capsys, tmp_path, make_hf_checkpoint):
    from tflm_mcubert.data.tasks import load_task

    ckpt = make_hf_checkpoint(tmp_path, classifier=True, vocab_size=30, num_labels=2)
    config = json.loads((ckpt / "config.json").read_text())
    config["id2label"] = {"0": NAMES[1], "1": NAMES[0]}  # the task's names, the other way round
    (ckpt / "config.json").write_text(json.dumps(config))
    data = write_named(tmp_path / "named.csv")
    results = tmp_path / "eval.json"
    args = ["evaluate", "--checkpoint", ckpt, "--seq-len", 16, "--samples", 10, "--calibration-samples", 4]
    code, _, err = run_cli(capsys, *args, "--task", data, "--json", results)
    assert code == 0, err
    report = json.loads(results.read_text())
    task_ids = load_task(str(data))["test"]["label"][:10]  # sorted names: NAMES[0] is 0 in the task
    assert report["labels"] == [1 - i for i in task_ids] and report["label_names"] == [NAMES[1], NAMES[0]]
    three = tmp_path / "three.csv"
    write_named(three, names=["a", "b"], count=30)
    three.write_text(three.read_text() + "good film,c\n")
    code, _, err = run_cli(capsys, *args, "--task", three)
    assert code == 2
    assert_one_clean_error(err, "has 3 labels, the checkpoint's classifier 2")
    other = write_named(tmp_path / "other.csv", names=["x", "y"])
    code, _, err = run_cli(capsys, *args, "--task", other)
    assert code == 2
    assert_one_clean_error(err, "--task labels ['x', 'y'] are not the checkpoint's id2label")


def test_a_bare_encoder_s_export_has_no_labels_and_a_nameless_classifier_hf_s_default(tmp_path, make_hf_checkpoint):
    encoder = make_hf_checkpoint(tmp_path, vocab_size=30)
    assert _run("export", "--checkpoint", encoder, "--out", tmp_path / "bare", "--seq-len", 16) == 0
    assert "labels" not in json.loads((tmp_path / "bare" / "report.json").read_text())["model"]
    settings = (tmp_path / "bare" / "model_settings.h").read_text()
    assert "#define MCUBERT_MODEL_NUM_LABELS 0" in settings and "MCUBERT_MODEL_LABELS" not in settings
    assert "the model has no labels" in (tmp_path / "bare" / "FIRMWARE.md").read_text()
    classifier = make_hf_checkpoint(tmp_path, classifier=True, vocab_size=30, num_labels=3)
    assert _run("export", "--checkpoint", classifier, "--out", tmp_path / "clf-out", "--seq-len", 16) == 0
    defaults = ["LABEL_0", "LABEL_1", "LABEL_2"]
    assert json.loads((tmp_path / "clf-out" / "report.json").read_text())["model"]["labels"] == defaults
    settings = (tmp_path / "clf-out" / "model_settings.h").read_text()
    assert '#define MCUBERT_MODEL_LABELS {"LABEL_0", "LABEL_1", "LABEL_2"}' in settings
