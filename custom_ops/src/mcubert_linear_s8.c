/*
 * Output stages of the pair4 linear layers (SPEC 3.1, 3.2): the gemm gives bias-free int32
 * accumulators for one row block and one channel pair; these add the bias, requantize and
 * store in the layout the op wants (rows, transposed, or as the int16 pre-norm sum).
 */
#include <stddef.h>

#include "mcubert_fixed_point.h"
#include "mcubert_internal.h"

/* Bytes between consecutive channel pairs of a pair4 tensor: ceil(K/4) groups of 8. */
static inline int32_t pair_stride(const mcubert_linear *layer)
{
    return ((layer->in_features + 3) >> 2) * 8;
}

void mcubert_linear_to_s8(const mcubert_rows *rows, const mcubert_linear *layer, int32_t c_begin,
                          int32_t c_end, int32_t offset, const int8_t *lut, int8_t *out,
                          int32_t row_stride, int32_t col_stride)
{
    const int32_t stride = pair_stride(layer);
    int32_t pair;
    /* A head's channel range may start or end mid-pair (odd head size): the pair is computed
     * whole and only the channels inside [c_begin, c_end) are stored. */
    for (pair = c_begin >> 1; 2 * pair < c_end; ++pair) {
        int32_t acc[MCUBERT_BLOCK_ROWS][2];
        int32_t j;
        mcubert_gemm_4x2_pair4(rows, layer->weights + pair * stride, acc);
        for (j = 0; j < 2; ++j) {
            const int32_t c = 2 * pair + j;
            const int32_t *ch = layer->channels + 3 * c;
            int8_t *dst = out + (c - c_begin) * col_stride;
            int32_t r;
            if (c < c_begin || c >= c_end) {
                continue;
            }
            for (r = 0; r < rows->count; ++r) {
                const int32_t y = mcubert_requantize(acc[r][j] + ch[0], ch[1], ch[2]);
                /* clamp16 first: y + offset cannot overflow, and the int8 clamp is unchanged. */
                const int8_t q = mcubert_clamp8(mcubert_clamp16(y) + offset);
                dst[r * row_stride] = lut != NULL ? lut[q + 128] : q;
            }
        }
    }
}

void mcubert_linear_residual_to_s16(const mcubert_rows *rows, const mcubert_linear *layer,
                                    const int8_t *residual, int32_t zero_point, int32_t shift,
                                    int16_t *z)
{
    const int32_t n = layer->out_features;
    const int32_t stride = pair_stride(layer);
    const int32_t scale = (int32_t)1 << shift; /* (x - zp) << R, written without shifting negatives */
    int32_t pair;
    for (pair = 0; 2 * pair < n; ++pair) {
        int32_t acc[MCUBERT_BLOCK_ROWS][2];
        int32_t j;
        mcubert_gemm_4x2_pair4(rows, layer->weights + pair * stride, acc);
        for (j = 0; j < 2 && 2 * pair + j < n; ++j) {
            const int32_t c = 2 * pair + j;
            const int32_t *ch = layer->channels + 3 * c;
            int32_t r;
            for (r = 0; r < rows->count; ++r) {
                const int32_t y = mcubert_requantize(acc[r][j] + ch[0], ch[1], ch[2]);
                const int32_t res = (residual[r * n + c] - zero_point) * scale; /* |res| < 2^15 */
                z[r * n + c] = mcubert_clamp16((int64_t)y + res);
            }
        }
    }
}
