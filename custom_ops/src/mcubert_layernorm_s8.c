/*
 * Integer LayerNorm of one row (SPEC 3.3; reference ops/layernorm.py). No mean is rounded:
 * the sums are exact, and every product is a 32 x 32 -> 64 multiply.
 *
 *   S1 = sum z (|S1| <= 2^25), S2 = sum z^2 (<= 2^40), D = d S2 - S1^2 + eps (0 <= D <= 2^51)
 *   D == 0: n_q = 0;  else (inv, e) = inverse_sqrt(D), n_q = rsh((d z - S1) inv, 34 - e)
 *   out = clamp8(rsh(n_q gamma_q + beta_q 2^26, 42))
 */
#include "mcubert_fixed_point.h"
#include "mcubert_internal.h"

#define NORM_FRAC_BITS 26 /* n_q in Q26 */
#define OUTPUT_SHIFT 42   /* NORM_FRAC_BITS + 16 (gamma_q, beta_q are Q16) */

void mcubert_layer_norm_s8(const int16_t *z, int32_t d, const int32_t *table, int64_t eps,
                           int8_t *out)
{
    int32_t s1 = 0;
    int64_t s2 = 0;
    int64_t big_d;
    uint32_t inv = 0;
    int e = 0;
    int32_t c;
    for (c = 0; c < d; ++c) {
        s1 += z[c];
        s2 += (int32_t)z[c] * z[c];
    }
    big_d = (int64_t)d * s2 - (int64_t)s1 * s1 + eps;
    if (big_d > 0) {
        /* inverse_sqrt: normalize D << 2e into [2^60, 2^62), r = isqrt in [2^30, 2^31),
         * inv = floor(2^60 / r) in (2^29, 2^30]: 30 significant bits at any magnitude. */
        uint32_t root;
        e = (62 - mcubert_bit_length64((uint64_t)big_d)) >> 1;
        root = mcubert_isqrt64((uint64_t)big_d << (2 * e));
        inv = (uint32_t)(((uint64_t)1 << 60) / root);
    }
    for (c = 0; c < d; ++c) {
        /* D == 0 (constant row, eps 0): n_q = 0, so the output is beta. */
        const int32_t n_q = big_d > 0
            ? (int32_t)mcubert_rsh64((int64_t)(d * z[c] - s1) * inv, 34 - e)
            : 0;
        const int64_t gamma = table[2 * c];
        const int64_t beta = table[2 * c + 1];
        const int64_t y = mcubert_rsh64(n_q * gamma + beta * ((int64_t)1 << NORM_FRAC_BITS), OUTPUT_SHIFT);
        out[c] = (int8_t)(y < MCUBERT_INT8_MIN ? MCUBERT_INT8_MIN : y > MCUBERT_INT8_MAX ? MCUBERT_INT8_MAX : y);
    }
}
