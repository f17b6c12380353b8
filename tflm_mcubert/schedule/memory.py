"""Peak activation memory of BERT encoder schedules, all counted by one model.

A schedule is a list of steps; each step lists the buffers live during it (bytes, each rounded up
to the 16-byte arena alignment). The peak of a schedule is the largest step. Weights (flash) are
not counted; the model inputs are (input_ids and token_type_ids int32[s] during the embedding, the
int8[s] attention mask throughout). Symbols: s tokens, d hidden, h heads, dh = d/h, f = ffn, t tile.

Schedules (the comparison of the paper's Figure 7):

  mcubert     Ours. Embedding token by token; attention fused per head with query tiles and the
              output projection + residual + LayerNorm written back during the last head;
              MLP tiled along tokens. Peak ~ (2 + 1/h) s d + O(t s + t d) (closed form:
              attention_formula_bytes). The scratch sizes are the ops' own scratch_bytes(), so this
              model and the kernels cannot drift apart.

  cmsis-nn    Untiled TFLite graph, one op at a time, every output materialised, dead tensors
              reused (TFLM's greedy planner): Q, K, V = FC(x); head-major transposes of Q, K, V
              (copies); scores = BMM (h s s); softmax into a new h s s tensor; context = BMM;
              transpose back; output FC; add; LayerNorm. MLP: FC1 with GELU fused (the paper's
              3-tensor count x, s f, s d = 6 s d for f = 4d); FC2; add; LayerNorm.

  burrello    Burrello et al. 2021: attention per head, untiled along tokens. For each head:
              Q_j, K_j, V_j (3 s dh), scores s x s (softmax in place), context_j written into a
              full s x d context; then the output FC into a new s x d tensor, add and LayerNorm
              in place. MLP as cmsis-nn.

  flash       FlashAttention-style: Q, K, V resident (3 s d), K/V streamed in blocks of t keys
              per block of t queries, output accumulated in int32 (4 s d) with per-row running
              max and sum (int32 each); block scores t x t int32. Then requantized in place to
              int8 context, output FC, add, LayerNorm. MLP as cmsis-nn.

The embedding is the same (ours) for every schedule: Figure 7 compares encoder schedules.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable

from tflm_mcubert.ops import attention, embedding, mlp
from tflm_mcubert.ops.scratch import align_up
from tflm_mcubert.ops.topology import ENCODER

_EMBEDDING, (_ATTENTION, _MLP) = ENCODER.first, ENCODER.layer  # the steps of the mcubert schedule

SCHEDULES = ("mcubert", "cmsis-nn", "burrello", "flash")


@dataclasses.dataclass(frozen=True)
class Dims:
    """The model dimensions the memory depends on."""

    hidden: int
    heads: int
    ffn: int
    layers: int
    weight_bits: int = 8  # of the attention and MLP linear weights (Flash traffic only; SPEC.md 3.1.1)

    @classmethod
    def of(cls, config) -> "Dims":
        """From a Dims, a BertConfig, or anything with HF-style attribute names."""
        if isinstance(config, Dims):
            return config
        return cls(
            hidden=int(config.hidden_size),
            heads=int(config.num_attention_heads),
            ffn=int(config.intermediate_size),
            layers=int(config.num_hidden_layers),
        )

    @property
    def head_size(self) -> int:
        return self.hidden // self.heads


@dataclasses.dataclass(frozen=True)
class Step:
    name: str
    live: tuple[tuple[str, int], ...]  # (buffer, aligned bytes)

    @property
    def bytes(self) -> int:
        return sum(n for _, n in self.live)


def _step(name: str, **buffers: int) -> Step:
    return Step(name, tuple((k, align_up(v)) for k, v in buffers.items()))


def peak(steps: Iterable[Step]) -> Step:
    return max(steps, key=lambda st: st.bytes)


def mask_bytes(s: int) -> int:
    return s  # int8[s] key mask (the valid-length mode needs 4 bytes; we plan for the mask)


# ---------------------------------------------------------------------------------------------
# Per-op steps
# ---------------------------------------------------------------------------------------------


def embedding_steps(s: int, dims: Dims) -> list[Step]:
    return [
        _step(
            _EMBEDDING.kind,
            input_ids=4 * s,
            token_type_ids=4 * s,
            attention_mask=mask_bytes(s),
            hidden=s * dims.hidden,
            scratch=embedding.scratch_bytes(s, dims.hidden),
        )
    ]


def attention_steps(schedule: str, s: int, dims: Dims, t: int) -> list[Step]:
    d, h, dh = dims.hidden, dims.heads, dims.head_size
    m = mask_bytes(s)
    sd = s * d
    if schedule == "mcubert":
        return [_step(_ATTENTION.kind, attention_mask=m, hidden=sd, scratch=attention.scratch_bytes(s, d, h, t))]
    if schedule == "cmsis-nn":
        hss = h * s * s
        return [
            _step("q=fc(x)", attention_mask=m, x=sd, q=sd),
            _step("k=fc(x)", attention_mask=m, x=sd, q=sd, k=sd),
            _step("v=fc(x)", attention_mask=m, x=sd, q=sd, k=sd, v=sd),
            _step("qh=transpose(q)", attention_mask=m, x=sd, q=sd, k=sd, v=sd, qh=sd),
            _step("kh=transpose(k)", attention_mask=m, x=sd, qh=sd, k=sd, v=sd, kh=sd),
            _step("vh=transpose(v)", attention_mask=m, x=sd, qh=sd, kh=sd, v=sd, vh=sd),
            _step("scores=bmm(qh,kh)", attention_mask=m, x=sd, qh=sd, kh=sd, vh=sd, scores=hss),
            _step("probs=softmax(scores)", attention_mask=m, x=sd, vh=sd, scores=hss, probs=hss),
            _step("ctxh=bmm(probs,vh)", attention_mask=m, x=sd, vh=sd, probs=hss, ctxh=sd),
            _step("ctx=transpose(ctxh)", attention_mask=m, x=sd, ctxh=sd, ctx=sd),
            _step("o=fc(ctx)", attention_mask=m, x=sd, ctx=sd, o=sd),
            _step("a=add(x,o)", attention_mask=m, x=sd, o=sd, a=sd),
            _step("y=layernorm(a)", attention_mask=m, a=sd, y=sd),
        ]
    if schedule == "burrello":
        return [
            _step(
                "head: q,k,v,scores",
                attention_mask=m,
                x=sd,
                context=sd,
                q_head=s * dh,
                k_head=s * dh,
                v_head=s * dh,
                scores=s * s,
            ),
            _step("o=fc(context)", attention_mask=m, x=sd, context=sd, o=sd),
            _step("add+layernorm in place", attention_mask=m, x=sd, o=sd),
        ]
    if schedule == "flash":
        return [
            _step("q,k,v=fc(x)", attention_mask=m, x=sd, q=sd, k=sd, v=sd),
            _step(
                "blocks",
                attention_mask=m,
                x=sd,
                q=sd,
                k=sd,
                v=sd,
                out_int32=4 * sd,
                row_max=4 * s,
                row_sum=4 * s,
                block_scores=4 * t * t,
            ),
            _step("requantize out in place", attention_mask=m, x=sd, out_int32=4 * sd),
            _step("o=fc(context)", attention_mask=m, x=sd, context=sd, o=sd),
            _step("add+layernorm in place", attention_mask=m, x=sd, o=sd),
        ]
    raise ValueError(f"unknown schedule {schedule!r} (choose from {', '.join(SCHEDULES)})")


def mlp_steps(schedule: str, s: int, dims: Dims, t: int) -> list[Step]:
    d, f = dims.hidden, dims.ffn
    m = mask_bytes(s)
    if schedule == "mcubert":
        return [_step(_MLP.kind, attention_mask=m, hidden=s * d, scratch=mlp.scratch_bytes(s, d, f, t))]
    if schedule in ("cmsis-nn", "burrello", "flash"):
        return [
            _step("a=gelu(fc1(x))", attention_mask=m, x=s * d, a=s * f),
            _step("o=fc2(a)", attention_mask=m, x=s * d, a=s * f, o=s * d),
            _step("add", attention_mask=m, x=s * d, o=s * d, y=s * d),
            _step("layernorm", attention_mask=m, y=s * d, out=s * d),
        ]
    raise ValueError(f"unknown schedule {schedule!r} (choose from {', '.join(SCHEDULES)})")


def model_steps(schedule: str, s: int, config, t_attention: int = 1, t_mlp: int = 1) -> list[Step]:
    """Every step of a whole encoder (layers repeat, so one layer is representative)."""
    dims = Dims.of(config)
    steps = embedding_steps(s, dims)
    for layer in range(dims.layers):
        for st in attention_steps(schedule, s, dims, t_attention) + mlp_steps(schedule, s, dims, t_mlp):
            steps.append(Step(f"layer{layer}.{st.name}", st.live))
    return steps


def model_peak(schedule: str, s: int, config, t_attention: int = 1, t_mlp: int = 1) -> int:
    return peak(model_steps(schedule, s, config, t_attention, t_mlp)).bytes


# ---------------------------------------------------------------------------------------------
# Inside the MCUBERT attention op: which scratch regions are live in each phase
# ---------------------------------------------------------------------------------------------


def attention_phases(s: int, dims: Dims, t: int) -> list[Step]:
    """Live scratch regions per phase of the op (the scratch layout must cover the worst one)."""
    layout = attention.scratch_layout(s, dims.hidden, dims.heads, t)
    size = {r.name: align_up(r.nbytes) for r in layout.regions}

    def phase(name: str, *regions: str) -> Step:
        return Step(name, tuple((r, size[r]) for r in regions))

    common = ("key", "value_t", "context", "widened")
    tile = ("query", "scores", "row_max", "row_recip")
    return [
        phase("project K, V of a head", *common),
        phase("earlier head: a query tile", *common, *tile),
        phase("last head: a query tile", *common, "context_tile", *tile),
        phase("last head: output projection + LayerNorm", *common, "context_tile", "residual"),
    ]


def attention_formula_bytes(s: int, dims: Dims, t: int) -> int:
    """The closed form (2 + 1/h) s d + tile terms, unaligned (documentation and a cross-check)."""
    d, h, dh = dims.hidden, dims.heads, dims.head_size
    resident = s * d + mask_bytes(s)
    big = s * dh * (h - 1) + 2 * s * dh  # earlier heads' context + one head's K, V
    tile = t * dh + max(t * dh + 2 * t * s + 8 * t, 2 * t * d) + 2 * 4 * max(d, s)
    return resident + big + tile
