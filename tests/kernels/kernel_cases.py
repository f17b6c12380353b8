"""Kernel test cases: a KernelCall plus the numpy reference's expected output bytes.

Two parameter kinds (ops/testing.py): "realistic" layers quantized through the offline path, and
"extreme" ones with every integer drawn from the full range the contract allows (saturation,
largest biases/multipliers/shifts, any LayerNorm table and eps).
"""

from __future__ import annotations

import dataclasses
import functools
import re
from pathlib import Path

import numpy as np

from tflm_mcubert.ops import attention, causal_attention, decoder_mlp, embedding, mlp, testing
from tflm_mcubert.ops.attention import AttentionParams
from tflm_mcubert.ops.linear import Linear
from tflm_mcubert.ops.mlp import MLPParams
from tflm_mcubert.ops.quantization import TensorQuant
from tflm_mcubert.ops import kernel_abi
from tflm_mcubert.ops.kernel_abi import KernelCall
from tflm_mcubert.kernel_sources import custom_ops_dir


HEADER = Path(__file__).resolve().parents[2] / "custom_ops" / "include" / "mcubert" / "mcubert_ops.h"
# The generated contract header the C build compiles (custom_ops_dir() writes it).
CONTRACT_HEADER = custom_ops_dir() / "include" / "mcubert" / "mcubert_contract.h"
# The contract-wide hashes the C build implements (test_kernels_layout checks them against SPEC.md).
HEADER_SPEC_HASH = int(
    re.search(r"#define MCUBERT_SPEC_HASH (0x[0-9a-fA-F]+)u", CONTRACT_HEADER.read_text()).group(1), 16
)
# Version 2's (int4 embedding tables, SPEC 4.1.1); an int4 embedding call carries it.
HEADER_SPEC_HASH_V2 = int(
    re.search(r"#define MCUBERT_SPEC_HASH_V2 (0x[0-9a-fA-F]+)u", CONTRACT_HEADER.read_text()).group(1), 16
)


@dataclasses.dataclass
class Case:
    name: str
    call: KernelCall
    expected: np.ndarray  # int8, flattened result tensor

    @property
    def expected_bytes(self) -> bytes:
        return self.expected.tobytes()


def _mask(rng, s: int, kind: str) -> np.ndarray:
    """int8[s] key mask: "all", "none" (every key masked), "tail" (padding), "random"."""
    if kind == "all":
        return np.ones(s, np.int8)
    if kind == "none":
        return np.zeros(s, np.int8)
    if kind == "tail":
        return (np.arange(s) < s - s // 5).astype(np.int8)
    mask = rng.integers(-128, 128, s).astype(np.int8)  # any non-zero byte attends
    mask[rng.random(s) < 0.3] = 0
    return mask


def _spec_hash(weight_bits) -> int | None:
    """The hash a call carries: the C build's version-1 hash for int8, else the version's own (None:
    the contract's, which the generated C tables share)."""
    return HEADER_SPEC_HASH if weight_bits == 8 else None


def _bits_suffix(weight_bits) -> str:
    """ "" for int8, "-int4" for int4, "-w4848" for a width per layer (SPEC 3.1.2, version 8)."""
    if isinstance(weight_bits, tuple):
        return "-w" + "".join(map(str, weight_bits))
    return "" if weight_bits == 8 else "-int4"


@functools.lru_cache(maxsize=None)
def _realistic_attention(s, d, h, seed, weight_bits=8):
    rng = np.random.default_rng(seed)
    fa = testing.float_attention(rng, d, h, sharpness=2.0)
    x = rng.normal(size=(s, d))
    inq = TensorQuant.observe(x, symmetric=False)
    xq = inq.quantize(x)
    valid = np.ones(s, bool)
    quant = fa.calibrate(inq.dequantize(xq), valid, inq)
    return AttentionParams.quantize(fa, quant, seq_len=s, tile=1, weight_bits=weight_bits), xq


def attention_case(
    s: int,
    d: int,
    h: int,
    t: int,
    *,
    kind: str = "extreme",
    mask: str = "random",
    mask_mode: int = 0,
    seed: int = 0,
    saturate_rows: bool = True,
    weight_bits: int = 8,
) -> Case:
    """weight_bits 4: int4 projections (w4row, spec version 3)."""
    rng = np.random.default_rng(seed * 7919 + s * 31 + d)
    if kind == "extreme":
        params = testing.extreme_attention(rng, s, d, h, t, mask_mode, weight_bits)
        hidden = rng.integers(-128, 128, (s, d)).astype(np.int8)
        if saturate_rows and s > 1:
            hidden[0] = -128
            hidden[-1] = 127
    else:
        base, xq = _realistic_attention(s, d, h, seed, weight_bits)
        params = dataclasses.replace(base, tile=t, mask_mode=mask_mode).validate()
        hidden = xq.copy()
    if mask_mode == 0:
        key_mask = _mask(rng, s, mask)
    else:
        length = {"all": s, "none": 0, "tail": s - s // 5}.get(mask, int(rng.integers(0, s + 1)))
        key_mask = np.array([length], np.int32)
    expected = attention.run(params, hidden.copy(), key_mask)
    call = kernel_abi.attention_call(params, hidden, key_mask, _spec_hash(weight_bits))
    name = f"attention-{kind}-s{s}-d{d}-h{h}-t{t}-{mask}-m{mask_mode}" + _bits_suffix(weight_bits)
    return Case(name, call, expected.reshape(-1))


def mlp_case(s: int, d: int, f: int, t: int, *, kind: str = "extreme", seed: int = 0, weight_bits: int = 8) -> Case:
    """weight_bits 4: int4 FC1 and FC2 (w4row, spec version 3)."""
    rng = np.random.default_rng(seed * 7919 + s * 31 + d + f)
    if kind == "extreme":
        params = testing.extreme_mlp(rng, s, d, f, t, weight_bits)
        hidden = rng.integers(-128, 128, (s, d)).astype(np.int8)
        if s > 1:
            hidden[0] = -128
            hidden[-1] = 127
    else:
        fm = testing.float_mlp(rng, d, f)
        x = rng.normal(size=(s, d))
        inq = TensorQuant.observe(x, symmetric=False)
        hidden = inq.quantize(x)
        quant = fm.calibrate(inq.dequantize(hidden), inq)
        params = MLPParams.quantize(fm, quant, seq_len=s, tile=t, weight_bits=weight_bits)
    expected = mlp.run(params, hidden.copy())
    return Case(
        f"mlp-{kind}-s{s}-d{d}-f{f}-t{t}" + _bits_suffix(weight_bits),
        kernel_abi.mlp_call(params, hidden, _spec_hash(weight_bits)),
        expected.reshape(-1),
    )


def decoder_mlp_case(d: int, f: int, *, seed: int = 0, token: int = 0) -> Case:
    """One token of a calibrated GPT-2 MLP (MCUBERT_DECODER_MLP): a one-row block through the linear layers."""
    params, _, in_quant, x = testing.quantized_decoder_mlp(d, f, rows=token + 1, seed=seed)
    hidden = in_quant.quantize(x)[token]
    expected = decoder_mlp.run(params, hidden.copy())
    return Case(f"decoder-mlp-d{d}-f{f}-s{seed}", kernel_abi.decoder_mlp_call(params, hidden), expected.reshape(-1))


def causal_attention_case(
    d: int, h: int, step: int, *, context: int = 40, seed: int = 0, window: int = 0, weight_bits=8
) -> Case:
    """Step `step` of a calibrated decoder attention (MCUBERT_CAUSAL_ATTENTION), its cache filled by the
    reference's steps before it (rows after `step` stale); `window` > 0: GPT-Neo's local attention."""
    params, _, in_quant, x = testing.quantized_causal_attention(
        d=d, h=h, context=context, seed=seed, weight_bits=weight_bits
    )
    params = dataclasses.replace(params, window=window)
    xs = in_quant.quantize(x)
    cache = np.full((2, context, d), 77, np.int8)
    for p in range(step):
        causal_attention.run(params, xs[p].copy(), np.array([p], np.int32), cache)
    call = kernel_abi.causal_attention_call(params, xs[step], np.array([step], np.int32), cache)
    expected = causal_attention.run(params, xs[step].copy(), np.array([step], np.int32), cache.copy())
    name = f"causal-attention-d{d}-h{h}-p{step}-w{window}-s{seed}{_bits_suffix(weight_bits)}"
    return Case(name, call, expected.reshape(-1))


def embedding_case(
    s: int,
    d: int,
    *,
    kind: str = "extreme",
    seed: int = 0,
    cluster_sizes=(3, 4, 5),
    ranks=(None, 2, 5),
    type_vocab: int = 2,
    word_bits: int = 8,
) -> Case:
    """word_bits 4: the int4 tables (SPEC 4.1.1), spec version 2."""
    rng = np.random.default_rng(seed * 7919 + s * 31 + d)
    if kind == "extreme":
        params = testing.extreme_embedding(rng, s, d, cluster_sizes, ranks, type_vocab, word_bits)
    else:
        from tflm_mcubert.ops.embedding import EmbeddingParams

        fe = testing.float_embedding(rng, d, s, cluster_sizes, ranks, type_vocab)
        ids0 = rng.integers(0, sum(cluster_sizes), s).astype(np.int32)
        out = TensorQuant.observe(fe.forward(ids0, np.zeros(s, np.int32)), symmetric=False)
        params = EmbeddingParams.quantize(fe, out, word_bits)
    ids = rng.integers(0, params.vocab_size, s).astype(np.int32)
    types = rng.integers(0, params.type_vocab_size, s).astype(np.int32)
    expected = embedding.run(params, ids, types, np.zeros((s, d), np.int8))
    spec_hash = HEADER_SPEC_HASH if word_bits == 8 else HEADER_SPEC_HASH_V2
    return Case(
        f"embedding-{kind}-s{s}-d{d}" + ("" if word_bits == 8 else "-int4"),
        kernel_abi.embedding_call(params, ids, types, spec_hash),
        expected.reshape(-1),
    )


def _with_shift(lin: Linear, shift: int) -> Linear:
    channels = lin.channels.copy()
    channels[:, 2] = shift
    channels[channels[:, 1] == 0, 2] = 0  # a zero multiplier carries shift 0
    return Linear(lin.in_features, lin.out_features, lin.packed_weights, channels, lin.weight_bits)


def shift_boundary_cases(shift: int, seed: int = 0, weight_bits: int = 8) -> list[Case]:
    """An attention and an MLP case with every requantization at one shift: the kernels' output
    stages have a fast form for shift <= -2 (SMMLA + ASR) and the exact form otherwise, so the
    shifts around -2 test projections, transposed V, scores, context, residual sums, FC1 with its
    table and FC2 on both sides of that boundary. The residual stages (output projection, FC2) also
    have a scaled fast form for shifts >= -1 within the layer's accumulator bound (small biases,
    int4 weights), so shifts up to a few above 0 test that one too."""
    rng = np.random.default_rng(40 + shift + 100 * seed)
    s, d, h = 13, 16, 2
    params = testing.extreme_attention(rng, s, d, h, 4, weight_bits=weight_bits)
    params = dataclasses.replace(
        params,
        query=_with_shift(params.query, shift),
        key=_with_shift(params.key, shift),
        value=_with_shift(params.value, shift),
        output=_with_shift(params.output, shift),
        score_shift=shift,
        context_shift=shift,
    ).validate()
    hidden = rng.integers(-128, 128, (s, d)).astype(np.int8)
    mask = (rng.random(s) < 0.8).astype(np.int8)
    cases = [
        Case(
            f"attention-shift{shift}" + _bits_suffix(weight_bits),
            kernel_abi.attention_call(params, hidden, mask, _spec_hash(weight_bits)),
            attention.run(params, hidden.copy(), mask).reshape(-1),
        )
    ]
    mlp_params = testing.extreme_mlp(rng, s, d, 40, 4, weight_bits=weight_bits)
    mlp_params = dataclasses.replace(
        mlp_params, fc1=_with_shift(mlp_params.fc1, shift), fc2=_with_shift(mlp_params.fc2, shift)
    ).validate()
    cases.append(
        Case(
            f"mlp-shift{shift}" + _bits_suffix(weight_bits),
            kernel_abi.mlp_call(mlp_params, hidden, _spec_hash(weight_bits)),
            mlp.run(mlp_params, hidden.copy()).reshape(-1),
        )
    )
    return cases
