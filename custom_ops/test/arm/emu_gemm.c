/*
 * The gemm driver (test/gemm_driver.c) linked with the library for the unicorn runner
 * (tflm_mcubert/measure/arm_emulator.py): tests/kernels/test_kernels_gemm.py and bench/w4_gemm.py
 * call mcubert_gemm_driver directly. As in emu_main.c, main() is never run; it references the
 * entry-point table so that --gc-sections keeps it, and calls return to mcubert_emu_stop.
 */
#include "gemm_driver.h"
#include "mcubert/mcubert_ops.h"

void mcubert_emu_stop(void);

__attribute__((noinline)) void mcubert_emu_stop(void)
{
    for (;;) {
        __asm__ volatile("bkpt 0");
    }
}

typedef void (*entry_point)(void);
__attribute__((used)) const entry_point mcubert_emu_api[] = {
    (entry_point)mcubert_gemm_driver,
    (entry_point)mcubert_uses_dsp_path,
    mcubert_emu_stop,
};

int main(void)
{
    const entry_point *volatile table = mcubert_emu_api;
    return table[0] != 0 ? 0 : 1;
}
