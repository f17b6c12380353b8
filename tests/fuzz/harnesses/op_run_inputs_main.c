/*
 * Runs fuzz_op_run.c's derivation on a fixed list of inputs (fuzz_inputs.c, written by
 * tests/kernels/test_kernels_fuzz_inputs_qemu.py) and prints, per input, a hash of the bytes every
 * kernel run wrote (FNV-1a over MCUBERT_FUZZ_OUTPUT_HOOK's calls). Built for the host (stdio) and
 * as a Cortex-M image under QEMU (semihosting): equal lines mean equal outputs on both paths.
 */
#include <stddef.h>
#include <stdint.h>

#include "mcubert/mcubert_ops.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
void mcubert_fuzz_output(const int8_t *out, int32_t size);

extern const uint8_t *const fuzz_inputs[];
extern const uint32_t fuzz_input_sizes[];
extern const int32_t fuzz_input_count;

#if defined(__arm__)
#include "semihost.h"
static void print_text(const char *text)
{
    semihost_write(text);
}

/* The harness aborts on a finding: end the run with a status the test reads. */
void abort(void)
{
    semihost_write("ABORT\n");
    semihost_exit(3);
}
#else
#include <stdio.h>
static void print_text(const char *text)
{
    fputs(text, stdout);
}
#endif

static uint32_t hash;

void mcubert_fuzz_output(const int8_t *out, int32_t size)
{
    int32_t i;
    for (i = 0; i < size; ++i) {
        hash = (hash ^ (uint8_t)out[i]) * 16777619u;
    }
}

static void print_hex(uint32_t value)
{
    char text[9];
    int i;
    for (i = 7; i >= 0; --i, value >>= 4) {
        text[i] = "0123456789abcdef"[value & 15u];
    }
    text[8] = '\0';
    print_text(text);
}

int main(void)
{
    int32_t i;
    for (i = 0; i < fuzz_input_count; ++i) {
        hash = 2166136261u;
        LLVMFuzzerTestOneInput(fuzz_inputs[i], fuzz_input_sizes[i]);
        print_text("input ");
        print_hex((uint32_t)i);
        print_text(" outputs ");
        print_hex(hash);
        print_text("\n");
    }
    print_text("done\n");
    return 0;
}
