/*
 * 4 x 2 x 4 micro-kernels (4 activation rows x 2 output channels x K in steps of 4) and the
 * row widening they consume. See mcubert_gemm_s8.h for the layouts.
 *
 * Bounds: int8 x int8 products are <= 2^14 and K <= 4096, int16 softmax weights (<= 2^14) x
 * int8 values over s <= 1024 keys stay within [-2^31, 2^31) (SPEC 3.4), so int32 accumulators
 * never overflow. SMLAD wraps modulo 2^32 anyway, so its partial sums need no bound at all.
 *
 * This file: the rows' set-up and the plain C path. The DSP path is in mcubert_gemm_s8_dsp.c, the MVE
 * path in mcubert_gemm_s8_mve.c; each file compiles to nothing on a build without its path.
 */
#include "mcubert_gemm_s8.h"

#include <stddef.h>

#include "mcubert/mcubert_ops.h"
#include "mcubert_dsp.h"
#include "mcubert_fixed_point.h"
#include "mcubert_gemm_s8_rows.h"

static void rows_clear(mcubert_rows *rows, mcubert_rows_kind kind, int32_t count, int32_t length)
{
    rows->kind = kind;
    rows->count = count;
    rows->length = length;
    rows->split = length;
    rows->second = NULL;
    rows->second_stride = 0;
    rows->widened = NULL;
}

void mcubert_rows_init_s8(mcubert_rows *rows, const int8_t *base, int32_t stride, int32_t count, int32_t length)
{
    int32_t r;
    rows_clear(rows, MCUBERT_ROWS_S8, count, length);
    for (r = 0; r < count; ++r) {
        rows->row[r] = base + r * stride;
    }
}

void mcubert_rows_init_split_s8(mcubert_rows *rows, const int8_t *first_base, int32_t first_stride, int32_t split,
                                const int8_t *second_base, int32_t second_stride, int32_t count, int32_t length)
{
    mcubert_rows_init_s8(rows, first_base, first_stride, count, length);
    rows->split = split;
    rows->second = second_base;
    rows->second_stride = second_stride;
}

void mcubert_rows_init_gather_s8(mcubert_rows *rows, const int8_t *const *row_pointers, int32_t count, int32_t length)
{
    int32_t r;
    rows_clear(rows, MCUBERT_ROWS_S8, count, length);
    for (r = 0; r < count; ++r) {
        rows->row[r] = row_pointers[r];
    }
}

void mcubert_rows_init_gather_s4(mcubert_rows *rows, const uint8_t *const *row_pointers, int32_t count, int32_t length)
{
    int32_t r;
    rows_clear(rows, MCUBERT_ROWS_S4, count, length);
    for (r = 0; r < count; ++r) {
        rows->row[r] = row_pointers[r];
    }
}

void mcubert_rows_init_s16(mcubert_rows *rows, const int16_t *base, int32_t stride, int32_t count, int32_t length)
{
    int32_t r;
    rows_clear(rows, MCUBERT_ROWS_S16, count, length);
    for (r = 0; r < count; ++r) {
        rows->row[r] = base + r * stride;
    }
}

int32_t mcubert_uses_dsp_path(void)
{
    return MCUBERT_DSP + MCUBERT_MVE;
}

#if !MCUBERT_DSP

/* ---- plain C path ---------------------------------------------------------------------- */

/* int4 rows become int8 rows r * length bytes into `widened` (int16[4][K] holds 4 int8 rows of
 * K), so the plain loops below only ever see int8 or int16 rows. */
void mcubert_rows_widen(mcubert_rows *rows, uint32_t *widened)
{
    int32_t r, k;
    if (rows->kind != MCUBERT_ROWS_S4) {
        return;
    }
    for (r = 0; r < rows->count; ++r) {
        int8_t *unpacked = (int8_t *)(void *)widened + r * rows->length;
        for (k = 0; k < rows->length; ++k) {
            unpacked[k] = (int8_t)activation_at(rows, r, k);
        }
        rows->row[r] = unpacked;
    }
    rows->kind = MCUBERT_ROWS_S8;
}

/* Two channels of a pair4 group over K values [k_begin, k_end) of one segment (x points at
 * the value for k_begin). Value k of channel c is at group[8 (k / 4) + 4 c + k % 4], i.e.
 * group + 2k - k % 4. */
static inline void pair4_segment(const int8_t *x, int32_t k_begin, int32_t k_end, const int8_t *group, int32_t *acc0,
                                 int32_t *acc1)
{
    int32_t s0 = *acc0, s1 = *acc1;
    int32_t k = k_begin;
    for (; k < k_end && (k & 3) != 0; ++k, ++x) {
        const int8_t *w = group + 2 * k - (k & 3);
        s0 += *x * w[0];
        s1 += *x * w[4];
    }
    for (; k + 4 <= k_end; k += 4, x += 4) {
        const int8_t *w = group + 2 * k;
        s0 += x[0] * w[0] + x[1] * w[1] + x[2] * w[2] + x[3] * w[3];
        s1 += x[0] * w[4] + x[1] * w[5] + x[2] * w[6] + x[3] * w[7];
    }
    for (; k < k_end; ++k, ++x) {
        const int8_t *w = group + 2 * k - (k & 3);
        s0 += *x * w[0];
        s1 += *x * w[4];
    }
    *acc0 = s0;
    *acc1 = s1;
}

void mcubert_gemm_4xn_pair4(const mcubert_rows *rows, const int8_t *pairs, int32_t pair_stride, int32_t channels,
                            int32_t acc[][MCUBERT_BLOCK_ROWS])
{
    int32_t r, c;
    for (c = 0; c < channels; c += 2) {
        const int8_t *group = pairs + (c >> 1) * pair_stride;
        for (r = 0; r < rows->count; ++r) {
            int32_t a0 = 0, a1 = 0;
            pair4_segment(row_s8(rows, r), 0, rows->split, group, &a0, &a1);
            if (rows->split < rows->length) {
                pair4_segment(second_s8(rows, r), rows->split, rows->length, group, &a0, &a1);
            }
            acc[c][r] = a0;
            if (c + 1 < channels) {
                acc[c + 1][r] = a1;
            }
        }
    }
}

/* Two int8 weight rows against activation row r, whatever the row's storage (w1 may equal w0):
 * each activation is loaded once for both. */
static void row_dot2(const mcubert_rows *rows, int32_t r, const int8_t *w0, const int8_t *w1, int32_t *out)
{
    int32_t a0 = 0, a1 = 0, k;
    if (rows->kind == MCUBERT_ROWS_S16) {
        const int16_t *x = row_s16(rows, r);
        for (k = 0; k < rows->length; ++k) {
            a0 += x[k] * w0[k];
            a1 += x[k] * w1[k];
        }
    } else if (rows->split == rows->length) {
        const int8_t *x = row_s8(rows, r);
        for (k = 0; k < rows->length; ++k) {
            a0 += x[k] * w0[k];
            a1 += x[k] * w1[k];
        }
    } else {
        for (k = 0; k < rows->length; ++k) {
            const int32_t x = activation_at(rows, r, k);
            a0 += x * w0[k];
            a1 += x * w1[k];
        }
    }
    out[0] = a0;
    out[1] = a1;
}

void mcubert_gemm_4xn_rows(const mcubert_rows *rows, const int8_t *first, int32_t row_stride, int32_t channels,
                           int32_t acc[][MCUBERT_BLOCK_ROWS])
{
    int32_t c, r;
    for (c = 0; c < channels; c += 2) {
        const int8_t *w0 = first + c * row_stride;
        const int8_t *w1 = c + 1 < channels ? w0 + row_stride : w0;
        for (r = 0; r < rows->count; ++r) {
            int32_t pair[2];
            row_dot2(rows, r, w0, w1, pair);
            acc[c][r] = pair[0];
            if (c + 1 < channels) {
                acc[c + 1][r] = pair[1];
            }
        }
    }
}

#endif /* !MCUBERT_DSP */
