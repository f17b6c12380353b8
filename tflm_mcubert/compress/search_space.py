"""The differentiable NAS search spaces of MCUBERT's embedding compression (paper §3.2), as Keras layers
that plug into `BertModel(word_lookup=...)`.

- `TokenClusteringSearch` (Stage 1, Alg. 1): per-token α over c clusters at fixed ranks d/div^i.
- `RankSearch` (Stage 2, Alg. 3): fixed clustering, per-cluster SVD, β per singular value.
- `JointSearch`: α and β together (the one-stage "DARTS" ablation of Fig. 4).

Each layer's architecture variables (α logits, β) are named `arch_*` and returned by
`architecture_variables()`; `weight_variables()` are the rest, so a training loop can update w and α/β
with separate optimizers (`split_trainable_variables` does it for a whole model). `embedding_size()` is
the paper's Σ_i Size(Emb_i) as a differentiable scalar (a parameter count; scale it by λ, or normalise it
by the dense table's v·d first so that λ does not depend on the model). `to_clustered_embedding()` turns
the searched architecture into the deployable `ClusteredLowRankEmbedding`.

All three take ids of the ORIGINAL vocabulary: the search runs on the unmodified tokenizer and data; only
the final `ClusteredLowRankEmbedding` uses permuted ids (see its `permutation`).

Size formula. The paper gives Size(Emb_i) = Σ_l β_il (d + Σ_j α_ji): the kept ranks of Vᵀ_i (d each) and
of U_i (one per soft token). Cluster 0 is dense and stores no Vᵀ, so we use Size(Emb_0) = d·Σ_j α_j0: the
paper's formula with its d rank-rows of V_0 left out, a constant d² that changes no gradient but would
make the count differ from the stored parameters. With one-hot α and β ∈ {0, 1}, `embedding_size()`
equals `to_clustered_embedding().stored_params()` (non-empty clusters; an empty one stores nothing).
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from tflm_mcubert.compress.adaptive_shape import fixed_ranks  # noqa: F401 (re-exported)

from tflm_mcubert.model.clustered_embedding import (
    ClusteredLowRankEmbedding,
    cluster_boundaries,
    check_permutation,
    invert_permutation,
    permutation_from_assignment,
)
from tflm_mcubert.model.clustered_lookup import clustered_lookup, pad_rows
from tflm_mcubert.model.lowrank import low_rank_factorization
from tflm_mcubert.errors import UserError

ARCH_PREFIX = "arch_"


class UnitInterval(keras.constraints.Constraint):
    """Keeps β in [0, 1] by clipping after every optimizer step (Keras optimizers apply constraints).

    Clipping rather than a sigmoid: the ℓ1 size penalty then pushes β down at a constant rate and a β that
    reaches 0 stays pruned unless the task loss pulls it back, as in the paper's 0 ≤ β ≤ 1.
    """

    def __call__(self, w):
        return tf.clip_by_value(w, 0.0, 1.0)


def _thresholds(beta_threshold, num_clusters: int) -> list[float]:
    values = (
        [float(beta_threshold)] * (num_clusters - 1)
        if np.isscalar(beta_threshold)
        else [float(t) for t in beta_threshold]
    )
    if len(values) != num_clusters - 1 or any(not 0.0 <= t < 1.0 for t in values):
        raise UserError(
            f"beta_threshold must be one value or {num_clusters - 1} values in [0, 1), got {beta_threshold}"
        )
    return values


def _kept_ranks(betas, thresholds, keep) -> list[int]:
    """Alg. 3's ratios: per cluster, how many β_il exceed β*_i (or how many `keep` marks)."""
    keep = keep or [None] * len(betas)
    return [int(np.sum(b > t)) if k is None else int(np.sum(k)) for b, t, k in zip(betas, thresholds, keep)]


def _searched_factors(a: np.ndarray, b: np.ndarray, beta: np.ndarray, rank: int):
    """The deployable factors of one cluster: Alg. 2 at the searched rank, applied to the table the search
    computed, A·diag(β)·B. That is its best rank-r approximation, which keeping the r components of
    largest β is not: β ranks importance, while the approximation error depends on σ·β, and the trained
    factors are no longer exactly orthogonal. With β in {0, 1} both agree exactly."""
    rank = min(rank, a.shape[0], b.shape[1])
    if rank == 0:
        return np.zeros((a.shape[0], 0), np.float32), np.zeros((0, b.shape[1]), np.float32)
    return low_rank_factorization((a * beta) @ b, rank)


class _SearchLayer(keras.layers.Layer):
    def architecture_variables(self) -> list:
        return [v for v in self.trainable_variables if v.name.startswith(ARCH_PREFIX)]

    def weight_variables(self) -> list:
        return [v for v in self.trainable_variables if not v.name.startswith(ARCH_PREFIX)]

    def _table(self, name: str, shape) -> keras.Variable:
        return self.add_weight(name=name, shape=tuple(int(s) for s in shape), initializer="zeros")


def split_trainable_variables(model: keras.Model) -> tuple[list, list]:
    """(weights w, architecture variables α/β) of a model, for two optimizers."""
    trainable = model.trainable_variables
    return (
        [v for v in trainable if not v.name.startswith(ARCH_PREFIX)],
        [v for v in trainable if v.name.startswith(ARCH_PREFIX)],
    )


def _soft_mixture(alpha_logits, ids, per_cluster):
    """Σ_i α_ji · Emb_i[j] with α_j = softmax(logits_j); `per_cluster` lists each cluster's [.., d] vectors."""
    alpha = tf.nn.softmax(tf.gather(alpha_logits, ids), axis=-1)
    return tf.add_n([alpha[..., i : i + 1] * vectors for i, vectors in enumerate(per_cluster)])


def _assignment_factors(assignment, table_0_rows, factor_rows):
    """Gather each cluster's rows for the final layer: tokens sorted by cluster, ties by original id."""
    num_clusters = len(factor_rows) + 1
    permutation, cutoffs = permutation_from_assignment(assignment, num_clusters)
    members = [np.flatnonzero(assignment == i) for i in range(num_clusters)]
    factors = [(u[members[i]], vt) for i, (u, vt) in enumerate(factor_rows, start=1)]
    return table_0_rows[members[0]], factors, cutoffs, permutation


class TokenClusteringSearch(_SearchLayer):
    """Stage 1 (Alg. 1): which cluster each token belongs to, at fixed ranks.

    Cluster 0 is the full table U_0 = Emb; cluster i > 0 is the WHOLE table factorized at rank d/div^i
    (Alg. 2). Token j embeds to α_j0·U_0[j] + Σ_i α_ji·U_i[j]·Vᵀ_i, α_j = softmax(arch_alpha[j]), the logits
    starting at 0 (α = 1/c). U_0, U_i, Vᵀ_i are weights w.
    """

    def __init__(self, vocab_size: int, dim: int, num_clusters: int = 4, div: float = 4, ranks=None, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size, self.dim, self.num_clusters, self.div = int(vocab_size), int(dim), int(num_clusters), div
        if ranks is None:  # a rank above the vocabulary size would be no different from the vocabulary size
            self.ranks = [min(r, self.vocab_size) for r in fixed_ranks(self.dim, self.num_clusters, div)]
        else:  # given ranks (the ratio-then-clustering ablation searches them first)
            self.ranks = [int(r) for r in ranks]
            if len(self.ranks) != self.num_clusters - 1 or any(
                not 0 <= r <= min(self.dim, self.vocab_size) for r in self.ranks
            ):
                raise UserError(
                    f"{self.num_clusters} clusters need {self.num_clusters - 1} ranks within "
                    f"0..{min(self.dim, self.vocab_size)}, got {list(ranks)}"
                )

    def build(self, input_shape=None):
        self.table = self._table("table_0", (self.vocab_size, self.dim))
        self.us = [self._table(f"u_{i}", (self.vocab_size, r)) for i, r in enumerate(self.ranks, start=1)]
        self.vts = [self._table(f"vt_{i}", (r, self.dim)) for i, r in enumerate(self.ranks, start=1)]
        self.alpha_logits = self._table(ARCH_PREFIX + "alpha", (self.vocab_size, self.num_clusters))
        super().build(input_shape)

    @classmethod
    def from_dense(cls, table: np.ndarray, num_clusters: int = 4, div: float = 4, ranks=None, **kwargs):
        table = np.asarray(table, np.float32)
        layer = cls(table.shape[0], table.shape[1], num_clusters, div, ranks=ranks, **kwargs)
        layer.build()
        layer.table.assign(table)
        # Alg. 2 at rank r keeps the leading r columns/rows of the factors at any larger rank: one SVD serves all.
        u, vt = low_rank_factorization(table, max(layer.ranks))
        for u_var, vt_var, rank in zip(layer.us, layer.vts, layer.ranks):
            u_var.assign(u[:, :rank])
            vt_var.assign(vt[:rank])
        return layer

    def call(self, input_ids):
        ids = tf.cast(input_ids, tf.int32)
        per_cluster = [tf.gather(self.table, ids)]
        per_cluster += [tf.matmul(tf.gather(u, ids), vt) for u, vt in zip(self.us, self.vts)]
        return self._mix(ids, per_cluster)

    def _mix(self, ids, per_cluster):
        """The relaxation: the softmax-weighted mixture (the exact search overrides it)."""
        return _soft_mixture(self.alpha_logits, ids, per_cluster)

    def alpha(self) -> tf.Tensor:
        return tf.nn.softmax(self.alpha_logits, axis=-1)

    def embedding_size(self) -> tf.Tensor:
        tokens = tf.reduce_sum(self.alpha(), axis=0)  # Σ_j α_ji: soft token count per cluster
        size = self.dim * tokens[0]
        for i, rank in enumerate(self.ranks, start=1):
            size += rank * (self.dim + tokens[i])  # β fixed at 1 for the rank kept ranks
        return size

    def clustering(self) -> np.ndarray:
        """cls[j] = argmax_i α_ji (Alg. 1, last line)."""
        return np.argmax(self.alpha_logits.numpy(), axis=-1)

    def dense_table(self) -> np.ndarray:
        """The (trained) full table U_0: the Emb that Stage 2 divides into clusters."""
        return np.asarray(self.table.numpy())

    def to_clustered_embedding(self, assignment=None, **kwargs) -> ClusteredLowRankEmbedding:
        """The searched clustering (or `assignment`, e.g. projected onto a budget) with the trained
        fixed-rank factors (the clustering-only NAS model)."""
        assignment = self.clustering() if assignment is None else np.asarray(assignment)
        table_0, factors, cutoffs, permutation = _assignment_factors(
            assignment, self.dense_table(), [(u.numpy(), vt.numpy()) for u, vt in zip(self.us, self.vts)]
        )
        kwargs.setdefault("origin", "nas-clustering")
        return ClusteredLowRankEmbedding.from_factors(
            table_0, factors, cutoffs=cutoffs, permutation=permutation, **kwargs
        )

    def get_config(self):
        config = super().get_config()
        config.update(
            vocab_size=self.vocab_size,
            dim=self.dim,
            num_clusters=self.num_clusters,
            div=self.div,
            ranks=list(self.ranks),
        )
        return config


class RankSearch(_SearchLayer):
    """Stage 2 (Alg. 3): which singular values each cluster keeps, for a fixed clustering.

    Tokens are permuted so that clusters are contiguous (`permutation`, old id → new id, applied inside
    `call`). Cluster 0 is dense; cluster i > 0 holds the full thin SVD of its rows, stored as
    A_i = U_i·Σ_i^½ and B_i = Σ_i^½·Vᵀ_i (weights w), and token j embeds to A_i[j]·diag(β_i)·B_i, which is
    the paper's U_ij·diag(β_i Σ_i)·Vᵀ_i. β_il starts at the threshold β*_i and is clipped to [0, 1]
    (`UnitInterval`); singular value l is kept iff β_il > β*_i.

    Note the paper's initialisation β = β* scales clusters 1..c-1 by β* at the start of Stage 2.
    """

    def __init__(self, vocab_size: int, dim: int, cutoffs, permutation, beta_threshold=0.5, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size, self.dim = int(vocab_size), int(dim)
        self.boundaries = cluster_boundaries(vocab_size, cutoffs)
        self.permutation = check_permutation(permutation)
        self.thresholds = _thresholds(beta_threshold, len(self.boundaries) - 1)
        sizes = [b - a for a, b in zip(self.boundaries[:-1], self.boundaries[1:])]
        self.cluster_sizes = sizes
        self.full_ranks = [min(n, self.dim) for n in sizes[1:]]

    def build(self, input_shape=None):
        self.table = self._table("table_0", (self.cluster_sizes[0], self.dim))
        self.us, self.vts, self.betas = [], [], []
        for i, (n, k, threshold) in enumerate(zip(self.cluster_sizes[1:], self.full_ranks, self.thresholds), start=1):
            self.us.append(self._table(f"u_{i}", (n, k)))
            self.vts.append(self._table(f"vt_{i}", (k, self.dim)))
            self.betas.append(
                self.add_weight(
                    name=f"{ARCH_PREFIX}beta_{i}",
                    shape=(k,),
                    initializer=keras.initializers.Constant(threshold),
                    constraint=UnitInterval(),
                )
            )
        self._new_ids = tf.constant(self.permutation, tf.int32)
        super().build(input_shape)

    @classmethod
    def from_assignment(
        cls, table: np.ndarray, assignment: np.ndarray, num_clusters: int = 4, beta_threshold=0.5, **kwargs
    ) -> "RankSearch":
        """Divide `table` (original id order) by the Stage-1 clustering and SVD each cluster i > 0."""
        table = np.asarray(table, np.float32)
        permutation, cutoffs = permutation_from_assignment(assignment, num_clusters)
        layer = cls(table.shape[0], table.shape[1], cutoffs, permutation, beta_threshold, **kwargs)
        layer.build()
        permuted = table[invert_permutation(permutation)]
        b = layer.boundaries
        layer.table.assign(permuted[b[0] : b[1]])
        for i, (u_var, vt_var, k) in enumerate(zip(layer.us, layer.vts, layer.full_ranks), start=1):
            if k:
                u, vt = low_rank_factorization(permuted[b[i] : b[i + 1]], k)
                u_var.assign(u)
                vt_var.assign(vt)
        return layer

    def call(self, input_ids):
        new_ids = tf.gather(self._new_ids, tf.cast(input_ids, tf.int32))

        def embed_cluster(i, local):
            if i == 0:
                return tf.gather(pad_rows(self.table), local)
            if self.full_ranks[i - 1] == 0:
                return None
            return tf.matmul(tf.gather(pad_rows(self.us[i - 1]), local) * self._gate(i - 1), self.vts[i - 1])

        return clustered_lookup(new_ids, self.boundaries, embed_cluster, self.dim)

    def _gate(self, i: int):
        """How cluster i+1's singular components are weighted: by β (the exact search overrides it)."""
        return self.betas[i]

    def embedding_size(self) -> tf.Tensor:
        size = tf.constant(float(self.cluster_sizes[0] * self.dim))
        for n, beta in zip(self.cluster_sizes[1:], self.betas):
            size += tf.reduce_sum(beta) * float(self.dim + n)  # α one-hot: Σ_j α_ji = n_i
        return size

    def ranks(self) -> list[int]:
        """Alg. 3's ratios: per cluster i > 0, how many β_il exceed β*_i."""
        return [int(np.sum(beta.numpy() > t)) for beta, t in zip(self.betas, self.thresholds)]

    def to_clustered_embedding(self, keep=None, **kwargs) -> ClusteredLowRankEmbedding:
        """The deployable embedding; `keep` (one boolean mask per cluster i > 0) overrides β > β*."""
        ranks = _kept_ranks([b.numpy() for b in self.betas], self.thresholds, keep)
        factors = [
            _searched_factors(u.numpy(), vt.numpy(), beta.numpy(), r)
            for u, vt, beta, r in zip(self.us, self.vts, self.betas, ranks)
        ]
        return ClusteredLowRankEmbedding.from_factors(
            self.table.numpy(),
            factors,
            cutoffs=self.boundaries[1:-1],
            permutation=self.permutation,
            **{"origin": "nas-two-stage", **kwargs},
        )

    def get_config(self):
        config = super().get_config()
        config.update(
            vocab_size=self.vocab_size,
            dim=self.dim,
            cutoffs=self.boundaries[1:-1],
            permutation=self.permutation.tolist(),
            beta_threshold=self.thresholds,
        )
        return config


class JointSearch(_SearchLayer):
    """One-stage search (the DARTS ablation): α and β trained together.

    Cluster 0 is the full table; every cluster i > 0 starts from the full thin SVD of the WHOLE table
    (A_i = U·Σ^½, B_i = Σ^½·Vᵀ; its own copy, as tokens may end anywhere) with its own β_i.
    Token j embeds to α_j0·U_0[j] + Σ_i α_ji·A_i[j]·diag(β_i)·B_i.
    """

    def __init__(self, vocab_size: int, dim: int, num_clusters: int = 4, beta_threshold=0.5, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size, self.dim, self.num_clusters = int(vocab_size), int(dim), int(num_clusters)
        if self.num_clusters < 2:
            raise UserError(f"need at least 2 clusters, got {num_clusters}")
        self.thresholds = _thresholds(beta_threshold, self.num_clusters)
        self.full_rank = min(self.vocab_size, self.dim)

    def build(self, input_shape=None):
        k = self.full_rank
        self.table = self._table("table_0", (self.vocab_size, self.dim))
        self.us = [self._table(f"u_{i}", (self.vocab_size, k)) for i in range(1, self.num_clusters)]
        self.vts = [self._table(f"vt_{i}", (k, self.dim)) for i in range(1, self.num_clusters)]
        self.betas = [
            self.add_weight(
                name=f"{ARCH_PREFIX}beta_{i}",
                shape=(k,),
                initializer=keras.initializers.Constant(t),
                constraint=UnitInterval(),
            )
            for i, t in enumerate(self.thresholds, start=1)
        ]
        self.alpha_logits = self._table(ARCH_PREFIX + "alpha", (self.vocab_size, self.num_clusters))
        super().build(input_shape)

    @classmethod
    def from_dense(cls, table: np.ndarray, num_clusters: int = 4, beta_threshold=0.5, **kwargs):
        table = np.asarray(table, np.float32)
        layer = cls(table.shape[0], table.shape[1], num_clusters, beta_threshold, **kwargs)
        layer.build()
        layer.table.assign(table)
        u, vt = low_rank_factorization(table, layer.full_rank)
        for u_var, vt_var in zip(layer.us, layer.vts):
            u_var.assign(u)
            vt_var.assign(vt)
        return layer

    def call(self, input_ids):
        ids = tf.cast(input_ids, tf.int32)
        per_cluster = [tf.gather(self.table, ids)]
        per_cluster += [tf.matmul(tf.gather(u, ids) * beta, vt) for u, vt, beta in zip(self.us, self.vts, self.betas)]
        return _soft_mixture(self.alpha_logits, ids, per_cluster)

    def alpha(self) -> tf.Tensor:
        return tf.nn.softmax(self.alpha_logits, axis=-1)

    def embedding_size(self) -> tf.Tensor:
        tokens = tf.reduce_sum(self.alpha(), axis=0)
        size = self.dim * tokens[0]
        for i, beta in enumerate(self.betas, start=1):
            size += tf.reduce_sum(beta) * (self.dim + tokens[i])
        return size

    def clustering(self) -> np.ndarray:
        return np.argmax(self.alpha_logits.numpy(), axis=-1)

    def ranks(self) -> list[int]:
        return [int(np.sum(beta.numpy() > t)) for beta, t in zip(self.betas, self.thresholds)]

    def to_clustered_embedding(self, assignment=None, keep=None, **kwargs) -> ClusteredLowRankEmbedding:
        """The deployable embedding of `assignment` (default argmax α) keeping β > β* (or the `keep` masks)."""
        ranks = _kept_ranks([b.numpy() for b in self.betas], self.thresholds, keep)
        assignment = self.clustering() if assignment is None else np.asarray(assignment)
        permutation, cutoffs = permutation_from_assignment(assignment, self.num_clusters)
        members = [np.flatnonzero(assignment == i) for i in range(self.num_clusters)]
        factors = [
            _searched_factors(u.numpy()[members[i]], vt.numpy(), beta.numpy(), r)
            for i, (u, vt, beta, r) in enumerate(zip(self.us, self.vts, self.betas, ranks), start=1)
        ]
        table_0 = self.table.numpy()[members[0]]
        return ClusteredLowRankEmbedding.from_factors(
            table_0, factors, cutoffs=cutoffs, permutation=permutation, **{"origin": "nas-one-stage", **kwargs}
        )

    def get_config(self):
        config = super().get_config()
        config.update(
            vocab_size=self.vocab_size, dim=self.dim, num_clusters=self.num_clusters, beta_threshold=self.thresholds
        )
        return config
