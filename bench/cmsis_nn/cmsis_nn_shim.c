/*
 * The real CMSIS-NN kernels (a user's checkout, CMSIS_NN_DIR; never committed) behind the emulator's
 * call ABI, for bench/kernel_cost.py: one linear layer y = clamp8(requantize(x W^T + bias)) on `tokens`
 * rows, per-channel quantization, run the way TFLM 90b983c's CMSIS-NN FULLY_CONNECTED runs it:
 *
 *   cmsisnn_bench_conv1x1   arm_convolve_1x1_s8_fast (-> arm_nn_mat_mult_nt_t_s8): TFLM's path for a
 *                           rank-3 input whose depth is a multiple of 4 (BERT's [1, s, d] activations)
 *   cmsisnn_bench_fc        arm_fully_connected_per_channel_s8 (-> arm_nn_vec_mat_mult_t_per_ch_s8,
 *                           one token at a time): its path for rank-2 inputs
 *   cmsisnn_bench_fc_s4     arm_fully_connected_s4 (-> arm_nn_vec_mat_mult_t_s4, one token at a time):
 *                           its only path for int4 weights, per-tensor quantization (TFLM refuses
 *                           per-channel int4); built when the checkout has it (CMSISNN_BENCH_S4)
 *
 * channels[i] = {bias, multiplier, shift} as the MCUBERT kernels take them (TFLite's shift convention).
 * CMSIS-NN rounds its requantization twice where the MCUBERT contract rounds once, so an output may
 * differ from ours by one; the benchmark checks that bound.
 */
#include <stdint.h>

#include "arm_nnfunctions.h"

#define MAX_CHANNELS 4096

void mcubert_emu_stop(void);
int32_t cmsisnn_bench_conv1x1(const int8_t *x, int32_t tokens, int32_t k, int32_t n, const int8_t *w,
                              const int32_t *channels, int8_t *y, void *scratch);
int32_t cmsisnn_bench_fc(const int8_t *x, int32_t tokens, int32_t k, int32_t n, const int8_t *w,
                         const int32_t *channels, int8_t *y, void *scratch);
int32_t cmsisnn_bench_scratch_bytes(int32_t k, int32_t n);
int32_t cmsisnn_bench_fc_s4(const int8_t *x, int32_t tokens, int32_t k, int32_t n, const int8_t *w_packed,
                            const int32_t *bias_in, int32_t multiplier_in, int32_t shift_in, int8_t *y);
int main(void);

static int32_t bias[MAX_CHANNELS], multiplier[MAX_CHANNELS], shift[MAX_CHANNELS];

__attribute__((noinline)) void mcubert_emu_stop(void)
{
    for (;;) {
        __asm__ volatile("bkpt 0");
    }
}

/* Splits channels[n][3] outside the measured calls' hot loops (TFLM keeps them split at Prepare). */
static void split_channels(const int32_t *channels, int32_t n)
{
    int32_t i;
    for (i = 0; i < n; ++i) {
        bias[i] = channels[3 * i];
        multiplier[i] = channels[3 * i + 1];
        shift[i] = channels[3 * i + 2];
    }
}

int32_t cmsisnn_bench_scratch_bytes(int32_t k, int32_t n)
{
    const cmsis_nn_dims input = {1, 1, 1, k}, filter = {n, 1, 1, k};
    int32_t a = arm_convolve_1x1_s8_fast_get_buffer_size(&input);
    int32_t b = arm_fully_connected_s8_get_buffer_size(&filter);
    return a > b ? a : b;
}

int32_t cmsisnn_bench_conv1x1(const int8_t *x, int32_t tokens, int32_t k, int32_t n, const int8_t *w,
                              const int32_t *channels, int8_t *y, void *scratch)
{
    const cmsis_nn_context ctx = {scratch, cmsisnn_bench_scratch_bytes(k, n)};
    cmsis_nn_conv_params conv = {0};
    const cmsis_nn_per_channel_quant_params quant = {multiplier, shift};
    const cmsis_nn_dims input = {1, 1, tokens, k}, filter = {n, 1, 1, k}, bias_dims = {1, 1, 1, n};
    const cmsis_nn_dims output = {1, 1, tokens, n};
    if (n > MAX_CHANNELS) {
        return -1;
    }
    split_channels(channels, n);
    conv.stride.h = conv.stride.w = 1;
    conv.dilation.h = conv.dilation.w = 1;
    conv.activation.min = -128;
    conv.activation.max = 127;
    return arm_convolve_1x1_s8_fast(&ctx, &conv, &quant, &input, x, &filter, w, &bias_dims, bias, &output, y);
}

int32_t cmsisnn_bench_fc(const int8_t *x, int32_t tokens, int32_t k, int32_t n, const int8_t *w,
                         const int32_t *channels, int8_t *y, void *scratch)
{
    const cmsis_nn_context ctx = {scratch, cmsisnn_bench_scratch_bytes(k, n)};
    cmsis_nn_fc_params fc = {0};
    const cmsis_nn_per_channel_quant_params quant = {multiplier, shift};
    const cmsis_nn_dims input = {tokens, 1, 1, k}, filter = {k, 1, 1, n}, bias_dims = {1, 1, 1, n};
    const cmsis_nn_dims output = {tokens, 1, 1, n};
    if (n > MAX_CHANNELS) {
        return -1;
    }
    split_channels(channels, n);
    fc.activation.min = -128;
    fc.activation.max = 127;
    /* kernel sums with zero offsets are zero: TFLM passes them when the input offset is non-zero */
    return arm_fully_connected_per_channel_s8(&ctx, &fc, &quant, &input, x, &filter, w, &bias_dims, bias, &output, y);
}

/* w_packed: int4 weights [n][k], two a byte, the first in the low nibble (CMSIS-NN's s4 layout). */
int32_t cmsisnn_bench_fc_s4(const int8_t *x, int32_t tokens, int32_t k, int32_t n, const int8_t *w_packed,
                            const int32_t *bias_in, int32_t multiplier_in, int32_t shift_in, int8_t *y)
{
#if defined(CMSISNN_BENCH_S4)
    const cmsis_nn_context ctx = {0, 0};
    cmsis_nn_fc_params fc = {0};
    const cmsis_nn_per_tensor_quant_params quant = {multiplier_in, shift_in};
    const cmsis_nn_dims input = {tokens, 1, 1, k}, filter = {k, 1, 1, n}, bias_dims = {1, 1, 1, n};
    const cmsis_nn_dims output = {tokens, 1, 1, n};
    fc.activation.min = -128;
    fc.activation.max = 127;
    return arm_fully_connected_s4(&ctx, &fc, &quant, &input, x, &filter, w_packed, &bias_dims, bias_in, &output, y);
#else
    (void)x, (void)tokens, (void)k, (void)n, (void)w_packed, (void)bias_in, (void)multiplier_in, (void)shift_in;
    (void)y;
    return -2; /* this CMSIS-NN has no arm_fully_connected_s4 */
#endif
}

typedef void (*entry_point)(void);
__attribute__((used)) const entry_point cmsisnn_emu_api[] = {
    (entry_point)cmsisnn_bench_conv1x1,
    (entry_point)cmsisnn_bench_fc,
    (entry_point)cmsisnn_bench_scratch_bytes,
    (entry_point)cmsisnn_bench_fc_s4,
    mcubert_emu_stop,
};

/* The unicorn images call the table; a firmware with its own main (bench/m55_gemm_main.c) leaves this out. */
#if !defined(CMSISNN_BENCH_NO_MAIN)
int main(void)
{
    const entry_point *volatile table = cmsisnn_emu_api;
    return table != 0 ? 0 : 1;
}
#endif
