/*
 * mcubert_cycles() of the emulator-only board emulator-m55 (QEMU mps3-an547 run with `-icount shift=0`):
 * EXECUTED INSTRUCTIONS, not cycles. QEMU models no cycle counter (the DWT's reads 0), but under
 * `-icount shift=0` its virtual clock advances exactly 1 ns per executed instruction and SysTick
 * (processor clock) counts on that clock. The first call calibrates instructions per tick with a loop of
 * known length (SUBS + BNE, as bench/m55_gemm_main.c does) and starts SysTick free-running; its 24 bits
 * (about 5 * 10^8 instructions at mps3-an547's 32 MHz) are extended by the SysTick interrupt. The
 * resolution is one tick (about 31 instructions); the interrupt's own few instructions every 2^24 ticks
 * are counted too. TFLM's MicroProfiler reads the same count (tflm_ticks_icount.cc).
 */
#include "platform.h"

#define SYST_CSR (*(volatile uint32_t *)0xE000E010u)
#define SYST_RVR (*(volatile uint32_t *)0xE000E014u)
#define SYST_CVR (*(volatile uint32_t *)0xE000E018u)
#define SCB_ICSR (*(volatile uint32_t *)0xE000ED04u)
#define SYST_CSR_ENABLE_TICKINT_CLKSOURCE 7u /* enabled, interrupt on wrap, processor clock */
#define SCB_ICSR_PENDSTSET (1u << 26)
#define SYST_MAX 0xFFFFFFu
#define CALIBRATION_LOOPS 1000000u /* 2 * 10^6 instructions */

static volatile uint32_t systick_wraps;
static uint64_t instructions_per_tick_q16; /* 16 fraction bits; 0 until calibrated */

/* SysTick's wrap: the vector table's SysTick entry (startup.c, weak). */
void SysTick_Handler(void)
{
    ++systick_wraps;
}

/* Ticks since SysTick's first reload: the wrap count and the counter read as one, with interrupts masked; a
 * wrap whose interrupt is still pending is counted here (and the counter read again after it). */
static uint64_t systick_ticks(void)
{
    uint32_t primask, wraps, count;
    __asm__ volatile("mrs %0, primask\n\tcpsid i" : "=r"(primask)::"memory");
    wraps = systick_wraps;
    count = SYST_CVR;
    if ((SCB_ICSR & SCB_ICSR_PENDSTSET) != 0u) {
        ++wraps;
        count = SYST_CVR;
    }
    __asm__ volatile("msr primask, %0" ::"r"(primask) : "memory");
    /* The counter goes SYST_MAX, ..., 1, 0 (the wrap: the interrupt is pended here), SYST_MAX: at 0 a wrap
     * is already counted but its period has one tick left. */
    return ((uint64_t)wraps << 24) + ((SYST_MAX + 1u - count) & SYST_MAX) - 1u;
}

static uint64_t loop_ticks(uint32_t loops)
{
    const uint64_t start = systick_ticks();
    __asm__ volatile("1: subs %0, %0, #1\n\tbne 1b" : "+r"(loops) : : "cc");
    return systick_ticks() - start;
}

static void calibrate(void)
{
    uint64_t loop, empty;
    SYST_RVR = SYST_MAX;
    SYST_CVR = 0u;
    SYST_CSR = SYST_CSR_ENABLE_TICKINT_CLKSOURCE;
    while (SYST_CVR == 0u) { /* the first tick reloads the cleared counter, without a wrap */
    }
    loop = loop_ticks(CALIBRATION_LOOPS);
    empty = loop_ticks(1u);
    /* Without -icount SysTick runs on host time: the figures are then meaningless, but never divide by 0. */
    instructions_per_tick_q16 = (((uint64_t)2u * (CALIBRATION_LOOPS - 1u)) << 16) / (loop > empty ? loop - empty : 1u);
    if (instructions_per_tick_q16 == 0u) {
        instructions_per_tick_q16 = 1u;
    }
}

uint32_t mcubert_cycles(void)
{
    if (instructions_per_tick_q16 == 0u) {
        calibrate();
    }
    /* Modulo 2^32, as a cycle counter wraps: differences of two reads are right up to 4 * 10^9 instructions. */
    return (uint32_t)((systick_ticks() * instructions_per_tick_q16) >> 16);
}
