/*
 * Softmax weights of one attention row (SPEC 3.4; reference ops/attention.py exp_weights and
 * reciprocal). Normalization is deferred: the caller multiplies sum_k e[k] v[k][c] by the
 * returned reciprocal, so every weight keeps 14 bits.
 *
 *   m = max of the valid scores;  e[k] = valid ? exp_lut[min(m - score[k], 255)] : 0
 *   recip = sum e ? floor(2^44 / sum e) : 0          (2^14 <= sum <= 2^24: recip < 2^31)
 *
 * With a key mask (mode 0), keys are taken four at a time: one test of the mask word finds
 * the common all-valid case, which then needs no per-key check. On the DSP path the maximum of
 * such four keys is two SSUB16/SEL pairs on int16 pairs (when the row is 4-byte aligned: the
 * scores region is, and a row starts at an even s or at the region).
 */
#include "mcubert_dsp.h"
#include "mcubert_fixed_point.h"
#include "mcubert_internal.h"

#if MCUBERT_MVE
#include <arm_mve.h>
#endif

#define LUT_LAST 255
#define RECIP_BITS 44

#if MCUBERT_MVE

/* MVE: eight keys a step. The valid lanes of keys [k, k + 8): inside the row and, with a mask, where
 * its byte is nonzero (VLDRB.S16 of the mask, VCMP predicated by the tail: nothing read past the row). */
static inline mve_pred16_t valid_keys(const int8_t *mask, int32_t k, int32_t n)
{
    const mve_pred16_t tail = vctp16q((uint32_t)(n - k));
    return mask == NULL ? tail : vcmpneq_m_n_s16(vldrbq_z_s16(mask + k, tail), 0, tail);
}

/* m by VMAXV over the valid lanes; then per 8 keys the lookup index min(m - score, 255) (VSUB, VMIN as
 * unsigned: m - score is in [0, 65535] for a valid key), e by a VLDRH gather from the table, zero where
 * the key is masked, stored in place and summed by VADDVA: the same integers as the DSP path's. */
int32_t mcubert_softmax_weights_s16(int16_t *row, const mcubert_keys *keys, const int16_t *exp_lut)
{
    const int8_t *mask = keys->mask;
    const int32_t n = keys->count;
    int16_t m = MCUBERT_INT16_MIN;
    int32_t sum = 0, k;
    uint16x8_t top;
    for (k = 0; k < n; k += 8) {
        const mve_pred16_t valid = valid_keys(mask, k, n);
        m = vmaxvq_p_s16(m, vldrhq_z_s16(row + k, valid), valid);
    }
    top = vdupq_n_u16((uint16_t)m);
    for (k = 0; k < n; k += 8) {
        const mve_pred16_t valid = valid_keys(mask, k, n), tail = vctp16q((uint32_t)(n - k));
        const uint16x8_t rise =
            vminq_u16(vsubq_u16(top, vldrhq_z_u16((const uint16_t *)row + k, tail)), vdupq_n_u16(LUT_LAST));
        const int16x8_t e = vldrhq_gather_shifted_offset_z_s16(exp_lut, rise, valid);
        vstrhq_p_s16(row + k, e, tail);
        sum = vaddvaq_s16(sum, e);
    }
    return sum > 0 ? (int32_t)(((uint64_t)1 << RECIP_BITS) / (uint32_t)sum) : 0;
}

#else /* !MCUBERT_MVE */

/* Nonzero when none of the 4 mask bytes at p is 0 (all four keys attend). */
static inline int all_valid4(const int8_t *p)
{
    const uint32_t x = mcubert_read_u32(p);
    return ((x - 0x01010101u) & ~x & 0x80808080u) == 0u;
}

static inline int32_t max4(const int16_t *row, int32_t m)
{
    m = mcubert_max_i32(m, row[0]);
    m = mcubert_max_i32(m, row[1]);
    m = mcubert_max_i32(m, row[2]);
    return mcubert_max_i32(m, row[3]);
}

/* Maximum score over the valid keys (INT16_MIN if there is none: then no weight uses it). */
static int32_t row_max(const int16_t *row, const mcubert_keys *keys)
{
    const int8_t *mask = keys->mask;
    const int32_t n = keys->count;
    int32_t m = MCUBERT_INT16_MIN;
    int32_t k = 0;
#if MCUBERT_DSP
    if (((uintptr_t)row & 3u) == 0) {
        /* Two running maxima, one per halfword (SSUB16 + SEL). Scores of masked keys never
         * enter (those groups go the scalar way). */
        uint32_t pair = 0x80008000u;
        const uint32_t *words = (const uint32_t *)(const void *)row;
        for (; k + 4 <= n; k += 4) {
            if (mask == NULL || all_valid4(mask + k)) {
                pair = mcubert_max16x2(words[k >> 1], pair);
                pair = mcubert_max16x2(words[(k >> 1) + 1], pair);
            } else {
                int32_t i;
                for (i = 0; i < 4; ++i) {
                    if (mask[k + i] != 0) {
                        m = mcubert_max_i32(m, row[k + i]);
                    }
                }
            }
        }
        m = mcubert_max_i32(m, mcubert_max_i32((int16_t)(pair & 0xFFFFu), (int16_t)(pair >> 16)));
    }
#endif
    if (mask == NULL) {
        for (; k + 4 <= n; k += 4) {
            m = max4(row + k, m);
        }
    } else {
        for (; k + 4 <= n; k += 4) {
            if (all_valid4(mask + k)) {
                m = max4(row + k, m);
            } else {
                int32_t i;
                for (i = 0; i < 4; ++i) {
                    if (mask[k + i] != 0) {
                        m = mcubert_max_i32(m, row[k + i]);
                    }
                }
            }
        }
    }
    for (; k < n; ++k) {
        if (mask == NULL || mask[k] != 0) {
            m = mcubert_max_i32(m, row[k]);
        }
    }
    return m;
}

/* e = exp_lut[min(m - score, 255)] for a valid key (m - score >= 0). */
static inline int32_t weight_of(int32_t m, int32_t score, const int16_t *exp_lut)
{
    return exp_lut[mcubert_min255_nonnegative(m - score)];
}

int32_t mcubert_softmax_weights_s16(int16_t *row, const mcubert_keys *keys, const int16_t *exp_lut)
{
    const int8_t *mask = keys->mask;
    const int32_t n = keys->count;
    const int32_t m = row_max(row, keys);
    int32_t sum = 0;
    int32_t k = 0;
    /* In place: score k is read before e[k] replaces it. */
#if MCUBERT_DSP
    if (((uintptr_t)row & 3u) == 0) {
        /* Four keys as two int16-pair words: pack with PKHBT, store by word, and sum the pairs
         * with SMLAD against (1, 1). */
        uint32_t *words = (uint32_t *)(void *)row;
        for (; k + 4 <= n; k += 4, words += 2) {
            if (mask == NULL || all_valid4(mask + k)) {
                const uint32_t a = mcubert_pack_low_halves((uint32_t)weight_of(m, row[k], exp_lut),
                                                           (uint32_t)weight_of(m, row[k + 1], exp_lut));
                const uint32_t b = mcubert_pack_low_halves((uint32_t)weight_of(m, row[k + 2], exp_lut),
                                                           (uint32_t)weight_of(m, row[k + 3], exp_lut));
                words[0] = a;
                words[1] = b;
                sum = mcubert_smlad(a, 0x00010001u, sum);
                sum = mcubert_smlad(b, 0x00010001u, sum);
            } else {
                break; /* the scalar loops below take it from here */
            }
        }
    }
#endif
    for (; k + 4 <= n; k += 4) {
        if (mask == NULL || all_valid4(mask + k)) {
            const int32_t e0 = weight_of(m, row[k], exp_lut);
            const int32_t e1 = weight_of(m, row[k + 1], exp_lut);
            const int32_t e2 = weight_of(m, row[k + 2], exp_lut);
            const int32_t e3 = weight_of(m, row[k + 3], exp_lut);
            row[k] = (int16_t)e0;
            row[k + 1] = (int16_t)e1;
            row[k + 2] = (int16_t)e2;
            row[k + 3] = (int16_t)e3;
            sum += e0 + e1 + e2 + e3;
        } else {
            int32_t i;
            for (i = 0; i < 4; ++i) {
                const int32_t e = mask[k + i] != 0 ? weight_of(m, row[k + i], exp_lut) : 0;
                row[k + i] = (int16_t)e;
                sum += e;
            }
        }
    }
    for (; k < n; ++k) {
        const int32_t e = mask == NULL || mask[k] != 0 ? weight_of(m, row[k], exp_lut) : 0;
        row[k] = (int16_t)e;
        sum += e;
    }
    return sum > 0 ? (int32_t)(((uint64_t)1 << RECIP_BITS) / (uint32_t)sum) : 0;
}

#endif /* MCUBERT_MVE */
