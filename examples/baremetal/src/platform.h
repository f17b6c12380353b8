/*
 * The platform layer of the bare-metal examples: text output, exit, cycle counter and clock.
 *
 * mcubert_platform_init/_write/_exit/_command_line/_read_line are weak: define your own (a UART, RTT, ...) in
 * any source file of your build and the linker takes yours. Defaults (platform_itm.c): text to ITM
 * stimulus port 0, which ST-LINK carries over SWO on NUCLEO boards; exit parks the core with the
 * status in `mcubert_exit_status`. The QEMU target links platform_semihosting.c instead (console,
 * command line and exit status through semihosting); the Raspberry Pi boards link platform_memory.c
 * (console text in a RAM buffer a debugger reads).
 */
#ifndef MCUBERT_PLATFORM_H
#define MCUBERT_PLATFORM_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The core clock the firmware runs at, for cycles -> milliseconds. The startup code leaves the
 * clock at its reset value: 16 MHz (HSI) on STM32F7, 64 MHz (HSI) on STM32H7, 64 MHz on the nRF52840;
 * the Raspberry Pi parts boot from a ring oscillator of no exact frequency (0 here: no milliseconds
 * are printed). Configure PLLs in
 * mcubert_platform_init() (or your own startup) and set this to match, or build with
 * -DMCUBERT_CORE_CLOCK_HZ=<Hz> (CMake: -DMCUBERT_CORE_CLOCK_HZ=...). */
extern uint32_t mcubert_core_clock_hz;

void mcubert_platform_init(void);
void mcubert_platform_write(const char *text);
void mcubert_platform_exit(int32_t status) __attribute__((noreturn));
/* The text the firmware was started with: QEMU's -append (through semihosting); "" on the boards. */
const char *mcubert_platform_command_line(void);

/* Text input, one line at a time: the next line's bytes without its '\n', at most `capacity` of them
 * into `buffer` (the rest of a longer line is skipped); *line_bytes gets the line's whole length, so
 * the caller can tell it was cut. Returns the bytes stored, or -1 when there is no (more) input.
 * `source` names the input where the platform has a choice: under QEMU the host file it opens
 * (semihosting) on the first call; boards ignore it. The default (platform.c, weak) has no input:
 * on a board, define this in your own file to read a UART line (the ST-LINK virtual COM port). */
int32_t mcubert_platform_read_line(const char *source, uint8_t *buffer, uint32_t capacity, uint32_t *line_bytes);

/* DWT cycle counter (enabled by the startup code). It reads 0 where there is none: under QEMU, and
 * on ARMv6-M cores (Cortex-M0+). */
uint32_t mcubert_cycles(void);

/* Stack high-water mark: bytes of the reserved stack (__stack_size__, 16 KB by default) ever used
 * since reset, from the pattern the startup code paints; and the reserved size. */
uint32_t mcubert_stack_used_bytes(void);
uint32_t mcubert_stack_size_bytes(void);

/* Number formatting on top of mcubert_platform_write (no printf, no float formatting). */
void mcubert_platform_write_uint(uint32_t value);
void mcubert_platform_write_int(int32_t value);
/* value / 10^decimals with that many decimals, e.g. (-12345, 4) -> "-1.2345" */
void mcubert_platform_write_fixed(int32_t value, int32_t decimals);

#ifdef __cplusplus
}
#endif

#endif
