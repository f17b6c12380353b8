/*
 * The kernels the baselines share (mcubert_baselines.h): CMSIS-NN's vector x matrix strategy,
 * re-implemented, and one function per op of an untiled TFLite graph.
 *
 * 1x2x4: one lhs row against two rhs rows, 4 columns per step. Per step the lhs word is
 * sign-extended (SXTB16, SXTB16 ROR 8) and so is each rhs word — 3 loads, 6 SXTB16 and 4 SMLADs
 * for 8 MACs; nothing is reused across lhs rows (each token is its own vector x matrix call).
 * With an int16 lhs (softmax weights) the rhs word is widened and reordered into (w0, w1),
 * (w2, w3) (SXTB16 x2 + PKHBT + PKHTB) to match the lhs pairs, as CMSIS-NN's s16 kernels do.
 */
#ifndef MCUBERT_BASELINE_KERNELS_H
#define MCUBERT_BASELINE_KERNELS_H

#include <stdint.h>

#include "mcubert_dsp.h"
#include "mcubert_fixed_point.h"
#include "mcubert_internal.h"

#if !MCUBERT_DSP
#error "the baselines are written for the DSP path (Cortex-M4/M7)"
#endif

/* acc0, acc1 = lhs . rhs0, lhs . rhs1 over k int8 columns. */
static inline void baseline_dot2_s8(const int8_t *lhs, const int8_t *rhs0, const int8_t *rhs1, int32_t k, int32_t *acc0,
                                    int32_t *acc1)
{
    int32_t a0 = 0, a1 = 0, j;
    for (j = k >> 2; j != 0; --j) {
        const uint32_t v = mcubert_read_u32(lhs);
        const uint32_t v_odd = mcubert_sxtb16_ror8(v), v_even = mcubert_sxtb16(v);
        uint32_t w = mcubert_read_u32(rhs0);
        a0 = mcubert_smlad(mcubert_sxtb16_ror8(w), v_odd, a0);
        a0 = mcubert_smlad(mcubert_sxtb16(w), v_even, a0);
        w = mcubert_read_u32(rhs1);
        a1 = mcubert_smlad(mcubert_sxtb16_ror8(w), v_odd, a1);
        a1 = mcubert_smlad(mcubert_sxtb16(w), v_even, a1);
        lhs += 4;
        rhs0 += 4;
        rhs1 += 4;
    }
    for (j = k & 3; j != 0; --j) {
        a0 += *lhs * *rhs0++;
        a1 += *lhs++ * *rhs1++;
    }
    *acc0 = a0;
    *acc1 = a1;
}

/* acc0, acc1 = lhs . rhs0, lhs . rhs1 for an int16 lhs and int8 rhs rows. */
static inline void baseline_dot2_s16(const int16_t *lhs, const int8_t *rhs0, const int8_t *rhs1, int32_t k,
                                     int32_t *acc0, int32_t *acc1)
{
    int32_t a0 = 0, a1 = 0, j;
    for (j = k >> 2; j != 0; --j) {
        const uint32_t x01 = mcubert_read_u32(lhs), x23 = mcubert_read_u32(lhs + 2);
        uint32_t w = mcubert_read_u32(rhs0);
        uint32_t odd = mcubert_sxtb16_ror8(w), even = mcubert_sxtb16(w);
        a0 = mcubert_smlad(mcubert_pack_low_halves(even, odd), x01, a0);  /* (w0, w1) */
        a0 = mcubert_smlad(mcubert_pack_high_halves(even, odd), x23, a0); /* (w2, w3) */
        w = mcubert_read_u32(rhs1);
        odd = mcubert_sxtb16_ror8(w);
        even = mcubert_sxtb16(w);
        a1 = mcubert_smlad(mcubert_pack_low_halves(even, odd), x01, a1);
        a1 = mcubert_smlad(mcubert_pack_high_halves(even, odd), x23, a1);
        lhs += 4;
        rhs0 += 4;
        rhs1 += 4;
    }
    for (j = k & 3; j != 0; --j) {
        a0 += *lhs * *rhs0++;
        a1 += *lhs++ * *rhs1++;
    }
    *acc0 = a0;
    *acc1 = a1;
}

/* Fully connected, int8 out: for t < tokens and c in [c_begin, c_end),
 *   out[t * row_stride + (c - c_begin) * col_stride] = clamp8(clamp16(requantize(x_t . w_c + bias_c)) + offset)
 * x rows x + t * x_stride (k values), w row-major [.][k], channels [.][3]. */
void baseline_fc_s8(const int8_t *x, int32_t x_stride, int32_t tokens, int32_t k, const int8_t *w,
                    const int32_t *channels, int32_t c_begin, int32_t c_end, int32_t offset, int8_t *out,
                    int32_t row_stride, int32_t col_stride);

/* Fully connected, int32 out (requantized and saturated): y[t * n + c], all n channels. */
void baseline_fc_s32(const int8_t *x, int32_t tokens, int32_t k, int32_t n, const int8_t *w, const int32_t *channels,
                     int32_t *y);

/* The table op: x[i] = lut[x[i] + 128], in place. */
void baseline_lookup(int8_t *x, int32_t count, const int8_t *lut);

/* The add op over `tokens` rows of d: z[i] = clamp16(y[i] + (x[i] - zp_c) 2^shift_c) (SPEC 3.2),
 * c = i mod d, `channels` [d][2] = (zp_c, shift_c). */
void baseline_add(const int32_t *y, const int8_t *x, int32_t tokens, int32_t d, const int32_t *channels, int16_t *z);

/* The LayerNorm op on `tokens` rows of d (the library's routine). */
void baseline_layer_norm(const int16_t *z, int32_t tokens, int32_t d, const int32_t *table, int64_t eps, int8_t *out);

/* Batched matmul for scores: out[i * out_stride + j] = clamp16(requantize(q_i . k_j)) for
 * i < rows, j < keys; q_i = q + i * q_stride, k_j = k + j * k_stride (dh values each). */
void baseline_scores(const int8_t *q, int32_t q_stride, int32_t rows, const int8_t *k, int32_t k_stride, int32_t keys,
                     int32_t dh, const mcubert_requant *score, int16_t *out, int32_t out_stride);

/* Batched matmul for the context: out[i * out_stride + c] = clamp8(requantize(mean)) with
 * mean = rsh((e_i . vt_c) recip_i, 28), e_i = e + i * e_stride (keys values), vt_c = vt + c * vt_stride. */
void baseline_context(const int16_t *e, int32_t e_stride, const int32_t *recip, int32_t rows, const int8_t *vt,
                      int32_t vt_stride, int32_t dh, int32_t keys, const mcubert_requant *context, int8_t *out,
                      int32_t out_stride);

/* The key set of a call, as the library builds it (mask mode 0: the int8 mask; 1: a length). */
mcubert_keys baseline_keys(const mcubert_attention_params *params, const void *mask);

/* Scratch check shared by the baselines' entry points. */
mcubert_status baseline_check_scratch(const mcubert_context *context, int32_t needed, mcubert_message *message);

#endif /* MCUBERT_BASELINE_KERNELS_H */
