"""search --budget-control projected: every step's hard architecture fits the budget, tokens still move."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tflm_mcubert.compress import budget as budgets
from tflm_mcubert.compress import budget_control, exact_space, nas
from tflm_mcubert.compress.baselines import adaptive_for_budget
from tflm_mcubert.errors import UserError
from tflm_mcubert.model.bert import BertModel
from tflm_mcubert.train.distill import Objective
from tflm_mcubert.train.trainer import RunDirectory, Trainer

V, D = 60, 16
TARGET = 300


def _sizes_per_step(tmp_path, small_config, make_split, monkeypatch, **options):
    """Run a small search; return its outcome and, per stage, the hard size every training step trained."""
    layers = {}
    for cls in (exact_space.ExactClusteringSearch, exact_space.ExactRankSearch):
        original = cls.choose

        def choose(self, original=original):
            layers[isinstance(self, exact_space.ExactRankSearch)] = self
            return original(self)

        monkeypatch.setattr(cls, "choose", choose)
    sizes = {"stage1-clustering": [], "stage2-ranks": []}

    def record(stage, steps):
        if stage == "stage1-clustering":
            layer = layers[False]
            sizes[stage].append(budgets.assignment_params(layer.clustering(), layer.ranks, D))
        elif stage == "stage2-ranks":
            layer = layers[True]
            sizes[stage].append(budgets.deployable_params(layer.cluster_sizes, layer.ranks(), D))

    keras.utils.set_random_seed(0)
    dense = BertModel(small_config(vocab_size=V, hidden_size=D, num_labels=2))
    split = make_split(V, size=40, seed=4, min_len=8, max_len=8)
    run = RunDirectory(tmp_path / "run", {"test": 1}, resume=False)
    trainer = Trainer(run, tf.distribute.get_strategy(), batch_size=8, seed=0, progress=False, on_step_end=record)
    job = nas.SearchJob(trainer, tf.distribute.get_strategy(), dense, split, Objective(), None, batch_size=8)
    defaults = dict(target_params=TARGET, epochs=6.0, finetune_epochs=0.2, min_count=1, stage1_start="budget")
    defaults["final_training"] = "continue"  # the search's own result is looked at
    return nas.run_search(job, nas.SearchOptions(**{**defaults, **options})), sizes


def test_projected_control_holds_the_budget_at_every_step_while_tokens_move(
    tmp_path, small_config, make_split, monkeypatch
):
    outcome, sizes = _sizes_per_step(
        tmp_path, small_config, make_split, monkeypatch, budget_control="projected", arch_lr=1e-2
    )
    stage1, stage2 = sizes["stage1-clustering"], sizes["stage2-ranks"]
    assert len(stage1) == len(stage2) == 30
    # Never over the budget, at any step of either stage.
    assert max(stage1) <= TARGET and max(stage2) <= TARGET
    # The start (adaptive embedding scaled to the budget) is under it; promotions the task loss asks for fill
    # it, then every further promotion is paid for by demotions: from then on within one dense row of it.
    log = outcome.details["stage1"]
    assert stage1[0] == budgets.deployable_params(log["start_clusters"], log["start_ranks"], D) < TARGET - D
    filled = next(i for i, size in enumerate(stage1) if size > TARGET - D)
    assert all(size > TARGET - D for size in stage1[filled:])
    assert min(stage2) > TARGET - (D + max(outcome.embedding.cluster_sizes))  # one component of the largest cluster
    # No size penalty on α; a fixed one on β (not steered: the masks hold the budget).
    assert outcome.details["lambda"] == {"stage1-clustering": 0.0, "stage2-ranks": nas.DEFAULT_LAMBDA}
    assert outcome.details["size_range"] == {
        "stage1-clustering": [min(stage1), max(stage1)],
        "stage2-ranks": [min(stage2), max(stage2)],
    }
    assert log["moved_from_frequency"] >= 10
    assert outcome.embedding.stored_params() == stage2[-1]  # written = trained in the last step


def test_multiplicative_control_is_still_the_default_and_barely_moves_here(
    tmp_path, small_config, make_split, monkeypatch
):
    # The contrast the projected control was built for, on the same search: the start margin and the
    # scale-free Adam steps leave the frequency clustering (almost) where it was.
    assert nas.SearchOptions().budget_control == "multiplicative"
    outcome, sizes = _sizes_per_step(tmp_path, small_config, make_split, monkeypatch, arch_lr=1e-2)
    assert outcome.details["stage1"]["moved_from_frequency"] <= 3
    assert max(sizes["stage1-clustering"]) < TARGET - D  # the budget's slack is left unused in Stage 1


def test_start_and_projection_keep_argmax_when_it_fits_and_demote_the_rarest_first():
    cutoffs, ranks = adaptive_for_budget(V, D, TARGET)
    frequency = np.arange(V, 0, -1).astype(np.float64)  # token 0 the most frequent
    start = nas.frequency_assignment(frequency, cutoffs)
    logits = 0.05 * np.eye(4)[start] + budget_control.frequency_tie_break(frequency, start, 4)
    np.testing.assert_array_equal(budget_control.project_clustering(logits, ranks, D, TARGET), start)
    # Every dense token equally keen on cluster 0: a budget one row short demotes the rarest dense token.
    short = budgets.assignment_params(start, ranks, D) - 1
    projected = budget_control.project_clustering(logits, ranks, D, short)
    assert budgets.assignment_params(projected, ranks, D) <= short
    dense = np.flatnonzero(start == 0)
    np.testing.assert_array_equal(np.flatnonzero(projected != start), dense[-1:])


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(budget_control="lagrange", target_params=TARGET), "unknown --budget-control"),
        (dict(budget_control="projected", lambda_=1.0), "needs --target-embedding-params"),
        (dict(budget_control="projected", target_params=TARGET, lambda_=1.0), "leave out --lambda"),
        (dict(budget_control="projected", target_params=TARGET, relaxation="soft"), "--relaxation exact"),
        (dict(budget_control="projected", target_params=TARGET, mode="one-stage"), "--relaxation exact"),
        (dict(target_params=TARGET, alpha_margin=0.0), "--alpha-margin must be positive"),
    ],
)
def test_bad_budget_control_options_are_refused(options, message):
    with pytest.raises(UserError, match=message):
        nas.SearchOptions(**options).validate(V, D)
