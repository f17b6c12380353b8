/* Board-independent part of the platform layer: the clock figure and number formatting. */
#include "platform.h"

#ifndef MCUBERT_CORE_CLOCK_HZ
#error "define MCUBERT_CORE_CLOCK_HZ (the CMake project does: the board's reset clock by default)"
#endif

uint32_t mcubert_core_clock_hz = MCUBERT_CORE_CLOCK_HZ;

void mcubert_platform_write_uint(uint32_t value)
{
    char digits[11];
    char *p = digits + sizeof digits - 1;
    *p = '\0';
    do {
        *--p = (char)('0' + value % 10u);
        value /= 10u;
    } while (value != 0u);
    mcubert_platform_write(p);
}

void mcubert_platform_write_int(int32_t value)
{
    if (value < 0) {
        mcubert_platform_write("-");
        mcubert_platform_write_uint(0u - (uint32_t)value);
    } else {
        mcubert_platform_write_uint((uint32_t)value);
    }
}

void mcubert_platform_write_fixed(int32_t value, int32_t decimals)
{
    uint32_t magnitude = value < 0 ? 0u - (uint32_t)value : (uint32_t)value;
    uint32_t unit = 1u;
    uint32_t fraction;
    char digits[11];
    int32_t i;
    for (i = 0; i < decimals; ++i) {
        unit *= 10u;
    }
    if (value < 0) {
        mcubert_platform_write("-");
    }
    mcubert_platform_write_uint(magnitude / unit);
    if (decimals <= 0) {
        return;
    }
    fraction = magnitude % unit;
    digits[0] = '.';
    for (i = decimals; i >= 1; --i) {
        digits[i] = (char)('0' + fraction % 10u);
        fraction /= 10u;
    }
    digits[decimals + 1] = '\0';
    mcubert_platform_write(digits);
}

/* No text input unless the platform has one (platform_semihosting.c) or the application brings its own. */
__attribute__((weak)) int32_t mcubert_platform_read_line(const char *source, uint8_t *buffer, uint32_t capacity,
                                                         uint32_t *line_bytes)
{
    (void)source;
    (void)buffer;
    (void)capacity;
    *line_bytes = 0u;
    return -1;
}

/* newlib's abort() (TFLM's TFLITE_ABORT, a failed TFLITE_DCHECK) and exit() end here. libnosys's
 * _exit spins forever, which under QEMU looks like a hang: report it and exit with status 3. */
void _exit(int status)
{
    (void)status;
    mcubert_platform_write("FAIL: abort() or exit() in the C library\n");
    mcubert_platform_exit(3);
}
