/*
 * Emulator image of the library plus the baselines (bench/kernel_cost.py and
 * tests/kernels/test_kernels_baselines.py load it with tflm_mcubert/measure/arm_emulator.py).
 * Like test/arm/emu_main.c: main() is never run; it references the entry-point table so that
 * --gc-sections keeps every function, and calls return to mcubert_emu_stop.
 */
#include "mcubert/mcubert_ops.h"
#include "mcubert_baselines.h"

void mcubert_emu_stop(void);

__attribute__((noinline)) void mcubert_emu_stop(void)
{
    for (;;) {
        __asm__ volatile("bkpt 0");
    }
}

typedef void (*entry_point)(void);
__attribute__((used)) const entry_point mcubert_emu_api[] = {
    (entry_point)mcubert_embedding_s8,
    (entry_point)mcubert_embedding_validate,
    (entry_point)mcubert_embedding_get_buffer_size,
    (entry_point)mcubert_attention_s8,
    (entry_point)mcubert_attention_validate,
    (entry_point)mcubert_attention_get_buffer_size,
    (entry_point)mcubert_mlp_s8,
    (entry_point)mcubert_mlp_validate,
    (entry_point)mcubert_mlp_get_buffer_size,
    (entry_point)mcubert_uses_dsp_path,
    mcubert_emu_stop,
    (entry_point)mcubert_baseline_cmsis_linear_s8,
    (entry_point)mcubert_bench_linear_s8,
    (entry_point)mcubert_baseline_cmsis_attention_s8,
    (entry_point)mcubert_baseline_cmsis_attention_get_buffer_size,
    (entry_point)mcubert_baseline_burrello_attention_s8,
    (entry_point)mcubert_baseline_burrello_attention_get_buffer_size,
    (entry_point)mcubert_baseline_flash_attention_s8,
    (entry_point)mcubert_baseline_flash_attention_get_buffer_size,
    (entry_point)mcubert_baseline_cmsis_mlp_s8,
    (entry_point)mcubert_baseline_cmsis_mlp_get_buffer_size,
};

int main(void)
{
    const entry_point *volatile table = mcubert_emu_api;
    return table[0] != 0 ? 0 : 1;
}
