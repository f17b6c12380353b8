"""The trainer: alternating update rules, gradients into α/β, checkpoints and exact resumption."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tflm_mcubert.compress import nas
from tflm_mcubert.train.batches import pad_batch, training_batch
from tflm_mcubert.train.distill import Objective
from tflm_mcubert.compress.search_space import RankSearch, TokenClusteringSearch
from tflm_mcubert.train.trainer import RunDirectory, Stage, Trainer, predict_logits
from tflm_mcubert.errors import UserError
from tflm_mcubert.model.bert import BertModel

V, D = 60, 16


def search_model(small_config, kind):
    keras.utils.set_random_seed(0)
    dense = BertModel(small_config(vocab_size=V, hidden_size=D, num_labels=2))
    table = dense.embeddings.word_embeddings.numpy()
    layer = (
        TokenClusteringSearch.from_dense(table, num_clusters=4, div=2)
        if kind == "alpha"
        else RankSearch.from_assignment(table, np.arange(V) % 4, num_clusters=4)
    )
    return dense.with_word_lookup(layer), layer


def snapshot(variables):
    return [np.array(v.numpy()) for v in variables]


def changed(before, variables):
    return [not np.array_equal(b, v.numpy()) for b, v in zip(before, variables)]


def trainer(tmp_path, **kwargs):
    run = RunDirectory(tmp_path / "run", {"test": 1}, resume=kwargs.pop("resume", False))
    return Trainer(run, tf.distribute.get_strategy(), batch_size=8, seed=0, progress=False, **kwargs)


@pytest.mark.parametrize("kind", ["alpha", "beta"])
def test_each_rule_moves_only_its_own_variables(tmp_path, small_config, make_split, kind):
    model, layer = search_model(small_config, kind)
    penalty = nas.SizePenalty(layer.embedding_size, lambda: 0, V * D, lambda_=1.0, target=None)
    weights_rule, arch_rule = nas.search_rules(model, penalty, lr=1e-2, arch_lr=1e-2)
    assert {id(v) for v in arch_rule.variables} == {id(v) for v in layer.architecture_variables()}
    split = make_split(V, size=8, min_len=8, max_len=8)
    for name, rule, moved, kept in [
        ("w", weights_rule, weights_rule.variables, arch_rule.variables),
        ("a", arch_rule, arch_rule.variables, weights_rule.variables),
    ]:
        moved_before, kept_before = snapshot(moved), snapshot(kept)
        trainer(tmp_path / name).fit(Stage(name, model, [rule], split, 1.0, Objective()))
        assert not any(changed(kept_before, kept)), f"rule {name} moved variables it does not own"
        # Every architecture variable gets a gradient (the batch of 8 reaches every cluster of β; α is a
        # full table, of which the batch's rows must move). Most weights move too.
        moves = changed(moved_before, moved)
        assert all(moves) if name == "a" else np.mean(moves) > 0.8


def test_size_penalty_alone_moves_alpha_toward_cheap_clusters(tmp_path, small_config, make_split):
    model, layer = search_model(small_config, "alpha")
    penalty = nas.SizePenalty(layer.embedding_size, lambda: 0, V * D, lambda_=100.0, target=None)
    _, arch_rule = nas.search_rules(model, penalty, lr=1e-3, arch_lr=0.1)
    # Labels the model cannot fit with one step: the penalty decides α for the tokens no batch contains.
    split = make_split(V, size=8, seed=3)
    unseen = np.setdiff1d(np.arange(V), np.concatenate(split.input_ids))
    assert unseen.size
    trainer(tmp_path).fit(Stage("a", model, [arch_rule], split, 1.0, Objective()))
    assert np.all(layer.clustering()[unseen] == int(np.argmin([D, *layer.ranks])))


def test_kd_objective_is_cross_entropy_at_zero_weight_and_matches_the_teacher_at_full_weight(small_config, make_split):
    keras.utils.set_random_seed(1)
    model = BertModel(small_config(vocab_size=V, hidden_size=D, num_labels=3))
    batch = pad_batch(make_split(V, size=4, num_labels=3), np.arange(4))
    logits = model({k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")})["logits"].numpy()
    batch["teacher_logits"] = logits.astype(np.float32)
    ce = Objective().per_example_loss(model, batch).numpy()
    np.testing.assert_allclose(ce, -np.log(tf.nn.softmax(logits).numpy()[np.arange(4), batch["labels"]]), rtol=1e-5)
    kd = Objective(kd_weight=1.0, temperature=3.0).per_example_loss(model, batch).numpy()
    np.testing.assert_allclose(kd, 0.0, atol=1e-5)  # the student IS the teacher


def test_batches_are_padded_to_their_longest_row_and_epochs_reshuffle(make_split):
    split = make_split(V, size=20, seed=2)
    first = training_batch(split, batch_size=8, seed=0, step=0)
    assert first["input_ids"].shape[1] == max(split.input_ids[r].size for r in first["index"])
    assert np.array_equal(first["attention_mask"].sum(1), [split.input_ids[r].size for r in first["index"]])
    epoch_0 = np.concatenate([training_batch(split, batch_size=8, seed=0, step=s)["index"] for s in range(3)])
    epoch_1 = np.concatenate([training_batch(split, batch_size=8, seed=0, step=s)["index"] for s in range(3, 6)])
    assert sorted(epoch_0) == sorted(epoch_1) == list(range(20)) and not np.array_equal(epoch_0, epoch_1)


class Stop(Exception):
    pass


def run_two_stage(tmp_path, small_config, split, *, stop_after=None, resume=False, lr=1e-2):
    """A tiny two-stage search with a budget (λ control and projection) and the final KD fine-tune."""

    def stop(stage, steps):
        if stop_after and (stage, steps) == stop_after:
            raise Stop

    keras.utils.set_random_seed(0)
    tf.config.experimental.enable_op_determinism()
    dense = BertModel(small_config(vocab_size=V, hidden_size=D, num_labels=2))
    run = RunDirectory(tmp_path / "run", {"lr": lr}, resume=resume)
    trainer = Trainer(
        run, tf.distribute.get_strategy(), batch_size=8, seed=0, checkpoint_every=2, progress=False, on_step_end=stop
    )
    teacher_logits = np.random.default_rng(5).normal(size=(len(split), 2)).astype(np.float32)
    job = nas.SearchJob(
        trainer, tf.distribute.get_strategy(), dense, split, Objective(kd_weight=0.5), teacher_logits, batch_size=8
    )
    options = nas.SearchOptions(
        mode="two-stage", target_params=400, lr=lr, arch_lr=0.05, epochs=1.0, finetune_epochs=1.0
    )
    options.final_training = "continue"
    return nas.run_search(job, options)


def test_resume_after_an_interruption_ends_exactly_where_an_uninterrupted_run_does(tmp_path, small_config, make_split):
    split = make_split(V, size=40, seed=4, min_len=8, max_len=8)  # 5 steps per stage, one batch shape
    reference = run_two_stage(tmp_path / "a", small_config, split)
    with pytest.raises(Stop):  # mid Stage 2: its step-4 checkpoint survives, step 5 is lost
        run_two_stage(tmp_path / "b", small_config, split, stop_after=("stage2-ranks", 3))
    resumed = run_two_stage(tmp_path / "b", small_config, split, resume=True)
    assert [r.resumed_from for r in resumed.records] == [5, 2, 0]
    # a stage's seconds count every run of it: Stage 1, trained wholly before the stop, took time too
    stage1 = resumed.records[0]
    assert stage1.seconds > 0 and stage1.seconds == run_meta(tmp_path / "b", resumed.records[0].name)["seconds"]
    assert reference.embedding.describe() == resumed.embedding.describe()
    assert reference.embedding.stored_params() <= 400
    for a, b in zip(reference.model.variables, resumed.model.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.path)
    np.testing.assert_array_equal(
        predict_logits(reference.model, split.remapped(reference.embedding.permutation), 8),
        predict_logits(resumed.model, split.remapped(resumed.embedding.permutation), 8),
    )


def run_meta(root, stage: str) -> dict:
    return RunDirectory(root / "run", {"lr": 1e-2}, resume=True).load_arrays(f"stage-{stage}")[1]


def test_resume_refuses_a_run_with_other_settings_and_a_fresh_run_refuses_an_old_one(tmp_path):
    RunDirectory(tmp_path / "run", {"lr": 1e-2, "data": "abc"}, resume=False)
    with pytest.raises(UserError, match="holds an earlier run; pass --resume"):
        RunDirectory(tmp_path / "run", {"lr": 1e-2, "data": "abc"}, resume=False)
    with pytest.raises(UserError, match=r"different settings \(lr: 0.01 -> 0.02\)"):
        RunDirectory(tmp_path / "run", {"lr": 2e-2, "data": "abc"}, resume=True)
    with pytest.raises(UserError, match="different settings .*the data"):
        RunDirectory(tmp_path / "run", {"lr": 1e-2, "data": "xyz"}, resume=True)
    assert RunDirectory(tmp_path / "run", {"lr": 1e-2, "data": "abc"}, resume=True).resumed
