"""MCUBERT_CAUSAL_ATTENTION: a decoder's pre-LayerNorm self-attention for one token, over an int8 KV cache.

GPT-2's block reads the residual stream x, normalizes it, attends, and adds the result back:
x' = x + O(attention(LN1(x))). One invoke is one token at position p:

    z[c]      = (x[c] - zp[c]) << R[c]                          residual stream in s_z units (int16)
    a         = layer_norm(z)                                    LN1, int8
    q, k, v   = requantized(a . W_q|k|v)                         int8[d] (linear.py)
    cache[0, p] = k;  cache[1, p] = v                            the KV cache: int8[2, n, d], state
    per head j: scores over the keys 0..p, softmax-weighted mean of the values 0..p (with a window w:
                the last w positions only, GPT-Neo's local attention)
                (attention.py's arithmetic: int16 scores, exp table, 2^44 / sum, Q16 mean)
    z'[c]     = clamp_int16(requantize(ctx . W_o)[c] + z[c])     the residual add, in s_z units
    x'[c]     = clamp_int8(round(z'[c] / 2^R'[c]) + zp'[c])       written over x (in place)

The cache is the op's state between invokes (a TFLM variable tensor; ResetVariableTensors zeroes it,
and a new sequence starts at p = 0, which reads only row 0): rows after p are never read, so a prompt
is fed one token per invoke. Keys and values are stored as the int8 projections the scores and the
mean read, so a step equals recomputing the whole prefix (`prefill`) byte for byte. The residual
stream keeps one s_z for every op of the decoder; a channel's scale is s_z * 2^R[c].
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from tflm_mcubert.ops import contract
from tflm_mcubert.ops.attention import attend, choose_score_scale, scores
from tflm_mcubert.ops.fixed_point import (
    INT8_MAX,
    INT8_MIN,
    build_exp_lut,
    check_multipliers,
    quantize_multiplier,
    round_half_up,
    saturate,
)
from tflm_mcubert.ops.layernorm import (
    MAX_RESIDUAL_SHIFT,
    LayerNormParams,
    check_dim,
    check_residual,
    float_layer_norm,
    layer_norm,
    residual_channels,
    residual_out,
    residual_sum,
)
from tflm_mcubert.ops.linear import Linear, int4_layers_option, layer_widths, widths_from_options
from tflm_mcubert.ops.op_def import OpDef
from tflm_mcubert.ops.quantization import TensorQuant
from tflm_mcubert.ops.scratch import LayoutBuilder, ScratchLayout
from tflm_mcubert.ops.validation import OpSpecError, check_array, check_int, check_writable_view

OP = contract.CAUSAL_ATTENTION
LINEARS = ("query", "key", "value", "output")


def scratch_layout(n: int, d: int) -> ScratchLayout:
    return (
        LayoutBuilder(OP)
        .add("residual", (d,), np.int16)  # z, then z'
        .add("normed", (d,), np.int8)  # a
        .add("query", (d,), np.int8)
        .add("context", (d,), np.int8)
        .add("scores", (n,), np.int16)  # one head's scores over the keys 0..p, then its exp weights
        .add("widened", (contract.DSP_ROWS, d), np.int16)  # DSP path: the one activation row for SMLAD
        .build()
    )


def scratch_bytes(n: int, d: int) -> int:
    return scratch_layout(n, d).total_bytes


@dataclasses.dataclass(frozen=True, eq=False)
class CausalAttentionParams:
    context: int  # n: positions the cache holds
    hidden: int
    heads: int
    window: int  # keys p - window + 1 .. p (GPT-Neo's local attention); 0: all of 0..p
    score_multiplier: int
    score_shift: int
    context_multiplier: int
    context_shift: int
    layer_norm: LayerNormParams  # LN1, from s_z units to the int8 a
    query: Linear
    key: Linear
    value: Linear
    output: Linear  # to s_z units
    exp_lut: np.ndarray  # int16[256]
    residual: np.ndarray  # int32[d, 2]: the input's (zp, R)
    output_residual: np.ndarray  # int32[d, 2]: the output's (zp', R')

    @property
    def head_size(self) -> int:
        return self.hidden // self.heads

    def validate(self) -> "CausalAttentionParams":
        check_int(OP, "context", self.context, 1, contract.MAX_SEQ_LEN)
        d = check_dim(OP, "hidden", check_int(OP, "hidden", self.hidden, 1, contract.MAX_HIDDEN))
        h = check_int(OP, "heads", self.heads, 1, contract.MAX_HEADS)
        check_int(OP, "window", self.window, 0, contract.MAX_SEQ_LEN)
        if d % h:
            raise OpSpecError(OP, "heads", f"hidden {d} is not a multiple of heads {h}")
        for field in ("score", "context"):
            problem = check_multipliers(getattr(self, f"{field}_multiplier"), getattr(self, f"{field}_shift"))
            if problem:
                raise OpSpecError(OP, f"{field}_multiplier", problem)
        self.layer_norm.validate(OP, "layer_norm", d)
        for name in LINEARS:
            layer: Linear = getattr(self, name)
            if (layer.out_features, layer.in_features) != (d, d):
                raise OpSpecError(
                    OP, name, f"expected a {d} x {d} layer, got {layer.out_features} x {layer.in_features}"
                )
            layer.validate(OP, name)
        check_array(OP, "exp_lut", self.exp_lut, np.int16, (256,))
        check_residual(OP, "residual", self.residual, d)
        check_residual(OP, "output_residual", self.output_residual, d)
        return self

    def options(self) -> dict[str, int]:
        return {
            "context": self.context,
            "hidden": self.hidden,
            "heads": self.heads,
            "window": self.window,
            "score_multiplier": self.score_multiplier,
            "score_shift": self.score_shift,
            "context_multiplier": self.context_multiplier,
            "context_shift": self.context_shift,
            "ln_eps": self.layer_norm.eps,
            **int4_layers_option(tuple(getattr(self, name) for name in LINEARS)),
        }

    def tensors(self) -> dict[str, np.ndarray]:
        out = {"layer_norm": self.layer_norm.table}
        for name in LINEARS:
            layer: Linear = getattr(self, name)
            out[f"{name}_weights"], out[f"{name}_channels"] = layer.packed_weights, layer.channels
        out.update(exp_lut=self.exp_lut, residual=self.residual, output_residual=self.output_residual)
        return out

    @classmethod
    def from_serialized(cls, options: dict[str, int], tensors: dict[str, np.ndarray]) -> "CausalAttentionParams":
        d, widths = options["hidden"], widths_from_options(LINEARS, options)
        layers = {
            name: Linear(d, d, tensors[f"{name}_weights"], tensors[f"{name}_channels"], bits)
            for name, bits in zip(LINEARS, widths)
        }
        return cls(
            options["context"],
            d,
            options["heads"],
            options["window"],
            options["score_multiplier"],
            options["score_shift"],
            options["context_multiplier"],
            options["context_shift"],
            LayerNormParams(tensors["layer_norm"], options["ln_eps"]),
            **layers,
            exp_lut=tensors["exp_lut"],
            residual=tensors["residual"],
            output_residual=tensors["output_residual"],
        ).validate()


# ---------------------------------------------------------------------------------------------
# Reference
# ---------------------------------------------------------------------------------------------


def _project(layer: Linear, a: np.ndarray) -> np.ndarray:
    return saturate(layer.requantized(a), INT8_MIN, INT8_MAX, np.int8)


def _heads(params: CausalAttentionParams, q: np.ndarray, keys: np.ndarray, values: np.ndarray) -> np.ndarray:
    """int8[d]: each head's context for one query over the given keys and values (int8[m, d])."""
    dh, valid = params.head_size, np.ones(keys.shape[0], bool)
    context = np.empty(params.hidden, np.int8)
    for j in range(params.heads):
        cols = slice(j * dh, (j + 1) * dh)
        head_scores = scores(params, q[None, cols], keys[:, cols])
        context[cols] = attend(params, head_scores, valid, values[:, cols].T)[0]
    return context


def first_key(params: CausalAttentionParams, p: int) -> int:
    """The first position a query at p attends to."""
    return max(0, p - params.window + 1) if params.window else 0


def _position(params: CausalAttentionParams, position: np.ndarray) -> int:
    p = int(check_array(OP, "position", position, np.int32, (1,))[0])
    if not 0 <= p < params.context:
        raise OpSpecError(OP, "position", f"{p} is outside [0, {params.context})")
    return p


def run(
    params: CausalAttentionParams,
    hidden: np.ndarray,
    position: np.ndarray,
    cache: np.ndarray,
    scratch: np.ndarray | None = None,
) -> np.ndarray:
    """One token: `hidden` (int8[d]) updated in place, `cache` (int8[2, n, d]) row p written; returns hidden."""
    n, d = params.context, params.hidden
    check_writable_view(OP, "hidden", hidden, np.int8, (d,))
    check_writable_view(OP, "cache", cache, np.int8, (2, n, d))
    p = _position(params, position)
    v = scratch_layout(n, d).views(scratch)
    v["residual"][:] = residual_sum(np.zeros(d, np.int64), hidden, params.residual)
    v["normed"][:] = layer_norm(v["residual"][None], params.layer_norm)[0]
    v["query"][:] = _project(params.query, v["normed"][None])[0]
    cache[0, p] = _project(params.key, v["normed"][None])[0]
    cache[1, p] = _project(params.value, v["normed"][None])[0]
    first = first_key(params, p)
    v["context"][:] = _heads(params, v["query"], cache[0, first : p + 1], cache[1, first : p + 1])
    v["residual"][:] = residual_sum(params.output.requantized(v["context"][None])[0], hidden, params.residual)
    hidden[:] = residual_out(v["residual"], params.output_residual)
    return hidden


def prefill(params: CausalAttentionParams, hidden: np.ndarray) -> np.ndarray:
    """The same op recomputed for a whole prefix at once (int8[s, d] -> int8[s, d], no cache): token i
    attends to tokens 0..i. The cache's contract is that stepping equals this, byte for byte."""
    hidden = check_array(OP, "hidden", hidden, np.int8)
    z = residual_sum(np.zeros(hidden.shape, np.int64), hidden, params.residual)
    a = layer_norm(z, params.layer_norm)
    q, k, v = (_project(getattr(params, name), a) for name in ("query", "key", "value"))
    out = np.empty_like(hidden)
    for i in range(hidden.shape[0]):
        first = first_key(params, i)
        context = _heads(params, q[i], k[first : i + 1], v[first : i + 1])
        zi = residual_sum(params.output.requantized(context[None])[0], hidden[i], params.residual)
        out[i] = residual_out(zi, params.output_residual)
    return out


# ---------------------------------------------------------------------------------------------
# Float reference and quantization (offline)
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, eq=False)
class CausalAttentionFloat:
    """GPT-2's attention block in the Hugging Face layout (w* [out, in]) with its LayerNorm ln_1."""

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
    eps: float = 1e-5
    scale: float | None = None  # the score scale; None: 1/sqrt(head size) (GPT-2)
    window: int = 0  # GPT-Neo's local attention: keys p - window + 1 .. p; 0: all

    @property
    def hidden(self) -> int:
        return int(self.wq.shape[1])

    def forward(self, x: np.ndarray, observed: dict | None = None) -> np.ndarray:
        """x + attention(ln_1(x)) for a causal sequence x [s, d], float64."""
        x = np.asarray(x, np.float64)
        s, d = x.shape
        h, dh = self.heads, d // self.heads
        a = float_layer_norm(x, self.gamma, self.beta, self.eps)
        q, k, v = (a @ w.T + b for w, b in ((self.wq, self.bq), (self.wk, self.bk), (self.wv, self.bv)))
        qh, kh, vh = (t.reshape(s, h, dh).transpose(1, 0, 2) for t in (q, k, v))
        sc = qh @ kh.transpose(0, 2, 1) * (self.scale if self.scale is not None else 1 / math.sqrt(dh))
        visible = np.tril(np.ones((s, s), bool))
        if self.window:
            visible &= ~np.tril(np.ones((s, s), bool), -self.window)
        sc = np.where(visible, sc, -np.inf)
        p = np.exp(sc - sc.max(axis=-1, keepdims=True))
        p /= p.sum(axis=-1, keepdims=True)
        ctx = (p @ vh).transpose(1, 0, 2).reshape(s, d)
        y = x + ctx @ self.wo.T + self.bo
        if observed is not None:
            finite = sc[np.isfinite(sc)]
            observed.update(normed=a, query=q, key=k, value=v, scores=finite, context=ctx, output=y)
        return y

    def _observe(self, x) -> tuple[dict, np.ndarray, np.ndarray]:
        """(activations, outputs, inputs) of one float pass over calibration sequences: x [s, d] or a list
        of them (each causal on its own), the rows of every sequence concatenated."""
        sequences = [x] if isinstance(x, np.ndarray) and x.ndim == 2 else list(x)
        seen: dict = {}
        outputs = []
        for sequence in sequences:
            observed: dict = {}
            outputs.append(self.forward(sequence, observed))
            for name, value in observed.items():
                seen.setdefault(name, []).append(np.asarray(value).reshape(-1, *np.shape(value)[1:]))
        return {k: np.concatenate(v) for k, v in seen.items()}, np.concatenate(outputs), np.concatenate(sequences)

    def quantize(
        self,
        x,
        input_quant: TensorQuant,
        *,
        context: int,
        z_scale: float | None = None,
        weight_bits: int | tuple[int, ...] | dict[str, int] = 8,
    ) -> "CausalAttentionParams":
        """Integer parameters from one float pass over calibration sequences (x [s, d], or a list of them)
        whose residual stream is quantized as `input_quant` (per channel, power-of-two multiples of one
        step). `z_scale`: the
        decoder's s_z (calibrate_decoder chooses one for every op, so the stream can grow layer by layer);
        None: this op's own (layernorm.residual_channels). The output keeps s_z: its channels get the
        smallest shift R' whose int8 covers their calibrated range. `weight_bits`: one width for the four
        projections, or one each (a tuple in LINEARS order, or by name; SPEC.md 3.1.2)."""
        bits = dict(zip(LINEARS, layer_widths(OP, LINEARS, weight_bits)))
        seen, y, x = self._observe(x)
        d, dh = self.hidden, self.hidden // self.heads
        residual, z_scale = stream_residual(input_quant, float(max(np.abs(y).max(), np.abs(x).max())), d, z_scale)
        normed = TensorQuant.observe(seen["normed"], symmetric=False)
        sym = {name: TensorQuant.observe(seen[name], symmetric=True) for name in ("query", "key", "value")}
        # A context is a convex combination of values, and a token early in the text attends to few of them
        # (the first one's context is its own value): the value's range bounds every context, calibrated or not.
        sym["context"] = sym["value"]
        score_scale = choose_score_scale(float(np.abs(seen["scores"]).max()))
        logit = self.scale if self.scale is not None else 1 / math.sqrt(dh)
        score_m, score_s = quantize_multiplier(sym["query"].scale * sym["key"].scale * logit / score_scale)
        ctx_m, ctx_s = quantize_multiplier(
            sym["value"].scale / (sym["context"].scale * (1 << contract.SOFTMAX_MEAN_FRAC_BITS))
        )
        return CausalAttentionParams(
            context=context,
            hidden=d,
            heads=self.heads,
            window=self.window,
            score_multiplier=int(score_m),
            score_shift=int(score_s),
            context_multiplier=int(ctx_m),
            context_shift=int(ctx_s),
            layer_norm=LayerNormParams.from_float(self.gamma, self.beta, self.eps, z_scale, normed),
            query=Linear.from_float(self.wq, self.bq, normed, sym["query"].scale, bits["query"]),
            key=Linear.from_float(self.wk, self.bk, normed, sym["key"].scale, bits["key"]),
            value=Linear.from_float(self.wv, self.bv, normed, sym["value"].scale, bits["value"]),
            output=Linear.from_float(self.wo, self.bo, sym["context"], z_scale, bits["output"]),
            exp_lut=build_exp_lut(score_scale),
            residual=residual,
            output_residual=stream_channels(y.min(axis=0), y.max(axis=0), z_scale),
        ).validate()


# Offline: a stream channel's calibrated range sits in the middle of its int8 codes (False: at the bottom,
# as before). The power-of-two scale leaves up to half the codes spare; centred, they guard both ends against
# values past the calibrated range (clipped otherwise: bench/decoder_attention_range.py measures the cost).
STREAM_CENTRED = True


def stream_channels(lo: np.ndarray, hi: np.ndarray, z_scale: float, centred: bool | None = None) -> np.ndarray:
    """int32[d, 2] (zp, R) of a residual-stream value with channel ranges [lo, hi] at s_z * 2^R: the
    smallest R in [0, 7] whose 255 steps cover the range (so the next op's z is an exact shift), and the
    zero point that centres the range in the 255 steps (`centred`, default STREAM_CENTRED) or puts lo at -128."""
    lo, hi = np.minimum(lo, 0.0), np.maximum(hi, 0.0)
    steps = np.maximum(hi - lo, 1e-12) / (z_scale * (INT8_MAX - INT8_MIN))
    shift = np.clip(np.ceil(np.log2(np.maximum(steps, 1.0)) - 1e-12), 0, MAX_RESIDUAL_SHIFT).astype(np.int64)
    scale = z_scale * np.exp2(shift)
    spare = (INT8_MAX - INT8_MIN) - (hi - lo) / scale if (STREAM_CENTRED if centred is None else centred) else 0.0
    zero_point = np.clip(round_half_up(INT8_MIN - lo / scale + spare / 2), INT8_MIN, INT8_MAX).astype(np.int64)
    return np.stack([zero_point, shift], axis=1).astype(np.int32)


def stream_residual(quant: TensorQuant, z_max_abs: float, d: int, z_scale: float | None) -> tuple[np.ndarray, float]:
    """(int32[d, 2] (zp, R), s_z) of a residual-stream input: at a given s_z, R[c] = log2(scale[c] / s_z) (the
    channel scales must be power-of-two multiples of it, R in [0, 7]); None: the op's own s_z
    (layernorm.residual_channels, as the encoder ops choose it)."""
    if z_scale is None:
        return residual_channels(quant, z_max_abs, d)
    scale = np.broadcast_to(np.asarray(quant.scale, np.float64), (d,))
    shift = np.rint(np.log2(scale / z_scale)).astype(np.int64)
    if np.any(shift < 0) or np.any(shift > MAX_RESIDUAL_SHIFT) or not np.allclose(scale, z_scale * np.exp2(shift)):
        raise ValueError("stream_residual: the channel scales must be s_z * 2^R with R in [0, 7]")
    zero_point = np.broadcast_to(np.asarray(quant.zero_point, np.int64), (d,))
    return np.stack([zero_point, shift], axis=1).astype(np.int32), float(z_scale)


def stream_quant(channels: np.ndarray, z_scale: float) -> TensorQuant:
    """The TensorQuant of a residual-stream value stored with `channels` (zp, R) at step s_z."""
    return TensorQuant(z_scale * np.exp2(channels[:, 1].astype(np.float64)), channels[:, 0].astype(np.int64))


def _reference(params: CausalAttentionParams, inputs, out: np.ndarray, scratch=None) -> np.ndarray:
    hidden, position, cache = inputs
    return run(
        params, hidden.reshape(params.hidden), position, cache.reshape(2, params.context, params.hidden), scratch
    )


DEFINITION = OpDef(
    code=OP,
    kind="causal_attention",
    c_name="causal_attention",
    params_type=CausalAttentionParams,
    runtime_inputs=("hidden", "position", "cache"),
    output="hidden",
    in_place=True,
    per_layer=True,
    tiled=False,
    reference=_reference,
    scratch_bytes=lambda p: scratch_bytes(p.context, p.hidden),
    plan_scratch=lambda s, dims, t: scratch_bytes(s, dims.hidden),
    buffer_size_args=lambda p: (p.context, p.hidden, p.heads),
    output_shape=lambda p: (1, p.hidden),
    linear_layers=LINEARS,
)
