/*
 * Cortex-M startup without CMSIS or a HAL: the vector table, a Reset_Handler that copies .data,
 * zeroes .bss, paints the stack (so mcubert_stack_used_bytes() can tell its high-water mark),
 * enables the FPU and the DWT cycle counter where the core has them, runs C++ constructors, calls
 * main() and hands its status to mcubert_platform_exit(). System registers are written by address
 * (ARMv7-M ARM B3.2, ARMv8-M ARM D1). The same table serves ARMv6-M (Cortex-M0+), where the
 * configurable-fault vectors are reserved and never taken.
 *
 * The clock is left at its reset value (STM32F7: 16 MHz HSI, STM32H7: 64 MHz HSI, nRF52840: 64 MHz);
 * see platform.h.
 * Only the 16 core exceptions have vectors: nothing here enables a peripheral interrupt.
 */
#include <stdint.h>

#include "platform.h"

extern uint32_t __data_start__, __data_end__, __data_load__, __bss_start__, __bss_end__, __stack_top__;
extern uint32_t __stack_size__; /* a linker symbol: its address is the reserved stack size */
extern void (*__init_array_start[])(void);
extern void (*__init_array_end[])(void);
int main(void);
void Reset_Handler(void);
void Fault_Handler(void);
/* SysTick's vector: a fault unless a source defines it (icount_systick.c, the emulator-m55 board's counter). */
void SysTick_Handler(void) __attribute__((weak, alias("Fault_Handler")));

#define SCB_CPACR (*(volatile uint32_t *)0xE000ED88u)
#define DEMCR (*(volatile uint32_t *)0xE000EDFCu)
#define DWT_CTRL (*(volatile uint32_t *)0xE0001000u)
#define DWT_CYCCNT (*(volatile uint32_t *)0xE0001004u)
#define DWT_LAR (*(volatile uint32_t *)0xE0001FB0u)
#define DEMCR_TRCENA (1u << 24)
#define DWT_CTRL_CYCCNTENA 1u
#define CORESIGHT_UNLOCK 0xC5ACCE55u
#define STACK_PAINT 0x5AC4DA1Eu
#define PAINT_MARGIN_WORDS 16u /* left unpainted below Reset_Handler's own frame */

/* ARMv7-M and ARMv8-M Mainline have the DWT cycle counter; ARMv6-M (Cortex-M0+) has none. */
#if defined(__ARM_ARCH_7M__) || defined(__ARM_ARCH_7EM__) || defined(__ARM_ARCH_8M_MAIN__) /* GCC: M55 too */
#define MCUBERT_HAS_CYCLE_COUNTER 1
#else
#define MCUBERT_HAS_CYCLE_COUNTER 0
#endif

__attribute__((section(".isr_vector"), used)) void (*const mcubert_vector_table[16])(void) = {
    (void (*)(void))(uintptr_t)&__stack_top__,
    Reset_Handler,
    Fault_Handler, /* NMI */
    Fault_Handler, /* HardFault */
    Fault_Handler, /* MemManage */
    Fault_Handler, /* BusFault */
    Fault_Handler, /* UsageFault */
    0,
    0,
    0,
    0,
    Fault_Handler, /* SVCall */
    Fault_Handler, /* DebugMon */
    0,
    Fault_Handler, /* PendSV */
    SysTick_Handler,
};

static uint32_t *stack_bottom(void)
{
    return (uint32_t *)((uintptr_t)&__stack_top__ - (uintptr_t)&__stack_size__);
}

/* Inline in Reset_Handler's frame: a call would put its own frame where it paints. */
static inline __attribute__((always_inline)) void paint_stack(void)
{
    uint32_t *sp;
    __asm__ volatile("mov %0, sp" : "=r"(sp));
    for (uint32_t *word = stack_bottom(); word < sp - PAINT_MARGIN_WORDS; ++word) {
        *word = STACK_PAINT;
    }
}

uint32_t mcubert_stack_used_bytes(void)
{
    const uint32_t *word = stack_bottom();
    while (word < &__stack_top__ && *word == STACK_PAINT) {
        ++word;
    }
    return (uint32_t)((uintptr_t)&__stack_top__ - (uintptr_t)word);
}

uint32_t mcubert_stack_size_bytes(void)
{
    return (uint32_t)(uintptr_t)&__stack_size__;
}

static void enable_cycle_counter(void)
{
#if MCUBERT_HAS_CYCLE_COUNTER
    DEMCR |= DEMCR_TRCENA;
#if defined(__ARM_ARCH_7EM__)
    DWT_LAR = CORESIGHT_UNLOCK; /* the Cortex-M7 DWT ignores writes until unlocked (ARMv8-M has no lock) */
#endif
    DWT_CYCCNT = 0u;
    DWT_CTRL |= DWT_CTRL_CYCCNTENA;
#endif
}

void Reset_Handler(void)
{
    uint32_t *src = &__data_load__;
    uint32_t *dst = &__data_start__;
    while (dst < &__data_end__) {
        *dst++ = *src++;
    }
    for (dst = &__bss_start__; dst < &__bss_end__; ++dst) {
        *dst = 0u;
    }
    paint_stack();
#if defined(__ARM_FP) || defined(__ARM_FEATURE_MVE)
    SCB_CPACR |= 0xFu << 20; /* CP10, CP11 (FPU and MVE): full access, before any of their instructions */
    __asm__ volatile("dsb\n isb" ::: "memory");
#endif
    enable_cycle_counter();
    mcubert_platform_init();
    for (void (**constructor)(void) = __init_array_start; constructor < __init_array_end; ++constructor) {
        (*constructor)();
    }
    mcubert_platform_exit(main());
}

/* Weak: a board whose counter is not the DWT's defines its own (icount_systick.c). */
__attribute__((weak)) uint32_t mcubert_cycles(void)
{
#if MCUBERT_HAS_CYCLE_COUNTER
    return DWT_CYCCNT;
#else
    return 0u; /* no cycle counter on this core */
#endif
}

void Fault_Handler(void)
{
    uint32_t ipsr;
    __asm__ volatile("mrs %0, ipsr" : "=r"(ipsr));
    mcubert_platform_write("FAULT: exception ");
    mcubert_platform_write_uint(ipsr & 0x1FFu);
    mcubert_platform_write("\n");
    mcubert_platform_exit(100 + (int32_t)(ipsr & 0x1FFu));
}
