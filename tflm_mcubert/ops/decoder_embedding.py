"""MCUBERT_DECODER_EMBEDDING: a decoder's input for one token, the clustered word row plus the position row,
written as the residual stream (GPT-2: wte[id] + wpe[p], no LayerNorm).

    word[c] = requantize(U_0[id, c], Mw_0[c])                              cluster 0
            = requantize(sum_l U_i[id - end_{i-1}, l] * V_i[c, l], Mw_i[c])  cluster i > 0   (SPEC 4.1)
    z[c]    = clamp_int16(clamp_int32(word[c]) + clamp_int32(requantize(P[p, c], Mp[c])))
    x[c]    = clamp_int8(rsh(z[c], R'[c]) + zp'[c])                         the residual stream (4.6)

The word tables are the embedding op's, int8 or int4 storage (SPEC 4.1.1: a cluster-0 term is then
requantize(q[c] * row_scale, Mw_0[c])), so the tied LM head reads the same constant tensors.
s_z, the step of the decoder's whole residual stream, is chosen here: every later op keeps it.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tflm_mcubert.ops import contract
from tflm_mcubert.ops.embedding import quantize_per_channel, quantize_word_tables
from tflm_mcubert.ops.fixed_point import (
    INT16_MAX,
    INT16_MIN,
    INT32_MAX,
    INT32_MIN,
    check_multipliers,
    requantize,
    saturate,
)
from tflm_mcubert.ops.layernorm import check_dim, check_residual, residual_out
from tflm_mcubert.ops.op_def import OpDef
from tflm_mcubert.ops.scratch import LayoutBuilder, ScratchLayout
from tflm_mcubert.ops.validation import OpSpecError, check_array, check_int
from tflm_mcubert.ops.word_table import check_word_bits, word_clusters

OP = contract.DECODER_EMBEDDING


def scratch_layout(d: int) -> ScratchLayout:
    return LayoutBuilder(OP).add("residual", (d,), np.int16).build()  # z


def scratch_bytes(d: int) -> int:
    return scratch_layout(d).total_bytes


@dataclasses.dataclass(frozen=True, eq=False)
class DecoderEmbeddingParams:
    context: int  # n: positions of the position table
    hidden: int
    vocab_size: int
    clusters: np.ndarray  # int32[c, 2]
    word_rows: np.ndarray  # int8
    word_projections: np.ndarray  # int8, pair4
    word_requant: np.ndarray  # int32[c, d, 2]: into s_z units
    position_table: np.ndarray  # int8[n, d]
    position_requant: np.ndarray  # int32[d, 2]: into s_z units
    output_residual: np.ndarray  # int32[d, 2]: the stream's (zp, R)
    word_bits: int = 8  # 8: int8 word tables; 4: packed int4 (version 11, SPEC 4.1.1)

    def validate(self) -> "DecoderEmbeddingParams":
        n = check_int(OP, "context", self.context, 1, contract.MAX_SEQ_LEN)
        d = check_dim(OP, "hidden", check_int(OP, "hidden", self.hidden, 1, contract.MAX_HIDDEN))
        check_int(OP, "vocab_size", self.vocab_size, 1, INT32_MAX)
        check_word_bits(OP, self.word_bits)
        c = len(self.cluster_views)
        for field, table, shape in (
            ("word_requant", self.word_requant, (c, d, 2)),
            ("position_requant", self.position_requant, (d, 2)),
        ):
            check_array(OP, field, table, np.int32, shape)
            problem = check_multipliers(table[..., 0], table[..., 1])
            if problem:
                raise OpSpecError(OP, field, problem)
        check_array(OP, "position_table", self.position_table, np.int8, (n, d))
        check_residual(OP, "output_residual", self.output_residual, d)
        return self

    @property
    def cluster_views(self):
        return word_clusters(
            OP, self.clusters, self.word_rows, self.word_projections, self.hidden, self.vocab_size, self.word_bits
        )

    def options(self) -> dict[str, int]:
        """Version 7's fields; `word_bits` only for int4 (which makes the options version 11)."""
        values = {
            "context": self.context,
            "hidden": self.hidden,
            "vocab_size": self.vocab_size,
            "cluster_count": int(np.shape(self.clusters)[0]),
        }
        if self.word_bits != 8:
            values["word_bits"] = self.word_bits
        return values

    def tensors(self) -> dict[str, np.ndarray]:
        names = ("clusters", "word_rows", "word_projections", "word_requant", "position_table", "position_requant")
        return {name: getattr(self, name) for name in names + ("output_residual",)}

    @classmethod
    def from_serialized(cls, options: dict[str, int], tensors: dict[str, np.ndarray]) -> "DecoderEmbeddingParams":
        params = cls(
            options["context"],
            options["hidden"],
            options["vocab_size"],
            **tensors,
            word_bits=options.get("word_bits", 8),
        ).validate()
        if params.clusters.shape[0] != options["cluster_count"]:
            raise OpSpecError(
                OP, "cluster_count", f"{options['cluster_count']} but clusters holds {params.clusters.shape[0]}"
            )
        return params

    @classmethod
    def quantize(cls, clusters, position: np.ndarray, z_scale: float, output_residual: np.ndarray, word_bits: int = 8):
        """From float clusters ((U_0, None), (U_i, V_i^T), ...) and the position table [n, d], into the
        residual stream of step `z_scale` stored with `output_residual` (causal_attention.stream_channels);
        the word tables at `word_bits` (the embedding's int8 or int4 storage)."""
        tables = quantize_word_tables(clusters, z_scale, check_word_bits(OP, word_bits))
        position_q, position_rq = quantize_per_channel(position, z_scale)
        return cls(
            context=position.shape[0],
            hidden=position.shape[1],
            vocab_size=int(tables["clusters"][-1, 0]),
            **tables,
            position_table=position_q,
            position_requant=position_rq,
            output_residual=output_residual,
            word_bits=word_bits,
        ).validate()


def _index(params: DecoderEmbeddingParams, value: np.ndarray, field: str, limit: int) -> int:
    v = int(check_array(OP, field, value, np.int32, (1,))[0])
    if not 0 <= v < limit:
        raise OpSpecError(OP, field, f"{v} is outside [0, {limit})")
    return v


def word_row(params: DecoderEmbeddingParams, token: int) -> np.ndarray:
    """int64[d]: the requantized word term of one id (clamped to int32)."""
    for i, cluster in enumerate(params.cluster_views):
        if cluster.start <= token < cluster.end:
            u = cluster.rows[token - cluster.start].astype(np.int64)
            acc = u if cluster.projection is None else cluster.projection.astype(np.int64) @ u
            if cluster.row_scale is not None:  # int4 cluster 0: q * row_scale, |.| <= 8 * 65535 < 2^19
                acc = acc * cluster.row_scale[token - cluster.start]
            requant = params.word_requant[i].astype(np.int64)
            return np.clip(requantize(acc, requant[:, 0], requant[:, 1]), INT32_MIN, INT32_MAX)
    raise AssertionError("the cluster table covers every id")


def run(
    params: DecoderEmbeddingParams,
    input_id: np.ndarray,
    position: np.ndarray,
    out: np.ndarray,
    scratch: np.ndarray | None = None,
) -> np.ndarray:
    """Write one token's residual stream (int8[d]) into `out`; returns `out`."""
    token = _index(params, input_id, "input_id", params.vocab_size)
    p = _index(params, position, "position", params.context)
    check_array(OP, "hidden", out, np.int8, (params.hidden,))
    z = scratch_layout(params.hidden).views(scratch)["residual"]
    rq = params.position_requant.astype(np.int64)
    pos = np.clip(requantize(params.position_table[p].astype(np.int64), rq[:, 0], rq[:, 1]), INT32_MIN, INT32_MAX)
    z[:] = saturate(word_row(params, token) + pos, INT16_MIN, INT16_MAX, np.int16)
    out[:] = residual_out(z, params.output_residual)
    return out


def _reference(params: DecoderEmbeddingParams, inputs, out: np.ndarray, scratch=None) -> np.ndarray:
    return run(params, inputs[0], inputs[1], out.reshape(params.hidden), scratch)


DEFINITION = OpDef(
    code=OP,
    kind="decoder_embedding",
    c_name="decoder_embedding",
    params_type=DecoderEmbeddingParams,
    runtime_inputs=("input_id", "position"),
    output="hidden",
    in_place=False,
    per_layer=False,
    tiled=False,
    reference=_reference,
    scratch_bytes=lambda p: scratch_bytes(p.hidden),
    plan_scratch=lambda s, dims, t: scratch_bytes(dims.hidden),
    buffer_size_args=lambda p: (p.context, p.hidden),
    output_shape=lambda p: (1, p.hidden),
)
