/*
 * Bench firmware for bench/m55_gemm.py (QEMU mps3-an547, Cortex-M55): one int8 linear layer of
 * TOKENS x IN -> OUT, as the ops run it (row blocks of 4 widened once, then every channel), on
 * pseudo-random data, on whichever gemm path the library was built with (DSP or MVE); with
 * WEIGHT_BITS 4 its weights are int4 (w4row) and go through the int4-weight gemm.
 *
 * Instructions are read from SysTick under `-icount shift=0`, where QEMU's virtual clock advances
 * 1 ns per executed instruction: ticks are converted to instructions by a calibration loop of a
 * known instruction count measured the same way. Printed: the calibration, the gemm alone (widening
 * + micro-kernel over all blocks and channels), the whole layer (with the output stage), and a
 * CRC of the outputs (the same on both paths: the paths must agree bit for bit).
 *
 * Built with CMSIS_NN_LAYER, the layer is CMSIS-NN's instead (bench/cmsis_nn/cmsis_nn_shim.c:
 * arm_convolve_1x1_s8_fast -> arm_nn_mat_mult_nt_t_s8, TFLM's path for BERT's rank-3 activations, on
 * row-major weights); there is no separate gemm region, and the outputs are checked against a once-rounded
 * reference computed here (CMSIS-NN rounds twice: one unit apart at most).
 */
#include <stdint.h>

#include "mcubert_gemm_s4.h"
#include "mcubert_internal.h"
#include "semihost.h"

#ifndef TOKENS
#define TOKENS 128
#endif
#ifndef IN
#define IN 128
#endif
#ifndef OUT
#define OUT 128
#endif

#define PAIR_STRIDE (((IN + 3) / 4) * 8)
#define W4_ROW_BYTES (((IN + 7) / 8) * 4)
#ifndef WEIGHT_BITS
#define WEIGHT_BITS 8 /* 4: the layer's weights are int4 (w4row), through the int4-weight gemm */
#endif
#if defined(CMSIS_NN_LAYER)
#define WEIGHT_BYTES (OUT * IN) /* row-major [OUT][IN] */
int32_t cmsisnn_bench_conv1x1(const int8_t *x, int32_t tokens, int32_t k, int32_t n, const int8_t *w,
                              const int32_t *channels, int8_t *y, void *scratch);
int32_t cmsisnn_bench_scratch_bytes(int32_t k, int32_t n);
static int8_t cmsis_scratch[16384] __attribute__((aligned(16)));
#elif WEIGHT_BITS == 4
#define WEIGHT_BYTES (OUT * W4_ROW_BYTES)
#else
#define WEIGHT_BYTES ((OUT + 1) / 2 * PAIR_STRIDE)
#endif
#define SYST_CSR (*(volatile uint32_t *)0xE000E010u)
#define SYST_RVR (*(volatile uint32_t *)0xE000E014u)
#define SYST_CVR (*(volatile uint32_t *)0xE000E018u)
#define CALIBRATION_LOOPS 1000000u

static int8_t x[TOKENS * IN];
static int8_t weights[WEIGHT_BYTES];
static int32_t channels[OUT * 3];
static int8_t y[TOKENS * OUT];
static uint32_t widened[IN * 2] __attribute__((aligned(16))); /* int16[4][K] */
static volatile int32_t sink;

static uint32_t next_random(uint32_t *state)
{
    *state = *state * 1664525u + 1013904223u;
    return *state >> 8;
}

static void fill(void)
{
    uint32_t state = 12345u;
    uint32_t i;
    for (i = 0; i < sizeof x; ++i) {
        x[i] = (int8_t)next_random(&state);
    }
    for (i = 0; i < sizeof weights; ++i) {
        weights[i] = (int8_t)next_random(&state);
    }
    for (i = 0; i < OUT; ++i) {
        channels[3 * i] = (int32_t)(next_random(&state) & 0xFFFF) - 0x8000;        /* bias */
        channels[3 * i + 1] = (int32_t)(0x40000000u | (next_random(&state) << 6)); /* M in [2^30, 2^31) */
        channels[3 * i + 2] = -9;                                                  /* shift */
    }
}

static void systick_start(void)
{
    SYST_RVR = 0xFFFFFFu;
    SYST_CVR = 0u;
    SYST_CSR = 5u; /* enabled, processor clock, no interrupt */
}

/* SysTick ticks since `start` (it counts down, 24 bits). */
static uint32_t ticks_since(uint32_t start)
{
    return (start - SYST_CVR) & 0xFFFFFFu;
}

/* 2 * loops instructions (SUBS, BNE per iteration) plus a few around them. */
static uint32_t calibration_ticks(uint32_t loops)
{
    const uint32_t start = SYST_CVR;
    __asm__ volatile("1: subs %0, %0, #1\n\tbne 1b" : "+r"(loops) : : "cc");
    return ticks_since(start);
}

#if defined(CMSIS_NN_LAYER)
static void gemm_only(void)
{
}

static void whole_layer(void)
{
    if (cmsisnn_bench_scratch_bytes(IN, OUT) > (int32_t)sizeof cmsis_scratch ||
        cmsisnn_bench_conv1x1(x, TOKENS, IN, OUT, weights, channels, y, cmsis_scratch) != 0) {
        sink = -1;
    }
}

/* The largest |y - once-rounded reference| over the layer (CMSIS-NN's double rounding: at most 1). */
static int32_t max_difference(void)
{
    int32_t t, o, k, worst = 0;
    for (t = 0; t < TOKENS; ++t) {
        for (o = 0; o < OUT; ++o) {
            int64_t acc = channels[3 * o];
            int64_t scaled;
            int32_t want, diff;
            const int32_t right = 31 - channels[3 * o + 2]; /* shift < 0: a right shift of 31 - shift */
            for (k = 0; k < IN; ++k) {
                acc += (int32_t)x[t * IN + k] * weights[o * IN + k];
            }
            scaled = (acc * channels[3 * o + 1] + ((int64_t)1 << (right - 1))) >> right;
            want = scaled < -128 ? -128 : scaled > 127 ? 127 : (int32_t)scaled;
            diff = y[t * OUT + o] - want;
            diff = diff < 0 ? -diff : diff;
            worst = diff > worst ? diff : worst;
        }
    }
    return worst;
}
#else
/* Channels per gemm call: mcubert_linear_to_s8's chunks (16 on the MVE path, for int8 weights). */
#define CHUNK (MCUBERT_MVE && WEIGHT_BITS == 8 ? 2 * MCUBERT_CHUNK_CHANNELS : MCUBERT_CHUNK_CHANNELS)

#if WEIGHT_BITS == 4
static void gemm_only(void)
{
    int32_t r0, c;
    int32_t acc[CHUNK][MCUBERT_BLOCK_ROWS], start[MCUBERT_BLOCK_ROWS];
    for (r0 = 0; r0 < TOKENS; r0 += MCUBERT_BLOCK_ROWS) {
        mcubert_rows rows;
        const int32_t count = TOKENS - r0 < MCUBERT_BLOCK_ROWS ? TOKENS - r0 : MCUBERT_BLOCK_ROWS;
        mcubert_rows_init_s8(&rows, x + r0 * IN, IN, count, IN);
        mcubert_rows_widen_w4(&rows, widened, start);
        for (c = 0; c < OUT; c += CHUNK) {
            const int32_t n = OUT - c < CHUNK ? OUT - c : CHUNK;
            mcubert_gemm_4xn_w4(&rows, start, (const uint8_t *)weights + c * W4_ROW_BYTES, W4_ROW_BYTES, n, acc);
            sink += acc[0][0];
        }
    }
}
#else

static void gemm_only(void)
{
    int32_t r0, c;
    int32_t acc[CHUNK][MCUBERT_BLOCK_ROWS];
    for (r0 = 0; r0 < TOKENS; r0 += MCUBERT_BLOCK_ROWS) {
        mcubert_rows rows;
        const int32_t count = TOKENS - r0 < MCUBERT_BLOCK_ROWS ? TOKENS - r0 : MCUBERT_BLOCK_ROWS;
        mcubert_rows_init_s8(&rows, x + r0 * IN, IN, count, IN);
        mcubert_rows_widen_pair4(&rows, widened);
        for (c = 0; c < OUT; c += CHUNK) {
            const int32_t n = OUT - c < CHUNK ? OUT - c : CHUNK;
            mcubert_gemm_4xn_pair4(&rows, weights + (c >> 1) * PAIR_STRIDE, PAIR_STRIDE, n, acc);
            sink += acc[0][0];
        }
    }
}
#endif

static void whole_layer(void)
{
    const mcubert_linear layer = mcubert_linear_of(weights, channels, IN, OUT, WEIGHT_BITS);
    int32_t r0;
    for (r0 = 0; r0 < TOKENS; r0 += MCUBERT_BLOCK_ROWS) {
        mcubert_rows rows;
        const int32_t count = TOKENS - r0 < MCUBERT_BLOCK_ROWS ? TOKENS - r0 : MCUBERT_BLOCK_ROWS;
        mcubert_rows_init_s8(&rows, x + r0 * IN, IN, count, IN);
        mcubert_linear_widen(&rows, &layer, widened);
        mcubert_linear_to_s8(&rows, &layer, 0, OUT, 0, NULL, y + r0 * OUT, OUT, 1);
    }
}
#endif

/* Called around each measured region: its block opens a new segment of the QEMU block trace that
 * bench/m55_gemm.py costs with the Cortex-M55 cycle estimate (measure/qemu_blocks.py). */
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

int main(void)
{
    uint32_t start;
    fill();
    systick_start();
    report("calibration_loops ", CALIBRATION_LOOPS);
    report("calibration_ticks ", calibration_ticks(CALIBRATION_LOOPS));
    report("empty_ticks ", calibration_ticks(1u));
    start = SYST_CVR;
    bench_mark();
    gemm_only();
    bench_mark();
    report("gemm_ticks ", ticks_since(start));
    start = SYST_CVR;
    bench_mark();
    whole_layer();
    bench_mark();
    report("layer_ticks ", ticks_since(start));
    report("output_crc ", ~mcubert_crc32_update(0xFFFFFFFFu, (const uint8_t *)y, sizeof y));
#if defined(CMSIS_NN_LAYER)
    report("status ", (uint32_t)sink);
    report("max_difference ", (uint32_t)max_difference());
#else
    report("path ", (uint32_t)mcubert_uses_dsp_path());
#endif
    return 0;
}
