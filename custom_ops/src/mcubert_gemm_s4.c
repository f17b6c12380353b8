/*
 * The int4-weight micro-kernel and its row widening. See mcubert_gemm_s4.h for the layouts and
 * docs/w4-gemm.md for the design.
 *
 * Bounds: int8 x int4 products are <= 2^10 in magnitude and K <= 4096, so the accumulators
 * (< 2^22) and the DSP path's scaled sums (16 times that, < 2^26) never leave int32; SMLAD wraps
 * modulo 2^32 anyway, so its partial sums need no bound at all.
 */
#include "mcubert_gemm_s4.h"

#include <stddef.h>

#include "mcubert_dsp.h"
#include "mcubert_fixed_point.h"

#define MCUBERT_W4_ASM 0

/* int8 row r's first segment (K values [0, split)) and second (K values [split, K)). */
static inline const int8_t *first_w4(const mcubert_rows *rows, int32_t r)
{
    return (const int8_t *)rows->row[r];
}

static inline const int8_t *second_w4(const mcubert_rows *rows, int32_t r)
{
    return rows->second + r * rows->second_stride;
}

/* Activation k of int8 row r, whichever segment holds it. */
static inline int32_t activation_w4(const mcubert_rows *rows, int32_t r, int32_t k)
{
    return k < rows->split ? first_w4(rows, r)[k] : second_w4(rows, r)[k - rows->split];
}

/* Weight k of a packed w4row channel row: the offset-binary nibble minus 8. */
static inline int32_t weight_w4(const uint8_t *row, int32_t k)
{
    const int32_t byte = row[k >> 1];
    return (((k & 1) ? byte >> 4 : byte) & 0xF) - 8;
}

#if MCUBERT_DSP

/* ---- DSP path -------------------------------------------------------------------------- */

/* The int16 pair (16 lo(p), 16 hi(p)) of p = (lo, hi) with |values| <= 128: shifting the word
 * moves the low half's top bits (copies of its sign) into bits 16-19, which are cleared. */
static inline uint32_t times16_pair(uint32_t p)
{
    return (p << 4) & 0xFFF0FFF0u;
}

/* K values 8g .. 8g + 7 of row r as two words of bytes (x0..x3, x4..x7). */
static inline void group_words(const mcubert_rows *rows, int32_t r, int32_t g, uint32_t *lo, uint32_t *hi)
{
    const int32_t k = 8 * g;
    if (k + 8 <= rows->split) {
        *lo = mcubert_read_u32(first_w4(rows, r) + k);
        *hi = mcubert_read_u32(first_w4(rows, r) + k + 4);
    } else if (k >= rows->split) {
        *lo = mcubert_read_u32(second_w4(rows, r) + k - rows->split);
        *hi = mcubert_read_u32(second_w4(rows, r) + k - rows->split + 4);
    } else { /* the group straddles the two segments */
        uint32_t bytes[2] = {0, 0};
        int32_t i;
        for (i = 0; i < 8; ++i) {
            bytes[i >> 2] |= (uint32_t)(uint8_t)activation_w4(rows, r, k + i) << (8 * (i & 3));
        }
        *lo = bytes[0];
        *hi = bytes[1];
    }
}

/* Row r's full 8-groups into its slots of the widened block (16 words per group: two halves of
 * 4 rows x 2 words); returns the sum of the values widened. */
static int32_t widen_row_w4(const mcubert_rows *rows, int32_t r, uint32_t *dst, int32_t groups)
{
    const uint32_t ones = 0x00010001u;
    int32_t sum = 0, g;
    for (g = 0; g < groups; ++g, dst += 16) {
        uint32_t lo, hi;
        group_words(rows, r, g, &lo, &hi);
        {
            const uint32_t e0 = mcubert_sxtb16(lo), o0 = mcubert_sxtb16_ror8(lo); /* (x0, x2), (x1, x3) */
            const uint32_t e1 = mcubert_sxtb16(hi), o1 = mcubert_sxtb16_ror8(hi); /* (x4, x6), (x5, x7) */
            dst[0] = times16_pair(mcubert_pack_low_halves(e0, e1));               /* (16 x0, 16 x4) */
            dst[1] = mcubert_pack_low_halves(o0, o1);                             /* (x1, x5) */
            dst[8] = times16_pair(mcubert_pack_high_halves(e0, e1));              /* (16 x2, 16 x6) */
            dst[9] = mcubert_pack_high_halves(o0, o1);                            /* (x3, x7) */
            sum = mcubert_smlad(e0, ones, sum);
            sum = mcubert_smlad(o0, ones, sum);
            sum = mcubert_smlad(e1, ones, sum);
            sum = mcubert_smlad(o1, ones, sum);
        }
    }
    return sum;
}

void mcubert_rows_widen_w4(mcubert_rows *rows, uint32_t *widened, int32_t start[MCUBERT_BLOCK_ROWS])
{
    const int32_t groups = rows->length >> 3;
    int32_t r;
    for (r = 0; r < MCUBERT_BLOCK_ROWS; ++r) {
        /* -16 * 8 * sum: removes the nibbles' offset 8 from the 16-times-scaled products */
        start[r] = r < rows->count ? -128 * widen_row_w4(rows, r, widened + 2 * r, groups) : 0;
    }
    rows->widened = widened;
}

#if !MCUBERT_W4_ASM
/* One sweep of the micro-kernel: rows 0..3 against one channel's `words` packed words at w. Per
 * word: 1 load, 4 ALU operations for the four weight pairs, 16 SMLADs (the assembly loads the
 * 16 activation words with four LDMs). */
static void dsp_sweep_w4(const uint32_t *x, int32_t words, const uint8_t *w, const int32_t *start, int32_t acc[4])
{
    int32_t a0 = start[0], a1 = start[1], a2 = start[2], a3 = start[3];
    for (; words > 0; --words, x += 16, w += 4) {
        const uint32_t word = mcubert_read_u32(w);
        uint32_t lo = word & 0x000F000Fu, hi = word & 0x00F000F0u; /* (u0, u4), (16 u1, 16 u5) */
        a0 = mcubert_smlad(lo, x[0], a0);
        a0 = mcubert_smlad(hi, x[1], a0);
        a1 = mcubert_smlad(lo, x[2], a1);
        a1 = mcubert_smlad(hi, x[3], a1);
        a2 = mcubert_smlad(lo, x[4], a2);
        a2 = mcubert_smlad(hi, x[5], a2);
        a3 = mcubert_smlad(lo, x[6], a3);
        a3 = mcubert_smlad(hi, x[7], a3);
        lo = (word >> 8) & 0x000F000Fu; /* (u2, u6) */
        hi = (word >> 8) & 0x00F000F0u; /* (16 u3, 16 u7) */
        a0 = mcubert_smlad(lo, x[8], a0);
        a0 = mcubert_smlad(hi, x[9], a0);
        a1 = mcubert_smlad(lo, x[10], a1);
        a1 = mcubert_smlad(hi, x[11], a1);
        a2 = mcubert_smlad(lo, x[12], a2);
        a2 = mcubert_smlad(hi, x[13], a2);
        a3 = mcubert_smlad(lo, x[14], a3);
        a3 = mcubert_smlad(hi, x[15], a3);
    }
    acc[0] = a0 >> 4; /* exact: 16 times the accumulator */
    acc[1] = a1 >> 4;
    acc[2] = a2 >> 4;
    acc[3] = a3 >> 4;
}

void mcubert_dsp_4xn_w4(const uint32_t *x, int32_t words, const mcubert_w4_walk *walk, int32_t channels,
                        int32_t acc[][MCUBERT_BLOCK_ROWS])
{
    int32_t c;
    for (c = 0; c < channels; ++c) {
        dsp_sweep_w4(x, words, walk->base + c * walk->row_bytes, walk->start, acc[c]);
    }
}
#endif /* !MCUBERT_W4_ASM */

void mcubert_gemm_4xn_w4(const mcubert_rows *rows, const int32_t start[MCUBERT_BLOCK_ROWS], const uint8_t *first,
                         int32_t row_bytes, int32_t channels, int32_t acc[][MCUBERT_BLOCK_ROWS])
{
    mcubert_w4_walk walk;
    int32_t c, r, k;
    walk.base = first;
    walk.row_bytes = row_bytes;
    walk.start = start;
    mcubert_dsp_4xn_w4(rows->widened, rows->length >> 3, &walk, channels, acc);
    /* K % 8 tail: the last word's nibbles, read in place (its padding nibbles are never used). */
    for (k = rows->length & ~7; k < rows->length; ++k) {
        int32_t x[MCUBERT_BLOCK_ROWS];
        for (r = 0; r < rows->count; ++r) {
            x[r] = activation_w4(rows, r, k);
        }
        for (c = 0; c < channels; ++c) {
            const int32_t weight = weight_w4(first + c * row_bytes, k);
            for (r = 0; r < rows->count; ++r) {
                acc[c][r] += x[r] * weight;
            }
        }
    }
}

#else /* !MCUBERT_DSP */

/* ---- plain C path ---------------------------------------------------------------------- */

void mcubert_rows_widen_w4(mcubert_rows *rows, uint32_t *widened, int32_t start[MCUBERT_BLOCK_ROWS])
{
    int32_t r;
    (void)rows;
    (void)widened;
    for (r = 0; r < MCUBERT_BLOCK_ROWS; ++r) {
        start[r] = 0;
    }
}

/* K values [k_begin, k_end) of one segment (x points at the value for k_begin) against a packed
 * channel row; two nibbles (one byte) per step where the segment is byte-aligned. */
static int32_t segment_dot_w4(const int8_t *x, int32_t k_begin, int32_t k_end, const uint8_t *row)
{
    int32_t sum = 0, k = k_begin;
    if ((k & 1) != 0 && k < k_end) {
        sum += *x++ * weight_w4(row, k++);
    }
    for (; k + 2 <= k_end; k += 2, x += 2) {
        const int32_t byte = row[k >> 1];
        sum += x[0] * ((byte & 0xF) - 8) + x[1] * ((byte >> 4) - 8);
    }
    if (k < k_end) {
        sum += *x * weight_w4(row, k);
    }
    return sum;
}

void mcubert_gemm_4xn_w4(const mcubert_rows *rows, const int32_t start[MCUBERT_BLOCK_ROWS], const uint8_t *first,
                         int32_t row_bytes, int32_t channels, int32_t acc[][MCUBERT_BLOCK_ROWS])
{
    int32_t c, r;
    (void)start;
    for (c = 0; c < channels; ++c) {
        const uint8_t *row = first + c * row_bytes;
        for (r = 0; r < rows->count; ++r) {
            const int32_t split = mcubert_min_i32(rows->split, rows->length);
            int32_t sum = segment_dot_w4(first_w4(rows, r), 0, split, row);
            if (split < rows->length) {
                sum += segment_dot_w4(second_w4(rows, r), split, rows->length, row);
            }
            acc[c][r] = sum;
        }
    }
}

#endif /* MCUBERT_DSP */
