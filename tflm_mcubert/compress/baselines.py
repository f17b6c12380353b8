"""The embedding-compression baselines of the paper's Table 1, as `ClusteredLowRankEmbedding`s.

- Adaptive embedding (Baevski & Auli 2019): tokens ranked by train-split frequency, cut at fixed
  cut-offs, ranks d/4^i; here each cluster is initialised from the pretrained table with Alg. 2.
  At another budget (`adaptive_for_budget`): the same shape shrunk or grown as a whole, cut-offs and ranks
  multiplied by one factor.
- Whole-table SVD and FWSVD (Hsu et al. 2022): one low-rank cluster holding the whole vocabulary
  (cluster 0, the dense one, is empty).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from tflm_mcubert.compress.adaptive_shape import (  # noqa: F401 (re-exported)
    ADAPTIVE_CUTOFFS,
    BERT_VOCAB_SIZE,
    adaptive_cutoffs,
    adaptive_for_budget,
    adaptive_params,
    fixed_ranks,
    grown_ranks,
    scaled_adaptive,
)
from tflm_mcubert.errors import UserError
from tflm_mcubert.model.clustered_embedding import ClusteredLowRankEmbedding, permutation_from_ranking
from tflm_mcubert.model.lowrank import fisher_rows
from tflm_mcubert.train.batches import evaluation_batches

if TYPE_CHECKING:
    from tflm_mcubert.model.bert import BertModel
    from tflm_mcubert.train.batches import EncodedSplit
    from tflm_mcubert.train.distill import Objective


def frequency_ranking(token_frequency: np.ndarray) -> np.ndarray:
    """Token ids from most to least frequent, ties by id: `ranking[k]` gets new id k."""
    return np.argsort(-np.asarray(token_frequency), kind="stable")


def adaptive_embedding(
    table: np.ndarray, token_frequency: np.ndarray, *, cutoffs=ADAPTIVE_CUTOFFS, ranks=None, div: float = 4
) -> ClusteredLowRankEmbedding:
    """Frequency-clustered embedding; `ranks` default to d/div^i (BERT-tiny: 32, 8, 2)."""
    table = np.asarray(table)
    if np.shape(token_frequency) != (table.shape[0],):
        raise UserError(f"token frequencies cover {np.size(token_frequency)} ids, the table {table.shape[0]}")
    if ranks is None:
        ranks = fixed_ranks(table.shape[1], len(cutoffs) + 1, div)
    permutation = permutation_from_ranking(frequency_ranking(token_frequency))
    return ClusteredLowRankEmbedding.from_dense(
        table, cutoffs=cutoffs, ranks=ranks, permutation=permutation, origin="adaptive"
    )


def svd_embedding(table: np.ndarray, rank: int) -> ClusteredLowRankEmbedding:
    """The whole table at rank r by plain SVD (Alg. 2): r·(v + d) parameters."""
    return ClusteredLowRankEmbedding.from_dense(table, cutoffs=[0], ranks=[rank], method="svd")


def fwsvd_embedding(table: np.ndarray, rank: int, row_fisher: np.ndarray) -> ClusteredLowRankEmbedding:
    """The whole table at rank r by Fisher-weighted SVD (`row_fisher`: per-token importance)."""
    return ClusteredLowRankEmbedding.from_dense(table, cutoffs=[0], ranks=[rank], method="fwsvd", row_fisher=row_fisher)


def rank_for_budget(vocab_size: int, dim: int, max_params: int) -> int:
    """The largest whole-table rank whose r·(v + d) parameters fit `max_params`."""
    rank = min(dim, max_params // (vocab_size + dim))
    if rank < 1:
        raise UserError(f"{max_params:,} parameters cannot hold even rank 1 ({vocab_size + dim:,})")
    return int(rank)


def embedding_fisher(
    model: BertModel, split: EncodedSplit, objective: Objective, teacher_logits, *, batch_size: int
) -> np.ndarray:
    """FWSVD's per-token importance: Σ over one pass of the squared task-loss gradient of each word row."""
    table = model.embeddings.word_embeddings
    fisher = np.zeros(table.shape[0], np.float64)

    import tensorflow as tf  # only FWSVD needs it here

    @tf.function(reduce_retracing=True)
    def gradient(batch):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(objective.per_example_loss(model, batch))
        return tape.gradient(loss, table.value)

    for batch in evaluation_batches(split, batch_size):
        if teacher_logits is not None:
            batch["teacher_logits"] = np.asarray(teacher_logits[batch["index"]], np.float32)
        batch.pop("index")
        fisher += fisher_rows(gradient({k: tf.constant(v) for k, v in batch.items()}))
    return fisher
