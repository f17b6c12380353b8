/*
 * Platform of the QEMU target (mps2-an500, Cortex-M7): console text and the exit status through
 * Arm semihosting (BKPT 0xAB), so `qemu-system-arm -semihosting-config enable=on,target=native`
 * prints the output and exits with main()'s status, `-append "..."` reaches
 * mcubert_platform_command_line(), and mcubert_platform_read_line() reads a host file. Never link this into a board
 * image: without a debugger, BKPT escalates to a HardFault.
 */
#include "platform.h"

#define SYS_OPEN 0x01u
#define SYS_CLOSE 0x02u
#define SYS_WRITE0 0x04u
#define SYS_READ 0x06u
#define SYS_GET_CMDLINE 0x15u
#define SYS_EXIT_EXTENDED 0x20u
#define ADP_STOPPED_APPLICATION_EXIT 0x20026u
#define OPEN_MODE_READ_BINARY 1u /* fopen's "rb" */

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
    static char line[512]; /* the kernel's path comes first; QEMU fails the call if the text does not fit */
    /* {buffer, size} in; the host writes the text and its length. Nonzero status: nothing to read. */
    uint32_t block[2] = {(uint32_t)(uintptr_t)line, sizeof line};
    if (semihost_call(SYS_GET_CMDLINE, block) != 0u) {
        line[0] = '\0';
    }
    return line;
}

/* The input file: opened on the first read, closed at its end; read in chunks to keep the host calls few. */
static struct {
    int32_t state; /* 0 not opened yet, 1 reading, -1 ended (or could not be opened) */
    uint32_t handle;
    uint32_t length, at;
    uint8_t chunk[256];
} input;

static uint32_t text_length(const char *text)
{
    uint32_t n = 0u;
    while (text[n] != '\0') {
        ++n;
    }
    return n;
}

static void open_input(const char *source)
{
    uint32_t block[3];
    uint32_t handle;
    input.state = -1;
    if (source == 0 || source[0] == '\0') {
        return;
    }
    block[0] = (uint32_t)(uintptr_t)source;
    block[1] = OPEN_MODE_READ_BINARY;
    block[2] = text_length(source);
    handle = semihost_call(SYS_OPEN, block);
    if (handle != 0xFFFFFFFFu) {
        input.handle = handle;
        input.state = 1;
    }
}

/* The next byte of the file, or -1 at its end. */
static int32_t next_byte(void)
{
    if (input.at == input.length) {
        /* {handle, buffer, size} in; the host returns how many bytes it did NOT read. */
        uint32_t block[3] = {input.handle, (uint32_t)(uintptr_t)input.chunk, sizeof input.chunk};
        uint32_t missing;
        if (input.state != 1) {
            return -1;
        }
        missing = semihost_call(SYS_READ, block);
        input.at = 0u;
        input.length = missing <= sizeof input.chunk ? sizeof input.chunk - missing : 0u;
        if (input.length == 0u) {
            (void)semihost_call(SYS_CLOSE, &input.handle);
            input.state = -1;
            return -1;
        }
    }
    return input.chunk[input.at++];
}

int32_t mcubert_platform_read_line(const char *source, uint8_t *buffer, uint32_t capacity, uint32_t *line_bytes)
{
    uint32_t stored = 0u, total = 0u;
    int32_t c;
    if (input.state == 0) {
        open_input(source);
    }
    *line_bytes = 0u;
    c = next_byte();
    if (c < 0) {
        return -1;
    }
    for (; c >= 0 && c != '\n'; c = next_byte()) {
        if (stored < capacity) {
            buffer[stored++] = (uint8_t)c;
        }
        ++total;
    }
    *line_bytes = total;
    return (int32_t)stored;
}

void mcubert_platform_exit(int32_t status)
{
    /* {reason, code}: QEMU exits with `code`. */
    const uint32_t block[2] = {ADP_STOPPED_APPLICATION_EXIT, (uint32_t)status};
    (void)semihost_call(SYS_EXIT_EXTENDED, block);
    for (;;) {
    }
}
