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

#if MCUBERT_MVE
#include <arm_mve.h>
#endif

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

#if !MCUBERT_MVE /* MVE: the rows stay int8 (mcubert_rows_widen_w4 below, with the MVE gemm) */

/* The int16 pair (16 lo(p), 16 hi(p)) of p = (lo, hi) with |values| <= 128: shifting the word
 * moves the low half's top bits (copies of its sign) into bits 16-19, which are cleared. */
static inline uint32_t times16_pair(uint32_t p)
{
    return (p << 4) & 0xFFF0FFF0u;
}

/* Of the words a = (x0..x3) and b = (x4..x7): the bytes (x0, x1, x4, x5) (PKHBT) and
 * (x2, x3, x6, x7) (PKHTB). Written as asm natively: GCC 12 emits UXTH + ORR for the C. */
#if MCUBERT_DSP_NATIVE
static inline uint32_t bytes_0145(uint32_t a, uint32_t b)
{
    uint32_t result;
    __asm__("pkhbt %0, %1, %2, lsl #16" : "=r"(result) : "r"(a), "r"(b));
    return result;
}

static inline uint32_t bytes_2367(uint32_t a, uint32_t b)
{
    uint32_t result;
    __asm__("pkhtb %0, %1, %2, asr #16" : "=r"(result) : "r"(b), "r"(a));
    return result;
}
#else
static inline uint32_t bytes_0145(uint32_t a, uint32_t b)
{
    return (a & 0xFFFFu) | (b << 16);
}

static inline uint32_t bytes_2367(uint32_t a, uint32_t b)
{
    return (a >> 16) | (b & 0xFFFF0000u);
}
#endif

/* One 8-group (bytes a = x0..x3, b = x4..x7) into its four slots of the widened block (words 0, 1
 * of the first half, 8, 9 of the second); returns sum + the group's values. */
static inline int32_t widen_group_w4(uint32_t a, uint32_t b, uint32_t *dst, int32_t sum)
{
    const uint32_t ones = 0x00010001u;
    const uint32_t t = bytes_0145(a, b), u = bytes_2367(a, b);
    const uint32_t even_t = mcubert_sxtb16(t), odd_t = mcubert_sxtb16_ror8(t); /* (x0, x4), (x1, x5) */
    const uint32_t even_u = mcubert_sxtb16(u), odd_u = mcubert_sxtb16_ror8(u); /* (x2, x6), (x3, x7) */
    dst[0] = times16_pair(even_t);
    dst[1] = odd_t;
    dst[8] = times16_pair(even_u);
    dst[9] = odd_u;
    sum = mcubert_smlad(even_t, ones, sum);
    sum = mcubert_smlad(odd_t, ones, sum);
    sum = mcubert_smlad(even_u, ones, sum);
    return mcubert_smlad(odd_u, ones, sum);
}

/* `groups` 8-groups of one int8 segment into a row's slots (16 words per group). */
static int32_t widen_segment_w4(const int8_t *src, uint32_t *dst, int32_t groups, int32_t sum)
{
    for (; groups > 0; --groups, src += 8, dst += 16) {
        sum = widen_group_w4(mcubert_read_u32(src), mcubert_read_u32(src + 4), dst, sum);
    }
    return sum;
}

/* Row r's full 8-groups into its slots of the widened block; returns the sum of the values
 * widened. Whole groups come straight from their segment; a group straddling the two (only when
 * the split is not a multiple of 8) is assembled byte by byte. */
static int32_t widen_row_w4(const mcubert_rows *rows, int32_t r, uint32_t *dst, int32_t groups)
{
    int32_t g = mcubert_min_i32(rows->split >> 3, groups);
    int32_t sum = widen_segment_w4(first_w4(rows, r), dst, g, 0);
    if (g < groups && (rows->split & 7) != 0) {
        uint32_t bytes[2] = {0, 0};
        int32_t i;
        for (i = 0; i < 8; ++i) {
            bytes[i >> 2] |= (uint32_t)(uint8_t)activation_w4(rows, r, 8 * g + i) << (8 * (i & 3));
        }
        sum = widen_group_w4(bytes[0], bytes[1], dst + 16 * g, sum);
        ++g;
    }
    if (g < groups) {
        sum = widen_segment_w4(second_w4(rows, r) + 8 * g - rows->split, dst + 16 * g, groups - g, sum);
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
#endif /* !MCUBERT_MVE */

#if !MCUBERT_DSP_ASM
/* One sweep of the micro-kernel: rows 0..3 against one channel's `words` packed words at w. Per
 * word: 1 load, 5 ALU operations for the four weight pairs, 16 SMLADs. The assembly version
 * (mcubert_gemm_dsp_s4.S) is this loop with the 16 activation words loaded by four LDMs. */
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
#endif /* !MCUBERT_DSP_ASM */

#if MCUBERT_MVE

/* ---- MVE path -------------------------------------------------------------------------- */

/* A w4row byte holds K values 2i (low nibble) and 2i + 1 (high): one 16-byte weight load gives 32 K
 * values as VAND 0x0F (even K) and VSHR.U8 #4 (odd K), the stored nibbles u = w + 8 in [0, 15], which
 * VMLADAVA.S8 multiplies as they are. mcubert_rows_widen_w4 therefore copies each int8 row de-interleaved
 * to match: per 32-group, its 16 even-K values then its 16 odd-K values (VLD20/VLD21.8 do it); a K % 32
 * tail of n values holds its ceil(n/2) even values, then its odd ones, so row r is K bytes at
 * widened + r K (4K of the int16[4][K] region). The offset comes out through start[r] = -8 sum x. */

/* Row r's copy: `groups` whole 32-groups de-interleaved, then the tail; returns the sum of its values.
 * `src` is the row as one contiguous int8 run. */
static int32_t deinterleave_row_w4(const int8_t *src, int8_t *dst, int32_t length)
{
    const int32_t groups = length >> 5, rest = length & 31, even = (rest + 1) >> 1;
    int32_t sum = 0, g, i;
    for (g = 0; g < groups; ++g, src += 32, dst += 32) {
        const int8x16x2_t pair = vld2q_s8(src);
        vstrbq_s8(dst, pair.val[0]);
        vstrbq_s8(dst + 16, pair.val[1]);
        sum = vaddvaq_s8(sum, pair.val[0]);
        sum = vaddvaq_s8(sum, pair.val[1]);
    }
    for (i = 0; i < rest; ++i) {
        dst[(i & 1) ? even + (i >> 1) : i >> 1] = src[i];
        sum += src[i];
    }
    return sum;
}

void mcubert_rows_widen_w4(mcubert_rows *rows, uint32_t *widened, int32_t start[MCUBERT_BLOCK_ROWS])
{
    const int32_t length = rows->length, split = mcubert_min_i32(rows->split, length);
    int8_t *copies = (int8_t *)(void *)widened;
    int8_t *joined = copies + 4 * length; /* two segments joined first, in the region's second half */
    int32_t r;
    for (r = 0; r < MCUBERT_BLOCK_ROWS; ++r) {
        const int8_t *src = first_w4(rows, r);
        if (r >= rows->count) {
            start[r] = 0;
            continue;
        }
        if (split < length) {
            memcpy(joined, src, (size_t)split);
            memcpy(joined + split, second_w4(rows, r), (size_t)(length - split));
            src = joined;
        }
        start[r] = -8 * deinterleave_row_w4(src, copies + r * length, length);
    }
    rows->widened = widened;
}

/* One channel's 16 weight bytes (32 K) against both rows' 32-group, into s_row0 and s_row1. */
#define W4_GROUP(w, e0, o0, e1, o1, s_row0, s_row1)                                                                    \
    do {                                                                                                               \
        const uint8x16_t packed = (w);                                                                                 \
        const int8x16_t low = vreinterpretq_s8_u8(vandq_u8(packed, nibble)),                                           \
                        high = vreinterpretq_s8_u8(vshrq_n_u8(packed, 4));                                             \
        s_row0 = vmladavaq_s8(vmladavaq_s8(s_row0, e0, low), o0, high);                                                \
        s_row1 = vmladavaq_s8(vmladavaq_s8(s_row1, e1, low), o1, high);                                                \
    } while (0)

/* Rows x0, x1 (de-interleaved copies) against channels w and w + row_bytes (`both`; else only w): per
 * 32 K and channel, 1 weight load, VAND + VSHR, 4 VMLADAVA.S8 (64 MACs), the rows' 4 loads shared by
 * the pair. The K % 32 tail: predicated loads, nothing read past K or past the packed row. */
static inline void w4_pair(const int8_t *x0, const int8_t *x1, const uint8_t *w, int32_t row_bytes, int32_t length,
                           int both, int32_t sums[4])
{
    const uint8x16_t nibble = vdupq_n_u8(0x0F);
    const int32_t groups = length >> 5, rest = length & 31, even = (rest + 1) >> 1;
    const uint8_t *v = both ? w + row_bytes : w;
    int32_t a0 = sums[0], b0 = sums[1], a1 = sums[2], b1 = sums[3]; /* locals: int8 loads may alias sums */
    int32_t g;
    for (g = 0; g < groups; ++g, x0 += 32, x1 += 32, w += 16, v += 16) {
        const int8x16_t e0 = vldrbq_s8(x0), o0 = vldrbq_s8(x0 + 16), e1 = vldrbq_s8(x1), o1 = vldrbq_s8(x1 + 16);
        W4_GROUP(vldrbq_u8(w), e0, o0, e1, o1, a0, a1);
        W4_GROUP(vldrbq_u8(v), e0, o0, e1, o1, b0, b1);
    }
    if (rest != 0) {
        const mve_pred16_t live_even = vctp8q((uint32_t)even), live_odd = vctp8q((uint32_t)(rest - even));
        const int8x16_t e0 = vldrbq_z_s8(x0, live_even), o0 = vldrbq_z_s8(x0 + even, live_odd);
        const int8x16_t e1 = vldrbq_z_s8(x1, live_even), o1 = vldrbq_z_s8(x1 + even, live_odd);
        W4_GROUP(vldrbq_z_u8(w, live_even), e0, o0, e1, o1, a0, a1);
        W4_GROUP(vldrbq_z_u8(v, live_even), e0, o0, e1, o1, b0, b1);
    }
    sums[0] = a0;
    sums[1] = b0;
    sums[2] = a1;
    sums[3] = b1;
}

/* What a sweep of two rows covers: `channels` packed rows from w on, row_bytes apart, K = length, and the
 * two rows' start sums. */
typedef struct {
    const uint8_t *w;
    int32_t row_bytes;
    int32_t channels;
    int32_t length;
    int32_t start[2];
} w4_sweep_args;

/* Rows x0, x1 against every channel pair (an odd last channel alone): out[4 j + i] = row i x channel j of
 * the pair (acc[c][r0..] and acc[c + 1][r0..]). Out of line, the channel loop inside: one call a row pair. */
__attribute__((noinline)) static void w4_sweep(const int8_t *x0, const int8_t *x1, const w4_sweep_args *s, int32_t *out)
{
    const int32_t row_bytes = s->row_bytes, length = s->length, channels = s->channels;
    const uint8_t *w = s->w;
    int32_t c;
    for (c = 0; c < channels; c += 2, w += 2 * row_bytes, out += 2 * MCUBERT_BLOCK_ROWS) {
        const int both = c + 1 < channels;
        int32_t sums[4];
        sums[0] = sums[1] = s->start[0];
        sums[2] = sums[3] = s->start[1];
        w4_pair(x0, x1, w, row_bytes, length, both, sums);
        out[0] = sums[0];
        out[1] = sums[2];
        if (both) {
            out[MCUBERT_BLOCK_ROWS] = sums[1];
            out[MCUBERT_BLOCK_ROWS + 1] = sums[3];
        }
    }
}

void mcubert_gemm_4xn_w4(const mcubert_rows *rows, const int32_t start[MCUBERT_BLOCK_ROWS], const uint8_t *first,
                         int32_t row_bytes, int32_t channels, int32_t acc[][MCUBERT_BLOCK_ROWS])
{
    const int32_t length = rows->length, swept = rows->count > 2 ? 4 : 2;
    const int8_t *copies = (const int8_t *)(const void *)rows->widened;
    const int8_t *x[MCUBERT_BLOCK_ROWS];
    w4_sweep_args s;
    int32_t r;
    for (r = 0; r < MCUBERT_BLOCK_ROWS; ++r) {
        x[r] = copies + mcubert_min_i32(r, rows->count - 1) * length; /* rows >= count repeat the last */
    }
    s.w = first;
    s.row_bytes = row_bytes;
    s.channels = channels;
    s.length = length;
    for (r = 0; r < swept; r += 2) {
        s.start[0] = start[r];
        s.start[1] = start[r + 1];
        w4_sweep(x[r], x[r + 1], &s, acc[0] + r);
    }
}

#else /* !MCUBERT_MVE */

/* K % 8 tail: the last word's nibbles, read in place (its padding nibbles are never used). Out of
 * line, so that its locals are not on the stack under the micro-kernel (the ops' deepest chain). */
#if defined(__GNUC__)
__attribute__((noinline))
#endif
static void
tail_w4(const mcubert_rows *rows, const uint8_t *first, int32_t row_bytes, int32_t channels,
        int32_t acc[][MCUBERT_BLOCK_ROWS])
{
    int32_t c, r, k;
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

void mcubert_gemm_4xn_w4(const mcubert_rows *rows, const int32_t start[MCUBERT_BLOCK_ROWS], const uint8_t *first,
                         int32_t row_bytes, int32_t channels, int32_t acc[][MCUBERT_BLOCK_ROWS])
{
    mcubert_w4_walk walk;
    walk.base = first;
    walk.row_bytes = row_bytes;
    walk.start = start;
    mcubert_dsp_4xn_w4(rows->widened, rows->length >> 3, &walk, channels, acc);
    if ((rows->length & 7) != 0) {
        tail_w4(rows, first, row_bytes, channels, acc);
    }
}
#endif /* MCUBERT_MVE */

#else /* !MCUBERT_DSP */

/* ---- plain C path ---------------------------------------------------------------------- */

/* The plain path computes sum_k x[k] u[k] with the stored nibbles u = w + 8 (no subtraction per
 * weight) from start[r] = -8 * (sum of row r's K values); nothing is widened. */
void mcubert_rows_widen_w4(mcubert_rows *rows, uint32_t *widened, int32_t start[MCUBERT_BLOCK_ROWS])
{
    int32_t r, k;
    (void)widened;
    for (r = 0; r < MCUBERT_BLOCK_ROWS; ++r) {
        int32_t sum = 0;
        for (k = 0; r < rows->count && k < rows->length; ++k) {
            sum += activation_w4(rows, r, k);
        }
        start[r] = -8 * sum;
    }
}

/* sum + x[0] u[k_begin] + ... over K values [k_begin, k_end) of one segment (x at k_begin), the
 * nibbles u of a packed channel row; a byte (two nibbles) per step between the odd ends. */
static int32_t segment_dot_w4(const int8_t *x, int32_t k_begin, int32_t k_end, const uint8_t *row, int32_t sum)
{
    const uint8_t *w = row + (k_begin >> 1);
    const int8_t *pairs_end;
    if (k_begin >= k_end) {
        return sum;
    }
    if ((k_begin & 1) != 0) {
        sum += *x++ * (*w++ >> 4);
        ++k_begin;
    }
    pairs_end = x + ((k_end - k_begin) & ~1);
    while (x != pairs_end) {
        const int32_t byte = *w++;
        sum += x[0] * (byte & 0xF);
        sum += x[1] * (byte >> 4);
        x += 2;
    }
    if (((k_end - k_begin) & 1) != 0) {
        sum += *x * (*w & 0xF);
    }
    return sum;
}

void mcubert_gemm_4xn_w4(const mcubert_rows *rows, const int32_t start[MCUBERT_BLOCK_ROWS], const uint8_t *first,
                         int32_t row_bytes, int32_t channels, int32_t acc[][MCUBERT_BLOCK_ROWS])
{
    const int32_t split = mcubert_min_i32(rows->split, rows->length);
    int32_t c, r;
    for (c = 0; c < channels; ++c) {
        const uint8_t *row = first + c * row_bytes;
        for (r = 0; r < rows->count; ++r) {
            int32_t sum = segment_dot_w4(first_w4(rows, r), 0, split, row, start[r]);
            if (split < rows->length) {
                sum = segment_dot_w4(second_w4(rows, r), split, rows->length, row, sum);
            }
            acc[c][r] = sum;
        }
    }
}

#endif /* MCUBERT_DSP */
