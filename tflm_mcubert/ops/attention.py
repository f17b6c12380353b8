"""MCUBERT_ATTENTION: the whole attention sub-layer, fused, in place on the int8 hidden state x[s, d].

Schedule (heads outer, query tiles inner; the ordering is what bounds memory):

    for head j in 0..h-1:
        K_j = proj_k(x)[:, j]   V_j^T = proj_v(x)[:, j]^T        (all s tokens; scratch)
        for each query tile T of t tokens (the last one may be shorter):
            Q = proj_q(x[T])[:, j]                               (t x dh)
            S = int16 scores Q K_j^T                             (t x s)
            C = softmax(S, key mask) V_j                         (t x dh)
            if j < h-1: context[T, j] = C                        (kept: s x (h-1)dh)
            else:       z = requantize(concat(context[T], C) Wo^T + bo) + ((x[T] - zp[c]) << R[c])
                        x[T] = layer_norm(z)                      (written back in place)

Why writing x[T] back during the last head is safe: the last head's K and V were computed from the
whole, untouched x before its first tile; tile T reads only its own rows x[T] (for Q and the
residual) before overwriting them; and later tiles read only later rows, not yet overwritten.
Memory: s*d (x) + s*d*(h-1)/h (earlier heads' context) + 2*s*d/h (one head's K, V) + tile buffers,
i.e. (2 + 1/h)*s*d + O(t*s + t*d): see scratch_layout().

Numerics per head (all integer; Q, K, V, context symmetric int8; scores symmetric int16):

    q, k, v  = clamp_int8(requantize(bias + x . W, per-channel M))       (linear.py)
    score    = clamp_int16(requantize(q . k, M_score))                    (1/sqrt(dh) in M_score)
    valid    = key mask (mask mode 0: mask[k] != 0; mode 1: k < L)
    m        = max over valid keys of score                               (int16)
    e[k]     = exp_lut[min(m - score[k], 255)] if valid else 0            (0..EXP_ONE = 2^14)
    sum      = sum_k e[k]                                                 (int32, <= 2^24)
    recip    = floor(2^44 / sum), or 0 when sum == 0 (every key masked)   (one division per row)
    acc[c]   = sum_k e[k] * v[k, c]                                       (int32: |acc| <= 2^31)
    mean[c]  = (acc[c] * recip + 2^27) >> 28                              (Q16 weighted mean of v)
    ctx[c]   = clamp_int8(requantize(mean[c], M_ctx))

Scores are int16 so that their scale can be fine (offline: SCORE_LUT_RANGE / 255, i.e. the 256 LUT
entries span exp(0) .. exp(-12)) whatever the score range: with int8 scores the scale must cover the
largest score, and a peaked head (scores +-20) then rounds each exponent by +-7%. Normalizing after
P.V (rather than quantizing probabilities to 8 bits first) keeps 14-bit weights: a flat attention
over 512 keys would otherwise round every probability to 0. A row with every key masked has
recip = 0, so its context is exactly 0 (HF would instead average all keys uniformly).
"""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np

from tflm_mcubert.ops import contract, kernel_events
from tflm_mcubert.ops.fixed_point import (
    EXP_ONE,
    INT8_MAX,
    INT8_MIN,
    INT16_MIN,
    INT16_MAX,
    LUT_SIZE,
    build_exp_lut,
    check_multipliers,
    quantize_multiplier,
    requantize,
    round_shift_right,
    saturate,
)
from tflm_mcubert.ops.layernorm import (
    LayerNormParams,
    check_dim,
    check_residual,
    float_layer_norm,
    layer_norm,
    residual_channels,
    residual_sum,
)
from tflm_mcubert.ops.op_def import OpDef, hidden_shape
from tflm_mcubert.ops.linear import Linear, check_layer_bits, int_matmul, layer_widths, uniform_width
from tflm_mcubert.ops.linear import weight_bits_options, widths_from_options
from tflm_mcubert.ops.quantization import TensorQuant
from tflm_mcubert.ops.scratch import LayoutBuilder, ScratchLayout
from tflm_mcubert.ops.validation import OpSpecError, check_array, check_int, check_writable_view

OP = contract.ATTENTION
LAYERS = contract.ATTENTION_LINEAR_LAYERS  # the projections, each with its own width in version 8
RECIP_BITS = contract.SOFTMAX_RECIP_BITS  # 44
MEAN_SHIFT = contract.SOFTMAX_RECIP_BITS - contract.SOFTMAX_MEAN_FRAC_BITS  # 28
# Offline: the score difference (rowmax - score) the exp table covers; beyond it e = LUT[255] ~ 0.
SCORE_LUT_RANGE = 12.0
SCORE_INT16_TARGET = 32000  # a coarser scale is used only if the largest score would pass this


def choose_score_scale(max_abs_score: float) -> float:
    """int16 score scale: LUT resolution SCORE_LUT_RANGE/255, coarser only if int16 would overflow."""
    return max(SCORE_LUT_RANGE / (LUT_SIZE - 1), max_abs_score / SCORE_INT16_TARGET)


@functools.lru_cache(maxsize=4096)  # the planner asks for the same layouts across tiles and shapes
def scratch_layout(s: int, d: int, h: int, t: int) -> ScratchLayout:
    """The op's scratch. `query`/`scores`/row stats are dead once a tile's context exists, and
    `residual` (the pre-norm sum) is born after that, so they share one slot."""
    dh = d // h
    return (
        LayoutBuilder(OP)
        .add("key", (s, dh), np.int8)
        .add("value_t", (dh, s), np.int8)  # transposed: P.V reduces over contiguous s
        .add("context", (s, (h - 1) * dh), np.int8)
        .add("context_tile", (t, dh), np.int8)  # the last head's context, one tile
        .overlay(
            [
                ("query", (t, dh), np.int8),
                ("scores", (t, s), np.int16),
                ("row_max", (t,), np.int32),
                ("row_recip", (t,), np.int32),
            ],
            [("residual", (t, d), np.int16)],
        )
        # DSP path: 4 activation rows widened to int16 for SMLAD; the longest reduction is
        # max(d, s) (projections: d, P.V: s — where the exp weights are looked up while widening).
        .add("widened", (contract.DSP_ROWS, max(d, s)), np.int16)
        .build()
    )


def scratch_bytes(s: int, d: int, h: int, t: int) -> int:
    return scratch_layout(s, d, h, t).total_bytes


@dataclasses.dataclass(frozen=True, eq=False)
class AttentionParams:
    seq_len: int
    hidden: int
    heads: int
    tile: int
    mask_mode: int
    score_multiplier: int
    score_shift: int
    context_multiplier: int
    context_shift: int
    query: Linear
    key: Linear
    value: Linear
    output: Linear
    exp_lut: np.ndarray  # int16[256]
    layer_norm: LayerNormParams
    residual: np.ndarray  # int32[d, 2]: (zero point, shift R_c) of the incoming hidden state
    # 8 = int8 pair4, 4 = int4 w4row for all four projections (version 3, SPEC 3.1.1), or a width per
    # projection in LAYERS order (version 8, 3.1.2)
    weight_bits: int | tuple[int, ...] = 8

    @property
    def head_size(self) -> int:
        return self.hidden // self.heads

    @property
    def layer_widths(self) -> tuple[int, ...]:
        return layer_widths(OP, LAYERS, self.weight_bits)

    def validate(self) -> "AttentionParams":
        s = check_int(OP, "seq_len", self.seq_len, 1, contract.MAX_SEQ_LEN)
        d = check_dim(OP, "hidden", check_int(OP, "hidden", self.hidden, 1, contract.MAX_HIDDEN))
        h = check_int(OP, "heads", self.heads, 1, contract.MAX_HEADS)
        if d % h:
            raise OpSpecError(OP, "heads", f"hidden {d} is not a multiple of heads {h}")
        check_int(OP, "tile", self.tile, 1, s)
        check_int(OP, "mask_mode", self.mask_mode, 0, 1)
        for mult, shift in (("score_multiplier", "score_shift"), ("context_multiplier", "context_shift")):
            check_int(OP, mult, getattr(self, mult), 0, (1 << 31) - 1)
            check_int(OP, shift, getattr(self, shift), -31, 30)
            problem = check_multipliers(getattr(self, mult), getattr(self, shift))
            if problem:
                raise OpSpecError(OP, mult, problem)
        for name, bits in zip(LAYERS, self.layer_widths):
            lin: Linear = getattr(self, name)
            if (lin.in_features, lin.out_features) != (d, d):
                raise OpSpecError(OP, name, f"expected a {d} x {d} layer, got {lin.out_features} x {lin.in_features}")
            check_layer_bits(OP, name, lin, bits)
            lin.validate(OP, name)
        lut = check_array(OP, "exp_lut", self.exp_lut, np.int16, (LUT_SIZE,), 0, EXP_ONE)
        if lut[0] != EXP_ONE:
            raise OpSpecError(
                OP,
                "exp_lut",
                f"entry 0 must be EXP_ONE = {EXP_ONE} (the row max contributes exactly one), got {int(lut[0])}",
            )
        self.layer_norm.validate(OP, "layer_norm", d)
        check_residual(OP, "residual", self.residual, d)
        return self

    # -- serialization ----------------------------------------------------------------------

    def options(self) -> dict[str, int]:
        return {
            "seq_len": self.seq_len,
            "hidden": self.hidden,
            "heads": self.heads,
            "tile": self.tile,
            "mask_mode": self.mask_mode,
            "score_multiplier": self.score_multiplier,
            "score_shift": self.score_shift,
            "context_multiplier": self.context_multiplier,
            "context_shift": self.context_shift,
            "ln_eps": self.layer_norm.eps,
            **weight_bits_options(self.layer_widths),
        }

    def tensors(self) -> dict[str, np.ndarray]:
        """Constant inputs by contract name (hidden and mask come at run time)."""
        out = {}
        for name in ("query", "key", "value", "output"):
            lin: Linear = getattr(self, name)
            out[f"{name}_weights"] = lin.packed_weights
            out[f"{name}_channels"] = lin.channels
        out["exp_lut"] = self.exp_lut
        out["layer_norm"] = self.layer_norm.table
        out["residual"] = self.residual
        return out

    @classmethod
    def from_serialized(cls, options: dict[str, int], tensors: dict[str, np.ndarray]):
        d, widths = options["hidden"], widths_from_options(LAYERS, options)
        lin = {
            name: Linear(d, d, tensors[f"{name}_weights"], tensors[f"{name}_channels"], bits)
            for name, bits in zip(LAYERS, widths)
        }
        return cls(
            options["seq_len"],
            d,
            options["heads"],
            options["tile"],
            options["mask_mode"],
            options["score_multiplier"],
            options["score_shift"],
            options["context_multiplier"],
            options["context_shift"],
            lin["query"],
            lin["key"],
            lin["value"],
            lin["output"],
            tensors["exp_lut"],
            LayerNormParams(tensors["layer_norm"], options["ln_eps"]),
            tensors["residual"],
            uniform_width(widths),
        ).validate()

    # -- offline quantization ---------------------------------------------------------------

    @classmethod
    def quantize(
        cls,
        fw: "AttentionFloat",
        quant: "AttentionQuant",
        *,
        seq_len: int,
        tile: int,
        mask_mode: int = contract.MASK_MODE_KEY_MASK,
        weight_bits: int | tuple[int, ...] | dict[str, int] = 8,
    ) -> "AttentionParams":
        """`weight_bits`: one width for the four projections, or one each (a tuple in LAYERS order, or by name)."""
        widths = dict(zip(LAYERS, layer_widths(OP, LAYERS, weight_bits)))
        x = quant.input
        residual, z_scale = residual_channels(x, quant.z_max_abs, fw.hidden)
        dh = fw.hidden // fw.heads
        score_m, score_s = quantize_multiplier(
            quant.query.scale * quant.key.scale / (math.sqrt(dh) * quant.score_scale)
        )
        ctx_m, ctx_s = quantize_multiplier(
            quant.value.scale / (quant.context.scale * (1 << contract.SOFTMAX_MEAN_FRAC_BITS))
        )
        return cls(
            seq_len=seq_len,
            hidden=fw.hidden,
            heads=fw.heads,
            tile=tile,
            mask_mode=mask_mode,
            score_multiplier=int(score_m),
            score_shift=int(score_s),
            context_multiplier=int(ctx_m),
            context_shift=int(ctx_s),
            query=Linear.from_float(fw.wq, fw.bq, x, quant.query.scale, widths["query"]),
            key=Linear.from_float(fw.wk, fw.bk, x, quant.key.scale, widths["key"]),
            value=Linear.from_float(fw.wv, fw.bv, x, quant.value.scale, widths["value"]),
            output=Linear.from_float(fw.wo, fw.bo, quant.context, z_scale, widths["output"]),
            exp_lut=build_exp_lut(quant.score_scale),
            layer_norm=LayerNormParams.from_float(fw.gamma, fw.beta, fw.eps, z_scale, quant.output),
            residual=residual,
            weight_bits=uniform_width(tuple(widths.values())),
        ).validate()


# ---------------------------------------------------------------------------------------------
# Reference
# ---------------------------------------------------------------------------------------------


def key_validity(params: AttentionParams, mask: np.ndarray) -> np.ndarray:
    """bool[s]: which keys may be attended, from the mask input of either mode."""
    s = params.seq_len
    if params.mask_mode == contract.MASK_MODE_KEY_MASK:
        return check_array(OP, "mask", mask, np.int8, (s,)) != 0
    length = int(check_array(OP, "mask", mask, np.int32, (1,))[0])
    if not 0 <= length <= s:
        raise OpSpecError(OP, "mask", f"valid length {length} is outside [0, {s}]")
    return np.arange(s) < length


def _project(lin: Linear, x: np.ndarray, columns: slice) -> np.ndarray:
    return saturate(lin.requantized(x, columns), INT8_MIN, INT8_MAX, np.int8)


def scores(params: AttentionParams, q: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """int16[n, s] = clamp(requantize(q . k)) for q int8[n, dh], keys int8[s, dh]."""
    acc = int_matmul(q, keys.T)
    return saturate(requantize(acc, params.score_multiplier, params.score_shift), INT16_MIN, INT16_MAX, np.int16)


def exp_weights(scores_q: np.ndarray, valid: np.ndarray, exp_lut: np.ndarray):
    """(e int64[n, s], row_max int64[n], sum int64[n]) of the softmax numerators."""
    sc = scores_q.astype(np.int64)
    row_max = np.where(valid, sc, INT16_MIN).max(axis=1)  # any value works for fully masked rows
    index = np.clip(row_max[:, None] - sc, 0, LUT_SIZE - 1)  # masked keys may be < 0: zeroed below
    e = np.where(valid, exp_lut.astype(np.int64)[index], 0)
    return e, row_max, e.sum(axis=1)


def reciprocal(total: np.ndarray) -> np.ndarray:
    """floor(2^44 / sum), 0 for an all-masked row (sum 0). sum in [2^14, 2^24] -> recip < 2^31."""
    return np.where(total > 0, (np.int64(1) << RECIP_BITS) // np.maximum(total, 1), 0)


def attend(
    params: AttentionParams,
    scores_q: np.ndarray,
    valid: np.ndarray,
    value_t: np.ndarray,
    row_max_out=None,
    row_recip_out=None,
) -> np.ndarray:
    """int8[n, dh] context of one tile from its int16 scores and V^T (int8[dh, s])."""
    e, row_max, total = exp_weights(scores_q, valid, params.exp_lut)
    recip = reciprocal(total)
    if row_max_out is not None:
        row_max_out[:] = row_max
        row_recip_out[:] = recip
    acc = int_matmul(e, value_t.T)
    mean = round_shift_right(acc * recip[:, None], MEAN_SHIFT)
    return saturate(requantize(mean, params.context_multiplier, params.context_shift), INT8_MIN, INT8_MAX, np.int8)


def effective_probabilities(params: AttentionParams, scores_q: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """float64[n, s]: the attention weights the integer op applies, e[k] * recip / 2^44.

    (Diagnostics and tests only: the op never materialises them.)
    """
    e, _, total = exp_weights(scores_q, valid, params.exp_lut)
    return e * reciprocal(total)[:, None] / float(1 << RECIP_BITS)


def run(params: AttentionParams, hidden: np.ndarray, mask: np.ndarray, scratch: np.ndarray | None = None) -> np.ndarray:
    """Run the op in place on `hidden` (int8[s, d]); returns `hidden`.

    `scratch`: uint8[>= scratch_bytes(s, d, h, t)] — e.g. a view into a planned arena. Every
    intermediate lives there; the op writes nothing else but `hidden`.
    """
    s, d, h, t = params.seq_len, params.hidden, params.heads, params.tile
    dh = params.head_size
    check_writable_view(OP, "hidden", hidden, np.int8, (s, d))
    valid = key_validity(params, mask)
    v = scratch_layout(s, d, h, t).views(scratch)
    for head in range(h):
        cols = slice(head * dh, (head + 1) * dh)
        last = head == h - 1
        v["key"][:] = _project(params.key, hidden, cols)
        v["value_t"][:] = _project(params.value, hidden, cols).T
        for start in range(0, s, t):
            rows = slice(start, min(start + t, s))
            n = rows.stop - start
            q = v["query"][:n]
            q[:] = _project(params.query, hidden[rows], cols)
            tile_scores = v["scores"][:n]
            tile_scores[:] = scores(params, q, v["key"])
            target = v["context_tile"][:n] if last else v["context"][rows, cols]
            target[:] = attend(params, tile_scores, valid, v["value_t"], v["row_max"][:n], v["row_recip"][:n])
            if last:
                # The kernel reads the context row as two segments: earlier heads, then this tile.
                context_rows = np.concatenate([v["context"][rows], target], axis=1)
                z = v["residual"][:n]
                z[:] = residual_sum(params.output.requantized(context_rows), hidden[rows], params.residual)
                hidden[rows] = layer_norm(z, params.layer_norm)
    return hidden


# ---------------------------------------------------------------------------------------------
# Float reference and calibration (offline)
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class AttentionQuant:
    """Activation quantization of one attention layer (scales from calibration)."""

    input: TensorQuant  # hidden state in (asymmetric)
    query: TensorQuant  # symmetric
    key: TensorQuant  # symmetric
    value: TensorQuant  # symmetric
    score_scale: float  # int16 scores of q.k / sqrt(dh) (choose_score_scale)
    context: TensorQuant  # symmetric
    z_max_abs: float  # max |attention output + residual| (pre-norm)
    output: TensorQuant  # hidden state out (asymmetric)


@dataclasses.dataclass(frozen=True, eq=False)
class AttentionFloat:
    """Float weights in the Hugging Face layout: w* are [out, in]."""

    wq: np.ndarray
    bq: np.ndarray
    wk: np.ndarray
    bk: np.ndarray
    wv: np.ndarray
    bv: np.ndarray
    wo: np.ndarray
    bo: np.ndarray
    gamma: np.ndarray
    beta: np.ndarray
    heads: int
    eps: float = 1e-12

    @property
    def hidden(self) -> int:
        return int(self.wq.shape[1])

    def forward(self, x: np.ndarray, valid: np.ndarray, observed: dict | None = None) -> np.ndarray:
        """BERT self-attention + output (dense, residual, LayerNorm) in float64.

        A row whose keys are all masked gets a zero context, as the integer op defines it.
        """
        x = np.asarray(x, dtype=np.float64)
        s, d = x.shape
        h, dh = self.heads, d // self.heads
        q = x @ self.wq.T + self.bq
        k = x @ self.wk.T + self.bk
        v = x @ self.wv.T + self.bv
        qh, kh, vh = (a.reshape(s, h, dh).transpose(1, 0, 2) for a in (q, k, v))
        sc = qh @ kh.transpose(0, 2, 1) / math.sqrt(dh)
        if valid.any():
            masked = np.where(valid, sc, -np.inf)
            p = np.exp(masked - masked.max(axis=-1, keepdims=True))
            p /= p.sum(axis=-1, keepdims=True)
        else:
            p = np.zeros_like(sc)
        ctx = (p @ vh).transpose(1, 0, 2).reshape(s, d)
        attn = ctx @ self.wo.T + self.bo
        z = attn + x
        y = float_layer_norm(z, self.gamma, self.beta, self.eps)
        if observed is not None:
            valid_scores = sc[..., valid] if valid.any() else np.zeros(1)
            observed.update(query=q, key=k, value=v, scores=valid_scores, context=ctx, z=z, output=y)
        return y

    def calibrate(self, x: np.ndarray, valid: np.ndarray, input_quant: TensorQuant) -> AttentionQuant:
        """Activation scales from one float pass over the (dequantized) calibration input."""
        seen: dict = {}
        self.forward(x, valid, seen)
        sym = {name: TensorQuant.observe(seen[name], symmetric=True) for name in ("query", "key", "value", "context")}
        return AttentionQuant(
            input=input_quant,
            z_max_abs=float(np.abs(seen["z"]).max()),
            score_scale=choose_score_scale(float(np.abs(seen["scores"]).max())),
            output=TensorQuant.observe(seen["output"], symmetric=False),
            **sym,
        )


def _reference(params: AttentionParams, inputs, out: np.ndarray, scratch=None) -> np.ndarray:
    return run(params, inputs[0].reshape(params.seq_len, params.hidden), inputs[1], scratch)


DEFINITION = OpDef(
    code=OP,
    kind="attention",
    c_name="attention",
    params_type=AttentionParams,
    runtime_inputs=("hidden", "mask"),
    output="hidden",
    in_place=True,
    per_layer=True,
    tiled=True,
    reference=_reference,
    scratch_bytes=lambda p: scratch_bytes(p.seq_len, p.hidden, p.heads, p.tile),
    plan_scratch=lambda s, dims, t: scratch_bytes(s, dims.hidden, dims.heads, t),
    buffer_size_args=lambda p: (p.seq_len, p.hidden, p.heads, p.tile),
    output_shape=hidden_shape,
    cost_features=lambda s, dims, t: kernel_events.attention_features(s, dims.hidden, dims.heads, t),
    weight_traffic=lambda s, dims, t: kernel_events.attention_weight_traffic(s, dims.hidden, t, dims.weight_bits),
    linear_layers=LAYERS,
)
