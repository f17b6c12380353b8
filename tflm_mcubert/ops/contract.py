"""The serialized interface of the MCUBERT custom ops: option fields, tensor signatures, constants.

Data only (no numerics), so the op modules, the options codec and the docs all read one table. The
canonical text of this table, plus each op's scratch size at sample shapes, is hashed into
SPEC_HASH (ops/registry.py): a kernel built against another contract rejects the model at Prepare
instead of silently computing different bytes.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from tflm_mcubert.ops import fixed_point, layernorm, linear

SPEC_VERSION = 1  # what every op's options carry unless they need a later version (below)
# Version 2 = version 1 plus int4 embedding storage (SPEC.md 4.1.1): the embedding's options gain
# `word_bits`. The encoder writes the lowest version that can express an op's options, so int8
# models keep version 1 and their bytes; kernels accept both.
SPEC_VERSION_INT4 = 2
# Versions 1 and 2 predate per-op versions: they are contract-wide (every op reads both, each
# identified by the hash of the whole contract text). A version after these belongs to one op
# (VERSION_OPTIONS / VERSION_LINES below) and is hashed over the shared constants and that op's own
# lines only, so a new version of one op changes no other op's hash and no other model's bytes.
SPEC_VERSIONS = (SPEC_VERSION, SPEC_VERSION_INT4)
CONTRACT_WIDE_VERSIONS = SPEC_VERSIONS
# Version 3 belongs to MCUBERT_ATTENTION and MCUBERT_MLP (the first per-op version): option `weight_bits`,
# one storage width for all the op's linear layers, 4 = the packed int4 "w4row" layout (SPEC.md 3.1.1).
SPEC_VERSION_W4 = 3
# Versions 4-7 are the first of the ops added later: an op added after versions 1-2 reads only its
# own versions, and its lines are outside the contract-wide text, so adding it changed no other op's hash.
SPEC_VERSION_LM_HEAD = 4
SPEC_VERSION_CAUSAL_ATTENTION = 5  # one decoder token over an int8 KV cache
SPEC_VERSION_DECODER_MLP = 6  # the pre-LayerNorm MLP of a decoder block
SPEC_VERSION_DECODER_EMBEDDING = 7  # word + position into the residual stream
# Version 8 belongs to MCUBERT_ATTENTION and MCUBERT_MLP: a width per linear layer, option
# `int4_layers` (bit i: the op's layer i is int4), for a model whose ops mix int4 and int8 matrices.
SPEC_VERSION_LAYER_BITS = 8
# Version 9: version 8's `int4_layers` mask for MCUBERT_CAUSAL_ATTENTION and MCUBERT_DECODER_MLP (no weight_bits).
SPEC_VERSION_DECODER_LAYER_BITS = 9
SPEC_VERSION_SAMPLE = 10  # the next token drawn from the LM head's candidates (temperature, top-k, top-p)
# Version 11 belongs to MCUBERT_DECODER_EMBEDDING and MCUBERT_LM_HEAD: option `word_bits`, the tied word table
# at the embedding's int4 storage (SPEC.md 4.1.1); the head scores cluster 0's rows with a 48-bit requantize.
SPEC_VERSION_DECODER_INT4 = 11
ATTENTION_LINEAR_LAYERS = ("query", "key", "value", "output")  # the order of the op's weight inputs
MLP_LINEAR_LAYERS = ("fc1", "fc2")
LINEAR_WEIGHT_BITS = (4, 8)  # storage widths of the encoder ops' linear weights; 8 is versions 1-2's only one
EMBEDDING_WORD_BITS = (4, 8)  # storage widths of the word tables; 8 is version 1's only one
INT4_ROW_SCALE_BYTES = 2  # cluster 0 int4 rows: uint16 little-endian row scale, then the nibbles

MAX_SEQ_LEN = 1024  # exp sums and P.V accumulators are bounded for s <= 1024 (fixed_point.EXP_ONE)
MAX_HIDDEN = layernorm.MAX_DIM
MAX_FFN = linear.MAX_IN_FEATURES
MAX_HEADS = 64
MAX_CLUSTERS = 8
MAX_TYPE_VOCAB = 1024
MAX_LABELS = 1024
MAX_TOP_K = 256
INT32_MAX = fixed_point.INT32_MAX

EMBEDDING = "MCUBERT_EMBEDDING"
ATTENTION = "MCUBERT_ATTENTION"
MLP = "MCUBERT_MLP"
CLASSIFIER_HEAD = "MCUBERT_CLASSIFIER_HEAD"
LM_HEAD = "MCUBERT_LM_HEAD"
CAUSAL_ATTENTION = "MCUBERT_CAUSAL_ATTENTION"
DECODER_MLP = "MCUBERT_DECODER_MLP"
DECODER_EMBEDDING = "MCUBERT_DECODER_EMBEDDING"
SAMPLE = "MCUBERT_SAMPLE"
# The ops of the contract-wide versions 1 and 2: their text is SPEC_HASH's. Later ops have own versions only.
CONTRACT_WIDE_OPS = (EMBEDDING, ATTENTION, MLP, CLASSIFIER_HEAD)

# An op's kind is its name everywhere outside the .tflite: plan steps, cost models, report.json,
# --tile, tensor and op names ("layer0.attention"). This table is the one translation between the two.
KINDS = {
    EMBEDDING: "embedding",
    ATTENTION: "attention",
    MLP: "mlp",
    CLASSIFIER_HEAD: "head",
    LM_HEAD: "lm_head",
    CAUSAL_ATTENTION: "causal_attention",
    DECODER_MLP: "decoder_mlp",
    DECODER_EMBEDDING: "decoder_embedding",
    SAMPLE: "sample",
}
CUSTOM_CODES = {kind: code for code, kind in KINDS.items()}
TILED_KINDS = (KINDS[ATTENTION], KINDS[MLP])  # the ops whose schedule has a token tile

MASK_MODE_KEY_MASK = 0  # input 1 is int8[s]: 0 = masked key, anything else = attend
MASK_MODE_VALID_LENGTH = 1  # input 1 is int32[1]: keys [0, L) attend, L in [0, s]


@dataclasses.dataclass(frozen=True)
class OptionField:
    name: str
    lo: int
    hi: int
    doc: str


@dataclasses.dataclass(frozen=True)
class TensorSig:
    name: str
    dtype: str
    shape: str
    doc: str


CrossCheck = Callable[[dict[str, int]], "tuple[str, str] | None"]


@dataclasses.dataclass(frozen=True)
class OpContract:
    name: str
    options: tuple[OptionField, ...]
    inputs: tuple[TensorSig, ...]
    outputs: tuple[TensorSig, ...]
    cross_check: CrossCheck


# Every op's options start with these two; decoding checks them before anything else.
HEADER_FIELDS = (
    OptionField("spec_version", 0, INT32_MAX, "must equal SPEC_VERSION"),
    OptionField("spec_hash", 0, (1 << 32) - 1, "must equal SPEC_HASH (FNV-1a 32 of the contract)"),
)

_EPS = OptionField("ln_eps", 0, layernorm.EPS_MAX, "LayerNorm eps in D units: round(eps*d^2/s_z^2)")
_SEQ = OptionField("seq_len", 1, MAX_SEQ_LEN, "tokens s (static)")
_HIDDEN = OptionField("hidden", 1, MAX_HIDDEN, "hidden size d")
_TILE = OptionField("tile", 1, MAX_SEQ_LEN, "query/token tile t, 1 <= t <= s")


def _multiplier_ok(values: dict[str, int], mult: str, shift: str):
    problem = fixed_point.check_multipliers(values[mult], values[shift])
    return (mult, problem) if problem else None


def _check_embedding(v: dict[str, int]):
    bits = v.get("word_bits", 8)
    if bits not in EMBEDDING_WORD_BITS:
        return "word_bits", f"{bits} is not a storage width (4: packed int4, 8: int8)"
    if v["cluster_count"] > v["vocab_size"]:
        return "cluster_count", f"{v['cluster_count']} clusters for a vocabulary of {v['vocab_size']}"
    return None


def _check_weight_bits(v: dict[str, int]):
    bits = v.get("weight_bits", 8)
    if bits not in LINEAR_WEIGHT_BITS:
        return "weight_bits", f"{bits} is not a weight width (4: packed int4, 8: int8)"
    if "int4_layers" in v and bits != 8:
        return "weight_bits", f"{bits} with int4_layers (version 8: the mask gives the int4 layers, the rest are 8)"
    return None


def _check_attention(v: dict[str, int]):
    problem = _check_weight_bits(v)
    if problem:
        return problem
    if v["hidden"] % v["heads"]:
        return "heads", f"hidden {v['hidden']} is not a multiple of heads {v['heads']}"
    if v["tile"] > v["seq_len"]:
        return "tile", f"tile {v['tile']} exceeds seq_len {v['seq_len']}"
    return _multiplier_ok(v, "score_multiplier", "score_shift") or _multiplier_ok(
        v, "context_multiplier", "context_shift"
    )


def _check_mlp(v: dict[str, int]):
    problem = _check_weight_bits(v)
    if problem:
        return problem
    if v["tile"] > v["seq_len"]:
        return "tile", f"tile {v['tile']} exceeds seq_len {v['seq_len']}"
    return None


def _no_cross_field_rules(v: dict[str, int]):
    return None  # the classifier head's fields are independent of each other


def _check_causal_attention(v: dict[str, int]):
    if v["hidden"] % v["heads"]:
        return "heads", f"hidden {v['hidden']} is not a multiple of heads {v['heads']}"
    return _multiplier_ok(v, "score_multiplier", "score_shift") or _multiplier_ok(
        v, "context_multiplier", "context_shift"
    )


def _check_lm_head(v: dict[str, int]):
    if v.get("word_bits", 8) not in EMBEDDING_WORD_BITS:
        return "word_bits", f"{v['word_bits']} is not a storage width (4: packed int4, 8: int8)"
    if v["cluster_count"] > v["vocab_size"]:
        return "cluster_count", f"{v['cluster_count']} clusters for a vocabulary of {v['vocab_size']}"
    if v["top_k"] > v["vocab_size"]:
        return "top_k", f"{v['top_k']} exceeds vocab_size {v['vocab_size']}"
    return None


def _check_sample(v: dict[str, int]):
    if v["keep"] > v["top_k"]:
        return "keep", f"{v['keep']} exceeds top_k {v['top_k']}"
    return _multiplier_ok(v, "index_multiplier", "index_shift")


_REQUANT_D = "int32", "[d, 2]"
_LN = TensorSig("layer_norm", "int32", "[d, 2]", "gamma_q, beta_q (Q16 output units)")
_HIDDEN_IO = TensorSig("hidden", "int8", "[s, d]", "hidden state, updated in place")
_RESIDUAL = TensorSig(
    "residual", "int32", "[d, 2]", "per channel (zero point [-128, 127], shift R_c [0, 7]): s_x[c] = s_z * 2^R_c"
)

_TOKEN_STREAM = TensorSig("hidden", "int8", "[d]", "one token's residual stream, updated in place")
_BLOCK_OUTPUT = TensorSig("hidden", "int8", "[d]", "the residual stream after the block")
_OUTPUT_RESIDUAL = TensorSig(
    "output_residual", "int32", "[d, 2]", "the output's (zero point, shift R'): s = s_z * 2^R'"
)


def _linear_sigs(name: str, shape: str, to: str = "") -> tuple[TensorSig, TensorSig]:
    """A pair4 linear layer's two tensors: its weights [packed(N, K)] and channel rows [N, 3]."""
    rows = shape.split(",")[0]
    return (
        TensorSig(f"{name}_weights", "int8", f"[packed({shape})]", "pair4"),
        TensorSig(f"{name}_channels", "int32", f"[{rows}, 3]", f"bias, multiplier, shift{to}"),
    )


CONTRACTS: dict[str, OpContract] = {
    EMBEDDING: OpContract(
        EMBEDDING,
        options=(
            _SEQ,
            _HIDDEN,
            OptionField("vocab_size", 1, INT32_MAX, "v; ids outside [0, v) are an error"),
            OptionField("cluster_count", 1, MAX_CLUSTERS, "c"),
            OptionField("type_vocab_size", 1, MAX_TYPE_VOCAB, "token types; others are an error"),
            _EPS,
        ),
        inputs=(
            TensorSig("input_ids", "int32", "[s]", "token ids in the permuted vocabulary"),
            TensorSig("token_type_ids", "int32", "[s]", "segment ids"),
            TensorSig("clusters", "int32", "[c, 2]", "(end_id exclusive, rank r_i); r_0 = d"),
            TensorSig("word_rows", "int8", "[sum n_i*r_i]", "U_0 | U_1 | ... row-major, concatenated"),
            TensorSig(
                "word_projections",
                "int8",
                "[sum_{i>0} packed(d, r_i)]",
                "V_i (d out, r_i in) in pair4 layout, concatenated",
            ),
            TensorSig("word_requant", "int32", "[c, d, 2]", "(multiplier, shift) per cluster, channel"),
            TensorSig("position_table", "int8", "[s, d]", "rows 0..s-1 only"),
            TensorSig("position_requant", *_REQUANT_D, "(multiplier, shift) per channel"),
            TensorSig("token_type_table", "int8", "[T, d]", ""),
            TensorSig("token_type_requant", *_REQUANT_D, "(multiplier, shift) per channel"),
            _LN,
        ),
        outputs=(TensorSig("hidden", "int8", "[s, d]", "embedded, normalized hidden state"),),
        cross_check=_check_embedding,
    ),
    ATTENTION: OpContract(
        ATTENTION,
        options=(
            _SEQ,
            _HIDDEN,
            OptionField("heads", 1, MAX_HEADS, "h, divides d"),
            _TILE,
            OptionField("mask_mode", 0, 1, "0: int8[s] key mask; 1: int32[1] valid length"),
            OptionField("score_multiplier", 0, INT32_MAX, "q.k -> int16 score (1/sqrt(dh) folded)"),
            OptionField("score_shift", fixed_point.SHIFT_MIN, fixed_point.SHIFT_MAX, ""),
            OptionField("context_multiplier", 0, INT32_MAX, "Q16 mean of V -> int8 context"),
            OptionField("context_shift", fixed_point.SHIFT_MIN, fixed_point.SHIFT_MAX, ""),
            _EPS,
        ),
        inputs=(
            _HIDDEN_IO,
            TensorSig("mask", "int8|int32", "[s]|[1]", "mask_mode 0: int8[s]; 1: int32[1] valid length"),
            TensorSig("query_weights", "int8", "[packed(d, d)]", "pair4"),
            TensorSig("query_channels", "int32", "[d, 3]", "bias, multiplier, shift"),
            TensorSig("key_weights", "int8", "[packed(d, d)]", "pair4"),
            TensorSig("key_channels", "int32", "[d, 3]", "bias, multiplier, shift"),
            TensorSig("value_weights", "int8", "[packed(d, d)]", "pair4"),
            TensorSig("value_channels", "int32", "[d, 3]", "bias, multiplier, shift"),
            TensorSig("output_weights", "int8", "[packed(d, d)]", "pair4"),
            TensorSig("output_channels", "int32", "[d, 3]", "bias, multiplier, shift (to z units)"),
            TensorSig("exp_lut", "int16", "[256]", "EXP_ONE*exp(-k*s_score); [0] = EXP_ONE"),
            _LN,
            _RESIDUAL,
        ),
        outputs=(_HIDDEN_IO,),
        cross_check=_check_attention,
    ),
    MLP: OpContract(
        MLP,
        options=(
            _SEQ,
            _HIDDEN,
            OptionField("ffn", 1, MAX_FFN, "intermediate size"),
            _TILE,
            OptionField("fc1_output_zero_point", -128, 127, "zero point of the GELU table's input"),
            _EPS,
        ),
        inputs=(
            _HIDDEN_IO,
            TensorSig("fc1_weights", "int8", "[packed(ffn, d)]", "pair4"),
            TensorSig("fc1_channels", "int32", "[ffn, 3]", "bias, multiplier, shift"),
            TensorSig("activation_lut", "int8", "[256]", "GELU: entry q+128 for input q"),
            TensorSig("fc2_weights", "int8", "[packed(d, ffn)]", "pair4"),
            TensorSig("fc2_channels", "int32", "[d, 3]", "bias, multiplier, shift (to z units)"),
            _LN,
            _RESIDUAL,
        ),
        outputs=(_HIDDEN_IO,),
        cross_check=_check_mlp,
    ),
    CLASSIFIER_HEAD: OpContract(
        CLASSIFIER_HEAD,
        options=(
            _SEQ,
            _HIDDEN,
            OptionField("labels", 1, MAX_LABELS, "classifier outputs n"),
            OptionField("pooler_zero_point", -128, 127, "zero point of the tanh table's input"),
            OptionField("logits_zero_point", -128, 127, "zero point of the int8 logits"),
        ),
        inputs=(
            TensorSig("hidden", "int8", "[s, d]", "final hidden state; only row 0 ([CLS]) is read"),
            TensorSig("pooler_weights", "int8", "[packed(d, d)]", "pair4"),
            TensorSig("pooler_channels", "int32", "[d, 3]", "bias, multiplier, shift"),
            TensorSig("tanh_lut", "int8", "[256]", "tanh: entry q+128 for input q"),
            TensorSig("classifier_weights", "int8", "[packed(labels, d)]", "pair4"),
            TensorSig("classifier_channels", "int32", "[labels, 3]", "bias, multiplier, shift"),
        ),
        outputs=(TensorSig("logits", "int8", "[labels]", "quantized logits"),),
        cross_check=_no_cross_field_rules,
    ),
    LM_HEAD: OpContract(
        LM_HEAD,
        options=(
            _HIDDEN,
            OptionField("vocab_size", 1, INT32_MAX, "v: the tied embedding's vocabulary"),
            OptionField("cluster_count", 1, MAX_CLUSTERS, "c"),
            OptionField("top_k", 1, MAX_TOP_K, "k <= v: ids and scores kept, best first"),
            OptionField("normed_zero_point", -128, 127, "zero point of h = LN_f(x), the scored vector"),
            _EPS,
        ),
        inputs=(
            TensorSig("hidden", "int8", "[d]", "one token's residual stream after the last block"),
            _RESIDUAL,
            TensorSig("layer_norm", "int32", "[d, 2]", "LN_f: gamma_q, beta_q (Q16 output units)"),
            TensorSig("clusters", "int32", "[c, 2]", "the embedding's (end_id exclusive, rank r_i); r_0 = d"),
            TensorSig("word_rows", "int8", "[sum n_i*r_i]", "the embedding's U_0 | U_1 | ... (int8 storage)"),
            TensorSig("word_projections", "int8", "[sum_{i>0} packed(d, r_i)]", "the embedding's V_i, pair4"),
            TensorSig(
                "channel_requant", "int32", "[c, d, 2]", "(multiplier, shift): h - zp -> g_i per cluster, channel"
            ),
            TensorSig(
                "cluster_requant", "int32", "[c, 4]", "(Mp, shift) V_i^T g_i -> p_i (cluster 0: 0, 0); (Ms, shift)"
            ),
        ),
        outputs=(TensorSig("top", "int32", "[2, k]", "ids best first (ties: smaller id), then their scores"),),
        cross_check=_check_lm_head,
    ),
    CAUSAL_ATTENTION: OpContract(
        CAUSAL_ATTENTION,
        options=(
            OptionField("context", 1, MAX_SEQ_LEN, "n: positions the KV cache holds"),
            _HIDDEN,
            OptionField("heads", 1, MAX_HEADS, "h, divides d"),
            OptionField("window", 0, MAX_SEQ_LEN, "keys p-w+1..p (GPT-Neo's local layers); 0: every key 0..p"),
            OptionField("score_multiplier", 0, INT32_MAX, "q.k -> int16 score (the logit scale folded)"),
            OptionField("score_shift", fixed_point.SHIFT_MIN, fixed_point.SHIFT_MAX, ""),
            OptionField("context_multiplier", 0, INT32_MAX, "Q16 mean of V -> int8 context"),
            OptionField("context_shift", fixed_point.SHIFT_MIN, fixed_point.SHIFT_MAX, ""),
            _EPS,
        ),
        inputs=(
            _TOKEN_STREAM,
            TensorSig("position", "int32", "[1]", "p in [0, n): the token's position"),
            TensorSig("cache", "int8", "[2, n, d]", "state: keys then values; row p written, rows 0..p read"),
            _LN,
            *_linear_sigs("query", "d, d"),
            *_linear_sigs("key", "d, d"),
            *_linear_sigs("value", "d, d"),
            *_linear_sigs("output", "d, d", " (to z units)"),
            TensorSig("exp_lut", "int16", "[256]", "EXP_ONE*exp(-k*s_score); [0] = EXP_ONE"),
            _RESIDUAL,
            _OUTPUT_RESIDUAL,
        ),
        outputs=(_BLOCK_OUTPUT,),
        cross_check=_check_causal_attention,
    ),
    DECODER_MLP: OpContract(
        DECODER_MLP,
        options=(
            _HIDDEN,
            OptionField("ffn", 1, MAX_FFN, "intermediate size"),
            OptionField("fc1_output_zero_point", -128, 127, "zero point of the activation table's input"),
            _EPS,
        ),
        inputs=(
            _TOKEN_STREAM,
            _LN,
            *_linear_sigs("fc1", "ffn, d"),
            TensorSig("activation_lut", "int8", "[256]", "GELU: entry q+128 for input q"),
            *_linear_sigs("fc2", "d, ffn", " (to z units)"),
            _RESIDUAL,
            _OUTPUT_RESIDUAL,
        ),
        outputs=(_BLOCK_OUTPUT,),
        cross_check=_no_cross_field_rules,
    ),
    DECODER_EMBEDDING: OpContract(
        DECODER_EMBEDDING,
        options=(
            OptionField("context", 1, MAX_SEQ_LEN, "n: rows of the position table"),
            _HIDDEN,
            OptionField("vocab_size", 1, INT32_MAX, "v; ids outside [0, v) are an error"),
            OptionField("cluster_count", 1, MAX_CLUSTERS, "c"),
        ),
        inputs=(
            TensorSig("input_id", "int32", "[1]", "the token's id in the permuted vocabulary"),
            TensorSig("position", "int32", "[1]", "p in [0, n)"),
            TensorSig("clusters", "int32", "[c, 2]", "(end_id exclusive, rank r_i); r_0 = d"),
            TensorSig("word_rows", "int8", "[sum n_i*r_i]", "U_0 | U_1 | ... row-major (int8 storage)"),
            TensorSig("word_projections", "int8", "[sum_{i>0} packed(d, r_i)]", "V_i, pair4"),
            TensorSig("word_requant", "int32", "[c, d, 2]", "(multiplier, shift) into s_z units"),
            TensorSig("position_table", "int8", "[n, d]", ""),
            TensorSig("position_requant", *_REQUANT_D, "(multiplier, shift) into s_z units"),
            TensorSig("output_residual", "int32", "[d, 2]", "the stream's (zero point, shift R): s = s_z * 2^R"),
        ),
        outputs=(TensorSig("hidden", "int8", "[d]", "the token's residual stream"),),
        cross_check=_check_embedding,
    ),
    SAMPLE: OpContract(
        SAMPLE,
        options=(
            OptionField("top_k", 1, MAX_TOP_K, "k: the LM head's candidates"),
            OptionField("keep", 1, MAX_TOP_K, "top-k <= k: the best ones drawn from"),
            OptionField("top_p", 1, 1 << 15, "Q15 share of the kept weight (top-p)"),
            OptionField("index_multiplier", 0, INT32_MAX, "score_0 - score_i -> table index (1/temperature folded)"),
            OptionField("index_shift", fixed_point.SHIFT_MIN, fixed_point.SHIFT_MAX, ""),
            OptionField("seed", 0, (1 << 32) - 1, "uint32 added to the state before mixing"),
        ),
        inputs=(
            TensorSig("top", "int32", "[2, k]", "the LM head's ids best first, then their scores; updated in place"),
            TensorSig("rng_state", "int32", "[1]", "state: advanced by 0x6D2B79F5 per invoke"),
            TensorSig("exp_lut", "int16", "[256]", "EXP_ONE*exp(-j*16/255); [0] = EXP_ONE"),
        ),
        outputs=(TensorSig("top", "int32", "[2, k]", "the drawn candidate first, the ones before it one place on"),),
        cross_check=_check_sample,
    ),
}


def constants_text() -> list[str]:
    """The numeric constants of the contract, one per line (hashed; listed in SPEC.md)."""
    return [
        f"spec_version={SPEC_VERSION}",
        "rounding=half_up:(x+2^(n-1))>>n",
        "requantize=(acc*M+2^(30-shift))>>(31-shift);M in {0}u[2^30,2^31);shift in [-31,30]",
        f"weights=pair4:[ceil(N/2)][ceil(K/4)][{linear.PACK_CHANNELS}][{linear.PACK_DEPTH}];"
        f"zero padding;|w|<={linear.WEIGHT_MAX};|bias|<=2^30",
        f"exp_one={fixed_point.EXP_ONE};lut_size={fixed_point.LUT_SIZE}",
        "residual=z+=(x[c]-zp[c])<<R[c];zp in [-128,127];R in [0,7]",
        "scores=int16;exp_index=min(rowmax-score,255);masked_e=0;all_masked_recip=0",
        f"softmax_recip_bits={SOFTMAX_RECIP_BITS};softmax_mean_frac_bits={SOFTMAX_MEAN_FRAC_BITS}",
        f"layernorm=inv_sqrt_bits:{fixed_point.INV_SQRT_BITS};norm_frac_bits:{layernorm.NORM_FRAC_BITS};"
        f"param_frac_bits:{layernorm.PARAM_FRAC_BITS}",
        f"max_seq_len={MAX_SEQ_LEN};max_hidden={MAX_HIDDEN};max_ffn={MAX_FFN}",
        f"embedding_rows={EMBEDDING_ROWS};dsp_rows={DSP_ROWS};alignment=16",
        "graph=scratch:last_output:int8[scratch_bytes]:offline_offset;leading_batch_dims=1",
    ]


# Softmax normalization (attention): recip = floor(2^44 / sum_e), mean = (acc*recip + 2^27) >> 28 (Q16).
SOFTMAX_RECIP_BITS = 44
SOFTMAX_MEAN_FRAC_BITS = 16
# Rows the embedding kernel may normalize at once, and rows the DSP micro-kernel widens (its M).
EMBEDDING_ROWS = 4
DSP_ROWS = 4


def int4_row_bytes(length: int) -> int:
    """Bytes of one packed int4 row of `length` values (the last byte's high nibble pads an odd one)."""
    return (length + 1) // 2


def word_row_bytes(cluster: int, rank: int, bits: int) -> int:
    """Bytes of one stored row of cluster `cluster` (rank r_i; r_0 = d) at `bits` (SPEC 4.1.1)."""
    if bits == 8:
        return rank
    return int4_row_bytes(rank) + (INT4_ROW_SCALE_BYTES if cluster == 0 else 0)
