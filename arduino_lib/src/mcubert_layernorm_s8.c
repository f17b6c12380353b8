/* GENERATED FILE - do not edit. Generated from custom_ops/src/mcubert_layernorm_s8.c by arduino_lib/extras/sync_from_custom_ops.py;
 * edit the source, not this copy, and re-run the script. */
/*
 * Integer LayerNorm of one row (SPEC 3.3; reference ops/layernorm.py). No mean is rounded:
 * the sums are exact, and every product is a 32 x 32 -> 64 multiply.
 *
 *   S1 = sum z (|S1| <= 2^25), S2 = sum z^2 (<= 2^40), D = d S2 - S1^2 + eps (0 <= D <= 2^51)
 *   D == 0: n_q = 0;  else (inv, e) = inverse_sqrt(D), n_q = rsh((d z - S1) inv, 34 - e)
 *   out = clamp8(rsh(n_q gamma_q + beta_q 2^26, 42))
 *
 * Per element the two roundings are one 64-bit multiply-accumulate each, with the rounding
 * term as the accumulator's start:
 *   n_q: k = 34 - e is in [4, 29] and |n_q| < 2^31, so the rounded 64-bit value shifted right
 *        by k is (low word >> k) | (high word << (32 - k)) — no 64-bit shift;
 *   out: 42 >= 32 and the value is below 2^20 after the shift, so it is the high word >> 10.
 */
#include "mcubert_dsp.h"
#include "mcubert_fixed_point.h"
#include "mcubert_internal.h"

#define NORM_FRAC_BITS 26 /* n_q in Q26 */
#define OUTPUT_SHIFT 42   /* NORM_FRAC_BITS + 16 (gamma_q, beta_q are Q16) */

/* S1 and S2 of the row. DSP path on a 4-byte aligned row: two values per word, SMLAD against
 * (1, 1) for the sum and SMLALD for the squares. */
static void row_sums(const int16_t *z, int32_t d, int32_t *s1_out, int64_t *s2_out)
{
    int32_t s1 = 0;
    int64_t s2 = 0;
    int32_t c = 0;
#if MCUBERT_DSP
    if (((uintptr_t)z & 3u) == 0) {
        const uint32_t *words = (const uint32_t *)(const void *)z;
        for (; c + 4 <= d; c += 4, words += 2) {
            const uint32_t a = words[0], b = words[1];
            s1 = mcubert_smlad(a, 0x00010001u, s1);
            s1 = mcubert_smlad(b, 0x00010001u, s1);
            s2 = mcubert_smlald(a, a, s2);
            s2 = mcubert_smlald(b, b, s2);
        }
    }
#endif
    for (; c < d; ++c) {
        s1 += z[c];
        s2 += (int32_t)z[c] * z[c];
    }
    *s1_out = s1;
    *s2_out = s2;
}

void mcubert_layer_norm_s8(const int16_t *z, int32_t d, const int32_t *table, int64_t eps, int8_t *out)
{
    int32_t s1;
    int64_t s2, big_d;
    int32_t inv = 0; /* D == 0 (constant row, eps 0): inv = 0 gives n_q = 0, so out = beta */
    int32_t k = 4;   /* 34 - e; any value in [4, 29] when inv = 0 */
    int32_t c;
    row_sums(z, d, &s1, &s2);
    big_d = (int64_t)d * s2 - (int64_t)s1 * s1 + eps;
    if (big_d > 0) {
        /* inverse_sqrt: normalize D << 2e into [2^60, 2^62), r = isqrt in [2^30, 2^31),
         * inv = floor(2^60 / r) in (2^29, 2^30]: 30 significant bits at any magnitude. */
        const int e = (62 - mcubert_bit_length64((uint64_t)big_d)) >> 1;
        const uint32_t root = mcubert_isqrt64((uint64_t)big_d << (2 * e));
        inv = (int32_t)(((uint64_t)1 << 60) / root); /* <= 2^30 */
        k = 34 - e;
    }
    {
        const int64_t norm_round = (int64_t)1 << (k - 1);
        const int32_t back = 32 - k;
        for (c = 0; c < d; ++c) {
            /* n_q = rsh((d z - S1) inv, k): |d z - S1| <= 2^26, inv <= 2^30. */
            const uint64_t norm = (uint64_t)((int64_t)(d * z[c] - s1) * inv + norm_round);
            const int32_t n_q = (int32_t)(((uint32_t)norm >> k) | ((uint32_t)(norm >> 32) << back));
            /* rsh(n_q gamma + beta 2^26, 42): |n_q gamma| < 2^62, |beta 2^26| < 2^57. The
             * start beta 2^26 + 2^41 is assembled from its two words: 2^41 is bit 9 of the high. */
            const int32_t beta = table[2 * c + 1];
            const uint32_t start_low = (uint32_t)beta << NORM_FRAC_BITS;
            const uint32_t start_high = (uint32_t)((beta >> (32 - NORM_FRAC_BITS)) + (1 << (OUTPUT_SHIFT - 1 - 32)));
            const int64_t start = (int64_t)(((uint64_t)start_high << 32) | start_low);
            const int64_t y = (int64_t)n_q * table[2 * c] + start;
            out[c] = mcubert_clamp8((int32_t)(y >> 32) >> (OUTPUT_SHIFT - 32));
        }
    }
}
