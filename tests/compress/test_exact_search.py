"""The exact search: what it trains is what it writes; rare tokens; rank 0 end to end; the fine-tune's lr."""

import dataclasses

import keras
import numpy as np
import pytest
import tensorflow as tf

from tflm_mcubert.compress import budget_control, exact_space, nas
from tflm_mcubert.model.bert import BertModel
from tflm_mcubert.model.clustered_embedding import ClusteredLowRankEmbedding, permutation_from_assignment
from tflm_mcubert.train.distill import Objective
from tflm_mcubert.train.trainer import RunDirectory, Stage, Trainer, WarmupLinearDecay

V, D = 60, 16


def tiny_trainer(tmp_path, on_step_end=None):
    run = RunDirectory(tmp_path / "run", {"test": 1}, resume=False)
    return Trainer(run, tf.distribute.get_strategy(), batch_size=8, seed=0, progress=False, on_step_end=on_step_end)


@pytest.mark.parametrize("control", ["multiplicative", "projected"])
def test_the_architecture_trained_in_the_last_step_is_the_one_written(
    tmp_path, small_config, make_split, monkeypatch, control
):
    layers = {}  # the stage layers, caught as the search makes its choices before each step
    for cls in (
        exact_space.ExactClusteringSearch,
        budget_control.ProjectedClusteringSearch,
        exact_space.ExactRankSearch,
    ):
        original = cls.choose

        def choose(self, original=original):
            clustering = isinstance(self, exact_space.ExactClusteringSearch)
            layers["ExactClusteringSearch" if clustering else "ExactRankSearch"] = self
            return original(self)

        monkeypatch.setattr(cls, "choose", choose)
    trained = {}  # after every step: the hard choice that step's forward passes used

    def record(stage, steps):
        if stage == "stage1-clustering":
            trained["assignment"] = layers["ExactClusteringSearch"].assignment.numpy().tobytes()
        elif stage == "stage2-ranks":
            trained["masks"] = [m.numpy().tobytes() for m in layers["ExactRankSearch"].masks]

    keras.utils.set_random_seed(0)
    dense = BertModel(small_config(vocab_size=V, hidden_size=D, num_labels=2))
    split = make_split(V, size=40, seed=4, min_len=8, max_len=8)
    job = nas.SearchJob(
        tiny_trainer(tmp_path, record),
        tf.distribute.get_strategy(),
        dense,
        split,
        Objective(),
        None,
        batch_size=8,
        validation=make_split(V, size=16, seed=7, min_len=8, max_len=8),
    )
    # A budget so tight that the search must drop whole clusters: rank 0 is a choice it can make.
    options = nas.SearchOptions(
        target_params=200,
        arch_lr=0.05,
        lr=1e-2,
        epochs=1.0,
        finetune_epochs=0.2,
        min_count=1,
        budget_control=control,
        final_training="continue",  # what is written is what the search trained, not a retrained candidate
    )
    outcome = nas.run_search(job, options)

    rank_layer = layers["ExactRankSearch"]
    masks = [np.frombuffer(m, np.float32) > 0.5 for m in trained["masks"]]
    assignment = np.frombuffer(trained["assignment"], np.int32)
    permutation, cutoffs = permutation_from_assignment(assignment, 4)
    written = outcome.embedding
    assert written.permutation.tobytes() == permutation.tobytes()
    assert list(written.cutoffs) == cutoffs
    assert list(written.ranks) == [int(m.sum()) for m in masks]
    assert 0 in written.ranks and written.stored_params() <= 200
    for u, vt, u_trained, vt_trained, mask in zip(written.us, written.vts, rank_layer.us, rank_layer.vts, masks):
        # The kept columns as trained; the fine-tune moved the values, never the shapes.
        assert u.shape == u_trained.numpy()[:, mask].shape and vt.shape == vt_trained.numpy()[mask].shape
    for stage in ("stage1", "stage2"):  # no soft/hard gap: the model trained IS the model written
        log = outcome.details[stage]
        assert log["trained"] == "hard" and log["trained_dev"] == log["hard_dev"], log


def test_the_written_embedding_computes_what_the_last_step_trained(small_config):
    keras.utils.set_random_seed(1)
    table = np.random.default_rng(0).normal(size=(V, D)).astype(np.float32)
    layer = exact_space.ExactRankSearch.from_clustering(
        table, np.arange(V) % 4, num_clusters=4, beta_threshold=0.5, budget=V * 2
    )
    ids = np.arange(V, dtype=np.int32)[np.newaxis]
    embedding = layer.to_clustered_embedding()
    np.testing.assert_allclose(embedding(embedding.permutation[ids]).numpy(), layer(ids).numpy(), rtol=1e-5, atol=1e-5)
    with exact_space.relaxed(layer):  # the relaxation differs (β = 1 everywhere: every component, masked or not)
        assert not np.allclose(layer(ids).numpy(), embedding(embedding.permutation[ids]).numpy())


def test_rare_tokens_follow_their_frequency_cluster(tmp_path, small_config, make_split):
    keras.utils.set_random_seed(0)
    dense = BertModel(small_config(vocab_size=V, hidden_size=D, num_labels=2))
    split = make_split(V, size=16, seed=3, min_len=8, max_len=8)
    frequency = np.bincount(np.concatenate(split.input_ids), minlength=V)
    start = np.arange(V) % 4
    layer = exact_space.ExactClusteringSearch.from_frequency(
        dense.embeddings.word_embeddings.numpy(), start, frequency, min_count=3, num_clusters=4, div=2
    )
    model = dense.with_word_lookup(layer)
    penalty = nas.SizePenalty(layer.embedding_size, lambda: 0, V * D, lambda_=100.0, target=None)
    rules = nas.search_rules(model, penalty, lr=1e-3, arch_lr=0.5)
    stage = Stage("s1", model, rules, split, 2.0, Objective(), before_step=layer.choose)
    tiny_trainer(tmp_path).fit(stage)
    rare, owned = frequency < 3, frequency >= 3
    assert rare.any() and owned.any()
    assert np.array_equal(layer.clustering()[rare], start[rare])
    assert np.any(layer.clustering()[owned] != start[owned])  # the others are free to move (the penalty moves them)


def test_rank_zero_survives_save_load_and_export(tmp_path, small_config):
    from tflm_mcubert.data.calibration import random_samples
    from tflm_mcubert.export.mcubert_export import export_mcubert
    from tflm_mcubert.model.bert import build_model
    from tflm_mcubert.model.config import BertConfig
    from tflm_mcubert.model.hf_import import load_checkpoint, save_checkpoint

    config = BertConfig(
        vocab_size=120,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        type_vocab_size=2,
        num_labels=2,
    )
    model = build_model(config, seed=0)
    table = model.embeddings.word_embeddings.numpy()
    assignment = np.repeat([0, 1, 2, 3], 30)
    layer = exact_space.ExactRankSearch.from_clustering(
        table, assignment, num_clusters=4, beta_threshold=0.5, budget=30 * 32 + 3 * (30 + 32)
    )
    for mask, keep in zip(layer.masks, ([1, 1, 1] + [0] * 27, [0] * 30, [0] * 30)):
        mask.assign(np.asarray(keep, np.float32))  # cluster 1 at rank 3, clusters 2 and 3 at rank 0
    embedding = layer.to_clustered_embedding()
    assert list(embedding.ranks) == [3, 0, 0]
    pad = int(embedding.permutation[config.pad_token_id])
    compressed = model.with_word_lookup(embedding, config=dataclasses.replace(config, pad_token_id=pad))
    save_checkpoint(compressed, tmp_path / "ckpt", None, compression_info={"mode": "two-stage", "metrics": {}})
    loaded = load_checkpoint(str(tmp_path / "ckpt")).model
    assert list(loaded.embeddings.word_lookup.ranks) == [3, 0, 0]
    inputs = {
        "input_ids": np.array([[1, 40, 70, 100, 119]], np.int32),
        "attention_mask": np.ones((1, 5), np.int32),
        "token_type_ids": np.zeros((1, 5), np.int32),
    }
    np.testing.assert_array_equal(loaded(inputs)["logits"].numpy(), compressed(inputs)["logits"].numpy())
    samples = random_samples(config.vocab_size, 16, 2)
    result = export_mcubert(loaded, None, seq_len=16, arena_budget=1 << 30, samples=samples, sentences=None)
    # The MCUBERT op needs rank >= 1, so the exporter stores a rank-0 cluster as one zero column (n + d
    # bytes, `quantize.float_model`): its tokens still embed to zero, as the searched model's do.
    assert result.quantized.embedding.clusters[:, 0].tolist() == [30, 60, 90, 120]
    assert result.quantized.embedding.clusters[:, 1].tolist()[1:] == [3, 1, 1]
    assert result.fidelity["mean_pooled_cosine_min"] > 0.99


def test_finetune_lr_warms_up_over_6_percent_then_decays_linearly_to_zero():
    schedule = WarmupLinearDecay(1.0, 100)
    lr = np.array([float(schedule(step)) for step in range(100)])
    assert schedule.warmup_steps == 6
    np.testing.assert_allclose(lr[:6], np.arange(1, 7) / 6, rtol=1e-6)  # the first update already moves
    assert lr[5] == lr.max() == 1.0
    np.testing.assert_allclose(np.diff(lr[5:]), -1 / 95, rtol=1e-4)  # linear, down to the last step
    assert 0 < lr[-1] < 0.02


def test_baselines_get_as_many_steps_as_the_search_and_its_fine_tune(tmp_path, small_config, make_split):
    keras.utils.set_random_seed(0)
    dense = BertModel(small_config(vocab_size=V, hidden_size=D, num_labels=2))
    split = make_split(V, size=30, seed=4, min_len=8, max_len=8)  # 4 steps an epoch, the last one short
    steps = {}
    runs = {"continue": ("two-stage", {"target_params": 400, "final_training": "continue"})}
    runs |= {"retrain": ("two-stage", {"target_params": 400, "final_training": "retrain"})}
    runs |= {"adaptive": ("adaptive", {"ranks": (4, 2, 1)})}
    for name, (mode, extra) in runs.items():
        job = nas.SearchJob(
            tiny_trainer(tmp_path / name), tf.distribute.get_strategy(), dense, split, Objective(), None, batch_size=8
        )
        outcome = nas.run_search(job, nas.SearchOptions(mode=mode, epochs=0.3, finetune_epochs=0.6, **extra))
        steps[name] = [record.steps for record in outcome.records]
    assert sum(steps["continue"]) == steps["adaptive"][0] == 2 + 2 + 3
    # search, then train: the found architecture gets exactly the baseline's fine-tune, the search's cost apart
    assert steps["retrain"] == [2, 2, steps["adaptive"][0]]
    assert nas.SearchOptions().relaxation == "exact" and nas.SearchOptions().lr_schedule == "warmup-linear"


def test_clustered_embedding_from_factors_keeps_a_rank_zero_cluster():
    table_0 = np.ones((2, 4), np.float32)
    factors = [(np.ones((3, 2), np.float32), np.ones((2, 4), np.float32)), (np.zeros((3, 0)), np.zeros((0, 4)))]
    layer = ClusteredLowRankEmbedding.from_factors(table_0, factors, cutoffs=[2, 5])
    assert list(layer.ranks) == [2, 0] and layer.stored_params() == 2 * 4 + 2 * (3 + 4)
    np.testing.assert_array_equal(layer(np.array([[5, 6, 7]], np.int32)).numpy(), 0.0)


def test_stage1_can_start_from_adaptive_embedding_scaled_to_the_budget(tmp_path, small_config, make_split):
    from tflm_mcubert.compress.baselines import adaptive_cutoffs, adaptive_for_budget
    from tflm_mcubert.compress.search_space import fixed_ranks

    keras.utils.set_random_seed(0)
    dense = BertModel(small_config(vocab_size=V, hidden_size=D, num_labels=2))
    split = make_split(V, size=24, seed=5, min_len=8, max_len=8)
    target = 200
    cutoffs, ranks = adaptive_for_budget(V, D, target)
    # Not the paper's shape at this budget: a start at d/4^i would be over it and collapse the dense cluster.
    assert (cutoffs, ranks) != (adaptive_cutoffs(V, 4), fixed_ranks(D, 4, 4))
    starts = {}
    for start in nas.STAGE1_STARTS:
        trainer = tiny_trainer(tmp_path / start)
        job = nas.SearchJob(trainer, tf.distribute.get_strategy(), dense, split, Objective(), None, batch_size=8)
        options = nas.SearchOptions(
            target_params=target, epochs=0.2, finetune_epochs=0.1, min_count=1, stage1_start=start
        )
        options.final_training = "continue"  # only Stage 1's start is looked at
        stage1 = nas.run_search(job, options).details["stage1"]
        starts[start] = stage1["start_clusters"], stage1["start_ranks"]

    def sizes(cuts):
        return [b - a for a, b in zip([0, *cuts], [*cuts, V])]

    assert starts["budget"] == (sizes(cutoffs), ranks)
    assert starts["paper"] == (sizes(adaptive_cutoffs(V, 4)), fixed_ranks(D, 4, 4))
