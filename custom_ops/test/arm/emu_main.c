/*
 * The kernel library linked into an image for the unicorn runner
 * (tflm_mcubert/measure/arm_emulator.py), which loads the ELF and calls the API functions
 * directly; main() is never run there. `mcubert_emu_api` keeps every entry point through
 * --gc-sections (main references it), and calls return to `mcubert_emu_stop`, where the runner halts.
 */
#include "mcubert/mcubert_ops.h"
#include "mcubert/mcubert_tokenizer.h"
#include "mcubert/mcubert_bpe_tokenizer.h"
#include "mcubert/mcubert_wordpiece_decode.h"

void mcubert_emu_stop(void);

__attribute__((noinline)) void mcubert_emu_stop(void)
{
    for (;;) {
        __asm__ volatile("bkpt 0");
    }
}

typedef void (*entry_point)(void);
/* Every op's kernel, validate and get_buffer_size, in registry order (MCUBERT_OPS: the contract). */
#define OP_ENTRY_POINTS(lower, upper, code)                                                                            \
    (entry_point) mcubert_##lower##_s8, (entry_point)mcubert_##lower##_validate,                                       \
        (entry_point)mcubert_##lower##_get_buffer_size,

/* The op list is a macro, which clang-format would read as a call. */
/* clang-format off */
__attribute__((used)) const entry_point mcubert_emu_api[] = {
    MCUBERT_OPS(OP_ENTRY_POINTS)
    (entry_point)mcubert_verify_model,
    (entry_point)mcubert_verify_model_expected,
    (entry_point)mcubert_uses_dsp_path,
    (entry_point)mcubert_tokenizer_init,
    (entry_point)mcubert_tokenizer_get_buffer_size,
    (entry_point)mcubert_tokenize,
    (entry_point)mcubert_bpe_init,
    (entry_point)mcubert_bpe_get_buffer_size,
    (entry_point)mcubert_bpe_encode,
    (entry_point)mcubert_bpe_decode,
    (entry_point)mcubert_bpe_decode_bound,
    (entry_point)mcubert_utf8_finish,
    (entry_point)mcubert_wordpiece_decoder_init,
    (entry_point)mcubert_wordpiece_decode,
    (entry_point)mcubert_wordpiece_decode_bound,
    mcubert_emu_stop,
};
/* clang-format on */
#undef OP_ENTRY_POINTS

int main(void)
{
    /* Reaching the table from the reset path is what keeps it (and the API) in the image. */
    const entry_point *volatile table = mcubert_emu_api;
    return table[0] != 0 ? 0 : 1;
}
