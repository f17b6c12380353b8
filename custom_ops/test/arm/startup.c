/*
 * Minimal Cortex-M startup shared by the firmware (QEMU) and the emulator image (unicorn):
 * vector table, reset handler (copy .data, zero .bss, enable the FPU for hard-float builds,
 * trap divisions by zero), fault handlers that report through semihosting, and the semihosting
 * calls themselves. No CMSIS: the few system registers are written by address.
 */
#include <stdint.h>

#include "semihost.h"

extern uint32_t __data_start__, __data_end__, __data_load__, __bss_start__, __bss_end__, __stack_top__;
int main(void);
void Reset_Handler(void);
void Fault_Handler(void);

#define SCB_CCR (*(volatile uint32_t *)0xE000ED14u)
#define SCB_CPACR (*(volatile uint32_t *)0xE000ED88u)
#define CCR_DIV_0_TRP (1u << 4)

__attribute__((section(".isr_vector"), used)) void (*const vector_table[16])(void) = {
    (void (*)(void))(uintptr_t)&__stack_top__,
    Reset_Handler,
    Fault_Handler, /* NMI */
    Fault_Handler, /* HardFault */
    Fault_Handler, /* MemManage */
    Fault_Handler, /* BusFault */
    Fault_Handler, /* UsageFault (an unaligned LDRD/LDM lands here) */
    0,
    0,
    0,
    0,
    Fault_Handler, /* SVCall */
    Fault_Handler, /* DebugMon */
    0,
    Fault_Handler, /* PendSV */
    Fault_Handler, /* SysTick */
};

void Reset_Handler(void)
{
    uint32_t *src = &__data_load__;
    uint32_t *dst = &__data_start__;
    while (dst < &__data_end__) {
        *dst++ = *src++;
    }
    for (dst = &__bss_start__; dst < &__bss_end__; ++dst) {
        *dst = 0;
    }
#if defined(__ARM_FP)
    SCB_CPACR |= 0xFu << 20; /* CP10, CP11 full access */
    __asm__ volatile("dsb\n isb" ::: "memory");
#endif
    SCB_CCR |= CCR_DIV_0_TRP;
    semihost_exit(main());
}

void Fault_Handler(void)
{
    uint32_t ipsr;
    __asm__ volatile("mrs %0, ipsr" : "=r"(ipsr));
    semihost_write("FAULT: exception ");
    semihost_write_int((int32_t)(ipsr & 0x1FFu));
    semihost_write("\n");
    semihost_exit(100 + (int32_t)(ipsr & 0x1FFu));
}

static uint32_t semihost_call(uint32_t operation, const void *argument)
{
    register uint32_t r0 __asm__("r0") = operation;
    register const void *r1 __asm__("r1") = argument;
    __asm__ volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
    return r0;
}

void semihost_write(const char *text)
{
    (void)semihost_call(0x04u /* SYS_WRITE0 */, text);
}

void semihost_write_int(int32_t value)
{
    char digits[12];
    char *p = digits + sizeof digits - 1;
    uint32_t magnitude = value < 0 ? 0u - (uint32_t)value : (uint32_t)value;
    *p = '\0';
    do {
        *--p = (char)('0' + magnitude % 10u);
        magnitude /= 10u;
    } while (magnitude != 0u);
    if (value < 0) {
        *--p = '-';
    }
    semihost_write(p);
}

void semihost_exit(int32_t code)
{
    /* SYS_EXIT_EXTENDED: {ADP_Stopped_ApplicationExit, code} -> QEMU exits with `code`. */
    const uint32_t block[2] = {0x20026u, (uint32_t)code};
    (void)semihost_call(0x20u, block);
    for (;;) {
    }
}
