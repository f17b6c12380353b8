/*
 * Default platform of the NUCLEO boards: text to ITM stimulus port 0 (SWO through ST-LINK).
 *
 * The debugger enables the trace path (TPIU, SWO pin, baud rate from the core clock you tell it:
 * 16 MHz on F7 / 64 MHz on H7 at reset) when you open its SWV/ITM console. Until then ITM is off
 * and the text is dropped, as CMSIS's ITM_SendChar does, so the firmware runs the same with no
 * debugger attached. All four functions are weak: replace them with a UART in your own file.
 */
#include "platform.h"

#define ITM_STIM0 (*(volatile uint32_t *)0xE0000000u)
#define ITM_STIM0_BYTE (*(volatile uint8_t *)0xE0000000u)
#define ITM_TER (*(volatile uint32_t *)0xE0000E00u)
#define ITM_TCR (*(volatile uint32_t *)0xE0000E80u)
#define DEMCR (*(volatile uint32_t *)0xE000EDFCu)
#define DEMCR_TRCENA (1u << 24)
#define ITM_TCR_ITMENA 1u
/* A stuck trace FIFO (a debugger that left without disabling ITM) must not hang the firmware. */
#define ITM_READY_SPINS 100000u

volatile int32_t mcubert_exit_status = -1;

__attribute__((weak)) void mcubert_platform_init(void)
{
}

static int itm_port0_enabled(void)
{
    return (DEMCR & DEMCR_TRCENA) != 0u && (ITM_TCR & ITM_TCR_ITMENA) != 0u && (ITM_TER & 1u) != 0u;
}

__attribute__((weak)) void mcubert_platform_write(const char *text)
{
    if (!itm_port0_enabled()) {
        return;
    }
    for (; *text != '\0'; ++text) {
        uint32_t spins = 0u;
        while (ITM_STIM0 == 0u) { /* reads 1 when the port can take a byte */
            if (++spins == ITM_READY_SPINS) {
                return;
            }
        }
        ITM_STIM0_BYTE = (uint8_t)*text;
    }
}

/* Bare metal has nowhere to return to: keep the status where a debugger can read it
 * (`print mcubert_exit_status`) and sleep. */
__attribute__((weak)) void mcubert_platform_exit(int32_t status)
{
    mcubert_exit_status = status;
    for (;;) {
        __asm__ volatile("wfi");
    }
}

__attribute__((weak)) const char *mcubert_platform_command_line(void)
{
    return "";
}
