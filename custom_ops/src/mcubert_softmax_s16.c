/*
 * Softmax weights of one attention row (SPEC 3.4; reference ops/attention.py exp_weights and
 * reciprocal). Normalization is deferred: the caller multiplies sum_k e[k] v[k][c] by the
 * returned reciprocal, so every weight keeps 14 bits.
 *
 *   m = max of the valid scores;  e[k] = valid ? exp_lut[min(m - score[k], 255)] : 0
 *   recip = sum e ? floor(2^44 / sum e) : 0          (2^14 <= sum <= 2^24: recip < 2^31)
 */
#include "mcubert_fixed_point.h"
#include "mcubert_internal.h"

#define LUT_LAST 255
#define RECIP_BITS 44

static inline int key_valid(const mcubert_keys *keys, int32_t k)
{
    return keys->mask == NULL || keys->mask[k] != 0;
}

int32_t mcubert_softmax_weights_s16(int16_t *row, const mcubert_keys *keys, const int16_t *exp_lut)
{
    int32_t max_score = MCUBERT_INT16_MIN;
    int32_t sum = 0;
    int32_t k;
    for (k = 0; k < keys->count; ++k) {
        if (key_valid(keys, k) && row[k] > max_score) {
            max_score = row[k];
        }
    }
    /* In place: score k is read before e[k] replaces it. */
    for (k = 0; k < keys->count; ++k) {
        int16_t e = 0;
        if (key_valid(keys, k)) {
            e = exp_lut[mcubert_min_i32(max_score - row[k], LUT_LAST)];
        }
        row[k] = e;
        sum += e;
    }
    return sum > 0 ? (int32_t)(((uint64_t)1 << RECIP_BITS) / (uint32_t)sum) : 0;
}
