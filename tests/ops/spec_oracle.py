"""A second implementation of ops/SPEC.md: scalar loops over Python ints (arbitrary precision).

Nothing here can overflow, so where the numpy reference (int64 / float64 tricks) and this oracle
agree at the extremes of every range, the reference's bounds hold. It computes attention untiled
(all context rows, then the output projection), so agreement also shows the tiled, in-place
schedule computes the same function. Written to be read next to a C kernel: one formula per line.
"""

from __future__ import annotations

import math

from tflm_mcubert.ops import contract
from tflm_mcubert.ops.fixed_point import EXP_ONE


def rsh(x: int, n: int) -> int:
    """Round half up: floor(x / 2^n + 1/2)."""
    return (x + (1 << (n - 1))) >> n if n > 0 else x


def requant(acc: int, mult: int, shift: int) -> int:
    assert abs(acc) <= 1 << 31
    return rsh(acc * mult, 31 - shift)


def clamp(x: int, lo: int, hi: int) -> int:
    return max(lo, min(hi, x))


def ints(array) -> list:
    return array.tolist()


def layer_norm_row(z: list[int], table: list[list[int]], eps: int) -> list[int]:
    d = len(z)
    s1 = sum(z)
    s2 = sum(v * v for v in z)
    big_d = d * s2 - s1 * s1 + eps
    out = []
    for c in range(d):
        if big_d == 0:
            n_q = 0
        else:
            e = (62 - big_d.bit_length()) >> 1
            r = math.isqrt(big_d << (2 * e))
            inv = (1 << 60) // r
            n_q = rsh((d * z[c] - s1) * inv, 34 - e)
        gamma, beta = table[c]
        out.append(clamp(rsh(n_q * gamma + (beta << 26), 42), -128, 127))
    return out


def linear_row(x: list[int], weight: list[list[int]], channels: list[list[int]]) -> list[int]:
    """Unclamped requantized outputs of one row."""
    return [
        requant(bias + sum(a * w for a, w in zip(x, row)), mult, shift)
        for row, (bias, mult, shift) in zip(weight, channels)
    ]


def residual_row(projected: list[int], x: list[int], channels: list[list[int]]) -> list[int]:
    """channels[c] = (zero point, shift) of the incoming hidden state's channel c."""
    return [clamp(p + ((a - zp) << shift), -32768, 32767) for p, a, (zp, shift) in zip(projected, x, channels)]


def clamp32(x: int) -> int:
    return clamp(x, -(1 << 31), (1 << 31) - 1)


def int4_row(p, tok: int) -> tuple[list[int], int]:
    """(values, row scale; 1 outside cluster 0) of token `tok`'s int4 row, read straight from the
    stored bytes by SPEC 4.1.1 (not through the reference's unpacking)."""
    data = [b & 0xFF for b in ints(p.word_rows)]
    offset, start = 0, 0
    for i, (end, rank) in enumerate(ints(p.clusters)):
        row_bytes = (rank + 1) // 2 + (2 if i == 0 else 0)
        if tok < end:
            at = offset + (tok - start) * row_bytes
            scale = 1
            if i == 0:
                scale, at = data[at] + 256 * data[at + 1], at + 2
            nibbles = [(data[at + k // 2] >> (4 * (k % 2))) & 0xF for k in range(rank)]
            return [n - 16 if n >= 8 else n for n in nibbles], scale
        offset += (end - start) * row_bytes
        start = end
    raise AssertionError(tok)


def embedding(p, ids: list[int], types: list[int]) -> list[list[int]]:
    ln = ints(p.layer_norm.table)
    out = []
    for pos, (tok, typ) in enumerate(zip(ids, types)):
        for cl in p.cluster_views:
            if cl.start <= tok < cl.end:
                u = ints(cl.rows[tok - cl.start])
                if p.word_bits == 4:
                    u, scale = int4_row(p, tok)
                    u = [value * scale for value in u]
                rq = ints(cl.requant)
                if cl.projection is None:
                    word = [requant(u[c], *rq[c]) for c in range(p.hidden)]
                else:
                    w = ints(cl.projection.weight)
                    word = [requant(sum(a * b for a, b in zip(u, w[c])), *rq[c]) for c in range(p.hidden)]
        prq, trq = ints(p.position_requant), ints(p.token_type_requant)
        z = [
            clamp(
                clamp32(word[c])
                + clamp32(requant(int(p.position_table[pos, c]), *prq[c]))
                + clamp32(requant(int(p.token_type_table[typ, c]), *trq[c])),
                -32768,
                32767,
            )
            for c in range(p.hidden)
        ]
        out.append(layer_norm_row(z, ln, p.layer_norm.eps))
    return out


def attention(p, x: list[list[int]], valid: list[bool]) -> list[list[int]]:
    s, d, h = p.seq_len, p.hidden, p.heads
    dh = d // h
    wq, wk, wv, wo = (ints(getattr(p, n).weight) for n in ("query", "key", "value", "output"))
    cq, ck, cv, co = (ints(getattr(p, n).channels) for n in ("query", "key", "value", "output"))
    lut = ints(p.exp_lut)
    q = [[clamp(v, -128, 127) for v in linear_row(row, wq, cq)] for row in x]
    k = [[clamp(v, -128, 127) for v in linear_row(row, wk, ck)] for row in x]
    v = [[clamp(val, -128, 127) for val in linear_row(row, wv, cv)] for row in x]
    context = [[0] * d for _ in range(s)]
    for head in range(h):
        cols = range(head * dh, (head + 1) * dh)
        for i in range(s):
            score = [
                clamp(requant(sum(q[i][c] * k[j][c] for c in cols), p.score_multiplier, p.score_shift), -32768, 32767)
                for j in range(s)
            ]
            keys = [j for j in range(s) if valid[j]]
            m = max(score[j] for j in keys) if keys else 0
            e = [lut[min(m - score[j], 255)] if valid[j] else 0 for j in range(s)]
            total = sum(e)
            assert total == 0 or EXP_ONE <= total <= s * EXP_ONE
            recip = (1 << contract.SOFTMAX_RECIP_BITS) // total if total else 0
            for c in cols:
                acc = sum(e[j] * v[j][c] for j in range(s))
                mean = rsh(acc * recip, contract.SOFTMAX_RECIP_BITS - contract.SOFTMAX_MEAN_FRAC_BITS)
                context[i][c] = clamp(requant(mean, p.context_multiplier, p.context_shift), -128, 127)
    ln = ints(p.layer_norm.table)
    res = ints(p.residual)
    return [
        layer_norm_row(residual_row(linear_row(context[i], wo, co), x[i], res), ln, p.layer_norm.eps) for i in range(s)
    ]


def mlp(p, x: list[list[int]]) -> list[list[int]]:
    w1, w2 = ints(p.fc1.weight), ints(p.fc2.weight)
    c1, c2 = ints(p.fc1.channels), ints(p.fc2.channels)
    lut = ints(p.activation_lut)
    ln = ints(p.layer_norm.table)
    out = []
    for row in x:
        a = [lut[clamp(v + p.fc1_output_zero_point, -128, 127) + 128] for v in linear_row(row, w1, c1)]
        z = residual_row(linear_row(a, w2, c2), row, ints(p.residual))
        out.append(layer_norm_row(z, ln, p.layer_norm.eps))
    return out
