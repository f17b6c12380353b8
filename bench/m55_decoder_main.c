/*
 * Bench firmware for bench/m55_decoder.py (QEMU mps3-an547, Cortex-M55): the decoder's one-token ops
 * generated as golden cases (tests/kernels/kernel_golden.py: each case validates, runs its kernel and
 * compares every output byte with the numpy reference), with the kernel call alone timed through the
 * generator's GOLDEN_KERNEL_BEGIN / END hooks: SysTick under `-icount shift=0` as in m55_gemm_main.c, and
 * a bench_mark() on each side for the cycle estimate's block trace. Prints per case its ticks and status
 * (0: bit-exact).
 */
#include <stdint.h>

#include "golden.h"
#include "semihost.h"

#define SYST_CSR (*(volatile uint32_t *)0xE000E010u)
#define SYST_RVR (*(volatile uint32_t *)0xE000E014u)
#define SYST_CVR (*(volatile uint32_t *)0xE000E018u)
#define CALIBRATION_LOOPS 1000000u

static uint32_t started, elapsed;

__attribute__((noinline, noipa)) void bench_mark(void)
{
    __asm__ volatile("" ::: "memory");
}

void bench_begin(void)
{
    started = SYST_CVR;
    bench_mark();
}

void bench_end(void)
{
    bench_mark();
    elapsed = (started - SYST_CVR) & 0xFFFFFFu;
}

static uint32_t calibration_ticks(uint32_t loops)
{
    const uint32_t start = SYST_CVR;
    __asm__ volatile("1: subs %0, %0, #1\n\tbne 1b" : "+r"(loops) : : "cc");
    return (start - SYST_CVR) & 0xFFFFFFu;
}

static void report(const char *what, int32_t index, int32_t value)
{
    semihost_write(what);
    if (index >= 0) {
        semihost_write_int(index);
    }
    semihost_write(" ");
    semihost_write_int(value);
    semihost_write("\n");
}

int main(void)
{
    mcubert_context context;
    mcubert_message message;
    int32_t i;
    SYST_RVR = 0xFFFFFFu;
    SYST_CVR = 0u;
    SYST_CSR = 5u;
    report("calibration_loops", -1, (int32_t)CALIBRATION_LOOPS);
    report("calibration_ticks", -1, (int32_t)calibration_ticks(CALIBRATION_LOOPS));
    report("empty_ticks", -1, (int32_t)calibration_ticks(1u));
    context.buf = golden_scratch;
    context.size = golden_scratch_bytes;
    for (i = 0; i < golden_case_count; ++i) {
        const int32_t status = golden_cases[i].run(&context, &message);
        report("case_", i, (int32_t)elapsed);
        report("status_", i, status);
    }
    report("path", -1, mcubert_uses_dsp_path());
    return 0;
}
