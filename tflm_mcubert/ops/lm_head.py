"""MCUBERT_LM_HEAD: a decoder's tied LM head through the clustered low-rank word table.

The decoder's last step: the residual stream x normalized by LN_f into h, then the scores of every
vocabulary id for h, computed cluster by cluster from the same
int8 tables the embedding op reads (`clusters`, `word_rows`, `word_projections`: in a .tflite both ops
name the same constant tensors, so tying costs no Flash), and the k best kept as the clusters stream
by. The dense vocabulary matrix is never built, and no int8[vocab] logits buffer exists.

A cluster-0 row is U_0[t] (d values) with the embedding's per-channel scale a_0[c]; a cluster-i row is
U_i[t] . V_iᵀ (rank r_i) with scales a_i[c]. So logit[t] = sum_c h[c] a_i[c] E_i[t, c] becomes, per
cluster, one rescaling of h and then r_i multiply-adds per token (d for cluster 0):

    h      = layer_norm((x[c] - zp_x[c]) << R[c])                        LN_f, int8 (zero point zp)
    g_i[c] = clamp(requantize(h[c] - zp, Mg_i[c]), -G, G)               int16, G = gain_limit(d)
    cluster 0:  acc[t] = U_0[t] . g_0
    cluster i:  p_i[l] = clamp(requantize(sum_c V_i[c, l] g_i[c], Mp_i), -G, G);  acc[t] = U_i[t] . p_i
    score[t]    = clamp_int32(requantize(acc[t], Ms_i))                  one scale for every cluster

At int4 storage (version 11, SPEC 4.1.1) a row holds nibbles q, and a cluster-0 row also its uint16 row scale:
cluster 0 scores clamp_int32(requantize_wide(acc[t] * row_scale[t], Ms_0)) (a 48-bit product, fixed_point),
the other clusters as above with q for U_i.

G = min(32767, floor((2^31 - 1) / (128 d))) keeps every dot product of int8 and clamped values inside
int32 for any contract-valid tables, so the kernel needs no 64-bit accumulator and no overflow check.
The output is int32[2, k]: row 0 the ids (the embedding's permuted vocabulary) best first, row 1 their
scores; ties go to the smaller id.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tflm_mcubert.ops import contract
from tflm_mcubert.ops.fixed_point import (
    INT16_MAX,
    INT32_MAX,
    INT32_MIN,
    WIDE_SHIFT_MAX,
    check_multipliers,
    quantize_multiplier,
    requantize,
    requantize_wide,
    saturate,
)
from tflm_mcubert.ops.layernorm import LayerNormParams, check_dim, check_residual, layer_norm, residual_sum
from tflm_mcubert.ops.word_table import WordCluster, check_word_bits, word_clusters
from tflm_mcubert.ops.op_def import OpDef
from tflm_mcubert.ops.quantization import TensorQuant
from tflm_mcubert.ops.scratch import LayoutBuilder, ScratchLayout
from tflm_mcubert.ops.validation import OpSpecError, check_array, check_int

OP = contract.LM_HEAD


def gain_limit(d: int) -> int:
    """G: the clamp of g and p, so that |int8 row . clamped vector| < 2^31 for rows of up to d values."""
    return min(INT16_MAX, INT32_MAX // (128 * d))


def scratch_layout(d: int) -> ScratchLayout:
    return (
        LayoutBuilder(OP)
        .add("residual", (d,), np.int16)  # z of the residual stream
        .add("normed", (d,), np.int8)  # h = LN_f(z)
        .add("scaled", (d,), np.int16)  # g_i: h rescaled for the cluster
        .add("projected", (d,), np.int16)  # p_i (rank <= d)
        .build()
    )


def scratch_bytes(d: int) -> int:
    return scratch_layout(d).total_bytes


def output_bytes(top_k: int) -> int:
    """Of the output int32[1, 2, k]: the k best ids and their scores."""
    return 4 * 2 * top_k


@dataclasses.dataclass(frozen=True, eq=False)
class LmHeadParams:
    hidden: int
    vocab_size: int
    top_k: int
    normed_zero_point: int
    clusters: np.ndarray  # int32[c, 2]: the embedding's (end id, rank)
    word_rows: np.ndarray  # int8: the embedding's word_rows (int8 storage)
    word_projections: np.ndarray  # int8: the embedding's word_projections
    channel_requant: np.ndarray  # int32[c, d, 2]: (Mg, shift) per cluster and channel
    cluster_requant: np.ndarray  # int32[c, 4]: (Mp, shift) (cluster 0: 0, 0), (Ms, shift)
    layer_norm: LayerNormParams  # LN_f: from s_z units to h (its zero point normed_zero_point)
    residual: np.ndarray  # int32[d, 2]: the residual stream's (zp, R)
    word_bits: int = 8  # the tied table's storage: 8 int8, 4 packed int4 (version 11)

    def validate(self) -> "LmHeadParams":
        d = check_dim(OP, "hidden", check_int(OP, "hidden", self.hidden, 1, contract.MAX_HIDDEN))
        check_int(OP, "vocab_size", self.vocab_size, 1, INT32_MAX)
        check_int(OP, "top_k", self.top_k, 1, contract.MAX_TOP_K)
        if self.top_k > self.vocab_size:
            raise OpSpecError(OP, "top_k", f"{self.top_k} exceeds vocab_size {self.vocab_size}")
        check_int(OP, "normed_zero_point", self.normed_zero_point, -128, 127)
        self.layer_norm.validate(OP, "layer_norm", d)
        check_residual(OP, "residual", self.residual, d)
        check_word_bits(OP, self.word_bits)
        c = len(self.cluster_views)
        requant = check_array(OP, "channel_requant", self.channel_requant, np.int32, (c, d, 2))
        problem = check_multipliers(requant[..., 0], requant[..., 1])
        if problem:
            raise OpSpecError(OP, "channel_requant", problem)
        table = check_array(OP, "cluster_requant", self.cluster_requant, np.int32, (c, 4))
        problem = check_multipliers(table[:, 0::2], table[:, 1::2])
        if problem:
            raise OpSpecError(OP, "cluster_requant", problem)
        if np.any(table[0, :2]):
            raise OpSpecError(OP, "cluster_requant", "cluster 0 has no projection: its (Mp, shift) must be (0, 0)")
        if self.word_bits == 4 and table[0, 3] > WIDE_SHIFT_MAX:
            raise OpSpecError(
                OP, "cluster_requant", f"cluster 0's score shift {table[0, 3]} exceeds {WIDE_SHIFT_MAX} (int4 rows)"
            )
        return self

    @property
    def cluster_views(self) -> tuple[WordCluster, ...]:
        return word_clusters(
            OP, self.clusters, self.word_rows, self.word_projections, self.hidden, self.vocab_size, self.word_bits
        )

    def options(self) -> dict[str, int]:
        """Version 4's fields; `word_bits` only for int4 (which makes the options version 11)."""
        values = {
            "hidden": self.hidden,
            "vocab_size": self.vocab_size,
            "cluster_count": int(np.shape(self.clusters)[0]),
            "top_k": self.top_k,
            "normed_zero_point": self.normed_zero_point,
            "ln_eps": self.layer_norm.eps,
        }
        if self.word_bits != 8:
            values["word_bits"] = self.word_bits
        return values

    def tensors(self) -> dict[str, np.ndarray]:
        return {
            "residual": self.residual,
            "layer_norm": self.layer_norm.table,
            "clusters": self.clusters,
            "word_rows": self.word_rows,
            "word_projections": self.word_projections,
            "channel_requant": self.channel_requant,
            "cluster_requant": self.cluster_requant,
        }

    @classmethod
    def from_serialized(cls, options: dict[str, int], tensors: dict[str, np.ndarray]) -> "LmHeadParams":
        params = cls(
            options["hidden"],
            options["vocab_size"],
            options["top_k"],
            options["normed_zero_point"],
            *(tensors[name] for name in ("clusters", "word_rows", "word_projections")),
            tensors["channel_requant"],
            tensors["cluster_requant"],
            LayerNormParams(tensors["layer_norm"], options["ln_eps"]),
            tensors["residual"],
            options.get("word_bits", 8),
        ).validate()
        if params.clusters.shape[0] != options["cluster_count"]:
            raise OpSpecError(
                OP, "cluster_count", f"{options['cluster_count']} but clusters holds {params.clusters.shape[0]}"
            )
        return params

    @classmethod
    def tie(
        cls, embedding, hidden: TensorQuant, top_k: int, *, layer_norm: LayerNormParams, residual: np.ndarray
    ) -> tuple["LmHeadParams", float]:
        """The head tied to `embedding` (EmbeddingParams, int8 or int4 tables) for LN_f outputs quantized as `hidden`
        (`layer_norm` makes them from the residual stream whose channels are `residual`)
        (one zero point; one scale or one per channel), and the real logit of one score unit divided by
        the embedding's pre-norm scale s_z (a factor common to every id, so ranking needs none of it).

        Each cluster's channel scales a_i[c] (the embedding's word_requant) are folded into g_i, scaled so
        that |g_i| reaches G at |h - zp| = 255; p_i is scaled so its worst case over all g reaches G (no
        clamp ever bites); the score scale is the largest cluster's accumulator scale, so every score
        multiplier is <= 1. An int4 cluster 0 accumulates acc * row_scale: its largest product over the table,
        at |g| = G, sets a floor under the score unit so that its scores fit in 31 bits.
        """
        d, g_max, bits = embedding.hidden, gain_limit(embedding.hidden), embedding.word_bits
        views = word_clusters(
            OP, embedding.clusters, embedding.word_rows, embedding.word_projections, d, embedding.vocab_size, bits
        )
        zero_points = np.unique(np.asarray(hidden.zero_point))
        if zero_points.size != 1:
            raise OpSpecError(OP, "normed_zero_point", "the hidden state needs one zero point for all channels")
        # a_i[c] / s_z times the hidden state's (per-channel or one) scale: real = (h - zp) * this * E_int * s_z
        channel_scale = _real_scale(embedding.word_requant) * np.broadcast_to(hidden.scale, (d,))
        gain = channel_scale.max(axis=1) * 255.0 / g_max  # g units per cluster (real = g * gain)
        gain = np.where(gain > 0, gain, 1.0)
        accumulator_scale = np.empty(len(views))
        projection = np.zeros((len(views), 2))
        for i, view in enumerate(views):
            if view.projection is None:
                accumulator_scale[i] = gain[i]
                continue
            worst = max(1, int(np.abs(view.projection.astype(np.int64)).sum(axis=0).max()) * g_max)
            projection[i] = g_max / worst, gain[i] * worst / g_max
            accumulator_scale[i] = projection[i, 1]
        score_unit = accumulator_scale.max()
        if views[0].row_scale is not None:
            rows = np.abs(views[0].rows.astype(np.int64)).sum(axis=1) * views[0].row_scale
            widest = max(1, int(rows.max(initial=0))) * g_max
            score_unit = max(score_unit, gain[0] * widest / (1 << 30))
        channel = np.stack(quantize_multiplier(channel_scale / gain[:, None]), axis=-1).astype(np.int32)
        cluster = np.zeros((len(views), 4), np.int32)
        for i in range(len(views)):
            if views[i].projection is not None:
                cluster[i, :2] = quantize_multiplier(projection[i, 0])
            cluster[i, 2:] = quantize_multiplier(accumulator_scale[i] / score_unit)
        params = cls(
            d,
            embedding.vocab_size,
            top_k,
            int(zero_points[0]),
            embedding.clusters,
            embedding.word_rows,
            embedding.word_projections,
            channel,
            cluster,
            layer_norm,
            residual,
            bits,
        ).validate()
        return params, float(score_unit)


def _real_scale(requant: np.ndarray) -> np.ndarray:
    """multiplier * 2^(shift - 31) of (multiplier, shift) pairs."""
    return requant[..., 0].astype(np.float64) * np.exp2(requant[..., 1].astype(np.float64) - 31)


def cluster_scores(params: LmHeadParams, hidden: np.ndarray) -> np.ndarray:
    """int64[vocab]: every id's score for a normalized h (the reference's intermediate; the kernel keeps
    only the top k)."""
    d, g_max = params.hidden, gain_limit(params.hidden)
    x = check_array(OP, "hidden", hidden, np.int8, (d,)).astype(np.int64) - params.normed_zero_point
    out = []
    for i, view in enumerate(params.cluster_views):
        requant = params.channel_requant[i].astype(np.int64)
        g = np.clip(requantize(x, requant[:, 0], requant[:, 1]), -g_max, g_max)
        if view.projection is not None:
            q = view.projection.astype(np.int64).T @ g
            vector = np.clip(requantize(q, *params.cluster_requant[i, :2].astype(np.int64)), -g_max, g_max)
        else:
            vector = g
        acc = view.rows.astype(np.int64) @ vector
        if view.row_scale is None:
            scores = requantize(acc, *params.cluster_requant[i, 2:].astype(np.int64))
        else:  # int4 cluster 0: |acc * row_scale| <= 8 d G 65535 < 2^43
            scores = requantize_wide(acc * view.row_scale, *params.cluster_requant[i, 2:].astype(np.int64))
        out.append(np.clip(scores, INT32_MIN, INT32_MAX))
    return np.concatenate(out)


def normalize(params: LmHeadParams, hidden: np.ndarray) -> np.ndarray:
    """h = LN_f(z) of one token's residual stream (int8[d]), the vector the head scores."""
    x = check_array(OP, "hidden", hidden, np.int8, (params.hidden,))
    z = residual_sum(np.zeros(params.hidden, np.int64), x, params.residual)
    return layer_norm(z[None], params.layer_norm)[0]


def run(params: LmHeadParams, hidden: np.ndarray, top: np.ndarray, scratch: np.ndarray | None = None) -> np.ndarray:
    """Write int32[2, k] (ids best first, then their scores; ties to the smaller id) for one token's
    residual stream `hidden`; returns `top`."""
    check_array(OP, "top", top, np.int32, (2, params.top_k))
    if not top.flags.writeable:
        raise OpSpecError(OP, "top", "must be writable")
    scratch_layout(params.hidden).views(scratch)  # the kernel's scratch contract: checked, not needed here
    scores = cluster_scores(params, normalize(params, hidden))
    order = np.lexsort((np.arange(scores.size), -scores))[: params.top_k]
    top[0] = order
    top[1] = saturate(scores[order], INT32_MIN, INT32_MAX, np.int32)
    return top


def _reference(params: LmHeadParams, inputs, out: np.ndarray, scratch=None) -> np.ndarray:
    return run(params, inputs[0].reshape(params.hidden), out.reshape(2, params.top_k), scratch)


DEFINITION = OpDef(
    code=OP,
    kind="lm_head",
    c_name="lm_head",
    params_type=LmHeadParams,
    runtime_inputs=("hidden",),
    output="top",
    in_place=False,
    per_layer=False,
    tiled=False,
    reference=_reference,
    scratch_bytes=lambda p: scratch_bytes(p.hidden),
    plan_scratch=lambda s, dims, t: scratch_bytes(dims.hidden),
    buffer_size_args=lambda p: (p.hidden, p.top_k),
    output_shape=lambda p: (1, 2, p.top_k),  # output_bytes(top_k)
)
