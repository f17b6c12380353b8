/*
 * Output stages of the pair4 linear layers (SPEC 3.1, 3.2): the gemm gives bias-free int32
 * accumulators for one row block and one channel pair; these add the bias, requantize and
 * store in the layout the op wants (rows, transposed, or as the int16 pre-norm sum).
 *
 * Each channel's bias and requantization constants are loaded and prepared once per row block
 * (mcubert_requant_of), then applied to its (up to) four rows; the common case — shift <= -1 —
 * is MLA + SMMLA + ASR + saturate per value (see mcubert_fixed_point.h for why it is exact).
 */
#include <stddef.h>

#include "mcubert_fixed_point.h"
#include "mcubert_internal.h"

/* Bytes between consecutive channel pairs of a pair4 tensor: ceil(K/4) groups of 8. */
static inline int32_t pair_stride(const mcubert_linear *layer)
{
    return ((layer->in_features + 3) >> 2) * 8;
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
 * per-channel stage below takes four register arguments). */
typedef struct {
    int32_t offset;
    int32_t row_stride;
    const int8_t *lut;
} output_s8;

/* The pre-norm sum's residual input and int16 output (mcubert_linear_residual_to_s16's). */
typedef struct {
    const int8_t *residual;  /* [rows][n] */
    int16_t *z;              /* [rows][n] */
    int32_t stride;          /* n = out_features */
    const int32_t *channels; /* [n][2]: zero point, shift R_c */
} output_s16;

/* One channel of a full block, fast requantization with shift <= -2 (shift -1, which needs the
 * doubled accumulator, is rare in these layers and goes the generic way): |y| < 2^30, so the
 * clamp16 before adding the offset cannot change the int8 result and is skipped. Out of line with few
 * arguments: inlined, it leaves GCC too few registers for the four rows. */
MCUBERT_NOINLINE static void store_channel_s8_fast(const int32_t *acc, const int32_t *ch, const output_s8 *o,
                                                   int8_t *dst)
{
    const mcubert_requant q = mcubert_requant_of_shift2(ch[0], ch[1], ch[2]);
    const int32_t offset = o->offset;
    const int32_t stride = o->row_stride;
    const int8_t *lut = o->lut;
    const int32_t y0 = mcubert_sat8(mcubert_requant_fast(acc[0], &q) + offset);
    const int32_t y1 = mcubert_sat8(mcubert_requant_fast(acc[1], &q) + offset);
    const int32_t y2 = mcubert_sat8(mcubert_requant_fast(acc[2], &q) + offset);
    const int32_t y3 = mcubert_sat8(mcubert_requant_fast(acc[3], &q) + offset);
    if (lut != NULL) {
        dst[0] = lut[y0 + 128];
        dst[stride] = lut[y1 + 128];
        dst += 2 * stride;
        dst[0] = lut[y2 + 128];
        dst[stride] = lut[y3 + 128];
    } else {
        dst[0] = (int8_t)y0;
        dst[stride] = (int8_t)y1;
        dst += 2 * stride;
        dst[0] = (int8_t)y2;
        dst[stride] = (int8_t)y3;
    }
}

void mcubert_linear_to_s8(const mcubert_rows *rows, const mcubert_linear *layer, int32_t c_begin, int32_t c_end,
                          int32_t offset, const int8_t *lut, int8_t *out, int32_t row_stride, int32_t col_stride)
{
    const int32_t stride = pair_stride(layer);
    const int32_t count = rows->count;
    const int32_t *channels = layer->channels;
    output_s8 o;
    int32_t c = c_begin;
    o.offset = offset;
    o.row_stride = row_stride;
    o.lut = lut;
    /* A head's channel range may start or end mid-pair (odd head size): the pair is computed
     * whole and only the channels inside [c_begin, c_end) are stored. */
    while (c < c_end) {
        const int32_t pair = c >> 1;
        const int32_t *ch = channels + 3 * c;
        int8_t *dst = out + (c - c_begin) * col_stride;
        int32_t acc[2][MCUBERT_BLOCK_ROWS];
        mcubert_gemm_4x2_pair4(rows, layer->weights + pair * stride, acc);
        if ((c & 1) == 0 && c + 1 < c_end && count == MCUBERT_BLOCK_ROWS && ch[2] <= -2 && ch[5] <= -2) {
            store_channel_s8_fast(acc[0], ch, &o, dst);
            store_channel_s8_fast(acc[1], ch + 3, &o, dst + col_stride);
            c += 2;
            continue;
        }
        for (; c < c_end && c <= 2 * pair + 1; ++c, ch += 3, dst += col_stride) {
            store_channel_s8(acc[c & 1], count, ch, offset, lut, dst, row_stride);
        }
    }
}

/* Channel c of a full block, fast requantization (shift <= -1: output projections often have
 * -1, their target being the finer pre-norm scale): z[r][c] = clamp16(y_r + residual term);
 * |y| < 2^30 and |(x - zp) << R| < 2^15, so the int32 sum is exact. Straight-line, four rows. */
MCUBERT_NOINLINE static void store_channel_residual_fast(const int32_t *acc, const int32_t *ch, const output_s16 *o,
                                                         int32_t c)
{
    const mcubert_requant requant = mcubert_requant_of(ch[0], ch[1], ch[2]);
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

void mcubert_linear_residual_to_s16(const mcubert_rows *rows, const mcubert_linear *layer, const int8_t *residual,
                                    const int32_t *channels, int16_t *z)
{
    const int32_t n = layer->out_features;
    const int32_t stride = pair_stride(layer);
    const int32_t count = rows->count;
    const int32_t *ch = layer->channels;
    output_s16 o;
    int32_t c;
    o.residual = residual;
    o.z = z;
    o.stride = n;
    o.channels = channels;
    for (c = 0; c < n; c += 2, ch += 6) {
        int32_t acc[2][MCUBERT_BLOCK_ROWS];
        int32_t j;
        mcubert_gemm_4x2_pair4(rows, layer->weights + (c >> 1) * stride, acc);
        for (j = 0; j < 2 && c + j < n; ++j) {
            if (count == MCUBERT_BLOCK_ROWS && mcubert_requant_fast_ok(ch[3 * j], ch[3 * j + 2])) {
                store_channel_residual_fast(acc[j], ch + 3 * j, &o, c + j);
            } else {
                store_channel_residual(acc[j], count, ch + 3 * j, &o, c + j);
            }
        }
    }
}
