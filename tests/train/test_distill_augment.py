"""`distill --augment N --unlabeled FILE|DIR` (issue 41): the teacher labels the added examples once, in
the run directory, resumably; the run records them; bad input stops the run before any training."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.cli.cli_helpers import assert_one_clean_error, run_cli
from tests.cli.test_cli_compress import write_reviews
from tflm_mcubert.train import teacher_labels

COMMON = ("--batch-size", 16, "--max-seq-len", 16, "--quiet")
UNLABELED = ["the film is very good", "a sad and bad movie", "the cat sat on the mat"]


def finetuned_teacher(root, count: int):
    """(a tiny teacher fine-tuned for one epoch on `count` generated reviews, the reviews' CSV) under root."""
    from tests.conftest import build_hf_checkpoint
    from tflm_mcubert.cli import main

    data = write_reviews(root / "reviews.csv", count=count)
    encoder = build_hf_checkpoint(root, vocab_size=30)
    argv = ["finetune", "--checkpoint", encoder, "--out", root / "teacher", "--task", data, "--epochs", 1, *COMMON]
    assert main([str(a) for a in argv]) == 0
    return root / "teacher", data


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    root = tmp_path_factory.mktemp("augment")
    (root / "more.txt").write_text("\n".join(UNLABELED) + "\n", encoding="utf-8")
    return *finetuned_teacher(root, 60), root / "more.txt"


def distill(capsys, teacher, out, *extra):
    ckpt, data, _ = teacher
    return run_cli(capsys, "distill", "--teacher", ckpt, "--task", data, "--out", out, "--epochs", 1, *COMMON, *extra)


def test_added_examples_are_labelled_once_and_a_resumed_run_reuses_the_labels(teacher, tmp_path, capsys, monkeypatch):
    out = tmp_path / "student"
    code, _, err = distill(capsys, teacher, out, "--augment", 2, "--unlabeled", teacher[2])
    assert code == 0, err
    metrics = json.loads((out / "metrics.json").read_text())
    train = 48  # 80% of 60
    assert metrics["teacher_labelled"]["augmented_examples"] == 2 * train
    assert metrics["teacher_labelled"]["unlabeled_examples"] == len(UNLABELED)
    assert metrics["train_examples"] == 3 * train + len(UNLABELED)
    assert metrics["stages"][0]["steps"] == -(-metrics["train_examples"] // 16)
    settings = json.loads((out / "run" / "run.json").read_text())
    assert settings["augment"]["per_sentence"] == 2 and settings["augment"]["unlabeled"] == str(teacher[2])

    def no_teacher(*args):
        raise AssertionError("the teacher labelled again")

    monkeypatch.setattr(teacher_labels, "predict_logits", no_teacher)
    code, _, err = distill(capsys, teacher, out, "--augment", 2, "--unlabeled", teacher[2], "--resume")
    assert code == 0, err
    assert json.loads((out / "metrics.json").read_text())["validation_accuracy"] == metrics["validation_accuracy"]
    code, _, err = distill(capsys, teacher, out, "--augment", 3, "--unlabeled", teacher[2], "--resume")
    assert code == 2
    assert_one_clean_error(err, "different settings", "augment")


class Stopped(Exception):
    """A run stopped mid-labelling (a kill, a full disk)."""


def test_labelling_interrupted_between_chunks_resumes_where_it_stopped(tmp_path, small_config, monkeypatch):
    from tflm_mcubert.model.bert import BertModel
    from tflm_mcubert.train.batches import EncodedSplit
    from tflm_mcubert.train.trainer import RunDirectory

    model = BertModel(small_config(num_labels=2))
    rng = np.random.default_rng(0)
    ids = [rng.integers(1, 60, size=n).astype(np.int32) for n in rng.integers(2, 12, size=10)]
    split = EncodedSplit("x", ids, [np.zeros_like(i) for i in ids], np.zeros(10, np.int32), 0)
    expected = teacher_labels.labelled_logits(RunDirectory(tmp_path / "a", {}, resume=False), "k", split, model, 4)

    monkeypatch.setattr(teacher_labels, "LABELLING_CHUNK", 4)
    real, calls, stop_at = teacher_labels.predict_logits, [], [2]

    def stop_on_the_second_chunk(teacher, rows, batch_size):
        calls.append(len(rows))
        if len(calls) == stop_at[0]:
            raise Stopped
        return real(teacher, rows, batch_size)

    monkeypatch.setattr(teacher_labels, "predict_logits", stop_on_the_second_chunk)
    run = RunDirectory(tmp_path / "b", {}, resume=False)
    with pytest.raises(Stopped):
        teacher_labels.labelled_logits(run, "k", split, model, 4)
    calls.clear()
    stop_at[0] = None
    got = teacher_labels.labelled_logits(RunDirectory(tmp_path / "b", {}, resume=True), "k", split, model, 4)
    assert calls == [4, 2]  # the first chunk was kept
    np.testing.assert_allclose(got, expected, atol=1e-5)
    calls.clear()
    teacher_labels.labelled_logits(RunDirectory(tmp_path / "b", {}, resume=True), "other", split, model, 4)
    assert calls == [4, 4, 2]  # another teacher or other examples: labelled afresh


def test_a_bad_unlabeled_file_stops_the_run_before_training(teacher, tmp_path, capsys):
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("très bien\n".encode("latin-1"))
    code, _, err = distill(capsys, teacher, tmp_path / "s", "--unlabeled", bad)
    assert code == 2
    assert_one_clean_error(err, "latin1.txt", "not UTF-8")
    assert not (tmp_path / "s" / "run").exists()
