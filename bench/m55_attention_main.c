/*
 * Bench firmware for bench/m55_attention.py (QEMU mps3-an547, Cortex-M55): the attention's two batched
 * products for one layer of HEADS heads, S tokens, head size DH, as MCUBERT_ATTENTION runs them (tiles of
 * 4 query rows, widened once per block, then every key chunk / value chunk through mcubert_gemm_4xn_rows)
 * on pseudo-random data, on whichever path the library was built with (DSP or MVE):
 *
 *   scores:  QK^T, int8 query rows against int8 key rows, then the int16 scores (requantized, clamped);
 *   context: P.V, int16 softmax weights against int8 value_t rows, then the weighted mean (one
 *            reciprocal per row) requantized to int8.
 *
 * Each product is measured twice: the gemm alone (widening + micro-kernel, accumulators discarded) and
 * with the output stage. Instructions are read from SysTick under `-icount shift=0` as in
 * m55_gemm_main.c; a CRC of the outputs must be the same on both paths.
 *
 * Built with CMSIS_NN_BMM, the products are CMSIS-NN's arm_batch_matmul_s8 instead (what TFLM's CMSIS-NN
 * BATCH_MATMUL calls, per head, with the right-hand side already transposed, i.e. without the transpose
 * TFLM runs first): QK^T from int8 Q and K, P.V from int8 probabilities (input offset 128, as after
 * TFLM's int8 softmax) and value_t; no separate gemm regions, and their outputs differ from ours.
 */
#include <stdint.h>

#include "mcubert_fixed_point.h"
#include "mcubert_gemm_s8.h"
#include "mcubert_internal.h"
#include "semihost.h"

#ifndef S
#define S 128
#endif
#ifndef DH
#define DH 64
#endif
#ifndef HEADS
#define HEADS 2
#endif
#define TILE MCUBERT_BLOCK_ROWS
#define SYST_CSR (*(volatile uint32_t *)0xE000E010u)
#define SYST_RVR (*(volatile uint32_t *)0xE000E014u)
#define SYST_CVR (*(volatile uint32_t *)0xE000E018u)
#define CALIBRATION_LOOPS 1000000u
#define SCORE_MULTIPLIER 0x5A000000
#define SCORE_SHIFT -7
#define CONTEXT_MULTIPLIER 0x48000000
#define CONTEXT_SHIFT -9

static int8_t query[HEADS][S][DH];
static int8_t key[HEADS][S][DH];
static int8_t value_t[HEADS][DH][S];
static int16_t weights[HEADS][S][S]; /* softmax weights e[k] in [0, 2^14] */
static int16_t scores[HEADS][S][S];
static int8_t context[HEADS][S][DH];
static uint32_t widened[2 * (S > DH ? S : DH)] __attribute__((aligned(16))); /* int16[4][max(s, dh)] */
static volatile int32_t sink;

static uint32_t next_random(uint32_t *state)
{
    *state = *state * 1664525u + 1013904223u;
    return *state >> 8;
}

#if defined(CMSIS_NN_BMM)
static int8_t probabilities[HEADS][S][S]; /* int8 softmax output (zero point -128) */
#endif

static void fill(void)
{
    uint32_t state = 4321u;
    int32_t h, i, j;
    for (h = 0; h < HEADS; ++h) {
        for (i = 0; i < S; ++i) {
            for (j = 0; j < DH; ++j) {
                query[h][i][j] = (int8_t)next_random(&state);
                key[h][i][j] = (int8_t)next_random(&state);
                value_t[h][j][i] = (int8_t)next_random(&state);
            }
            for (j = 0; j < S; ++j) {
                weights[h][i][j] = (int16_t)(next_random(&state) % 16385u);
#if defined(CMSIS_NN_BMM)
                probabilities[h][i][j] = (int8_t)((weights[h][i][j] >> 6) - 128);
#endif
            }
        }
    }
}

static void systick_start(void)
{
    SYST_RVR = 0xFFFFFFu;
    SYST_CVR = 0u;
    SYST_CSR = 5u;
}

static uint32_t ticks_since(uint32_t start)
{
    return (start - SYST_CVR) & 0xFFFFFFu;
}

static uint32_t calibration_ticks(uint32_t loops)
{
    const uint32_t start = SYST_CVR;
    __asm__ volatile("1: subs %0, %0, #1\n\tbne 1b" : "+r"(loops) : : "cc");
    return ticks_since(start);
}

#if defined(CMSIS_NN_BMM)
#include "arm_nnfunctions.h"

static int8_t scores8[HEADS][S][S];
static int32_t vector_sums[S > DH ? S : DH];

static void batch_matmul(const int8_t *lhs, const int8_t *rhs, int8_t *out, int32_t lhs_rows, int32_t rhs_rows,
                         int32_t cols, int32_t input_offset, int32_t multiplier, int32_t shift)
{
    const cmsis_nn_context ctx = {vector_sums, sizeof vector_sums};
    cmsis_nn_bmm_params params = {0};
    const cmsis_nn_per_tensor_quant_params quant = {multiplier, shift};
    const cmsis_nn_dims lhs_dims = {1, HEADS, lhs_rows, cols}, rhs_dims = {1, HEADS, rhs_rows, cols};
    const cmsis_nn_dims out_dims = {1, HEADS, lhs_rows, rhs_rows};
    params.fc_params.input_offset = input_offset;
    params.fc_params.activation.min = -128;
    params.fc_params.activation.max = 127;
    if (arm_batch_matmul_s8(&ctx, &params, &quant, &lhs_dims, lhs, &rhs_dims, rhs, &out_dims, out) !=
        ARM_CMSIS_NN_SUCCESS) {
        sink = -1;
    }
}

static void scores_gemm(void)
{
}

static void scores_layer(void)
{
    batch_matmul(&query[0][0][0], &key[0][0][0], &scores8[0][0][0], S, S, DH, 0, SCORE_MULTIPLIER, SCORE_SHIFT + 1);
}

static void context_gemm(void)
{
}

static void context_layer(void)
{
    batch_matmul(&probabilities[0][0][0], &value_t[0][0][0], &context[0][0][0], S, DH, S, 128, CONTEXT_MULTIPLIER, -8);
}
#else
/* QK^T of one head's tile rows [t0, t0 + 4) against every key: the gemm, then (with `store`) the int16
 * scores as query_scores stores them (per-tensor fast requantization). */
static void scores_tile(int32_t h, int32_t t0, int store)
{
    const mcubert_requant q = mcubert_requant_of(0, SCORE_MULTIPLIER, SCORE_SHIFT);
    int32_t acc[MCUBERT_CHUNK_CHANNELS][MCUBERT_BLOCK_ROWS];
    mcubert_rows rows;
    int32_t j, c, r;
    mcubert_rows_init_s8(&rows, &query[h][t0][0], DH, TILE, DH);
    mcubert_rows_widen(&rows, widened);
    for (j = 0; j < S; j += MCUBERT_CHUNK_CHANNELS) {
        const int32_t chunk = S - j < MCUBERT_CHUNK_CHANNELS ? S - j : MCUBERT_CHUNK_CHANNELS;
        mcubert_gemm_4xn_rows(&rows, &key[h][j][0], DH, chunk, acc);
        if (!store) {
            sink += acc[0][0];
            continue;
        }
        for (c = 0; c < chunk; ++c) {
            for (r = 0; r < TILE; ++r) {
                scores[h][t0 + r][j + c] = (int16_t)mcubert_clamp16_i32(mcubert_requant_fast_unbiased(acc[c][r], &q));
            }
        }
    }
}

/* P.V of one head's tile rows: the gemm, then (with `store`) the context as attend_values stores it. */
static void context_tile(int32_t h, int32_t t0, int store)
{
    const mcubert_requant q = mcubert_requant_of(0, CONTEXT_MULTIPLIER, CONTEXT_SHIFT);
    int32_t acc[MCUBERT_CHUNK_CHANNELS][MCUBERT_BLOCK_ROWS];
    int32_t recip[TILE];
    mcubert_rows rows;
    int32_t c, j, r;
    for (r = 0; r < TILE; ++r) {
        recip[r] = 0x100000 + 977 * (t0 + r); /* floor(2^44 / sum e) for sums around 2^24 */
    }
    mcubert_rows_init_s16(&rows, &weights[h][t0][0], S, TILE, S);
    mcubert_rows_widen(&rows, widened);
    for (c = 0; c < DH; c += MCUBERT_CHUNK_CHANNELS) {
        const int32_t chunk = DH - c < MCUBERT_CHUNK_CHANNELS ? DH - c : MCUBERT_CHUNK_CHANNELS;
        mcubert_gemm_4xn_rows(&rows, &value_t[h][c][0], S, chunk, acc);
        if (!store) {
            sink += acc[0][0];
            continue;
        }
        for (j = 0; j < chunk; ++j) {
            for (r = 0; r < TILE; ++r) {
                context[h][t0 + r][c + j] = (int8_t)mcubert_clamp8(
                    mcubert_requant_fast_unbiased(mcubert_weighted_mean(acc[j][r], recip[r]), &q));
            }
        }
    }
}

static void each_tile(void (*tile)(int32_t, int32_t, int), int store)
{
    int32_t h, t0;
    for (h = 0; h < HEADS; ++h) {
        for (t0 = 0; t0 < S; t0 += TILE) {
            tile(h, t0, store);
        }
    }
}

static void scores_gemm(void)
{
    each_tile(scores_tile, 0);
}

static void scores_layer(void)
{
    each_tile(scores_tile, 1);
}

static void context_gemm(void)
{
    each_tile(context_tile, 0);
}

static void context_layer(void)
{
    each_tile(context_tile, 1);
}
#endif

/* Called around each measured region (a new segment of the QEMU block trace, see m55_gemm_main.c). */
__attribute__((noinline, noipa)) void bench_mark(void)
{
    __asm__ volatile("" ::: "memory");
}

static void report(const char *what, uint32_t ticks)
{
    semihost_write(what);
    semihost_write_int((int32_t)ticks);
    semihost_write("\n");
}

static uint32_t region(void (*run)(void))
{
    const uint32_t start = SYST_CVR;
    bench_mark();
    run();
    bench_mark();
    return ticks_since(start);
}

int main(void)
{
    fill();
    systick_start();
    report("calibration_loops ", CALIBRATION_LOOPS);
    report("calibration_ticks ", calibration_ticks(CALIBRATION_LOOPS));
    report("empty_ticks ", calibration_ticks(1u));
    report("scores_gemm_ticks ", region(scores_gemm));
    report("scores_ticks ", region(scores_layer));
    report("context_gemm_ticks ", region(context_gemm));
    report("context_ticks ", region(context_layer));
#if defined(CMSIS_NN_BMM)
    report("output_crc ", ~mcubert_crc32_update(0xFFFFFFFFu, (const uint8_t *)context, sizeof context));
    report("status ", (uint32_t)sink);
#else
    report("output_crc ",
           ~mcubert_crc32_update(mcubert_crc32_update(0xFFFFFFFFu, (const uint8_t *)scores, sizeof scores),
                                 (const uint8_t *)context, sizeof context));
    report("path ", (uint32_t)mcubert_uses_dsp_path());
#endif
    return 0;
}
