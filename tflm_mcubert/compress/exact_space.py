"""The exact search's layers: every architecture they train is one they can deploy.

The paper's relaxation (`search_space`) trains a soft mixture — every token a blend of all clusters, every
singular component scaled by β ∈ [0, 1] — and deploys its argmax / threshold, a different model: a search
that ends near-uniform pays for the difference at conversion. Here the forward pass always uses the hard
choice (one cluster per token, 0/1 rank masks) and the gradient reaches α and β straight through, as if the
soft relaxation had been used (Bengio et al. 2013): out = hard + (soft − stop_gradient(soft)), which equals
`hard` bit for bit in the forward pass.

The hard choices are re-made by `choose()` BEFORE every training step (`Stage.before_step`) and stored in
non-trainable variables, so the choice a step trains is exactly the one written after the last step (no
update of α/β sits between them), and a resumed run re-makes the same choices from the restored α/β.

- `ExactClusteringSearch` (Stage 1): starts from the frequency clustering (adaptive embedding's); tokens
  seen fewer than `min_count` times in training own no α — their logits are frozen at their frequency
  cluster, where the size penalty alone would otherwise decide them.
- `ExactRankSearch` (Stage 2): one mask per cluster i > 0 over its singular components; with a budget the
  masks keep the components of largest importance per parameter, importance = β × the component's energy
  ‖A_l‖²‖B_l‖² (`budget.keep_by_importance`), so a cluster may drop to rank 0; without one, β > β*.

`hardness` (1 in training) switches the forward pass to the soft relaxation for the per-stage logs.
"""

from __future__ import annotations

import contextlib

import numpy as np
import tensorflow as tf

from tflm_mcubert.compress import budget as budgets
from tflm_mcubert.compress.search_space import RankSearch, TokenClusteringSearch
from tflm_mcubert.model.clustered_embedding import ClusteredLowRankEmbedding

# Stage 1's initial logit of a token's frequency cluster (the others start at 0): small enough that Adam at
# the arch learning rate can move a token within one epoch, large enough that the start IS that clustering.
ALPHA_MARGIN = 0.25


def straight_through(hard, soft, hardness):
    """`hard` in the forward pass (exactly, when hardness is 1) with the gradient of `soft`; with hardness 0,
    plain `soft` (the relaxation, for evaluation)."""
    return hardness * (hard + (soft - tf.stop_gradient(soft))) + (1.0 - hardness) * soft


@contextlib.contextmanager
def relaxed(layer):
    """Evaluate `layer` as the soft relaxation (mixture / β-scaled components) inside the block."""
    layer.hardness.assign(0.0)
    try:
        yield layer
    finally:
        layer.hardness.assign(1.0)


def _hardness(layer):
    return layer.add_weight(name="hardness", shape=(), initializer="ones", trainable=False)


class ExactClusteringSearch(TokenClusteringSearch):
    """Stage 1 with a hard clustering in the forward pass (module docstring)."""

    def build(self, input_shape=None):
        v, c = self.vocab_size, self.num_clusters
        self.assignment = self.add_weight(
            name="assignment", shape=(v,), dtype="int32", initializer="zeros", trainable=False
        )
        self.owned = self.add_weight(name="owned", shape=(v, 1), initializer="ones", trainable=False)
        self.frozen_logits = self.add_weight(name="frozen_logits", shape=(v, c), initializer="zeros", trainable=False)
        self.hardness = _hardness(self)
        super().build(input_shape)

    @classmethod
    def from_frequency(
        cls, table, start, frequency, *, min_count: int, num_clusters: int, div: float, ranks=None, margin=ALPHA_MARGIN
    ):
        """Start at clustering `start` (tokens' frequency clusters), its logits `margin` above the others';
        tokens with frequency < min_count keep it."""
        layer = cls.from_dense(table, num_clusters, div, ranks=ranks)
        logits = margin * np.eye(num_clusters, dtype=np.float32)[np.asarray(start)]
        layer.alpha_logits.assign(logits)
        layer.frozen_logits.assign(logits)
        layer.owned.assign((np.asarray(frequency) >= min_count).astype(np.float32)[:, np.newaxis])
        layer.choose()
        return layer

    def effective_logits(self, ids=None):
        """A token's α logits: its own if it owns an α, else its frozen frequency cluster's (no gradient)."""
        pick = (lambda x: x) if ids is None else (lambda x: tf.gather(x, ids))
        owned = pick(self.owned)
        return owned * pick(self.alpha_logits) + (1.0 - owned) * pick(self.frozen_logits)

    def _mix(self, ids, per_cluster):
        soft = tf.nn.softmax(self.effective_logits(ids), axis=-1)
        hard = tf.one_hot(tf.gather(self.assignment, ids), self.num_clusters, dtype=soft.dtype)
        weights = straight_through(hard, soft, self.hardness)
        return tf.add_n([weights[..., i : i + 1] * vectors for i, vectors in enumerate(per_cluster)])

    def alpha(self) -> tf.Tensor:
        return tf.nn.softmax(self.effective_logits(), axis=-1)

    def choose(self) -> None:
        """The clustering the next step trains: argmax of each token's (effective) α."""
        self.assignment.assign(tf.argmax(self.effective_logits(), axis=-1, output_type=tf.int32))

    def clustering(self) -> np.ndarray:
        return np.asarray(self.assignment.numpy(), np.int64)

    def alpha_entropy(self) -> float:
        """Mean entropy (nats) of α over the tokens that own one: log c is uniform, 0 decided."""
        alpha = self.alpha().numpy()
        owned = self.owned.numpy()[:, 0] > 0.5
        entropy = -np.sum(alpha * np.log(np.maximum(alpha, 1e-30)), axis=-1)
        return float(entropy[owned].mean()) if owned.any() else 0.0

    def seen_table(self) -> np.ndarray:
        """Every token's embedding as the hard forward pass computes it: the table the encoder saw."""
        assignment = self.clustering()
        table = np.asarray(self.table.numpy()).copy()
        for i, (u, vt) in enumerate(zip(self.us, self.vts), start=1):
            rows = np.flatnonzero(assignment == i)
            table[rows] = u.numpy()[rows] @ vt.numpy()
        return table


class ExactRankSearch(RankSearch):
    """Stage 2 with 0/1 rank masks in the forward pass (module docstring). `budget`: embedding parameters
    the masks must fit (None: β > β*), or what `stored_size` counts (a byte budget)."""

    budget: int | None = None
    stored_size = None  # what `budget` counts (`budget.keep_by_importance`): None = parameters

    def build(self, input_shape=None):
        self.masks = [
            self.add_weight(name=f"mask_{i}", shape=(k,), initializer="zeros", trainable=False)
            for i, k in enumerate(self.full_ranks, start=1)
        ]
        self.hardness = _hardness(self)
        super().build(input_shape)

    @classmethod
    def from_clustering(
        cls, table, assignment, *, num_clusters: int, beta_threshold, budget: int | None, stored_size=None
    ):
        """Divide `table` (the table Stage 1's encoder saw) by the clustering; β starts at 1 (all kept)."""
        layer = cls.from_assignment(table, assignment, num_clusters, beta_threshold)
        layer.budget, layer.stored_size = budget, stored_size
        for beta in layer.betas:
            beta.assign(np.ones(beta.shape, np.float32))
        layer.choose()
        return layer

    def _gate(self, i: int):
        return straight_through(self.masks[i], self.betas[i], self.hardness)

    def importance(self) -> list[np.ndarray]:
        """β × energy ‖A_l‖²·‖B_l‖² of each component (σ_l² for a fresh SVD, whatever training made of it)."""
        return [
            beta.numpy() * np.sum(u.numpy() ** 2, axis=0) * np.sum(vt.numpy() ** 2, axis=1)
            for u, vt, beta in zip(self.us, self.vts, self.betas)
        ]

    def choose(self) -> None:
        """The masks the next step trains: by importance per parameter within the budget, else β > β*."""
        if self.budget is None:
            keep = [beta.numpy() > t for beta, t in zip(self.betas, self.thresholds)]
        else:
            keep = budgets.keep_by_importance(
                self.cluster_sizes, self.importance(), self.dim, self.budget, self.stored_size
            )
        for mask, k in zip(self.masks, keep):
            mask.assign(k.astype(np.float32))

    def keep_masks(self) -> list[np.ndarray]:
        return [mask.numpy() > 0.5 for mask in self.masks]

    def ranks(self) -> list[int]:
        return [int(k.sum()) for k in self.keep_masks()]

    def to_clustered_embedding(self, keep=None, **kwargs) -> ClusteredLowRankEmbedding:
        """The trained architecture itself: each cluster's kept columns of A and rows of B, as the forward
        pass used them (no β, no refactorisation)."""
        keep = self.keep_masks() if keep is None else keep
        factors = [(u.numpy()[:, k], vt.numpy()[k]) for u, vt, k in zip(self.us, self.vts, keep)]
        return ClusteredLowRankEmbedding.from_factors(
            self.table.numpy(),
            factors,
            cutoffs=self.boundaries[1:-1],
            permutation=self.permutation,
            **{"origin": "nas-two-stage", **kwargs},
        )
