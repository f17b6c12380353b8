/*
 * One function per op of an untiled TFLite graph, on the 1x2x4 vector x matrix kernels of
 * baseline_kernels.h. Requantization is per output, as a per-channel CMSIS-NN kernel does it
 * (multiplier and shift loaded with each output), in the spec's exact rounding.
 */
#include "baseline_kernels.h"

#include <stddef.h>

static inline int8_t fc_output(int32_t acc, const int32_t *ch, int32_t offset)
{
    const mcubert_requant q = mcubert_requant_of(ch[0], ch[1], ch[2]);
    return mcubert_clamp8(mcubert_clamp16_i32(mcubert_requant_apply(acc, &q)) + offset);
}

void baseline_fc_s8(const int8_t *x, int32_t x_stride, int32_t tokens, int32_t k, const int8_t *w,
                    const int32_t *channels, int32_t c_begin, int32_t c_end, int32_t offset, int8_t *out,
                    int32_t row_stride, int32_t col_stride)
{
    int32_t t;
    for (t = 0; t < tokens; ++t, x += x_stride, out += row_stride) {
        int8_t *dst = out;
        int32_t c;
        for (c = c_begin; c + 2 <= c_end; c += 2, dst += 2 * col_stride) {
            int32_t acc0, acc1;
            baseline_dot2_s8(x, w + c * k, w + (c + 1) * k, k, &acc0, &acc1);
            dst[0] = fc_output(acc0, channels + 3 * c, offset);
            dst[col_stride] = fc_output(acc1, channels + 3 * c + 3, offset);
        }
        if (c < c_end) {
            int32_t acc0, acc1;
            baseline_dot2_s8(x, w + c * k, w + c * k, k, &acc0, &acc1);
            dst[0] = fc_output(acc0, channels + 3 * c, offset);
        }
    }
}

void baseline_fc_s32(const int8_t *x, int32_t tokens, int32_t k, int32_t n, const int8_t *w, const int32_t *channels,
                     int32_t *y)
{
    int32_t t;
    for (t = 0; t < tokens; ++t, x += k, y += n) {
        int32_t c;
        for (c = 0; c < n; c += 2) {
            const int32_t *ch = channels + 3 * c;
            const int32_t c1 = c + 1 < n ? c + 1 : c;
            int32_t acc0, acc1;
            mcubert_requant q = mcubert_requant_of(ch[0], ch[1], ch[2]);
            baseline_dot2_s8(x, w + c * k, w + c1 * k, k, &acc0, &acc1);
            y[c] = mcubert_requant_apply(acc0, &q);
            if (c + 1 < n) {
                q = mcubert_requant_of(ch[3], ch[4], ch[5]);
                y[c + 1] = mcubert_requant_apply(acc1, &q);
            }
        }
    }
}

void baseline_lookup(int8_t *x, int32_t count, const int8_t *lut)
{
    int32_t i;
    for (i = 0; i < count; ++i) {
        x[i] = lut[x[i] + 128];
    }
}

void baseline_add(const int32_t *y, const int8_t *x, int32_t tokens, int32_t d, const int32_t *channels, int16_t *z)
{
    int32_t t, c;
    for (t = 0; t < tokens; ++t, y += d, x += d, z += d) {
        for (c = 0; c < d; ++c) {
            const int32_t scale = (int32_t)1 << channels[2 * c + 1];
            /* |residual term| < 2^15: clamping y to +-2^16 first keeps the sum in int32 and changes
             * no int16 result. */
            z[c] = mcubert_clamp16_i32(mcubert_clamp_i32(y[c], -65536, 65536) + (x[c] - channels[2 * c]) * scale);
        }
    }
}

void baseline_layer_norm(const int16_t *z, int32_t tokens, int32_t d, const int32_t *table, int64_t eps, int8_t *out)
{
    int32_t t;
    for (t = 0; t < tokens; ++t) {
        mcubert_layer_norm_s8(z + t * d, d, table, eps, out + t * d);
    }
}

void baseline_scores(const int8_t *q, int32_t q_stride, int32_t rows, const int8_t *k, int32_t k_stride, int32_t keys,
                     int32_t dh, const mcubert_requant *score, int16_t *out, int32_t out_stride)
{
    int32_t i;
    for (i = 0; i < rows; ++i, q += q_stride, out += out_stride) {
        int32_t j;
        for (j = 0; j < keys; j += 2) {
            const int8_t *k0 = k + j * k_stride;
            int32_t acc0, acc1;
            baseline_dot2_s8(q, k0, j + 1 < keys ? k0 + k_stride : k0, dh, &acc0, &acc1);
            out[j] = mcubert_clamp16_i32(mcubert_requant_apply(acc0, score));
            if (j + 1 < keys) {
                out[j + 1] = mcubert_clamp16_i32(mcubert_requant_apply(acc1, score));
            }
        }
    }
}

void baseline_context(const int16_t *e, int32_t e_stride, const int32_t *recip, int32_t rows, const int8_t *vt,
                      int32_t vt_stride, int32_t dh, int32_t keys, const mcubert_requant *context, int8_t *out,
                      int32_t out_stride)
{
    int32_t i;
    for (i = 0; i < rows; ++i, e += e_stride, out += out_stride) {
        int32_t c;
        for (c = 0; c < dh; c += 2) {
            const int8_t *v0 = vt + c * vt_stride;
            int32_t acc0, acc1;
            baseline_dot2_s16(e, v0, c + 1 < dh ? v0 + vt_stride : v0, keys, &acc0, &acc1);
            out[c] = mcubert_clamp8(mcubert_requant_apply(mcubert_weighted_mean(acc0, recip[i]), context));
            if (c + 1 < dh) {
                out[c + 1] = mcubert_clamp8(mcubert_requant_apply(mcubert_weighted_mean(acc1, recip[i]), context));
            }
        }
    }
}

mcubert_keys baseline_keys(const mcubert_attention_params *params, const void *mask)
{
    mcubert_keys keys;
    if (params->mask_mode == 0) {
        keys.mask = (const int8_t *)mask;
        keys.count = params->seq_len;
    } else {
        keys.mask = NULL;
        keys.count = (int32_t)mcubert_read_u32(mask);
    }
    return keys;
}

mcubert_status baseline_check_scratch(const mcubert_context *context, int32_t needed, mcubert_message *message)
{
    if (context == NULL || context->buf == NULL || ((uintptr_t)context->buf & 3u) != 0 || context->size < needed) {
        return mcubert_fail(message, MCUBERT_ERROR_ARGUMENT, "BASELINE", "scratch");
    }
    return MCUBERT_OK;
}
