"""MCUBERT_EMBEDDING: clustered low-rank word lookup + position + token type, then LayerNorm.

The vocabulary is permuted so cluster i owns the contiguous id range [end_{i-1}, end_i) (end_{-1} = 0).
Cluster 0 stores full rows U_0 (n_0 x d); cluster i > 0 stores U_i (n_i x r_i) and the projection
V_i (d x r_i, a pair4-packed linear layer). Per token at position p with id and type:

    word[c] = requantize(U_0[id, c], Mw_0[c])                           (cluster 0)
            = requantize(sum_l U_i[id - end_{i-1}, l] * V_i[c, l], Mw_i[c])   (cluster i > 0)
    z[c]    = clamp_int16(clamp_int32(word[c]) + clamp_int32(requantize(P[p, c], Mp[c]))
                          + clamp_int32(requantize(T[type, c], Mt[c])))
    out     = layer_norm(z)

All three terms are requantized into the pre-norm scale s_z; the sum is int64 before the clamp.
Ids outside [0, vocab_size) and types outside [0, type_vocab_size) are errors (the kernel returns
kTfLiteError). The op writes `out` (the hidden state) and nothing else besides its scratch.

int4 storage (word_bits = 4, spec version 2, SPEC.md 4.1.1): the same arithmetic on packed nibbles.
A cluster-0 row is a uint16 row scale then d nibbles and contributes requantize(q[c] * row_scale,
Mw_0[c]) (per row x per channel scale); a U_i row is r_i nibbles whose per-column scales are folded
into V_i offline, so the low-rank path is the int8 one. Only the gather changes, never a GEMM.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from tflm_mcubert.ops import contract
from tflm_mcubert.ops.fixed_point import (
    INT8_MAX,
    INT16_MAX,
    INT16_MIN,
    INT32_MAX,
    INT32_MIN,
    check_multipliers,
    quantize_multiplier,
    requantize,
    round_half_up,
    saturate,
)
from tflm_mcubert.ops.layernorm import LayerNormParams, check_dim, float_layer_norm, layer_norm
from tflm_mcubert.ops.op_def import OpDef, hidden_shape
from tflm_mcubert.ops.linear import Linear, packed_size
from tflm_mcubert.ops.quantization import TensorQuant
from tflm_mcubert.ops.scratch import LayoutBuilder, ScratchLayout
from tflm_mcubert.ops.validation import OpSpecError, check_array, check_int, check_writable_view
from tflm_mcubert.ops.word_table import check_int4_size, unpack_cluster

OP = contract.EMBEDDING
ROWS = contract.EMBEDDING_ROWS
# The pre-norm sum is sized so that the worst case over all tables reaches this, never 32767.
Z_TARGET = 32000


def scratch_layout(s: int, d: int) -> ScratchLayout:
    """z rows for ROWS tokens, plus the DSP path's int16-widened U rows (ranks are <= d)."""
    return LayoutBuilder(OP).add("z", (ROWS, d), np.int16).add("widened", (contract.DSP_ROWS, d), np.int16).build()


def scratch_bytes(s: int, d: int) -> int:
    return scratch_layout(s, d).total_bytes


def pack_int4(values: np.ndarray) -> np.ndarray:
    """int8[n, r] in [-8, 7] -> uint8[n, ceil(r/2)]: value 2j in the low nibble of byte j, an odd
    row's last high nibble 0 (SPEC 4.1.1)."""
    values = np.asarray(values)
    if values.size and (values.min() < -8 or values.max() > 7):
        raise ValueError("pack_int4: values must be in [-8, 7]")
    n, r = values.shape
    nibbles = np.zeros((n, 2 * contract.int4_row_bytes(r)), np.uint8)
    nibbles[:, :r] = values.astype(np.int64) & 0xF
    return (nibbles[:, 0::2] | (nibbles[:, 1::2] << 4)).astype(np.uint8)


def embedding_storage_bytes(clusters, hidden: int, bits: int = 8) -> int:
    """Flash bytes of the word tables (word_rows + word_projections) of an embedding stored at
    `bits` (8: int8, 4: packed int4 rows, SPEC 4.1.1). `clusters`: (rows n_i, rank r_i) per cluster,
    cluster 0 first with r_0 = hidden (it stores full rows, no projection). The one place that
    knows what a stored embedding costs: the exporter's Flash accounting and byte budgets use it.
    Per-channel requantization tables (8 bytes per channel and cluster) are not included."""
    if bits not in contract.EMBEDDING_WORD_BITS:
        raise ValueError(f"embedding_storage_bytes: bits {bits} is not a storage width {contract.EMBEDDING_WORD_BITS}")
    total = 0
    for i, (n, r) in enumerate(clusters):
        total += int(n) * contract.word_row_bytes(i, int(r), bits)
        if i > 0:
            total += packed_size(hidden, int(r))
    return total


@dataclasses.dataclass(frozen=True)
class Cluster:
    start: int
    end: int
    rank: int
    rows: np.ndarray  # int8[end - start, rank] (int4 storage: unpacked)
    projection: Linear | None  # d outputs from rank inputs; None for cluster 0
    requant: np.ndarray  # int32[d, 2]
    row_scale: np.ndarray | None = None  # int4 cluster 0: int64[end - start], the uint16 row scales


@dataclasses.dataclass(frozen=True, eq=False)
class EmbeddingParams:
    seq_len: int
    hidden: int
    vocab_size: int
    type_vocab_size: int
    clusters: np.ndarray  # int32[c, 2]: end id (exclusive), rank (r_0 = d)
    word_rows: np.ndarray  # int8[sum n_i * r_i]
    word_projections: np.ndarray  # int8[sum_{i>0} packed_size(d, r_i)]
    word_requant: np.ndarray  # int32[c, d, 2]
    position_table: np.ndarray  # int8[s, d]
    position_requant: np.ndarray  # int32[d, 2]
    token_type_table: np.ndarray  # int8[T, d]
    token_type_requant: np.ndarray  # int32[d, 2]
    layer_norm: LayerNormParams
    word_bits: int = 8  # 8: int8 word tables; 4: packed int4 (spec version 2, SPEC 4.1.1)

    # -- validation -------------------------------------------------------------------------

    def validate(self) -> "EmbeddingParams":
        s = check_int(OP, "seq_len", self.seq_len, 1, contract.MAX_SEQ_LEN)
        d = check_dim(OP, "hidden", check_int(OP, "hidden", self.hidden, 1, contract.MAX_HIDDEN))
        check_int(OP, "vocab_size", self.vocab_size, 1, INT32_MAX)
        bits = check_int(OP, "word_bits", self.word_bits, 4, 8)
        if bits not in contract.EMBEDDING_WORD_BITS:
            raise OpSpecError(OP, "word_bits", f"{bits} is not a storage width (4: packed int4, 8: int8)")
        t = check_int(OP, "type_vocab_size", self.type_vocab_size, 1, contract.MAX_TYPE_VOCAB)
        check_array(OP, "position_table", self.position_table, np.int8, (s, d))
        check_array(OP, "token_type_table", self.token_type_table, np.int8, (t, d))
        for field in ("position_requant", "token_type_requant"):
            table = check_array(OP, field, getattr(self, field), np.int32, (d, 2))
            problem = check_multipliers(table[:, 0], table[:, 1])
            if problem:
                raise OpSpecError(OP, field, problem)
        self.layer_norm.validate(OP, "layer_norm", d)
        _ = self.cluster_views  # validates the cluster geometry and tables
        return self

    @functools.cached_property
    def cluster_views(self) -> tuple[Cluster, ...]:
        d = self.hidden
        table = check_array(OP, "clusters", self.clusters, np.int32)
        if table.ndim != 2 or table.shape[1] != 2 or not 1 <= table.shape[0] <= contract.MAX_CLUSTERS:
            raise OpSpecError(
                OP, "clusters", f"expected int32[c, 2] with 1 <= c <= {contract.MAX_CLUSTERS}, got shape {table.shape}"
            )
        c = table.shape[0]
        ends, ranks = table[:, 0].astype(np.int64), table[:, 1].astype(np.int64)
        starts = np.concatenate([[0], ends[:-1]])
        if np.any(ends <= starts) or ends[-1] != self.vocab_size:
            raise OpSpecError(
                OP,
                "clusters",
                f"cluster ends must increase strictly and the last must equal vocab_size {self.vocab_size}",
            )
        if ranks[0] != d or np.any(ranks[1:] < 1) or np.any(ranks[1:] > d):
            raise OpSpecError(OP, "clusters", f"rank of cluster 0 must be d={d}; others in [1, d]")
        # Sizes in int64 (Python ints): a hostile table cannot wrap the offsets.
        bits = self.word_bits
        row_bytes = [contract.word_row_bytes(i, int(r), bits) for i, r in enumerate(ranks)]
        row_sizes = [int(n) * b for n, b in zip(ends - starts, row_bytes)]
        proj_sizes = [0] + [packed_size(d, int(r)) for r in ranks[1:]]
        if bits == 4:
            check_int4_size(OP, self.word_rows, row_sizes, d)
        check_array(OP, "word_rows", self.word_rows, np.int8, (sum(row_sizes),))
        check_array(OP, "word_projections", self.word_projections, np.int8, (sum(proj_sizes),))
        requant = check_array(OP, "word_requant", self.word_requant, np.int32, (c, d, 2))
        problem = check_multipliers(requant[..., 0], requant[..., 1])
        if problem:
            raise OpSpecError(OP, "word_requant", problem)
        views = []
        row_off = proj_off = 0
        for i in range(c):
            n, r = int(ends[i] - starts[i]), int(ranks[i])
            stored = self.word_rows[row_off : row_off + row_sizes[i]].reshape(n, row_bytes[i])
            rows, row_scale = (stored, None) if bits == 8 else unpack_cluster(OP, stored, i, r)
            projection = None
            if i > 0:
                channels = np.concatenate([np.zeros((d, 1), np.int32), requant[i]], axis=1)
                projection = Linear(
                    r, d, self.word_projections[proj_off : proj_off + proj_sizes[i]], channels
                ).validate(OP, f"word_projections[{i}]")
            views.append(Cluster(int(starts[i]), int(ends[i]), r, rows, projection, requant[i], row_scale))
            row_off += row_sizes[i]
            proj_off += proj_sizes[i]
        return tuple(views)

    # -- serialization ----------------------------------------------------------------------

    def options(self) -> dict[str, int]:
        """Version 1's fields; `word_bits` only for int4 (which makes the options version 2)."""
        values = {
            "seq_len": self.seq_len,
            "hidden": self.hidden,
            "vocab_size": self.vocab_size,
            "cluster_count": int(self.clusters.shape[0]),
            "type_vocab_size": self.type_vocab_size,
            "ln_eps": self.layer_norm.eps,
        }
        if self.word_bits != 8:
            values["word_bits"] = self.word_bits
        return values

    @property
    def storage_bytes(self) -> int:
        """Flash bytes of the word tables as stored (embedding_storage_bytes of this geometry)."""
        return int(self.word_rows.size + self.word_projections.size)

    def tensors(self) -> dict[str, np.ndarray]:
        """Constant inputs by contract name (input_ids / token_type_ids come at run time)."""
        return {
            "clusters": self.clusters,
            "word_rows": self.word_rows,
            "word_projections": self.word_projections,
            "word_requant": self.word_requant,
            "position_table": self.position_table,
            "position_requant": self.position_requant,
            "token_type_table": self.token_type_table,
            "token_type_requant": self.token_type_requant,
            "layer_norm": self.layer_norm.table,
        }

    @classmethod
    def from_serialized(cls, options: dict[str, int], tensors: dict[str, np.ndarray]):
        params = cls(
            options["seq_len"],
            options["hidden"],
            options["vocab_size"],
            options["type_vocab_size"],
            tensors["clusters"],
            tensors["word_rows"],
            tensors["word_projections"],
            tensors["word_requant"],
            tensors["position_table"],
            tensors["position_requant"],
            tensors["token_type_table"],
            tensors["token_type_requant"],
            LayerNormParams(tensors["layer_norm"], options["ln_eps"]),
            options.get("word_bits", 8),
        ).validate()
        if params.clusters.shape[0] != options["cluster_count"]:
            raise OpSpecError(OP, "cluster_count", "does not match the clusters tensor")
        return params

    # -- offline quantization ---------------------------------------------------------------

    @classmethod
    def quantize(cls, fw: "EmbeddingFloat", output: TensorQuant, word_bits: int = 8) -> "EmbeddingParams":
        """`word_bits` 8: int8 word tables (U_0 per channel, U_i per tensor); 4: packed int4 (U_0 per
        row x per channel, U_i per column with the column scales folded into V_i; SPEC 4.1.1)."""
        if word_bits not in contract.EMBEDDING_WORD_BITS:
            raise OpSpecError(OP, "word_bits", f"{word_bits} is not a storage width (4: packed int4, 8: int8)")
        d = fw.hidden
        word_max = np.zeros(d)
        for u, vt in fw.clusters:
            dense = u if vt is None else u @ vt
            word_max = np.maximum(word_max, np.abs(dense).max(axis=0))
        pos_max = np.abs(fw.position).max(axis=0)
        type_max = np.abs(fw.token_type).max(axis=0)
        z_scale = max(float((word_max + pos_max + type_max).max()), 1e-8) / Z_TARGET

        tables = quantize_word_tables(fw.clusters, z_scale, word_bits)
        per_channel = functools.partial(quantize_per_channel, z_scale=z_scale)
        pos_q, pos_rq = per_channel(fw.position)
        type_q, type_rq = per_channel(fw.token_type)
        return cls(
            seq_len=fw.position.shape[0],
            hidden=d,
            vocab_size=int(tables["clusters"][-1, 0]),
            type_vocab_size=fw.token_type.shape[0],
            **tables,
            position_table=pos_q,
            position_requant=pos_rq,
            token_type_table=type_q,
            token_type_requant=type_rq,
            layer_norm=LayerNormParams.from_float(fw.gamma, fw.beta, fw.eps, z_scale, output),
            word_bits=word_bits,
        ).validate()


def quantize_per_channel(table: np.ndarray, z_scale: float) -> tuple[np.ndarray, np.ndarray]:
    """A float table [n, d] as int8 per channel, and its int32[d, 2] (multiplier, shift) into s_z units."""
    m = np.abs(table).max(axis=0)
    scale = np.where(m > 0, m / INT8_MAX, 1.0)
    q = np.clip(round_half_up(table / scale), -INT8_MAX, INT8_MAX).astype(np.int8)
    mult, shift = quantize_multiplier(scale / z_scale)
    return q, np.stack([mult, shift], axis=1).astype(np.int32)


def quantize_word_tables(clusters, z_scale: float, word_bits: int = 8) -> dict[str, np.ndarray]:
    """The stored word tables (`clusters`, `word_rows`, `word_projections`, `word_requant`) of float clusters
    ((U_0, None), (U_i, V_i^T), ...) requantized into s_z units: the embedding's and a decoder's alike.
    `word_bits` 8: U_0 per channel, U_i per tensor; 4: packed int4 (SPEC 4.1.1)."""
    d = clusters[0][0].shape[1]
    rows, projections, requants, ends, ranks = [], [], [], [], []
    end = 0
    for u, vt in clusters:
        end += u.shape[0]
        ends.append(end)
        if vt is None:
            q, rq = quantize_per_channel(u, z_scale) if word_bits == 8 else _int4_full_rows(u, z_scale)
            ranks.append(d)
        else:
            if word_bits == 8:
                u_quant = TensorQuant.symmetric(float(np.abs(u).max()))
                q = u_quant.quantize(u)
            else:  # per column of U_i; the scale folds into column l of V_i (Linear.from_float)
                col_max = np.abs(u).max(axis=0)
                col_scale = np.where(col_max > 0, col_max / INT4_MAX, 1.0)
                u_quant = TensorQuant(col_scale, np.zeros(u.shape[1], np.int64))
                q = pack_int4(np.clip(round_half_up(u / col_scale), -INT4_MAX, INT4_MAX)).view(np.int8)
            lin = Linear.from_float(vt.T, np.zeros(d), u_quant, z_scale)
            projections.append(lin.packed_weights)
            rq = lin.channels[:, 1:]
            ranks.append(u.shape[1])
        rows.append(q.reshape(-1))
        requants.append(rq)
    return {
        "clusters": np.array([ends, ranks], dtype=np.int32).T.copy(),
        "word_rows": np.concatenate(rows),
        "word_projections": np.concatenate(projections) if projections else np.zeros(0, np.int8),
        "word_requant": np.stack(requants).astype(np.int32),
    }


INT4_MAX = 7  # int4 tables are quantized symmetrically to [-7, 7] (the kernel accepts -8 as well)
ROW_SCALE_MAX = (1 << 16) - 1


def _int4_full_rows(u: np.ndarray, z_scale: float) -> tuple[np.ndarray, np.ndarray]:
    """Cluster 0 as int4 rows (int8[n * (2 + ceil(d/2))] stored bytes) and its requant int32[d, 2].

    U_0[id, c] ~ q[id, c] * row_scale[id] * unit * s_c: per channel s_c (its max, so outlier
    channels do not set every row's step; free, it lives in Mw_0[c]) times a per-row uint16 scale
    (rare tokens' small rows keep their resolution), unit = the largest row step / 65535."""
    ch_max = np.abs(u).max(axis=0)
    ch_scale = np.where(ch_max > 0, ch_max, 1.0)
    normalized = u / ch_scale
    step = np.abs(normalized).max(axis=1) / INT4_MAX
    unit = max(float(step.max()), 1e-30) / ROW_SCALE_MAX
    row_scale = np.clip(round_half_up(step / unit), 0, ROW_SCALE_MAX).astype(np.int64)
    effective = np.where(row_scale > 0, row_scale * unit, 1.0)
    q = np.clip(round_half_up(normalized / effective[:, None]), -INT4_MAX, INT4_MAX)
    q[row_scale == 0] = 0
    mult, shift = quantize_multiplier(ch_scale * unit / z_scale)
    header = np.stack([row_scale & 0xFF, row_scale >> 8], axis=1).astype(np.uint8)
    stored = np.concatenate([header, pack_int4(q.astype(np.int8))], axis=1).view(np.int8)
    return stored, np.stack([mult, shift], axis=1).astype(np.int32)


def _check_ids(ids: np.ndarray, field: str, s: int, limit: int) -> np.ndarray:
    check_array(OP, field, ids, np.int32, (s,))
    bad = np.flatnonzero((ids < 0) | (ids >= limit))
    if bad.size:
        raise OpSpecError(OP, field, f"id {int(ids[bad[0]])} at position {int(bad[0])} is outside [0, {limit})")
    return ids


def _clamp32(x: np.ndarray) -> np.ndarray:
    return np.clip(x, INT32_MIN, INT32_MAX)


def word_terms(params: EmbeddingParams, ids: np.ndarray) -> np.ndarray:
    """int64[n, d]: the requantized word contribution of each token, clamped to int32."""
    out = np.zeros((ids.shape[0], params.hidden), dtype=np.int64)
    for cl in params.cluster_views:
        members = np.flatnonzero((ids >= cl.start) & (ids < cl.end))
        if not members.size:
            continue
        u = cl.rows[ids[members] - cl.start]
        acc = u.astype(np.int64) if cl.projection is None else cl.projection.accumulate(u)
        if cl.row_scale is not None:  # int4 cluster 0: q * row_scale, |.| <= 8 * 65535 < 2^19
            acc = acc * cl.row_scale[ids[members] - cl.start][:, None]
        out[members] = _clamp32(requantize(acc, cl.requant[:, 0], cl.requant[:, 1]))
    return out


def run(
    params: EmbeddingParams,
    input_ids: np.ndarray,
    token_type_ids: np.ndarray,
    out: np.ndarray,
    scratch: np.ndarray | None = None,
) -> np.ndarray:
    """Write the int8 hidden state for `input_ids` into `out` (int8[s, d]); returns `out`.

    `scratch`: a uint8 buffer of >= scratch_bytes(s, d) (a view into an arena is fine).
    """
    s, d = params.seq_len, params.hidden
    _check_ids(input_ids, "input_ids", s, params.vocab_size)
    _check_ids(token_type_ids, "token_type_ids", s, params.type_vocab_size)
    check_writable_view(OP, "hidden", out, np.int8, (s, d))
    views = scratch_layout(s, d).views(scratch)
    z = views["z"]
    word = word_terms(params, input_ids)
    pos_rq, type_rq = params.position_requant, params.token_type_requant
    position = _clamp32(requantize(params.position_table.astype(np.int64), pos_rq[:, 0], pos_rq[:, 1]))
    token_type = _clamp32(
        requantize(params.token_type_table[token_type_ids].astype(np.int64), type_rq[:, 0], type_rq[:, 1])
    )
    for start in range(0, s, ROWS):
        rows = slice(start, min(start + ROWS, s))
        n = rows.stop - start
        z[:n] = saturate(word[rows] + position[rows] + token_type[rows], INT16_MIN, INT16_MAX, np.int16)
        out[rows] = layer_norm(z[:n], params.layer_norm)
    return out


# ---------------------------------------------------------------------------------------------
# Float reference (offline: calibration, and the yardstick the tests hold the integer op to)
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, eq=False)
class EmbeddingFloat:
    clusters: tuple[tuple[np.ndarray, np.ndarray | None], ...]  # (U_0, None), (U_i, V_i^T), ...
    position: np.ndarray  # [s, d]
    token_type: np.ndarray  # [T, d]
    gamma: np.ndarray
    beta: np.ndarray
    eps: float = 1e-12

    @property
    def hidden(self) -> int:
        return int(self.position.shape[1])

    def word_vectors(self, ids: np.ndarray) -> np.ndarray:
        out = np.zeros((ids.shape[0], self.hidden))
        start = 0
        for u, vt in self.clusters:
            members = np.flatnonzero((ids >= start) & (ids < start + u.shape[0]))
            rows = u[ids[members] - start]
            out[members] = rows if vt is None else rows @ vt
            start += u.shape[0]
        return out

    def forward(self, input_ids: np.ndarray, token_type_ids: np.ndarray) -> np.ndarray:
        z = self.word_vectors(input_ids) + self.position[: input_ids.shape[0]] + self.token_type[token_type_ids]
        return float_layer_norm(z, self.gamma, self.beta, self.eps)


def _reference(params: EmbeddingParams, inputs, out: np.ndarray, scratch=None) -> np.ndarray:
    s, d = params.seq_len, params.hidden
    return run(params, inputs[0], inputs[1], out.reshape(s, d), scratch)


DEFINITION = OpDef(
    code=OP,
    kind="embedding",
    c_name="embedding",
    params_type=EmbeddingParams,
    runtime_inputs=("input_ids", "token_type_ids"),
    output="hidden",
    in_place=False,
    per_layer=False,
    tiled=False,
    reference=_reference,
    scratch_bytes=lambda p: scratch_bytes(p.seq_len, p.hidden),
    plan_scratch=lambda s, dims, t: scratch_bytes(s, dims.hidden),
    buffer_size_args=lambda p: (p.seq_len, p.hidden),
    output_shape=hidden_shape,
)
