import numpy as np
import pytest

from tflm_mcubert.compress.baselines import (
    ADAPTIVE_CUTOFFS,
    adaptive_cutoffs,
    adaptive_embedding,
    adaptive_for_budget,
    adaptive_params,
    frequency_ranking,
    fwsvd_embedding,
    grown_ranks,
    rank_for_budget,
    scaled_adaptive,
    svd_embedding,
)
from tflm_mcubert.errors import UserError
from tflm_mcubert.model.clustered_embedding import stored_embedding_bytes
from tflm_mcubert.model.clustered_embedding import ClusteredLowRankEmbedding
from tflm_mcubert.compress.search_space import fixed_ranks

BERT_VOCAB = 30522


@pytest.mark.parametrize(
    "dim, ranks, params, paper_millions",
    [
        (128, [32, 8, 2], 318_420, 0.318),  # BERT-tiny, Table 1
        (256, [64, 16, 4], 647_592, 0.648),  # BERT-mini, Table 1
    ],
)
def test_adaptive_embedding_params_match_the_paper(dim, ranks, params, paper_millions):
    assert fixed_ranks(dim, 4, 4) == ranks
    layer = ClusteredLowRankEmbedding(BERT_VOCAB, dim, ADAPTIVE_CUTOFFS, ranks)
    # 1000·d + 3000·r1 + r1·d + 6000·r2 + r2·d + 20522·r3 + r3·d
    assert layer.stored_params() == params
    assert round(params / 1e6, 3) == paper_millions


def test_fwsvd_budget_of_the_paper_is_rank_12():
    rank = rank_for_budget(BERT_VOCAB, 128, 368_000)
    assert rank == 12
    assert ClusteredLowRankEmbedding(BERT_VOCAB, 128, [0], [rank]).stored_params() == 367_800  # paper: 0.368M


def test_adaptive_embedding_puts_frequent_tokens_first_ties_by_id(random_table):
    table = random_table(40, 8)
    frequency = np.zeros(40, int)
    frequency[[7, 3, 30, 12]] = [5, 9, 5, 1]
    assert list(frequency_ranking(frequency)[:5]) == [3, 7, 30, 12, 0]
    layer = adaptive_embedding(table, frequency, cutoffs=(4, 10, 20), div=2)
    assert list(layer.ranks) == [4, 2, 1]
    assert [int(layer.permutation[t]) for t in (3, 7, 30, 12)] == [0, 1, 2, 3]
    out = layer(layer.remap(np.array([[3, 7, 30, 12]]))).numpy()[0]
    np.testing.assert_array_equal(out, table[[3, 7, 30, 12]])  # cluster 0 is dense


def test_whole_table_baselines_are_one_low_rank_cluster(random_table):
    table = random_table(50, 8)
    svd = svd_embedding(table, 3)
    assert svd.cluster_sizes == [0, 50] and svd.stored_params() == 3 * (50 + 8)
    u, s, vt = np.linalg.svd(table.astype(np.float64), full_matrices=False)
    np.testing.assert_allclose(svd(np.arange(50)[None]).numpy()[0], (u[:, :3] * s[:3]) @ vt[:3], atol=1e-5)

    fisher = np.random.default_rng(0).gamma(0.3, size=50)
    fw = fwsvd_embedding(table, 3, fisher)
    assert fw.stored_params() == svd.stored_params()
    fw_error = np.sum(fisher[:, None] * (fw(np.arange(50)[None]).numpy()[0] - table) ** 2)
    svd_error = np.sum(fisher[:, None] * (svd(np.arange(50)[None]).numpy()[0] - table) ** 2)
    assert fw_error < svd_error
    assert fw.describe()["origin"] == "fwsvd"


@pytest.mark.parametrize("dim", [128, 256])
def test_adaptive_for_budget_gives_the_paper_configuration_at_its_own_size(dim):
    paper = ClusteredLowRankEmbedding(BERT_VOCAB, dim, ADAPTIVE_CUTOFFS, fixed_ranks(dim, 4, 4)).stored_params()
    assert adaptive_for_budget(BERT_VOCAB, dim, paper) == (list(ADAPTIVE_CUTOFFS), fixed_ranks(dim, 4, 4))


@pytest.mark.parametrize(
    "percent, cutoffs, ranks, params",
    [(2, [293, 1172, 2930], [9, 2, 1], 78_059), (4, [597, 2388, 5970], [19, 5, 1], 156_107)],
)
def test_adaptive_for_budget_scales_cutoffs_and_ranks_by_one_factor(percent, cutoffs, ranks, params):
    target = BERT_VOCAB * 128 * percent // 100
    got = adaptive_for_budget(BERT_VOCAB, 128, target)
    assert got == (cutoffs, ranks)
    assert adaptive_params(BERT_VOCAB, 128, *got) == params <= target
    assert ClusteredLowRankEmbedding(BERT_VOCAB, 128, *got).stored_params() == params
    factor = cutoffs[0] / 1000
    assert got == scaled_adaptive(BERT_VOCAB, 128, ADAPTIVE_CUTOFFS, [32, 8, 2], factor)
    # the next head size is over the target: the largest configuration that fits
    bigger = scaled_adaptive(BERT_VOCAB, 128, ADAPTIVE_CUTOFFS, [32, 8, 2], (cutoffs[0] + 1) / 1000)
    assert adaptive_params(BERT_VOCAB, 128, *bigger) > target


def test_adaptive_for_budget_is_the_largest_fit_by_brute_force():
    vocab, dim = 500, 64
    base, ranks = adaptive_cutoffs(vocab, 4), fixed_ranks(dim, 4, 4)
    reach = (vocab - 1) * base[0] // base[-1]  # the largest head whose cut-offs fit the vocabulary

    def config(step):  # the shape grown as a whole up to that head, then its ranks alone toward d
        head = min(step, reach)
        cutoffs, head_ranks = scaled_adaptive(vocab, dim, base, ranks, head / base[0])
        return cutoffs, grown_ranks(head_ranks, dim, step - head)

    steps = range(1, reach + dim + 1)
    sizes = [adaptive_params(vocab, dim, *config(step)) for step in steps]
    assert sizes == sorted(sizes)  # monotone: bisection finds the largest fit
    assert config(steps[-1])[1] == [dim] * 3 and sizes[-1] > vocab * dim  # up to past the dense table
    for target in range(sizes[0], sizes[-1] + 200, 37):
        best = max(step for step, size in zip(steps, sizes) if size <= target)
        assert adaptive_for_budget(vocab, dim, target) == config(best)


@pytest.mark.parametrize("bits", [8, 4])
def test_a_budget_past_the_last_cutoffs_reach_is_spent_on_the_ranks(bits):
    """BERT-tiny-wide tables on a 2 MB board: once the last cut-off reaches the vocabulary's end the ranks
    keep growing toward d, up to about the dense table's size, instead of the shape stopping there."""
    vocab, dim = BERT_VOCAB, 96

    def stored(cutoffs, ranks):
        bounds = [0, *cutoffs, vocab]
        return stored_embedding_bytes([b - a for a, b in zip(bounds[:-1], bounds[1:])], ranks, dim, bits)

    reach = (vocab - 1) * ADAPTIVE_CUTOFFS[0] // ADAPTIVE_CUTOFFS[-1]
    largest_scaled = scaled_adaptive(vocab, dim, ADAPTIVE_CUTOFFS, fixed_ranks(dim, 4, 4), reach / 1000)
    target = vocab * dim * bits // 8 * 3 // 5  # 60% of the dense table: past the scaled shape's largest size
    assert target > stored(*largest_scaled)
    cutoffs, ranks = adaptive_for_budget(vocab, dim, target, bits=bits)
    assert stored(*largest_scaled) < stored(cutoffs, ranks) <= target
    assert cutoffs == largest_scaled[0] and all(a > b for a, b in zip(ranks, largest_scaled[1]))
    assert any(ranks == grown_ranks(largest_scaled[1], dim, step) for step in range(1, dim + 1))


def test_adaptive_for_budget_refuses_a_budget_below_its_smallest_shape():
    with pytest.raises(UserError, match="below the smallest adaptive embedding"):
        adaptive_for_budget(BERT_VOCAB, 128, 31_000)  # smallest: 31,033


def test_search_adaptive_at_a_budget_uses_the_scaled_configuration(tmp_path, small_config, make_split):
    import keras
    import tensorflow as tf

    from tflm_mcubert.compress import nas
    from tflm_mcubert.model.bert import BertModel
    from tflm_mcubert.train.distill import Objective
    from tflm_mcubert.train.trainer import RunDirectory, Trainer

    vocab, dim, target = 200, 32, 1500
    keras.utils.set_random_seed(0)
    dense = BertModel(small_config(vocab_size=vocab, hidden_size=dim, num_labels=2))
    split = make_split(vocab, size=16, seed=4, min_len=8, max_len=8)
    trainer = Trainer(
        RunDirectory(tmp_path / "run", {"test": 1}, resume=False),
        tf.distribute.get_strategy(),
        batch_size=8,
        seed=0,
        progress=False,
    )
    job = nas.SearchJob(trainer, tf.distribute.get_strategy(), dense, split, Objective(), None, batch_size=8)
    options = nas.SearchOptions(mode="adaptive", target_params=target, epochs=0.1, finetune_epochs=0.1)
    outcome = nas.run_search(job, options)
    cutoffs, ranks = adaptive_for_budget(vocab, dim, target)
    assert outcome.details["cutoffs"] == cutoffs and outcome.details["ranks"] == ranks
    assert outcome.embedding.cutoffs == cutoffs and list(outcome.embedding.ranks) == ranks
    assert outcome.embedding.stored_params() == adaptive_params(vocab, dim, cutoffs, ranks) <= target
    with pytest.raises(UserError, match="not both"):
        nas.SearchOptions(mode="adaptive", target_params=target, ranks=(4, 2, 1)).validate(vocab, dim)
