import numpy as np
import pytest

from tflm_mcubert.compress.baselines import (
    ADAPTIVE_CUTOFFS,
    adaptive_embedding,
    frequency_ranking,
    fwsvd_embedding,
    rank_for_budget,
    svd_embedding,
)
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
