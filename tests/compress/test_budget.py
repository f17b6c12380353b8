"""Projection of searched architectures onto a parameter budget (`search --target-embedding-params`)."""

import numpy as np
import pytest

from tflm_mcubert.compress.budget import (
    assignment_params,
    betas_for_budget,
    check_target,
    demote_to_budget,
    deployable_params,
    fit_to_bytes,
    params_for_bytes,
    truncate_to_budget,
)
from tflm_mcubert.model.clustered_embedding import ClusteredLowRankEmbedding
from tflm_mcubert.errors import UserError

D = 16


def test_deployable_params_counts_what_the_embedding_stores(random_table):
    assignment = np.random.default_rng(0).integers(0, 4, size=80)
    layer = ClusteredLowRankEmbedding.from_assignment(random_table(80, D), assignment, ranks=[6, 3, 1])
    assert assignment_params(assignment, [6, 3, 1], D) == layer.stored_params()
    assert deployable_params([5, 0, 2, 9], [4, 8, 1], D) == 5 * D + 2 * (2 + D) + 1 * (9 + D)  # rank 8 > 2 tokens


def test_demotion_fits_the_budget_and_moves_the_least_attached_tokens_first():
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(200, 4))
    logits[:20, 0] += 20.0  # twenty tokens that strongly want the dense cluster
    assignment = np.argmax(logits, axis=1)
    ranks = [8, 4, 1]
    budget = 20 * D + 2 * (180 + D)  # room for them, if the other 180 tokens go (nearly) to rank 1
    assert assignment_params(assignment, ranks, D) > 2 * budget
    projected = demote_to_budget(assignment, logits, ranks, D, budget)
    assert assignment_params(projected, ranks, D) <= budget
    cost = np.array([D, *ranks])
    assert np.all(cost[projected] <= cost[assignment])  # only ever to a cheaper cluster
    assert np.all(projected[:20] == 0) and np.sum(projected == 0) < np.sum(assignment == 0)


def test_demotion_stops_when_every_token_is_in_the_cheapest_cluster():
    logits = np.zeros((50, 3))
    projected = demote_to_budget(np.zeros(50, int), logits, [4, 2], D, budget=1)
    assert np.all(projected == 2)


def test_betas_for_budget_prunes_an_over_budget_search_and_fills_an_under_budget_one():
    counts = [10, 30, 100]
    betas = [np.array([0.9, 0.8, 0.2, 0.1]), np.array([0.95, 0.7, 0.3])]
    dense = 10 * D
    for budget in (dense + 2 * (30 + D), dense + (30 + D) + 3 * (100 + D), dense + 10):
        keep = betas_for_budget(counts, betas, D, budget)
        size = deployable_params(counts, [int(k.sum()) for k in keep], D)
        assert size <= budget
        # nothing left out would still fit, and the kept values are each cluster's largest β
        assert all(size + n + D > budget for n, k in zip(counts[1:], keep) if not k.all())
        for k, b in zip(keep, betas):
            assert np.all(b[k][:, None] >= b[~k][None, :]) if k.any() and (~k).any() else True
    keep = betas_for_budget(counts, betas, D, dense + 2 * (30 + D))
    assert [list(k) for k in keep] == [[True, True, False, False], [False, False, False]]


def test_truncation_fits_and_keeps_the_strongest_components(random_table):
    assignment = np.random.default_rng(2).integers(0, 3, size=60)
    layer = ClusteredLowRankEmbedding.from_assignment(random_table(60, D), assignment, ranks=[8, 8])
    budget = layer.stored_params() - 3 * (60 + D)
    truncated = truncate_to_budget(layer, budget)
    assert truncated.stored_params() <= budget and truncated.cutoffs == layer.cutoffs
    assert sum(truncated.ranks) < sum(layer.ranks)
    assert truncate_to_budget(layer, layer.stored_params()) is layer


def test_a_target_below_rank_one_for_every_token_is_refused():
    check_target(30522 + 128, 30522, 128)
    with pytest.raises(UserError, match=r"infeasible.*30,650"):
        check_target(30_000, 30522, 128)


def test_fit_to_bytes_drops_the_least_energy_per_byte_and_never_a_last_free_column(random_table):
    layer = ClusteredLowRankEmbedding.from_dense(random_table(80, D), cutoffs=[10, 30, 60], ranks=[4, 3, 1])
    assert fit_to_bytes(layer, layer.stored_bytes()) is layer
    # One byte under: dropping rank 1 -> 0 of cluster 3 saves nothing (stored as a zero column), rank 3 -> 2 of
    # cluster 2 saves its 30 rows' bytes (its Vᵀ stays padded to 4), rank 4 -> 3 of cluster 1 saves 20.
    fitted = fit_to_bytes(layer, layer.stored_bytes() - 1)
    assert fitted.stored_bytes() <= layer.stored_bytes() - 1 and fitted.ranks[2] == 1
    assert sum(fitted.ranks) == sum(layer.ranks) - 1
    # Every cluster at rank 1 and still over: no drop saves a byte, so the budget is refused.
    floor = ClusteredLowRankEmbedding.from_dense(random_table(80, D), cutoffs=[10, 30, 60], ranks=[1, 1, 1])
    assert fit_to_bytes(layer, floor.stored_bytes()).ranks == (1, 1, 1)
    with pytest.raises(UserError, match="no rank lowers its stored size"):
        fit_to_bytes(layer, floor.stored_bytes() - 1)


def test_a_byte_budget_is_searched_as_parameters_after_the_cluster_tables():
    assert params_for_bytes(10_000, 80, D, 4) == 10_000 - 4 * (8 + 8 * D)
    with pytest.raises(UserError, match="infeasible"):
        params_for_bytes(4 * (8 + 8 * D) + 80 + D - 1, 80, D, 4)
    # int4: the bytes after the tables at a dense row's cost per parameter (d/2 + 2 bytes for d)
    assert params_for_bytes(10_000, 80, D, 4, bits=4) == 2 * (10_000 - 4 * (8 + 8 * D)) * D // (D + 4)
    with pytest.raises(UserError, match="8 or 4"):
        params_for_bytes(10_000, 80, D, 4, bits=2)
