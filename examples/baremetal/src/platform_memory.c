/*
 * Platform of the boards with no trace port the debugger tools read by default (Raspberry Pi Pico's
 * Cortex-M0+ has no ITM): the console text goes to a RAM buffer, the exit status to a variable, and
 * a debugger reads both after the run (GDB over a Debug Probe: `print mcubert_console` and
 * `print mcubert_exit_status`). No peripheral is touched, so the image runs with or without a probe.
 * All four functions are weak: replace them with a UART (the Pico SDK's stdio, say) in your own file.
 */
#include "platform.h"

#define CONSOLE_BYTES 4096u

/* The last CONSOLE_BYTES - 1 bytes written, NUL-terminated once the exit status is set. */
char mcubert_console[CONSOLE_BYTES];
volatile uint32_t mcubert_console_length;
volatile int32_t mcubert_exit_status = -1;

__attribute__((weak)) void mcubert_platform_init(void)
{
}

__attribute__((weak)) void mcubert_platform_write(const char *text)
{
    for (; *text != '\0'; ++text) {
        if (mcubert_console_length == CONSOLE_BYTES - 1u) { /* full: keep the latest text */
            for (uint32_t i = 1u; i < CONSOLE_BYTES - 1u; ++i) {
                mcubert_console[i - 1u] = mcubert_console[i];
            }
            --mcubert_console_length;
        }
        mcubert_console[mcubert_console_length++] = *text;
    }
}

__attribute__((weak)) void mcubert_platform_exit(int32_t status)
{
    mcubert_console[mcubert_console_length] = '\0';
    mcubert_exit_status = status;
    for (;;) {
        __asm__ volatile("wfi");
    }
}

__attribute__((weak)) const char *mcubert_platform_command_line(void)
{
    return "";
}
