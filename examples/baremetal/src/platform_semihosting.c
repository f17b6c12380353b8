/*
 * Platform of the QEMU target (mps2-an500, Cortex-M7): console text and the exit status through
 * Arm semihosting (BKPT 0xAB), so `qemu-system-arm -semihosting-config enable=on,target=native`
 * prints the output and exits with main()'s status, and `-append "..."` reaches
 * mcubert_platform_command_line(). Never link this into a board image: without a
 * debugger, BKPT escalates to a HardFault.
 */
#include "platform.h"

#define SYS_WRITE0 0x04u
#define SYS_GET_CMDLINE 0x15u
#define SYS_EXIT_EXTENDED 0x20u
#define ADP_STOPPED_APPLICATION_EXIT 0x20026u

static uint32_t semihost_call(uint32_t operation, const void *argument)
{
    register uint32_t r0 __asm__("r0") = operation;
    register const void *r1 __asm__("r1") = argument;
    __asm__ volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
    return r0;
}

void mcubert_platform_init(void)
{
}

void mcubert_platform_write(const char *text)
{
    (void)semihost_call(SYS_WRITE0, text);
}

const char *mcubert_platform_command_line(void)
{
    static char line[128];
    /* {buffer, size} in; the host writes the text and its length. Nonzero status: nothing to read. */
    uint32_t block[2] = {(uint32_t)(uintptr_t)line, sizeof line};
    if (semihost_call(SYS_GET_CMDLINE, block) != 0u) {
        line[0] = '\0';
    }
    return line;
}

void mcubert_platform_exit(int32_t status)
{
    /* {reason, code}: QEMU exits with `code`. */
    const uint32_t block[2] = {ADP_STOPPED_APPLICATION_EXIT, (uint32_t)status};
    (void)semihost_call(SYS_EXIT_EXTENDED, block);
    for (;;) {
    }
}
