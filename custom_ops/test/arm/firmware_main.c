/*
 * Self-checking firmware for QEMU (mps2-an500 Cortex-M7, mps2-an386 Cortex-M4, mps3-an547
 * Cortex-M55): runs every generated golden case (validate + kernel on the real memory system,
 * where an unaligned LDRD/LDM faults), compares with the reference's bytes, prints one line per
 * case through semihosting and exits with the number of failures (a fault exits with 100 +
 * exception).
 */
#include <stdint.h>

#include "golden.h"
#include "semihost.h"

int main(void)
{
    int32_t failures = 0;
    int32_t i;
    static const char *const paths[] = {"plain C path", "DSP path", "MVE path"};
    semihost_write("mcubert firmware: ");
    semihost_write(paths[mcubert_uses_dsp_path()]);
    semihost_write("\n");
    for (i = 0; i < golden_case_count; ++i) {
        mcubert_context context;
        mcubert_message message;
        int32_t result, k;
        /* Garbage scratch: a kernel must not depend on its contents. */
        for (k = 0; k < golden_scratch_bytes / 4; ++k) {
            golden_scratch[k] = 0xA5A5A5A5u ^ (uint32_t)k;
        }
        context.buf = golden_scratch;
        context.size = golden_scratch_bytes;
        message.text[0] = '\0';
        result = golden_cases[i].run(&context, &message);
        semihost_write(result == 0 ? "PASS " : "FAIL ");
        semihost_write(golden_cases[i].name);
        if (result != 0) {
            semihost_write(" code ");
            semihost_write_int(result);
            semihost_write(" ");
            semihost_write(message.text);
            ++failures;
        }
        semihost_write("\n");
    }
    semihost_write(failures == 0 ? "ALL PASS\n" : "FAILURES\n");
    return failures;
}
