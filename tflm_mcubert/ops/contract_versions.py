"""The per-op versions of the numerics contract (ops/contract.py): the option fields each later version adds
(VERSION_OPTIONS), the numerics lines it hashes (VERSION_LINES), and what a reader or writer asks of them:
an op's versions, its fields at a version, the lowest version that expresses some options, its hashed text."""

from __future__ import annotations

from tflm_mcubert.ops.contract import (
    ATTENTION,
    ATTENTION_LINEAR_LAYERS,
    CAUSAL_ATTENTION,
    CONTRACTS,
    CONTRACT_WIDE_OPS,
    CONTRACT_WIDE_VERSIONS,
    DECODER_EMBEDDING,
    DECODER_MLP,
    EMBEDDING,
    HEADER_FIELDS,
    LINEAR_WEIGHT_BITS,
    LM_HEAD,
    MLP,
    MLP_LINEAR_LAYERS,
    OptionField,
    SAMPLE,
    SPEC_VERSION_CAUSAL_ATTENTION,
    SPEC_VERSION_DECODER_EMBEDDING,
    SPEC_VERSION_DECODER_INT4,
    SPEC_VERSION_DECODER_LAYER_BITS,
    SPEC_VERSION_DECODER_MLP,
    SPEC_VERSION_INT4,
    SPEC_VERSION_LAYER_BITS,
    SPEC_VERSION_LM_HEAD,
    SPEC_VERSION_SAMPLE,
    SPEC_VERSION_W4,
)

_WORD_BITS = OptionField("word_bits", 4, 8, "word table storage: 4 (packed int4) or 8 (int8)")
_WEIGHT_BITS = OptionField(
    "weight_bits", 4, 8, "every linear layer's weights: 4 (packed int4, w4row) or 8 (int8, pair4)"
)


def _w4_lines(op: str, layers: tuple[str, ...], shapes: str) -> tuple[str, ...]:
    """Version 3's numerics of an encoder op: the w4row layout, its value range, the weight tensors."""
    return (
        f"{op}.weight_bits=one width for every linear layer of the op;values {LINEAR_WEIGHT_BITS};8=pair4",
        "w4row=[N][4*ceil(K/8)] bytes;value k of channel c:nibble k%2 (low first) of byte c*row_bytes+k/2;"
        "stored nibble=w+8;w in [-7,7] (nibble 0=-8 refused);padding nibbles (k>=K) 0",
        "w4row.acc=bias+sum_k x[k]*w[c][k] as int8;channel rows (bias,M,shift) as int8",
        f"{op}.weights({'|'.join(layers)})=int8[N*4*ceil(K/8)] when weight_bits=4;(N,K)=({shapes})",
    )


def _int4_layers_field(layers: tuple[str, ...]) -> OptionField:
    names = ", ".join(f"{1 << i}={layer}" for i, layer in enumerate(layers))
    return OptionField("int4_layers", 0, (1 << len(layers)) - 1, f"linear layers stored int4 (bits {names})")


def _int4_layers_lines(op: str, layers: tuple[str, ...], otherwise: str = "weight_bits(=8)") -> tuple[str, ...]:
    """Version 8's numerics of an encoder op (9's of a decoder op, whose other layers are 8): each linear layer
    at its own width (3.1.1's two layouts)."""
    return (
        f"{op}.layer width=4 if bit i of int4_layers is set,else {otherwise};layer i of {'|'.join(layers)}",
        f"{op}.weights(layer i)=w4row at width 4,pair4 at width 8",
    )


# Option fields a later version adds, by version and op (absent from, and unknown to, earlier ones).
VERSION_OPTIONS: dict[int, dict[str, tuple[OptionField, ...]]] = {
    SPEC_VERSION_INT4: {
        EMBEDDING: (_WORD_BITS,),
    },
    SPEC_VERSION_W4: {
        ATTENTION: (_WEIGHT_BITS,),
        MLP: (_WEIGHT_BITS,),
    },
    SPEC_VERSION_LAYER_BITS: {
        ATTENTION: (_int4_layers_field(ATTENTION_LINEAR_LAYERS),),
        MLP: (_int4_layers_field(MLP_LINEAR_LAYERS),),
    },
    SPEC_VERSION_DECODER_LAYER_BITS: {
        CAUSAL_ATTENTION: (_int4_layers_field(ATTENTION_LINEAR_LAYERS),),
        DECODER_MLP: (_int4_layers_field(MLP_LINEAR_LAYERS),),
    },
    SPEC_VERSION_DECODER_INT4: {DECODER_EMBEDDING: (_WORD_BITS,), LM_HEAD: (_WORD_BITS,)},
}

_INT4_TABLE_LINES = (
    "word_rows at word_bits=4=the embedding's int4 storage (SPEC 4.1.1):cluster 0 row=uint16 row_scale LE,"
    "then d nibbles;cluster i row=ceil(r_i/2) bytes;nibble 2j low,2j+1 high;odd row's padding nibble 0",
)


# Contract text a per-op version adds beyond its option fields (numerics, layouts), by version and op.
VERSION_LINES: dict[int, dict[str, tuple[str, ...]]] = {
    SPEC_VERSION_W4: {
        ATTENTION: _w4_lines(ATTENTION, ATTENTION_LINEAR_LAYERS, "d, d"),
        MLP: _w4_lines(MLP, MLP_LINEAR_LAYERS, "ffn, d|d, ffn"),
    },
    SPEC_VERSION_LAYER_BITS: {
        ATTENTION: _int4_layers_lines(ATTENTION, ATTENTION_LINEAR_LAYERS),
        MLP: _int4_layers_lines(MLP, MLP_LINEAR_LAYERS),
    },
    SPEC_VERSION_DECODER_LAYER_BITS: {  # the mask, and the w4row layout it selects (3.1.1)
        CAUSAL_ATTENTION: _int4_layers_lines(CAUSAL_ATTENTION, ATTENTION_LINEAR_LAYERS, "8")
        + _w4_lines(CAUSAL_ATTENTION, ATTENTION_LINEAR_LAYERS, "d, d")[1:3],
        DECODER_MLP: _int4_layers_lines(DECODER_MLP, MLP_LINEAR_LAYERS, "8")
        + _w4_lines(DECODER_MLP, MLP_LINEAR_LAYERS, "ffn, d|d, ffn")[1:3],
    },
    SPEC_VERSION_DECODER_EMBEDDING: {
        DECODER_EMBEDDING: (
            "decoder_embedding.word=the embedding's word term (SPEC 4.1, int8 storage) of input_id",
            "decoder_embedding.z=clamp16(clamp32(word[c])+clamp32(requantize(P[p][c],Mp[c])));x=clamp8(round(z/2^R)+zp)",
        )
    },
    SPEC_VERSION_DECODER_MLP: {
        DECODER_MLP: (
            "decoder_mlp.z=(x[c]-zp[c])<<R[c] int16;a=layer_norm(z);f=lut[clamp8(requantize(fc1(a))+zp_fc1)+128]",
            "decoder_mlp.out=z'=clamp16(requantize(fc2(f))+z);x'=clamp8(round(z'/2^R')+zp')",
        )
    },
    SPEC_VERSION_CAUSAL_ATTENTION: {
        CAUSAL_ATTENTION: (
            "causal_attention.z=(x[c]-zp[c])<<R[c] int16;a=layer_norm(z);q,k,v=int8 linear(a)",
            "causal_attention.cache=int8[2][n][d];row p=k,v of this token;rows 0..p read;rows >p never read",
            "causal_attention.keys=max(0,p-window+1)..p (window 0: 0..p)",
            "causal_attention.heads=attention's scores,exp table,recip,Q16 mean over those keys",
            "causal_attention.out=z'=clamp16(requantize(ctx.Wo)+z);x'=clamp8(round(z'/2^R')+zp')",
        )
    },
    SPEC_VERSION_SAMPLE: {
        SAMPLE: (
            "sample.state=state+0x6D2B79F5 mod 2^32;u=mulberry32 mix(state+seed) uint32",
            "sample.weight=w_i=exp_lut[min(255,requantize(clamp32(score_0-score_i),M,shift))],i<keep;c_i=w_0+..+w_i",
            "sample.top_p=m=first i with c_i*2^15>=top_p*c_(keep-1)",
            "sample.draw=r=(u*c_m)>>32;drawn=first i with c_i>r;top[:,0..drawn] rotated so drawn is first",
        )
    },
    SPEC_VERSION_DECODER_INT4: {
        DECODER_EMBEDDING: _INT4_TABLE_LINES
        + ("decoder_embedding.word at word_bits=4=cluster 0:requantize(q[c]*row_scale,Mw_0[c]);cluster i:as 4.1",),
        LM_HEAD: _INT4_TABLE_LINES
        + (
            "lm_head.score at word_bits=4=cluster 0:clamp_int32(requantize_wide(int64(U_0[t].g_0)*row_scale[t],Ms_0)),"
            "Ms_0 shift<=14;cluster i:as int8 with the nibbles",
            "requantize_wide(x,M,shift)=(x*((M+2^15)>>16)+2^(14-shift))>>(15-shift) in int64;|x|<2^47",
        ),
    },
    SPEC_VERSION_LM_HEAD: {
        LM_HEAD: (
            "lm_head.normed=h=layer_norm((x[c]-zp_x[c])<<R[c]) int8, zero point normed_zero_point",
            "lm_head.gain_limit=G=min(32767,floor((2^31-1)/(128*d)))",
            "lm_head.scaled=g_i[c]=clamp(requantize(h[c]-zp,Mg_i[c]),-G,G)",
            "lm_head.projected=cluster i>0:p_i[l]=clamp(requantize(sum_c V_i[c][l]*g_i[c],Mp_i),-G,G)",
            "lm_head.score=clamp_int32(requantize(U_i[t].(g_0|p_i),Ms_i)) as int32 accumulators",
            "lm_head.top=k best scores in id order,ties to the smaller id;row 0 ids,row 1 scores",
        )
    },
}


def op_versions(op: str) -> tuple[int, ...]:
    """The spec versions `op` reads, oldest first: the contract-wide ones, then its own."""
    own = {v for table in (VERSION_OPTIONS, VERSION_LINES) for v, ops in table.items() if op in ops}
    wide = CONTRACT_WIDE_VERSIONS if op in CONTRACT_WIDE_OPS else ()
    return wide + tuple(sorted(own - set(CONTRACT_WIDE_VERSIONS)))


def option_fields(op: str, version: int) -> tuple[OptionField, ...]:
    """The header plus `op`'s option fields in spec `version`."""
    extra = tuple(f for v, ops in sorted(VERSION_OPTIONS.items()) if v <= version for f in ops.get(op, ()))
    return HEADER_FIELDS + CONTRACTS[op].options + extra


def options_version(op: str, values: dict[str, int]) -> int:
    """The lowest of `op`'s versions whose fields include every key of `values` (what the encoder
    writes). An int4 embedding needs version 2; everything else stays version 1."""
    versions = op_versions(op)
    for version in versions:
        if set(values) <= {f.name for f in option_fields(op, version)}:
            return version
    return versions[-1]


def op_lines(op: str, version: int) -> list[str]:
    """`op`'s own contract text at `version`: its option fields, tensor signatures and the lines a
    per-op version adds (hashed into that version; registry.op_version_text)."""
    spec = CONTRACTS[op]
    lines = [f"{op}.version={version}"]
    lines += [f"{op}.option.{f.name}=int[{f.lo},{f.hi}]" for f in option_fields(op, version)]
    lines += [f"{op}.input{i}.{t.name}={t.dtype}{t.shape}" for i, t in enumerate(spec.inputs)]
    lines += [f"{op}.output{i}.{t.name}={t.dtype}{t.shape}" for i, t in enumerate(spec.outputs)]
    for v, ops in sorted(VERSION_LINES.items()):
        if v <= version:
            lines += list(ops.get(op, ()))
    return lines
