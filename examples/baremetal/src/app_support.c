#include "app_support.h"

#include <string.h>

#include "platform.h"

int32_t mcubert_report_refusal(const char *what, mcubert_status status, const mcubert_message *message)
{
    mcubert_platform_write("FAIL: ");
    mcubert_platform_write(what);
    mcubert_platform_write(": ");
    mcubert_platform_write(mcubert_status_name(status));
    mcubert_platform_write(": ");
    mcubert_platform_write(message->text);
    mcubert_platform_write("\n");
    return 2;
}

const char *mcubert_command_line_value(const char *command_line, const char *key, char *out, uint32_t capacity)
{
    const char *at = strstr(command_line, key);
    uint32_t n = 0u;
    if (at != NULL) {
        for (at += strlen(key); at[n] != '\0' && at[n] != ' ' && n + 1u < capacity; ++n) {
            out[n] = at[n];
        }
    }
    out[n] = '\0';
    return out;
}

void mcubert_write_done(uint32_t count, const char *items)
{
    mcubert_platform_write("done: ");
    mcubert_platform_write_uint(count);
    mcubert_platform_write(" ");
    mcubert_platform_write(items);
    mcubert_platform_write("; stack used ");
    mcubert_platform_write_uint(mcubert_stack_used_bytes());
    mcubert_platform_write(" of ");
    mcubert_platform_write_uint(mcubert_stack_size_bytes());
    mcubert_platform_write(" B\n");
}

const char *mcubert_kernel_path_name(void)
{
    static const char *const names[] = {"plain C path", "DSP path", "MVE path"};
    return names[mcubert_uses_dsp_path()];
}
