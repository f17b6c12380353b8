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
__attribute__((used)) const entry_point mcubert_emu_api[] = {
    (entry_point)mcubert_embedding_s8,
    (entry_point)mcubert_embedding_validate,
    (entry_point)mcubert_embedding_get_buffer_size,
    (entry_point)mcubert_attention_s8,
    (entry_point)mcubert_attention_validate,
    (entry_point)mcubert_attention_get_buffer_size,
    (entry_point)mcubert_mlp_s8,
    (entry_point)mcubert_mlp_validate,
    (entry_point)mcubert_mlp_get_buffer_size,
    (entry_point)mcubert_classifier_head_s8,
    (entry_point)mcubert_classifier_head_validate,
    (entry_point)mcubert_classifier_head_get_buffer_size,
    (entry_point)mcubert_lm_head_s8,
    (entry_point)mcubert_lm_head_validate,
    (entry_point)mcubert_lm_head_get_buffer_size,
    (entry_point)mcubert_causal_attention_s8,
    (entry_point)mcubert_causal_attention_validate,
    (entry_point)mcubert_causal_attention_get_buffer_size,
    (entry_point)mcubert_decoder_mlp_s8,
    (entry_point)mcubert_decoder_mlp_validate,
    (entry_point)mcubert_decoder_mlp_get_buffer_size,
    (entry_point)mcubert_decoder_embedding_s8,
    (entry_point)mcubert_decoder_embedding_validate,
    (entry_point)mcubert_decoder_embedding_get_buffer_size,
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

int main(void)
{
    /* Reaching the table from the reset path is what keeps it (and the API) in the image. */
    const entry_point *volatile table = mcubert_emu_api;
    return table[0] != 0 ? 0 : 1;
}
