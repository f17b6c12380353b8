"""The float model as the ops see it: numpy weights in the ops' float layouts, and a float64 forward.

`FloatBert.from_keras` reads a Keras `BertModel` (dense or compressed word embedding) into the
ops' float dataclasses (`EmbeddingFloat`, `AttentionFloat`, `MLPFloat`, `ClassifierHeadFloat`).
Its `forward` is the Keras model's function in float64, one sequence at a time, with a hook that
sees every activation the integer ops quantize: that is what calibration observes. A test holds it
to the Keras model.

The compressed embedding is mapped onto the op's cluster rules (cluster 0 dense and non-empty,
every other cluster non-empty with rank >= 1) without changing its function: empty clusters are
dropped, a rank-0 cluster becomes rank 1 with zero factors, and a whole-table low-rank embedding
(empty cluster 0) lends its first token to a one-row dense cluster 0.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from tflm_mcubert.model.finite import require_finite
from tflm_mcubert.ops.attention import AttentionFloat
from tflm_mcubert.ops.classifier_head import ClassifierHeadFloat
from tflm_mcubert.ops.embedding import EmbeddingFloat
from tflm_mcubert.ops.fixed_point import ACTIVATIONS
from tflm_mcubert.ops.layernorm import float_layer_norm
from tflm_mcubert.ops.mlp import MLPFloat

# observer(name, values): values are float64 rows of valid tokens only (padding never enters a
# range: padded rows are masked as keys, so their values cannot reach a real token's output).
Observer = Callable[[str, np.ndarray], None]


def _dense(layer) -> tuple[np.ndarray, np.ndarray]:
    """Keras Dense -> (weight [out, in], bias) in float64."""
    return (np.asarray(layer.kernel.numpy(), np.float64).T.copy(), np.asarray(layer.bias.numpy(), np.float64))


def _norm(layer) -> tuple[np.ndarray, np.ndarray, float]:
    return (
        np.asarray(layer.gamma.numpy(), np.float64),
        np.asarray(layer.beta.numpy(), np.float64),
        float(layer.epsilon),
    )


def embedding_clusters(word_lookup, dense_table=None):
    """((U_0, None), (U_i, V_i^T), ...) obeying the op's cluster rules, from a dense table or a
    ClusteredLowRankEmbedding (see the module docstring)."""
    if word_lookup is None:
        return ((np.asarray(dense_table, np.float64), None),)
    arrays = word_lookup.to_arrays()
    bounds = [int(b) for b in arrays["boundaries"]]
    d = int(arrays["dim"])
    dense = np.asarray(arrays["table_0"], np.float64).reshape(-1, d)
    low_rank = []
    for i in range(1, len(bounds) - 1):
        n = bounds[i + 1] - bounds[i]
        if n == 0:
            continue
        u = np.asarray(arrays[f"u_{i}"], np.float64).reshape(n, -1)
        vt = np.asarray(arrays[f"vt_{i}"], np.float64).reshape(-1, d)
        if u.shape[1] == 0:  # rank 0: every token embeds to zero
            u, vt = np.zeros((n, 1)), np.zeros((1, d))
        low_rank.append((u, vt))
    if dense.shape[0] == 0:
        if not low_rank:
            raise ValueError("embedding has no tokens")
        u, vt = low_rank[0]
        dense = u[:1] @ vt
        low_rank[0] = (u[1:], vt) if u.shape[0] > 1 else None
        low_rank = [c for c in low_rank if c is not None]
    return ((dense, None), *low_rank)


@dataclasses.dataclass(frozen=True, eq=False)
class FloatBert:
    embedding: EmbeddingFloat  # positions: all max_position_embeddings rows
    layers: tuple[tuple[AttentionFloat, MLPFloat], ...]
    head: ClassifierHeadFloat | None  # pooler + classifier (classifiers only)
    vocab_size: int
    permutation: np.ndarray | None  # original id -> model id (compressed embeddings)

    @classmethod
    def from_keras(cls, model) -> "FloatBert":
        require_finite({w.path: w.numpy() for w in model.weights}, source="model")
        config = model.config
        emb = model.embeddings
        lookup = emb.word_lookup
        clusters = embedding_clusters(lookup, None if lookup is not None else emb.word_embeddings.numpy())
        gamma, beta, eps = _norm(emb.layer_norm)
        embedding = EmbeddingFloat(
            clusters,
            np.asarray(emb.position_embeddings.numpy(), np.float64),
            np.asarray(emb.token_type_embeddings.numpy(), np.float64),
            gamma,
            beta,
            eps,
        )
        layers = []
        for layer in model.encoder_layers:
            att, ff = layer.attention, layer.feed_forward
            wq, bq = _dense(att.query)
            wk, bk = _dense(att.key)
            wv, bv = _dense(att.value)
            wo, bo = _dense(att.output_dense)
            g1, b1, e1 = _norm(att.layer_norm)
            w1, c1 = _dense(ff.intermediate)
            w2, c2 = _dense(ff.output_dense)
            g2, b2, e2 = _norm(ff.layer_norm)
            layers.append(
                (
                    AttentionFloat(wq, bq, wk, bk, wv, bv, wo, bo, g1, b1, config.num_attention_heads, e1),
                    MLPFloat(w1, c1, w2, c2, g2, b2, config.hidden_act, e2),
                )
            )
        head = None
        if model.classifier is not None:
            wp, bp = _dense(model.pooler)
            wc, bc = _dense(model.classifier)
            head = ClassifierHeadFloat(wp, bp, wc, bc)
        permutation = None if lookup is None or lookup.permutation is None else lookup.permutation
        return cls(embedding, tuple(layers), head, int(config.vocab_size), permutation)

    @property
    def hidden(self) -> int:
        return self.embedding.hidden

    def embedding_for(self, seq_len: int) -> EmbeddingFloat:
        """The embedding with only the positions a seq_len model stores."""
        return dataclasses.replace(self.embedding, position=self.embedding.position[:seq_len])

    def forward(
        self, input_ids: np.ndarray, token_type_ids: np.ndarray, valid: np.ndarray, observer: Observer | None = None
    ) -> dict[str, np.ndarray]:
        """One sequence (ids in the model's vocabulary): last_hidden_state [s, d] and, for a
        classifier, logits [labels]. Every quantized activation is shown to `observer`."""
        see = observer or (lambda name, values: None)
        x = self.embedding.forward(input_ids, token_type_ids)
        see("embedding.output", x[valid])
        for index, (attention, mlp) in enumerate(self.layers):
            x = attention_forward(attention, x, valid, f"layer{index}.attention", see)
            x = mlp_forward(mlp, x, valid, f"layer{index}.mlp", see)
        out = {"last_hidden_state": x}
        if self.head is not None:
            seen: dict = {}
            out["logits"] = self.head.forward(x[:1], seen)[0]
            for name, values in seen.items():
                see(f"head.{name}", values)
        return out


def attention_forward(fa: AttentionFloat, x: np.ndarray, valid: np.ndarray, name: str, see: Observer) -> np.ndarray:
    seen: dict = {}
    y = fa.forward(x, valid, seen)
    for key in ("query", "context", "z", "output"):
        see(f"{name}.{key}", seen[key][valid])
    for key in ("key", "value"):
        see(f"{name}.{key}", seen[key][valid])
    # forward() keeps scores of valid keys for every query row: keep valid query rows only.
    scores = seen["scores"]
    if scores.ndim == 3:
        see(f"{name}.scores", scores[:, valid])
    return y


def mlp_forward(fm: MLPFloat, x: np.ndarray, valid: np.ndarray, name: str, see: Observer) -> np.ndarray:
    """MLPFloat.forward, with the erf GELU vectorised (the reference's math.erf loop is slow)."""
    x = np.asarray(x, dtype=np.float64)
    fc1 = x @ fm.w1.T + fm.b1
    act = float_activation(fm.activation, fc1)
    z = act @ fm.w2.T + fm.b2 + x
    y = float_layer_norm(z, fm.gamma, fm.beta, fm.eps)
    for key, values in (("fc1_output", fc1), ("activation", act), ("z", z), ("output", y)):
        see(f"{name}.{key}", values[valid])
    return y


def float_activation(name: str, x: np.ndarray) -> np.ndarray:
    """The MLP activation (HF `hidden_act` name) in float64, vectorised."""
    if name == "gelu":  # erf GELU in float64 through TensorFlow's vectorised erf
        import tensorflow as tf

        return 0.5 * x * (1.0 + tf.math.erf(x / np.sqrt(2.0)).numpy())
    return ACTIVATIONS[name](x)
