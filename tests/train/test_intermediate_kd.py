"""Intermediate-layer KD across widths and the projected-teacher initialisation (train/intermediate.py,
train/distill.py): the terms vanish exactly where the student reproduces the teacher and are positive
elsewhere, the projection is an exact copy at equal shapes, the options are recorded (resume refuses a
change) and checked (UserErrors)."""

from __future__ import annotations

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.cli.cli_helpers import assert_one_clean_error, run_cli
from tests.train.test_distill_augment import COMMON, finetuned_teacher
from tflm_mcubert.errors import UserError
from tflm_mcubert.model.bert import INPUT_NAMES, BertModel
from tflm_mcubert.model.config import BertConfig
from tflm_mcubert.train.distill import Objective, embedding_projection, student_from_teacher, teacher_layers_for
from tflm_mcubert.train.intermediate import IntermediateKD, forward_internals, relation_kl
from tflm_mcubert.train.layer_kd import LayerKD

# The CLI teacher (conftest's TINY_CONFIG: 32 wide, 2 heads of 16, 64 FFN units): a student of one head of
# 16, half the width, is cut from it whole.
STUDENT = ("--preset", "L1-H16-A1-F32", "--relation-heads", 4)


def config(hidden=24, layers=2, heads=4, ffn=48, labels=2) -> BertConfig:
    return BertConfig(
        vocab_size=50,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=ffn,
        max_position_embeddings=16,
        num_labels=labels,
    )


def batch(seed=0, size=3, seq=7) -> dict:
    rng = np.random.default_rng(seed)
    mask = np.ones((size, seq), np.int32)
    mask[1, 4:] = 0  # a padded row
    return {
        "input_ids": tf.constant(rng.integers(1, 50, (size, seq)), tf.int32),
        "attention_mask": tf.constant(mask),
        "token_type_ids": tf.zeros((size, seq), tf.int32),
        "labels": tf.constant(rng.integers(0, 2, size), tf.int32),
    }


def model(cfg: BertConfig, seed: int) -> BertModel:
    keras.utils.set_random_seed(seed)
    return BertModel(cfg)


def inputs_of(b: dict) -> dict:
    return {name: b[name] for name in INPUT_NAMES}


def test_forward_internals_is_the_models_forward_with_its_layers_kept():
    m, b = model(config(), 0), batch()
    found, expected = forward_internals(m, inputs_of(b)), m(inputs_of(b))
    np.testing.assert_array_equal(found["logits"].numpy(), expected["logits"].numpy())
    np.testing.assert_array_equal(found["last_hidden_state"].numpy(), expected["last_hidden_state"].numpy())
    assert len(found["hidden_states"]) == 3 and len(found["qkv"]) == 2
    assert all(tuple(x.shape) == (3, 7, 24) for layer in found["qkv"] for x in layer)
    partial = forward_internals(m, inputs_of(b), layers=1, head=False)
    assert len(partial["hidden_states"]) == 2 and "logits" not in partial


def test_intermediate_terms_vanish_for_the_teacher_itself_and_are_positive_for_another_student():
    teacher, b = model(config(), 0), batch()
    layer_map = teacher_layers_for(2, 2)
    same = IntermediateKD(teacher, teacher, layer_map, relation_heads=2, initial_map=np.eye(24, dtype=np.float32))
    loss = same.per_example_loss(forward_internals(teacher, inputs_of(b)), inputs_of(b)).numpy()
    assert loss.shape == (3,)
    np.testing.assert_allclose(loss, 0.0, atol=1e-5)

    student = model(config(hidden=8, layers=1, heads=2, ffn=16), 1)
    narrow = IntermediateKD(
        teacher, student, teacher_layers_for(1, 2), relation_heads=2, initial_map=embedding_projection(teacher, 8).T
    )
    assert [tuple(p.shape) for p in narrow.projections] == [(8, 24), (8, 24)]
    assert narrow.pairs == [(0, 0), (1, 2)]
    loss = narrow.per_example_loss(forward_internals(student, inputs_of(b)), inputs_of(b)).numpy()
    assert loss.shape == (3,) and np.all(loss > 0)


def test_relation_kl_is_zero_between_equal_vectors_positive_otherwise_and_blind_to_padding():
    rng = np.random.default_rng(0)
    mask = np.array([[1, 1, 1, 0, 0]], np.float32)
    bias = tf.constant(((mask - 1.0) * 1e9).reshape(1, 1, 1, 5))
    teacher, student = (tf.constant(rng.normal(size=(1, 5, 12)), tf.float32) for _ in range(2))
    kl = relation_kl(teacher, student, 3, bias, tf.constant(mask)).numpy()
    np.testing.assert_allclose(relation_kl(teacher, teacher, 3, bias, tf.constant(mask)).numpy(), 0.0, atol=1e-6)
    assert kl[0] > 0
    # A relation of 3-wide student heads against 4-wide teacher heads: only the head count must agree.
    wide = tf.constant(rng.normal(size=(1, 5, 9)), tf.float32)
    assert relation_kl(teacher, wide, 3, bias, tf.constant(mask)).shape == (1,)
    padded = tf.concat([student[:, :3], tf.constant(rng.normal(size=(1, 2, 12)), tf.float32)], axis=1)
    np.testing.assert_allclose(relation_kl(teacher, padded, 3, bias, tf.constant(mask)).numpy(), kl, rtol=1e-6)


def test_an_objective_without_logit_terms_is_the_intermediate_terms_alone():
    teacher, b = model(config(), 0), batch()
    student = model(config(hidden=8, layers=1, heads=2, ffn=16), 1)
    terms = IntermediateKD(teacher, student, [1], relation_heads=2, initial_map=embedding_projection(teacher, 8).T)
    alone = Objective(kd_weight=1.0, intermediate_weight=0.5, intermediate=terms, logit_terms=False)
    assert not alone.uses_teacher_logits and alone.extra_variables == terms.projections
    expected = 0.5 * terms.per_example_loss(forward_internals(student, inputs_of(b)), inputs_of(b))
    np.testing.assert_allclose(alone.per_example_loss(student, b).numpy(), expected.numpy(), rtol=1e-6)
    joint = Objective(intermediate_weight=0.5, intermediate=terms).per_example_loss(student, b)
    plain = Objective().per_example_loss(student, b)
    np.testing.assert_allclose(joint.numpy(), (plain + expected).numpy(), rtol=1e-5)
    with pytest.raises(UserError, match="--intermediate-kd"):
        Objective(intermediate_weight=-1.0, intermediate=terms)


def test_projected_init_at_equal_shapes_is_the_teacher_exactly():
    teacher, b = model(config(), 0), batch()
    student, record = student_from_teacher(teacher, config(), seed=3, init="projected")
    assert record["init"] == "projected" and record["teacher_heads"] == [[0, 1, 2, 3], [0, 1, 2, 3]]
    np.testing.assert_allclose(
        student(inputs_of(b))["logits"].numpy(), teacher(inputs_of(b))["logits"].numpy(), rtol=1e-5, atol=1e-6
    )


def test_projected_init_of_a_narrower_student_takes_whole_heads_and_projects_every_side():
    teacher = model(config(hidden=24, layers=3, heads=4, ffn=48), 0)  # heads of 6
    shape = config(hidden=12, layers=1, heads=1, ffn=20)  # one head of 12: two teacher heads side by side
    student, record = student_from_teacher(teacher, shape, seed=3, init="projected")
    basis = embedding_projection(teacher, 12)
    [heads] = record["teacher_heads"]
    assert record["encoder_layers_from"] == [2] and len(heads) == 2 and heads == sorted(heads)
    cols = np.concatenate([np.arange(h * 6, (h + 1) * 6) for h in heads])
    t_att, s_att = teacher.encoder_layers[2].attention, student.encoder_layers[0].attention
    np.testing.assert_allclose(
        s_att.query.kernel.numpy(), basis.T @ t_att.query.kernel.numpy()[:, cols] * np.sqrt(2), rtol=1e-4, atol=1e-6
    )
    np.testing.assert_allclose(
        s_att.output_dense.kernel.numpy(), t_att.output_dense.kernel.numpy()[cols] @ basis, rtol=1e-4, atol=1e-6
    )
    np.testing.assert_allclose(
        student.embeddings.word_embeddings.numpy(),
        teacher.embeddings.word_embeddings.numpy() @ basis,
        rtol=1e-4,
        atol=1e-6,
    )
    # The projected student starts closer to the teacher's last mapped layer than a fresh one.
    b = inputs_of(batch())
    target = forward_internals(teacher, b)["hidden_states"][3].numpy() @ basis
    fresh, _ = student_from_teacher(teacher, shape, seed=3)

    def distance(m):
        return np.mean((forward_internals(m, b)["hidden_states"][1].numpy() - target) ** 2)

    assert distance(student) < distance(fresh)


def test_projected_init_refuses_a_student_that_is_not_whole_teacher_heads():
    teacher = model(config(hidden=24, heads=4), 0)  # heads of 6
    with pytest.raises(UserError, match="whole"):
        student_from_teacher(teacher, config(hidden=16, heads=4, ffn=32), seed=0, init="projected")  # heads of 4


@pytest.mark.parametrize(
    "options, fragment",
    [
        (dict(weight=-1.0), "--intermediate-kd"),
        (dict(weight=float("nan")), "--intermediate-kd"),
        (dict(weight=1.0, epochs=-2.0), "--intermediate-epochs"),
        (dict(epochs=1.0), "--intermediate-epochs needs --intermediate-kd"),
        (dict(weight=1.0, relation_heads=0), "--relation-heads"),
        (dict(init="svd"), "--init"),
    ],
)
def test_bad_layer_options_are_user_errors(options, fragment):
    with pytest.raises(UserError, match=fragment):
        LayerKD(**options).validate()


def test_relation_heads_must_divide_both_widths():
    teacher, student = model(config(hidden=24), 0), model(config(hidden=8, heads=2, ffn=16), 1)
    with pytest.raises(UserError, match="--relation-heads 3 .* student is 8"):
        IntermediateKD(teacher, student, [1, 1], relation_heads=3, initial_map=np.zeros((8, 24), np.float32))


def test_settings_are_empty_at_the_defaults_so_older_runs_resume():
    assert LayerKD().settings() == {}
    assert LayerKD(1.0, 2.0, 4, "projected").settings() == {
        "init": "projected",
        "intermediate_kd": {"weight": 1.0, "epochs": 2.0, "relation_heads": 4},
    }


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    return finetuned_teacher(tmp_path_factory.mktemp("intermediate"), 40)


def distill(capsys, teacher, out, *extra):
    ckpt, data = teacher
    return run_cli(capsys, "distill", "--teacher", ckpt, "--task", data, "--out", out, "--epochs", 1, *COMMON, *extra)


def test_distill_runs_the_layers_stage_then_the_logits_and_resume_refuses_a_changed_setting(teacher, tmp_path, capsys):
    out, options = tmp_path / "student", (*STUDENT, "--init", "projected", "--intermediate-kd", 1)
    code, _, err = distill(capsys, teacher, out, *options, "--intermediate-epochs", 1)
    assert code == 0, err
    metrics = json.loads((out / "metrics.json").read_text())
    assert [s["name"] for s in metrics["stages"]] == ["intermediate", "distill"]
    assert metrics["init"]["init"] == "projected"
    settings = json.loads((out / "run" / "run.json").read_text())
    assert settings["intermediate_kd"] == {"weight": 1.0, "epochs": 1.0, "relation_heads": 4}
    with np.load(out / "run" / "stage-intermediate.npz") as saved:
        assert saved["extra/0"].shape == (16, 32)  # the learned map is checkpointed with its stage ...
    exported = json.loads((out / "config.json").read_text())
    assert exported["hidden_size"] == 16  # ... and the exported student is a plain one
    code, _, err = distill(capsys, teacher, out, *options, "--intermediate-epochs", 1, "--resume")
    assert code == 0, err
    assert json.loads((out / "metrics.json").read_text())["validation_accuracy"] == metrics["validation_accuracy"]
    code, _, err = distill(capsys, teacher, out, *options, "--intermediate-epochs", 2, "--resume")
    assert code == 2
    assert_one_clean_error(err, "different settings", "intermediate_kd")
    code, _, err = distill(
        capsys,
        teacher,
        out,
        *STUDENT,
        "--init",
        "random",
        "--intermediate-kd",
        1,
        "--intermediate-epochs",
        1,
        "--resume",
    )
    assert code == 2
    assert_one_clean_error(err, "different settings", "init")


def test_distill_adds_the_terms_to_every_logits_step_without_a_layers_stage(teacher, tmp_path, capsys):
    options = ("--recipe", "logits", "--intermediate-kd", 0.5)
    code, _, err = distill(capsys, teacher, tmp_path / "s", *STUDENT, *options)
    assert code == 0, err
    metrics = json.loads((tmp_path / "s" / "metrics.json").read_text())
    assert [s["name"] for s in metrics["stages"]] == ["distill"]
    assert metrics["init"]["encoder_layers_from"] is None  # --init random: fresh layers at another width


@pytest.mark.parametrize(
    "extra, fragments",
    [
        (("--intermediate-kd", -1), ("--intermediate-kd", "non-negative")),
        (("--recipe", "logits", "--intermediate-epochs", 1), ("--intermediate-epochs needs --intermediate-kd",)),
        (("--intermediate-kd", 1, "--relation-heads", 3), ("--relation-heads 3", "divide")),
        (("--intermediate-kd", 1, "--prune-vocab", "CORPUS"), ("--prune-vocab with --intermediate-kd",)),
        (("--preset", "L1-H16-A2-F32", "--init", "projected"), ("--init projected", "whole teacher heads")),
    ],
)
def test_bad_options_stop_distill_with_one_clean_error(teacher, tmp_path, capsys, extra, fragments):
    extra = tuple(teacher[1] if e == "CORPUS" else e for e in extra)
    preset = () if "--preset" in extra else ("--preset", "L1-H16-A1-F32")
    code, _, err = distill(capsys, teacher, tmp_path / "s", *preset, *extra)
    assert code == 2
    assert_one_clean_error(err, *fragments)
