/*
 * Output stages of the linear layers (SPEC 3.1, 3.2): the gemm gives bias-free int32 accumulators
 * for one row block and one chunk of channels — the pair4 gemm for int8 weights, the W4 gemm for
 * int4 ones (SPEC 3.1.1: the same integers) — and these add the bias, requantize and store in the
 * layout the op wants (rows, transposed, or as the int16 pre-norm sum).
 *
 * Each channel's bias and requantization constants are loaded and prepared once per row block
 * (mcubert_requant_of), then applied to its (up to) four rows; the common case — shift <= -1 —
 * is MLA + SMMLA + ASR + saturate per value (see mcubert_fixed_point.h for why it is exact).
 */
#include <stddef.h>

#include "mcubert_fixed_point.h"
#include "mcubert_gemm_s4.h"
#include "mcubert_internal.h"

#if MCUBERT_MVE
#include <arm_mve.h>
#endif

/* Bytes between consecutive channel pairs of a pair4 tensor: ceil(K/4) groups of 8. */
static inline int32_t pair_stride(const mcubert_linear *layer)
{
    return ((layer->in_features + 3) >> 2) * 8;
}

void mcubert_linear_widen(mcubert_rows *rows, const mcubert_linear *layer, uint32_t *widened)
{
    if (layer->weight_bits == 4) {
        mcubert_rows_widen_w4(rows, widened, rows->w4_start);
    } else {
        mcubert_rows_widen_pair4(rows, widened);
    }
}

/* The first channel of the chunk that holds channel c: pair4 chunks start on a pair (a head's
 * channel range may start mid-pair, odd head size: the pair is computed whole and only the
 * channels inside the range stored); w4row channels are independent rows. */
static inline int32_t chunk_start(const mcubert_linear *layer, int32_t c)
{
    return layer->weight_bits == 4 ? c : c & ~1;
}

/* acc[j][r] of channels [first, first + n) for the row block (widened by mcubert_linear_widen). */
static void gemm_chunk(const mcubert_rows *rows, const mcubert_linear *layer, int32_t first, int32_t n,
                       int32_t acc[][MCUBERT_BLOCK_ROWS])
{
    if (layer->weight_bits == 4) {
        const int32_t row_bytes = mcubert_w4_row_bytes(layer->in_features);
        mcubert_gemm_4xn_w4(rows, rows->w4_start, (const uint8_t *)layer->weights + first * row_bytes, row_bytes, n,
                            acc);
    } else {
        const int32_t stride = pair_stride(layer);
        mcubert_gemm_4xn_pair4(rows, layer->weights + (first >> 1) * stride, stride, n, acc);
    }
}

/* One channel's outputs for rows [0, count), any requantization: dst[r * row_stride] = lut or
 * identity of clamp8(clamp16(requantize(acc[r] + bias)) + offset), ch = (bias, M, shift).
 * Out of line: the fast case below covers every full block of a realistic layer. */
MCUBERT_NOINLINE static void store_channel_s8(const int32_t *acc, int32_t count, const int32_t *ch, int32_t offset,
                                              const int8_t *lut, int8_t *dst, int32_t row_stride)
{
    int32_t r;
    for (r = 0; r < count; ++r) {
        const int8_t v = mcubert_clamp8(mcubert_clamp16_i32(mcubert_requantize(acc[r] + ch[0], ch[1], ch[2])) + offset);
        dst[r * row_stride] = lut != NULL ? lut[v + 128] : v;
    }
}

/* Where and how a channel's int8 outputs go (mcubert_linear_to_s8's arguments, gathered so the
 * output stage below takes few register arguments). */
typedef struct {
    int32_t offset;
    int32_t row_stride;
    int32_t col_stride;
    const int8_t *lut;
} output_s8;

/* The pre-norm sum's residual input and int16 output (mcubert_linear_residual_to_s16's). */
typedef struct {
    const int8_t *residual;  /* [rows][n] */
    int16_t *z;              /* [rows][n] */
    int32_t stride;          /* n = out_features */
    const int32_t *channels; /* [n][2]: zero point, shift R_c */
    int32_t acc_limit;       /* |acc| bound of the layer: K 128 128 (int8), K 128 8 (int4 nibbles) */
} output_s16;

#if MCUBERT_MVE
/* The MVE path's fast stage: the DSP path's (store_channel_s8_fast, whose conditions make it
 * exact: shift <= -2, |bias| <= 2^29), on four values at once: VADD of the bias, VMULH (SMMLA's
 * product high word, floored), VADD of the rounding and offset term, then the right shift by n and
 * SSAT's int8 clamp as two shifts: VQSHL by 24 - n (saturating: the result is out of int8 exactly
 * when it saturates) and VSHR by 24 (n <= 22, so 24 - n > 0). Then the table by a byte gather. */
static inline int32x4_t requantize_fast(int32x4_t acc, int32x4_t bias, int32x4_t multiplier, int32x4_t addend,
                                        int32x4_t left, const int8_t *lut)
{
    int32x4_t y = vaddq_s32(vmulhq_s32(vaddq_s32(acc, bias), multiplier), addend);
    y = vshrq_n_s32(vqshlq_s32(y, left), 24);
    if (lut != NULL) {
        y = vldrbq_gather_offset_s32(lut, vreinterpretq_u32_s32(vaddq_n_s32(y, 128)));
    }
    return y;
}

/* A full block of four channels (acc[0..3], ch[0..11]) when all four take the fast stage (else 0,
 * nothing stored): per row, a gather of the four channels' accumulators, requantize_fast and the
 * row's four outputs (one narrowing store when they are consecutive, else a byte scatter); the
 * channel constants are gathered once. Out of line: its constants then stay within its loop. */
MCUBERT_NOINLINE static int store_four_channels(const int32_t (*acc)[MCUBERT_BLOCK_ROWS], const int32_t *ch,
                                                const output_s8 *o, int8_t *dst)
{
    const uint32x4_t triples = vmulq_n_u32(vidupq_n_u32(0u, 1), 3 * sizeof(int32_t));
    const int32x4_t bias = vldrwq_gather_offset_s32(ch, triples), shift = vldrwq_gather_offset_s32(ch + 2, triples);
    /* shift in [-23, -2] and |bias| <= 2^29, as unsigned ranges: shift + 23 <= 21, bias + 2^29 <= 2^30 */
    if (vmaxvq_u32(0u, vreinterpretq_u32_s32(vaddq_n_s32(shift, 23))) > 21u ||
        vmaxvq_u32(0u, vreinterpretq_u32_s32(vaddq_n_s32(bias, (int32_t)1 << 29))) > ((uint32_t)1 << 30)) {
        return 0;
    }
    {
        const uint32x4_t rows = vmulq_n_u32(vidupq_n_u32(0u, 1), MCUBERT_BLOCK_ROWS * sizeof(int32_t));
        const int32_t row_stride = o->row_stride, col_stride = o->col_stride; /* the stores could alias *o */
        const int8_t *lut = o->lut;
        const int32x4_t multiplier = vldrwq_gather_offset_s32(ch + 1, triples);
        /* n = -1 - shift: 2^(n-1) + offset 2^n = (2 offset + 1) 2^(n-1); 24 - n = shift + 25 */
        const int32x4_t addend = vshlq_s32(vdupq_n_s32(2 * o->offset + 1), vsubq_s32(vdupq_n_s32(-2), shift));
        const int32x4_t left = vaddq_n_s32(shift, 25);
        int32_t r;
        if (lut == NULL && col_stride == 1) { /* the common case, its own loop */
            for (r = 0; r < MCUBERT_BLOCK_ROWS; ++r, dst += row_stride) {
                vstrbq_s32(dst, requantize_fast(vldrwq_gather_offset_s32(acc[0] + r, rows), bias, multiplier, addend,
                                                left, NULL));
            }
            return 1;
        }
        for (r = 0; r < MCUBERT_BLOCK_ROWS; ++r, dst += row_stride) {
            vstrbq_scatter_offset_s32(
                dst, vmulq_n_u32(vidupq_n_u32(0u, 1), (uint32_t)col_stride),
                requantize_fast(vldrwq_gather_offset_s32(acc[0] + r, rows), bias, multiplier, addend, left, lut));
        }
    }
    return 1;
}

/* One channel of a full block through the fast stage, its four rows as one vector; 0 when the
 * channel does not allow it. */
static int store_channel_s8_fast(const int32_t *acc, const int32_t *ch, const output_s8 *o, int8_t *dst)
{
    const int32_t bias = ch[0], n = -1 - ch[2];
    if (n < 1 || n > 22 || bias < -((int32_t)1 << 29) || bias > ((int32_t)1 << 29)) {
        return 0;
    }
    vstrbq_scatter_offset_s32(dst, vmulq_n_u32(vidupq_n_u32(0u, 1), (uint32_t)o->row_stride),
                              requantize_fast(vldrwq_s32(acc), vdupq_n_s32(bias), vdupq_n_s32(ch[1]),
                                              vdupq_n_s32(((int32_t)1 << (n - 1)) + o->offset * ((int32_t)1 << n)),
                                              vdupq_n_s32(24 - n), o->lut));
    return 1;
}

/* Channels [begin, end) of a chunk (as the DSP path's): four at a time while they last and all
 * take the fast stage, else one by one. */
MCUBERT_NOINLINE static void store_chunk_s8(const int32_t (*acc)[MCUBERT_BLOCK_ROWS], int32_t begin, int32_t end,
                                            int32_t count, const int32_t *ch, const output_s8 *o, int8_t *dst)
{
    const int32_t col_stride = o->col_stride;
    int32_t j = begin;
    dst += begin * col_stride;
    while (j < end) {
        if (count == MCUBERT_BLOCK_ROWS && end - j >= 4 && store_four_channels(acc + j, ch + 3 * j, o, dst)) {
            j += 4;
            dst += 4 * col_stride;
            continue;
        }
        if (count != MCUBERT_BLOCK_ROWS || !store_channel_s8_fast(acc[j], ch + 3 * j, o, dst)) {
            store_channel_s8(acc[j], count, ch + 3 * j, o->offset, o->lut, dst, o->row_stride);
        }
        ++j;
        dst += col_stride;
    }
}
#else
/* One channel of a full block through the fast stage, when the channel allows it; returns 0
 * (storing nothing) when not. The fast stage needs shift <= -2 (shift -1, which needs the
 * doubled accumulator, is rare in these layers and goes the generic way) and folds the output
 * offset into SMMLA's addend — (v >> n) + offset = (v + offset 2^n) >> n for flooring shifts —
 * which |bias| <= 2^29 and n = -1 - shift <= 22 keep inside int32 (|acc| < 2^26, M < 2^31).
 * Realistic layers meet all three. Per value: ADD, SMMLA, ASR, SSAT (and the table) and the
 * store; |y| < 2^30, so the clamp16 before the offset cannot change the int8 result and is
 * skipped. Out of line with four register arguments: inlined into the channel loop, it leaves
 * GCC too few registers for the four rows. */
MCUBERT_NOINLINE static int store_channel_s8_fast(const int32_t *acc, const int32_t *ch, const output_s8 *o,
                                                  int8_t *dst)
{
    const int32_t bias = ch[0], multiplier = ch[1], shift = -1 - ch[2];
    const int32_t stride = o->row_stride;
    const int8_t *lut = o->lut;
    int32_t addend, y0, y1, y2, y3;
    if (shift < 1 || shift > 22 || bias < -((int32_t)1 << 29) || bias > ((int32_t)1 << 29)) {
        return 0;
    }
    addend = ((int32_t)1 << (shift - 1)) + o->offset * ((int32_t)1 << shift);
    y0 = mcubert_sat8(mcubert_mul_high_add(acc[0] + bias, multiplier, addend) >> shift);
    y1 = mcubert_sat8(mcubert_mul_high_add(acc[1] + bias, multiplier, addend) >> shift);
    y2 = mcubert_sat8(mcubert_mul_high_add(acc[2] + bias, multiplier, addend) >> shift);
    y3 = mcubert_sat8(mcubert_mul_high_add(acc[3] + bias, multiplier, addend) >> shift);
    if (lut != NULL) {
        lut += 128;
        dst[0] = lut[y0];
        dst[stride] = lut[y1];
        dst += 2 * stride;
        dst[0] = lut[y2];
        dst[stride] = lut[y3];
    } else {
        dst[0] = (int8_t)y0;
        dst[stride] = (int8_t)y1;
        dst += 2 * stride;
        dst[0] = (int8_t)y2;
        dst[stride] = (int8_t)y3;
    }
    return 1;
}

/* Channels [begin, end) of a chunk: acc[j] and ch + 3 j belong to the chunk's channel j, whose
 * outputs start at dst + j * col_stride. */
MCUBERT_NOINLINE static void store_chunk_s8(const int32_t (*acc)[MCUBERT_BLOCK_ROWS], int32_t begin, int32_t end,
                                            int32_t count, const int32_t *ch, const output_s8 *o, int8_t *dst)
{
    const int32_t col_stride = o->col_stride;
    int32_t j;
    dst += begin * col_stride;
    for (j = begin; j < end; ++j, dst += col_stride) {
        const int32_t *cj = ch + 3 * j;
        if (count != MCUBERT_BLOCK_ROWS || !store_channel_s8_fast(acc[j], cj, o, dst)) {
            store_channel_s8(acc[j], count, cj, o->offset, o->lut, dst, o->row_stride);
        }
    }
}

#endif /* MCUBERT_MVE */

#if MCUBERT_MVE
/* Channels per chunk of mcubert_linear_to_s8: on the MVE path, whose pair4 gemm takes any count, 16
 * for int8 weights (each chunk's calls cost as much as a few channels' work there), 128 B more stack. */
#define TO_S8_CHUNK (2 * MCUBERT_CHUNK_CHANNELS)
static inline int32_t to_s8_chunk(const mcubert_linear *layer)
{
    return layer->weight_bits == 4 ? MCUBERT_CHUNK_CHANNELS : TO_S8_CHUNK;
}
#else
#define TO_S8_CHUNK MCUBERT_CHUNK_CHANNELS
#define to_s8_chunk(layer) MCUBERT_CHUNK_CHANNELS
#endif

void mcubert_linear_to_s8(const mcubert_rows *rows, const mcubert_linear *layer, int32_t c_begin, int32_t c_end,
                          int32_t offset, const int8_t *lut, int8_t *out, int32_t row_stride, int32_t col_stride)
{
    output_s8 o;
    int32_t c = c_begin;
    o.offset = offset;
    o.row_stride = row_stride;
    o.col_stride = col_stride;
    o.lut = lut;
    while (c < c_end) {
        const int32_t first = chunk_start(layer, c);
        const int32_t n = mcubert_min_i32(to_s8_chunk(layer), c_end - first);
        int32_t acc[TO_S8_CHUNK][MCUBERT_BLOCK_ROWS];
        gemm_chunk(rows, layer, first, n, acc);
        store_chunk_s8((const int32_t(*)[MCUBERT_BLOCK_ROWS])acc, c - first, n, rows->count,
                       layer->channels + 3 * first, &o, out + (first - c_begin) * col_stride);
        c = first + n;
    }
}

#if MCUBERT_MVE
/* Channel c of a full block, fast requantization, on MVE: the DSP path's stage below (same
 * conditions, same integers) with the four rows as one vector — the residual bytes gathered, the
 * int16 clamp as a saturating VQSHL by 16 and VSHR by 16, the outputs scattered. */
MCUBERT_NOINLINE static void store_channel_residual_fast(const int32_t *acc, const int32_t *ch, const output_s16 *o,
                                                         int32_t c)
{
    const mcubert_requant q = mcubert_requant_of_within(ch[0], ch[1], ch[2], o->acc_limit);
    const uint32x4_t rows = vmulq_n_u32(vidupq_n_u32(0u, 1), (uint32_t)o->stride); /* elements r n */
    const int32x4_t x = vldrbq_gather_offset_s32(o->residual + c, rows);
    const int32x4_t residual = vmulq_n_s32(vsubq_n_s32(x, o->channels[2 * c]), (int32_t)1 << o->channels[2 * c + 1]);
    int32x4_t y = vaddq_n_s32(vmulq_n_s32(vldrwq_s32(acc), q.scale), q.bias);
    y = vshlq_r_s32(vaddq_n_s32(vmulhq_s32(y, vdupq_n_s32(q.multiplier)), q.round), -q.shift);
    y = vshrq_n_s32(vqshlq_n_s32(vaddq_s32(y, residual), 16), 16);
    vstrhq_scatter_shifted_offset_s32(o->z + c, rows, y);
}
#else
/* Channel c of a full block, fast requantization (shift <= -1: output projections often have
 * -1, their target being the finer pre-norm scale; shifts >= 0 of int4 layers within the
 * accumulator bound): z[r][c] = clamp16(y_r + residual term); |y| < 2^30 and
 * |(x - zp) << R| < 2^15, so the int32 sum is exact. */
MCUBERT_NOINLINE static void store_channel_residual_fast(const int32_t *acc, const int32_t *ch, const output_s16 *o,
                                                         int32_t c)
{
    const mcubert_requant requant = mcubert_requant_of_within(ch[0], ch[1], ch[2], o->acc_limit);
    const mcubert_requant *q = &requant;
    const int32_t n = o->stride;
    const int32_t zero_point = o->channels[2 * c];
    const int32_t scale = (int32_t)1 << o->channels[2 * c + 1]; /* (x - zp) << R, no negative shift */
    const int8_t *x = o->residual + c;
    int16_t *z = o->z + c;
    const int32_t y0 = mcubert_requant_fast(acc[0], q);
    const int32_t y1 = mcubert_requant_fast(acc[1], q);
    const int32_t y2 = mcubert_requant_fast(acc[2], q);
    const int32_t y3 = mcubert_requant_fast(acc[3], q);
    z[0] = mcubert_clamp16_i32(y0 + (x[0] - zero_point) * scale);
    z[n] = mcubert_clamp16_i32(y1 + (x[n] - zero_point) * scale);
    x += 2 * n;
    z += 2 * n;
    z[0] = mcubert_clamp16_i32(y2 + (x[0] - zero_point) * scale);
    z[n] = mcubert_clamp16_i32(y3 + (x[n] - zero_point) * scale);
}
#endif /* MCUBERT_MVE */

/* Any requantization, rows [0, count): the same sum with y saturated to int32 (SPEC 3.2). */
MCUBERT_NOINLINE static void store_channel_residual(const int32_t *acc, int32_t count, const int32_t *ch,
                                                    const output_s16 *o, int32_t c)
{
    const int32_t zero_point = o->channels[2 * c];
    const int32_t scale = (int32_t)1 << o->channels[2 * c + 1];
    int32_t r;
    for (r = 0; r < count; ++r) {
        const int32_t y = mcubert_requantize(acc[r] + ch[0], ch[1], ch[2]);
        const int32_t res = (o->residual[r * o->stride + c] - zero_point) * scale; /* |res| < 2^15 */
        o->z[r * o->stride + c] = mcubert_clamp16((int64_t)y + res);
    }
}

/* Channels [c, c + n) of one chunk (acc[j] is channel c + j), fast or generic per channel. */
static void store_chunk_residual(const int32_t (*acc)[MCUBERT_BLOCK_ROWS], int32_t c, int32_t n, int32_t count,
                                 const int32_t *ch, const output_s16 *o)
{
    int32_t j;
    for (j = 0; j < n; ++j, ch += 3) {
        if (count == MCUBERT_BLOCK_ROWS &&
            (mcubert_requant_fast_ok(ch[0], ch[2]) || mcubert_requant_fast_ok_within(ch[0], ch[2], o->acc_limit))) {
            store_channel_residual_fast(acc[j], ch, o, c + j);
        } else {
            store_channel_residual(acc[j], count, ch, o, c + j);
        }
    }
}

void mcubert_linear_residual_to_s16(const mcubert_rows *rows, const mcubert_linear *layer, const int8_t *residual,
                                    const int32_t *channels, int16_t *z)
{
    const int32_t n = layer->out_features;
    output_s16 o;
    int32_t c;
    o.residual = residual;
    o.z = z;
    o.stride = n;
    o.channels = channels;
    o.acc_limit = layer->in_features * 128 * (layer->weight_bits == 4 ? 8 : 128); /* K <= 4096: < 2^27 */
    for (c = 0; c < n; c += MCUBERT_CHUNK_CHANNELS) {
        const int32_t chunk = mcubert_min_i32(MCUBERT_CHUNK_CHANNELS, n - c);
        int32_t acc[MCUBERT_CHUNK_CHANNELS][MCUBERT_BLOCK_ROWS];
        gemm_chunk(rows, layer, c, chunk, acc);
        store_chunk_residual((const int32_t(*)[MCUBERT_BLOCK_ROWS])acc, c, chunk, rows->count, layer->channels + 3 * c,
                             &o);
    }
}
