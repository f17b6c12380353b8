"""Synthetic parameters for the MCUBERT ops: tests here, golden vectors for the C kernels.

Two kinds:
  * realistic: random float layers (BERT-like initialisation), calibrated and quantized through
    the ops' own offline path — for accuracy checks against float math;
  * extreme: every integer drawn from the full range the contract allows (weights +-127, biases up
    to 2^30, any valid multiplier and shift, full-range LayerNorm tables and eps) — for overflow
    and saturation checks; the outputs are meaningless but must be bit-exact.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tflm_mcubert.ops import attention, embedding, mlp
from tflm_mcubert.ops.attention import AttentionFloat, AttentionParams
from tflm_mcubert.ops.causal_attention import CausalAttentionFloat, stream_channels
from tflm_mcubert.ops.decoder_embedding import DecoderEmbeddingParams
from tflm_mcubert.ops.decoder_mlp import DecoderMlpFloat
from tflm_mcubert.ops.embedding import EmbeddingFloat, EmbeddingParams
from tflm_mcubert.ops.fixed_point import EXP_ONE, MULTIPLIER_MIN, INT32_MAX
from tflm_mcubert.ops.layernorm import EPS_MAX, LayerNormParams, hidden_quant
from tflm_mcubert.ops.linear import BIAS_LIMIT, Linear, pack_weights
from tflm_mcubert.ops.linear_int4 import pack_weights_int4
from tflm_mcubert.ops.mlp import MLPFloat, MLPParams
from tflm_mcubert.ops.quantization import TensorQuant

# ---------------------------------------------------------------------------------------------
# Realistic float layers
# ---------------------------------------------------------------------------------------------


def _dense(rng: np.random.Generator, out_features: int, in_features: int):
    return (
        rng.normal(0.0, 1.0 / np.sqrt(in_features), (out_features, in_features)),
        rng.normal(0.0, 0.05, out_features),
    )


def _norm(rng: np.random.Generator, d: int):
    return 1.0 + 0.1 * rng.normal(size=d), 0.1 * rng.normal(size=d)


def float_attention(rng: np.random.Generator, d: int, h: int, *, sharpness: float = 2.0) -> AttentionFloat:
    """`sharpness` scales Q and K so attention is peaked like a trained model's (1: near uniform)."""
    wq, bq = _dense(rng, d, d)
    wk, bk = _dense(rng, d, d)
    wv, bv = _dense(rng, d, d)
    wo, bo = _dense(rng, d, d)
    gamma, beta = _norm(rng, d)
    return AttentionFloat(wq * sharpness, bq, wk * sharpness, bk, wv, bv, wo, bo, gamma, beta, h)


def float_mlp(rng: np.random.Generator, d: int, ffn: int, activation: str = "gelu") -> MLPFloat:
    w1, b1 = _dense(rng, ffn, d)
    w2, b2 = _dense(rng, d, ffn)
    gamma, beta = _norm(rng, d)
    return MLPFloat(w1, b1, w2, b2, gamma, beta, activation)


def float_embedding(
    rng: np.random.Generator, d: int, s: int, cluster_sizes=(40, 60, 100), ranks=(None, 16, 4), type_vocab: int = 2
) -> EmbeddingFloat:
    clusters = []
    for n, r in zip(cluster_sizes, ranks):
        if r is None:
            clusters.append((rng.normal(0, 0.05, (n, d)), None))
        else:
            clusters.append((rng.normal(0, 0.2, (n, r)), rng.normal(0, 0.2, (r, d))))
    gamma, beta = _norm(rng, d)
    return EmbeddingFloat(
        tuple(clusters), rng.normal(0, 0.02, (s, d)), rng.normal(0, 0.02, (type_vocab, d)), gamma, beta
    )


@dataclasses.dataclass(frozen=True, eq=False)
class QuantizedEncoder:
    embedding: EmbeddingParams
    layers: tuple[tuple[AttentionParams, MLPParams], ...]
    output: TensorQuant  # quantization of the final hidden state

    def run(self, input_ids, token_type_ids, mask) -> np.ndarray:
        """The whole encoder on separate arrays (each op allocates its own scratch)."""
        p = self.embedding
        hidden = np.zeros((p.seq_len, p.hidden), dtype=np.int8)
        embedding.run(p, input_ids, token_type_ids, hidden)
        for attn, ffn in self.layers:
            attention.run(attn, hidden, mask)
            mlp.run(ffn, hidden)
        return hidden


def quantized_encoder(
    rng: np.random.Generator,
    *,
    hidden: int,
    heads: int,
    ffn: int,
    layers: int,
    seq_len: int,
    tiles: dict[str, int] | None = None,
    valid=None,
    cluster_sizes=(40, 60, 100),
    ranks=(None, 16, 4),
):
    """(QuantizedEncoder, float forward function, calibration ids, types, valid).

    Calibrated on one random sequence through the float model, layer by layer.
    """
    tiles = tiles or {}
    s = seq_len
    emb = float_embedding(rng, hidden, s, cluster_sizes, ranks)
    vocab = sum(cluster_sizes)
    ids = rng.integers(0, vocab, s).astype(np.int32)
    types = (np.arange(s) >= s // 2).astype(np.int32)
    valid = np.ones(s, bool) if valid is None else valid
    x = emb.forward(ids, types)
    quant = TensorQuant.observe(x, symmetric=False)
    emb_params = EmbeddingParams.quantize(emb, quant)
    floats, params = [], []
    for _ in range(layers):
        fa, fm = float_attention(rng, hidden, heads), float_mlp(rng, hidden, ffn)
        aq = fa.calibrate(x, valid, quant)
        ap = AttentionParams.quantize(fa, aq, seq_len=s, tile=tiles.get("attention", 8))
        x = fa.forward(x, valid)
        mq = fm.calibrate(x, aq.output)
        mp = MLPParams.quantize(fm, mq, seq_len=s, tile=tiles.get("mlp", 8))
        x = fm.forward(x)
        quant = mq.output
        floats.append((fa, fm))
        params.append((ap, mp))

    def float_forward(ids_, types_, valid_):
        y = emb.forward(ids_, types_)
        for fa, fm in floats:
            y = fm.forward(fa.forward(y, valid_))
        return y

    return QuantizedEncoder(emb_params, tuple(params), quant), float_forward, ids, types, valid


# ---------------------------------------------------------------------------------------------
# Extreme integer parameters
# ---------------------------------------------------------------------------------------------


def _weights(rng, n, k, bits: int = 8) -> np.ndarray:
    top = 127 if bits == 8 else 7
    w = rng.choice(np.array([-top, top, -1, 0, 1], np.int8), size=(n, k), p=[0.4, 0.4, 0.05, 0.1, 0.05])
    return w.astype(np.int8)


def _requant(rng, n) -> tuple[np.ndarray, np.ndarray]:
    mult = rng.integers(MULTIPLIER_MIN, INT32_MAX, n, endpoint=True)
    mult[rng.random(n) < 0.05] = 0
    shift = rng.integers(-31, 31, n)
    return mult.astype(np.int32), shift.astype(np.int32)


def _mostly(rng, n, typical: int, limit: int) -> np.ndarray:
    """Values mostly within +-typical (so outputs vary), a fifth anywhere in +-limit."""
    small = rng.integers(-typical, typical, n, endpoint=True)
    large = rng.integers(-limit, limit, n, endpoint=True)
    return np.where(rng.random(n) < 0.8, small, large)


def _linear(rng, n, k, *, shifts=(-24, -12), bits: int = 8) -> Linear:
    """bits 4: int4 weights in [-7, 7] (w4row), shifts 4 higher for the ~16x smaller accumulators."""
    if bits == 4:
        shifts = (shifts[0] + 4, shifts[1] + 4)
    mult, shift = _requant(rng, n)
    # Mostly moderate shifts so that many outputs land inside the output range instead of saturating.
    shift = np.where(rng.random(n) < 0.8, rng.integers(*shifts, n), shift).astype(np.int32)
    channels = np.stack([_mostly(rng, n, 1 << 16, BIAS_LIMIT), mult, shift], axis=1).astype(np.int32)
    w = _weights(rng, n, k, bits)
    packed = pack_weights(w) if bits == 8 else pack_weights_int4(w).view(np.int8)
    return Linear(k, n, packed, channels, bits)


def _layer_norm(rng, d) -> LayerNormParams:
    table = np.stack([_mostly(rng, d, 1 << 21, INT32_MAX), _mostly(rng, d, 1 << 22, INT32_MAX)], 1)
    eps = int(rng.choice([0, 1, EPS_MAX, int(rng.integers(0, EPS_MAX))], p=[0.4, 0.2, 0.1, 0.3]))
    return LayerNormParams(table.astype(np.int32), eps)


def _residual(rng, d) -> np.ndarray:
    """Per-channel (zero point, shift) rows: random, with the extremes (-128 / 127, 0 / 7) present."""
    zero_point = rng.integers(-128, 128, d)
    shift = rng.integers(0, 8, d)
    for c, (zp, r) in zip(rng.permutation(d), ((-128, 7), (127, 7), (127, 0), (-128, 0))):
        zero_point[c], shift[c] = zp, r
    return np.stack([zero_point, shift], axis=1).astype(np.int32)


def extreme_attention(
    rng, s: int, d: int, h: int, t: int, mask_mode: int = 0, weight_bits: int | tuple[int, ...] = 8
) -> AttentionParams:
    """`weight_bits`: one width for the four projections, or one each (SPEC 3.1.2)."""
    bits = weight_bits if isinstance(weight_bits, tuple) else (weight_bits,) * 4
    lut = rng.integers(0, EXP_ONE, 256, endpoint=True).astype(np.int16)
    lut[0] = EXP_ONE
    sm, ss = _requant(rng, 2)
    return AttentionParams(
        seq_len=s,
        hidden=d,
        heads=h,
        tile=t,
        mask_mode=mask_mode,
        score_multiplier=int(max(sm[0], MULTIPLIER_MIN)),
        score_shift=int(rng.integers(-20, -5)),
        context_multiplier=int(max(sm[1], MULTIPLIER_MIN)),
        context_shift=int(rng.integers(-20, 0)),
        query=_linear(rng, d, d, bits=bits[0]),
        key=_linear(rng, d, d, bits=bits[1]),
        value=_linear(rng, d, d, bits=bits[2]),
        output=_linear(rng, d, d, shifts=(-16, -4), bits=bits[3]),
        exp_lut=lut,
        layer_norm=_layer_norm(rng, d),
        residual=_residual(rng, d),
        weight_bits=weight_bits,
    ).validate()


def extreme_mlp(rng, s: int, d: int, ffn: int, t: int, weight_bits: int | tuple[int, int] = 8) -> MLPParams:
    """`weight_bits`: one width for FC1 and FC2, or one each (SPEC 3.1.2)."""
    bits = weight_bits if isinstance(weight_bits, tuple) else (weight_bits,) * 2
    return MLPParams(
        seq_len=s,
        hidden=d,
        ffn=ffn,
        tile=t,
        fc1_output_zero_point=int(rng.integers(-128, 128)),
        fc1=_linear(rng, ffn, d, bits=bits[0]),
        activation_lut=rng.integers(-128, 128, 256).astype(np.int8),
        fc2=_linear(rng, d, ffn, shifts=(-16, -4), bits=bits[1]),
        layer_norm=_layer_norm(rng, d),
        residual=_residual(rng, d),
        weight_bits=weight_bits,
    ).validate()


def _int4_rows(rng, n: int, r: int, row_scales: bool) -> np.ndarray:
    """Stored int4 rows: any nibble, -8 included (zero padding nibble), uint16 row scales over their
    whole range (the extremes among them) for cluster 0."""
    packed = embedding.pack_int4(rng.integers(-8, 8, (n, r)))
    if row_scales:
        scale = rng.integers(0, 1 << 16, n)
        scale[: min(n, 2)] = [(1 << 16) - 1, 0][: min(n, 2)]
        packed = np.concatenate([np.stack([scale & 0xFF, scale >> 8], 1).astype(np.uint8), packed], axis=1)
    return packed.view(np.int8).reshape(-1)


def extreme_embedding(
    rng, s: int, d: int, cluster_sizes=(3, 4, 5), ranks=(None, 2, 5), type_vocab: int = 2, word_bits: int = 8
) -> EmbeddingParams:
    ends = np.cumsum(cluster_sizes)
    rank_list = [d if r is None else r for r in ranks]
    rows, projections, requants = [], [], []
    for i, (n, r) in enumerate(zip(cluster_sizes, rank_list)):
        rows.append(_weights(rng, n, r).reshape(-1) if word_bits == 8 else _int4_rows(rng, n, r, i == 0))
        if i > 0:
            projections.append(pack_weights(_weights(rng, d, r)))
        requants.append(np.stack(_requant(rng, d), axis=1))
    return EmbeddingParams(
        seq_len=s,
        hidden=d,
        vocab_size=int(ends[-1]),
        type_vocab_size=type_vocab,
        clusters=np.array([ends, rank_list], dtype=np.int32).T.copy(),
        word_rows=np.concatenate(rows),
        word_projections=np.concatenate(projections) if projections else np.zeros(0, np.int8),
        word_requant=np.stack(requants).astype(np.int32),
        position_table=_weights(rng, s, d),
        position_requant=np.stack(_requant(rng, d), 1),
        token_type_table=_weights(rng, type_vocab, d),
        token_type_requant=np.stack(_requant(rng, d), 1),
        layer_norm=_layer_norm(rng, d),
        word_bits=word_bits,
    ).validate()


# ---------------------------------------------------------------------------------------------
# Decoder blocks
# ---------------------------------------------------------------------------------------------


def float_causal_attention(rng: np.random.Generator, d: int, h: int):
    """GPT-2's attention block (ops.causal_attention.CausalAttentionFloat) with float_attention's weights."""
    base = float_attention(rng, d, h)
    fields = ("wq", "bq", "wk", "bk", "wv", "bv", "wo", "bo", "gamma", "beta")
    return CausalAttentionFloat(**{f: getattr(base, f) for f in fields}, heads=h, eps=1e-5)


def quantized_causal_attention(d: int = 32, h: int = 4, context: int = 256, seed: int = 0, weight_bits=8):
    """(params, float block, input quant, float residual stream [context, d]): a block calibrated on a
    residual stream with a few outlier channels, as GPT-2's has; `weight_bits` as the op's quantize takes it."""
    rng = np.random.default_rng(seed)
    fw = float_causal_attention(rng, d, h)
    x = rng.normal(0, 1.0, (context, d)) * (1 + 3 * (np.arange(d) % 7 == 0))
    y = fw.forward(x)
    in_quant = hidden_quant(x.min(axis=0), x.max(axis=0), float(max(np.abs(x).max(), np.abs(y).max())))
    return fw.quantize(x, in_quant, context=context, weight_bits=weight_bits), fw, in_quant, x


def quantized_decoder_mlp(d: int = 32, ffn: int = 128, rows: int = 64, seed: int = 0, weight_bits=8):
    """(params, float MLP, input quant, float residual stream [rows, d]) of GPT-2's MLP, calibrated;
    `weight_bits` as the op's quantize takes it."""
    rng = np.random.default_rng(seed)
    base = float_mlp(rng, d, ffn)
    fw = DecoderMlpFloat(base.w1, base.b1, base.w2, base.b2, base.gamma, base.beta)
    x = rng.normal(0, 1.0, (rows, d)) * (1 + 3 * (np.arange(d) % 7 == 0))
    y = fw.forward(x)
    in_quant = hidden_quant(x.min(axis=0), x.max(axis=0), float(max(np.abs(x).max(), np.abs(y).max())))
    return fw.quantize(x, in_quant, weight_bits=weight_bits), fw, in_quant, x


def quantized_decoder_embedding(
    d: int = 32, context: int = 16, seed: int = 0, sizes=(40, 60, 100), ranks=(None, 16, 4), word_bits: int = 8
):
    """(params, float clusters, float positions, s_z): GPT-2's wte + wpe as a clustered table at `word_bits`."""
    rng = np.random.default_rng(seed)
    fw = float_embedding(rng, d, context, cluster_sizes=sizes, ranks=ranks)
    dense = np.concatenate([u if vt is None else u @ vt for u, vt in fw.clusters])
    sums = dense[:, None, :] + fw.position[None]  # every (id, position)
    lo, hi = sums.min(axis=(0, 1)), sums.max(axis=(0, 1))
    # the stream's step: fine enough for the int16 sum, coarse enough that 2^7 steps cover every channel
    z_scale = float(np.min(hidden_quant(lo, hi, float(np.abs(sums).max())).scale))
    params = DecoderEmbeddingParams.quantize(
        fw.clusters, fw.position, z_scale, stream_channels(lo, hi, z_scale), word_bits=word_bits
    )
    return params, fw.clusters, fw.position, z_scale
