/*
 * 4 x 2 x 4 micro-kernels (4 activation rows x 2 output channels x K in steps of 4) and the
 * row widening they consume. See mcubert_gemm_s8.h for the layouts.
 *
 * Bounds: int8 x int8 products are <= 2^14 and K <= 4096, int16 softmax weights (<= 2^14) x
 * int8 values over s <= 1024 keys stay within [-2^31, 2^31) (SPEC 3.4), so int32 accumulators
 * never overflow. SMLAD wraps modulo 2^32 anyway, so its partial sums need no bound at all.
 */
#include "mcubert_gemm_s8.h"

#include <stddef.h>

#include "mcubert/mcubert_ops.h"
#include "mcubert_dsp.h"
#include "mcubert_fixed_point.h"

/* The micro-kernel is inlined into each wrapper so that its weight addressing (offset and step)
 * becomes constants; GCC's heuristics would otherwise keep one generic out-of-line copy. */
#if defined(__GNUC__)
#define MCUBERT_ALWAYS_INLINE __attribute__((always_inline)) inline
#else
#define MCUBERT_ALWAYS_INLINE inline
#endif

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

void mcubert_rows_init_s8(mcubert_rows *rows, const int8_t *base, int32_t stride, int32_t count,
                          int32_t length)
{
    int32_t r;
    rows_clear(rows, MCUBERT_ROWS_S8, count, length);
    for (r = 0; r < count; ++r) {
        rows->row[r] = base + r * stride;
    }
}

void mcubert_rows_init_split_s8(mcubert_rows *rows, const int8_t *first_base, int32_t first_stride,
                                int32_t split, const int8_t *second_base, int32_t second_stride,
                                int32_t count, int32_t length)
{
    mcubert_rows_init_s8(rows, first_base, first_stride, count, length);
    rows->split = split;
    rows->second = second_base;
    rows->second_stride = second_stride;
}

void mcubert_rows_init_gather_s8(mcubert_rows *rows, const int8_t *const *row_pointers, int32_t count,
                                 int32_t length)
{
    int32_t r;
    rows_clear(rows, MCUBERT_ROWS_S8, count, length);
    for (r = 0; r < count; ++r) {
        rows->row[r] = row_pointers[r];
    }
}

void mcubert_rows_init_s16(mcubert_rows *rows, const int16_t *base, int32_t stride, int32_t count,
                           int32_t length)
{
    int32_t r;
    rows_clear(rows, MCUBERT_ROWS_S16, count, length);
    for (r = 0; r < count; ++r) {
        rows->row[r] = base + r * stride;
    }
}

static inline const int8_t *row_s8(const mcubert_rows *rows, int32_t r)
{
    return (const int8_t *)rows->row[r];
}

static inline const int16_t *row_s16(const mcubert_rows *rows, int32_t r)
{
    return (const int16_t *)rows->row[r];
}

/* int8 row r's second segment (K values [split, K)). */
static inline const int8_t *second_s8(const mcubert_rows *rows, int32_t r)
{
    return rows->second + r * rows->second_stride;
}

/* Activation k of row r, whatever its storage (scalar paths: tails, odd splits). */
static inline int32_t activation_at(const mcubert_rows *rows, int32_t r, int32_t k)
{
    if (rows->kind == MCUBERT_ROWS_S16) {
        return row_s16(rows, r)[k];
    }
    return k < rows->split ? row_s8(rows, r)[k] : second_s8(rows, r)[k - rows->split];
}

int32_t mcubert_uses_dsp_path(void) { return MCUBERT_DSP; }

#if MCUBERT_DSP

/* ---- DSP path -------------------------------------------------------------------------- */

static inline void widen_word(uint32_t *dst, uint32_t x)
{
    dst[0] = mcubert_sxtb16(x);      /* (x0, x2) */
    dst[1] = mcubert_sxtb16_ror8(x); /* (x1, x3) */
}

void mcubert_rows_widen(mcubert_rows *rows, uint32_t *widened)
{
    const int32_t groups = rows->length >> 2;
    int32_t r;
    for (r = 0; r < rows->count; ++r) {
        uint32_t *dst = widened + 2 * r; /* row r's words inside each 8-word group */
        int32_t g = 0;
        if (rows->kind == MCUBERT_ROWS_S16) {
            const int16_t *src = row_s16(rows, r);
            for (; g < groups; ++g, src += 4, dst += 8) {
                const uint32_t lo = mcubert_read_u32(src);     /* (x0, x1) */
                const uint32_t hi = mcubert_read_u32(src + 2); /* (x2, x3) */
                dst[0] = mcubert_pack_low_halves(lo, hi);      /* (x0, x2) */
                dst[1] = mcubert_pack_high_halves(lo, hi);     /* (x1, x3) */
            }
            continue;
        }
        {
            const int32_t first_groups = rows->split >> 2;
            const int8_t *src = row_s8(rows, r);
            for (; g < first_groups; ++g, src += 4, dst += 8) {
                widen_word(dst, mcubert_read_u32(src));
            }
        }
        if (g == groups) {
            continue; /* single segment, or the second one is shorter than a group */
        }
        if ((rows->split & 3) == 0) {
            const int8_t *src = second_s8(rows, r);
            for (; g < groups; ++g, src += 4, dst += 8) {
                widen_word(dst, mcubert_read_u32(src));
            }
        } else {
            /* A group straddles the two segments (only when a head size is not a multiple of
             * 4): assemble the remaining groups byte by byte. */
            for (; g < groups; ++g, dst += 8) {
                uint32_t x = 0;
                int32_t i;
                for (i = 0; i < 4; ++i) {
                    x |= (uint32_t)(uint8_t)activation_at(rows, r, 4 * g + i) << (8 * i);
                }
                widen_word(dst, x);
            }
        }
    }
    rows->widened = widened;
}

/* One 4-value group of the 4 x 2 micro-kernel: channel 0's weight word is sign-extended once
 * (SXTB16, SXTB16 ROR 8) and used for all four rows, then channel 1's. Channel by channel keeps
 * 8 accumulators + 2 weight halves + 2 activation words + 3 pointers within the 14 usable
 * registers (both channels' weights at once would spill accumulators); the activation words are
 * reloaded for channel 1 instead, from `x` = the group's 8 widened words, (x0,x2),(x1,x3) per row.
 * Accumulates into the caller's a00..a31 (row, channel). */
#define MCUBERT_GROUP_4X2(w0_word, w1_word, x)                                                   \
    do {                                                                                        \
        uint32_t even_ = mcubert_sxtb16(w0_word), odd_ = mcubert_sxtb16_ror8(w0_word);           \
        a00 = mcubert_smlad(even_, (x)[0], a00); a00 = mcubert_smlad(odd_, (x)[1], a00);         \
        a10 = mcubert_smlad(even_, (x)[2], a10); a10 = mcubert_smlad(odd_, (x)[3], a10);         \
        a20 = mcubert_smlad(even_, (x)[4], a20); a20 = mcubert_smlad(odd_, (x)[5], a20);         \
        a30 = mcubert_smlad(even_, (x)[6], a30); a30 = mcubert_smlad(odd_, (x)[7], a30);         \
        even_ = mcubert_sxtb16(w1_word);                                                        \
        odd_ = mcubert_sxtb16_ror8(w1_word);                                                    \
        a01 = mcubert_smlad(even_, (x)[0], a01); a01 = mcubert_smlad(odd_, (x)[1], a01);         \
        a11 = mcubert_smlad(even_, (x)[2], a11); a11 = mcubert_smlad(odd_, (x)[3], a11);         \
        a21 = mcubert_smlad(even_, (x)[4], a21); a21 = mcubert_smlad(odd_, (x)[5], a21);         \
        a31 = mcubert_smlad(even_, (x)[6], a31); a31 = mcubert_smlad(odd_, (x)[7], a31);         \
    } while (0)

/* The micro-kernel over the full groups. Weight word of channel 0 at w, of channel 1 at
 * w + w1_offset, both advancing by w_step per group (pair4: 4 and 8, one pointer; rows: the row
 * distance and 4). 16 SMLADs = 32 MACs per group; the reduction loop is unrolled by two groups. */
static MCUBERT_ALWAYS_INLINE void dsp_groups(const mcubert_rows *rows, const int8_t *w, int32_t w1_offset,
                              int32_t w_step, int32_t acc[4][2])
{
    const int32_t groups = rows->length >> 2;
    const uint32_t *x = rows->widened;
    int32_t g;
    if (rows->count == MCUBERT_BLOCK_ROWS) {
        int32_t a00 = 0, a01 = 0, a10 = 0, a11 = 0, a20 = 0, a21 = 0, a30 = 0, a31 = 0;
        for (g = 0; g + 2 <= groups; g += 2) {
            const uint32_t w0 = mcubert_read_u32(w), w1 = mcubert_read_u32(w + w1_offset);
            const uint32_t v0 = mcubert_read_u32(w + w_step), v1 = mcubert_read_u32(w + w_step + w1_offset);
            MCUBERT_GROUP_4X2(w0, w1, x);
            MCUBERT_GROUP_4X2(v0, v1, x + 8);
            w += 2 * w_step;
            x += 16;
        }
        if (g < groups) {
            const uint32_t w0 = mcubert_read_u32(w), w1 = mcubert_read_u32(w + w1_offset);
            MCUBERT_GROUP_4X2(w0, w1, x);
        }
        acc[0][0] = a00; acc[0][1] = a01; acc[1][0] = a10; acc[1][1] = a11;
        acc[2][0] = a20; acc[2][1] = a21; acc[3][0] = a30; acc[3][1] = a31;
    } else {
        /* A block of 1..3 rows (ragged tile end): one row at a time, same layout. */
        int32_t r;
        for (r = 0; r < rows->count; ++r) {
            const int8_t *wr = w;
            const uint32_t *xr = x + 2 * r;
            int32_t a0 = 0, a1 = 0;
            for (g = 0; g < groups; ++g) {
                const uint32_t w0 = mcubert_read_u32(wr);
                const uint32_t w1 = mcubert_read_u32(wr + w1_offset);
                wr += w_step;
                a0 = mcubert_smlad(mcubert_sxtb16(w0), xr[0], a0);
                a0 = mcubert_smlad(mcubert_sxtb16_ror8(w0), xr[1], a0);
                a1 = mcubert_smlad(mcubert_sxtb16(w1), xr[0], a1);
                a1 = mcubert_smlad(mcubert_sxtb16_ror8(w1), xr[1], a1);
                xr += 8;
            }
            acc[r][0] = a0;
            acc[r][1] = a1;
        }
    }
}

void mcubert_gemm_4x2_pair4(const mcubert_rows *rows, const int8_t *group, int32_t acc[4][2])
{
    const int32_t full = rows->length & ~3;
    int32_t r, k;
    dsp_groups(rows, group, 4, 8, acc);
    /* K % 4 tail: the last group's lanes, read in place (its padding lanes are never used). */
    for (k = full; k < rows->length; ++k) {
        const int8_t *w = group + 2 * k - (k & 3);
        for (r = 0; r < rows->count; ++r) {
            const int32_t x = activation_at(rows, r, k);
            acc[r][0] += x * w[0];
            acc[r][1] += x * w[4];
        }
    }
}

void mcubert_gemm_4x2_rows(const mcubert_rows *rows, const int8_t *w0, const int8_t *w1,
                           int32_t acc[4][2])
{
    const int32_t full = rows->length & ~3;
    int32_t r, k;
    dsp_groups(rows, w0, (int32_t)(w1 - w0), 4, acc);
    for (k = full; k < rows->length; ++k) {
        for (r = 0; r < rows->count; ++r) {
            const int32_t x = activation_at(rows, r, k);
            acc[r][0] += x * w0[k];
            acc[r][1] += x * w1[k];
        }
    }
}

#else /* !MCUBERT_DSP */

/* ---- plain C path ---------------------------------------------------------------------- */

void mcubert_rows_widen(mcubert_rows *rows, uint32_t *widened)
{
    (void)rows;
    (void)widened;
}

/* Two channels of a pair4 group over K values [k_begin, k_end) of one segment (x points at
 * the value for k_begin). Value k of channel c is at group[8 (k / 4) + 4 c + k % 4], i.e.
 * group + 2k - k % 4. */
static inline void pair4_segment(const int8_t *x, int32_t k_begin, int32_t k_end, const int8_t *group,
                          int32_t *acc0, int32_t *acc1)
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

void mcubert_gemm_4x2_pair4(const mcubert_rows *rows, const int8_t *group, int32_t acc[4][2])
{
    int32_t r;
    for (r = 0; r < rows->count; ++r) {
        int32_t a0 = 0, a1 = 0;
        pair4_segment(row_s8(rows, r), 0, rows->split, group, &a0, &a1);
        if (rows->split < rows->length) {
            pair4_segment(second_s8(rows, r), rows->split, rows->length, group, &a0, &a1);
        }
        acc[r][0] = a0;
        acc[r][1] = a1;
    }
}

void mcubert_gemm_4x2_rows(const mcubert_rows *rows, const int8_t *w0, const int8_t *w1,
                           int32_t acc[4][2])
{
    int32_t r, k;
    for (r = 0; r < rows->count; ++r) {
        int32_t a0 = 0, a1 = 0;
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
        acc[r][0] = a0;
        acc[r][1] = a1;
    }
}

#endif /* MCUBERT_DSP */
