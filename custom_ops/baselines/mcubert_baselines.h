/*
 * Baselines for the benchmark (bench/kernel_cost.py) and its tests — NOT part of the library.
 *
 * Re-implementations, written for this project from the published descriptions (no code of the
 * originals is copied), of how earlier work runs the same layer on a Cortex-M:
 *
 *   cmsis     CMSIS-NN's strategy inside an untiled TFLite graph: every linear layer and batched
 *             matmul is a per-token vector x matrix product (arm_nn_vec_mat_mult_t_s8 style:
 *             one input row against two weight rows at a time, 4 columns per step, both operands
 *             widened with SXTB16 in the loop: "1x2x4"), each op materialises its output:
 *             Q, K, V; head-major copies of Q and K and the transpose of V; h x s x s scores;
 *             softmax; context; the copy back to token-major; the output projection (int32);
 *             the residual add (int16); LayerNorm. MLP: FC1, the activation table as its own
 *             op, FC2 (int32), add, LayerNorm.
 *   burrello  Burrello et al. 2021's attention schedule: per head, untiled along tokens — Q_j,
 *             K_j, V_j^T of the head, its s x s scores (softmax in place), its columns of a
 *             full s x d context; then the output projection, add and LayerNorm. Same 1x2x4
 *             kernels (the strategy available on Cortex-M; the original targets PULP cores).
 *   flash     FlashAttention-style: Q, K, V^T resident, keys streamed in blocks of `tile`
 *             (params->tile) against query blocks of the same size, an int32 output accumulator
 *             per row with a running maximum and sum, rescaled when the maximum grows; then the
 *             context, output projection, add and LayerNorm. Same 1x2x4 kernels.
 *
 * Numerics: SPEC.md's, so that instruction counts compare like with like. cmsis and burrello
 * produce the reference's bytes exactly (only the schedule and the loop nest differ). flash
 * cannot: its weights are computed against a running maximum and rescaled by
 * exp_lut[rise] / 2^14 when the maximum rises, which rounds differently from the reference's
 * single table lookup against the final maximum (the tests bound the difference). Softmax
 * weights and LayerNorm call the library's own routines in every baseline, so the comparison
 * measures the matmul strategy and the schedule, not those.
 *
 * Linear weights here are row-major int8 [out][in] (the layout those libraries use), not pair4;
 * everything else is as in mcubert_ops.h. Inputs are trusted (no validation): these are
 * measuring instruments. Scratch sizes come from the *_get_buffer_size functions.
 */
#ifndef MCUBERT_BASELINES_H
#define MCUBERT_BASELINES_H

#include <stdint.h>

#include "mcubert/mcubert_ops.h"

/* One linear layer y = clamp8(requantize(x W^T + bias)) on `tokens` rows (channels [out][3]). */
int32_t mcubert_baseline_cmsis_linear_s8(const int8_t *x, int32_t tokens, int32_t in_features, int32_t out_features,
                                         const int8_t *weights, const int32_t *channels, int8_t *y);

/* The same layer through the library's pair4 row-block kernel (4 x 2 x 4 micro-kernel, fused
 * output stage): the "ours" side of the linear-layer comparison. scratch: 8 * in_features bytes,
 * 4-byte aligned (the widened rows). */
int32_t mcubert_bench_linear_s8(const int8_t *x, int32_t tokens, int32_t in_features, int32_t out_features,
                                const int8_t *weights, const int32_t *channels, int8_t *y, void *scratch);

/* Whole ops, same arguments as the library's (weights row-major); return MCUBERT_OK, or
 * MCUBERT_ERROR_ARGUMENT when the scratch is smaller than get_buffer_size(). */
int32_t mcubert_baseline_cmsis_attention_get_buffer_size(int32_t seq_len, int32_t hidden, int32_t heads, int32_t tile);
mcubert_status mcubert_baseline_cmsis_attention_s8(const mcubert_attention_params *params,
                                                   const mcubert_attention_weights *weights, int8_t *hidden,
                                                   const void *mask, const mcubert_context *context,
                                                   mcubert_message *message);

int32_t mcubert_baseline_burrello_attention_get_buffer_size(int32_t seq_len, int32_t hidden, int32_t heads,
                                                            int32_t tile);
mcubert_status mcubert_baseline_burrello_attention_s8(const mcubert_attention_params *params,
                                                      const mcubert_attention_weights *weights, int8_t *hidden,
                                                      const void *mask, const mcubert_context *context,
                                                      mcubert_message *message);

int32_t mcubert_baseline_flash_attention_get_buffer_size(int32_t seq_len, int32_t hidden, int32_t heads, int32_t tile);
mcubert_status mcubert_baseline_flash_attention_s8(const mcubert_attention_params *params,
                                                   const mcubert_attention_weights *weights, int8_t *hidden,
                                                   const void *mask, const mcubert_context *context,
                                                   mcubert_message *message);

/* The MLP of all three (the schedules differ in attention only). */
int32_t mcubert_baseline_cmsis_mlp_get_buffer_size(int32_t seq_len, int32_t hidden, int32_t ffn, int32_t tile);
mcubert_status mcubert_baseline_cmsis_mlp_s8(const mcubert_mlp_params *params, const mcubert_mlp_weights *weights,
                                             int8_t *hidden, const mcubert_context *context, mcubert_message *message);

#endif /* MCUBERT_BASELINES_H */
