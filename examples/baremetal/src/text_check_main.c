/*
 * mcubert_text_check: text in, label out, on the target, no TFLM.
 *
 * Reads sentences, one a line (UTF-8; mcubert_platform_read_line: a host file named by
 * `sentences=<path>` on QEMU's command line, a UART on a board that defines it), tokenizes each on the
 * device (mcubert_tokenizer, ids in the export's id space) and runs the whole model through the C
 * kernels — MCUBERT_EMBEDDING, every layer's MCUBERT_ATTENTION and MCUBERT_MLP, MCUBERT_CLASSIFIER_HEAD —
 * with the options, weights and tokenizer blob of text_data.c (tflm_mcubert/firmware/app_data.py).
 * One output line a sentence: the label, "label <name> (<id>)" (argmax of the int8 logits, the first on
 * ties; the names are the export's, TEXT_LABEL_NAMES), the logits,
 * the tokens used, and the DWT cycles of tokenize and of the model (0 where there is no cycle counter,
 * e.g. under QEMU).
 *
 * A line longer than TEXT_LINE_BYTES (text_data.h: more bytes than TEXT_SEQ_LEN tokens of any script take)
 * is cut there (the output says so); a cut inside a UTF-8 sequence
 * and any other invalid UTF-8 are the tokenizer's to handle (it drops them, as BERT drops U+FFFD).
 * Exit status: 0 every sentence classified, 2 a kernel or the tokenizer refused its inputs (with its
 * message), 4 no input, 100 + exception number on a fault.
 */
#include <stdint.h>
#include <string.h>

#include "mcubert/mcubert_ops.h"
#include "mcubert/mcubert_tokenizer.h"
#include "app_support.h"
#include "platform.h"
#include "text_data.h"

#define SOURCE_BYTES 256 /* the `sentences=` path */

/* The hidden state and the ops' one scratch (the largest op's size) live in the arena region. */
__attribute__((section(".bss.mcubert_arena"), aligned(16))) static int8_t hidden[TEXT_HIDDEN_BYTES];
__attribute__((section(".bss.mcubert_arena"), aligned(16))) static uint8_t scratch[TEXT_SCRATCH_BYTES];
static uint32_t word_buffer[(TEXT_TOKENIZER_BUFFER_BYTES + 3) / 4]; /* uint32_t: 4-byte aligned */
static uint8_t line[TEXT_LINE_BYTES];
static int32_t ids[TEXT_SEQ_LEN];
static int32_t token_types[TEXT_SEQ_LEN];
static int8_t mask[TEXT_SEQ_LEN];
static int8_t logits[TEXT_LABELS];
static mcubert_tokenizer tokenizer;

static void write_cycles(const char *label, uint32_t cycles)
{
    mcubert_platform_write(label);
    mcubert_platform_write_uint(cycles);
    mcubert_platform_write(" cycles");
    if (mcubert_core_clock_hz != 0u) {
        /* milliseconds with 3 decimals: cycles * 10^6 / Hz, in 64 bits */
        uint64_t micro = (uint64_t)cycles * 1000000u / mcubert_core_clock_hz;
        mcubert_platform_write(" (");
        mcubert_platform_write_fixed((int32_t)micro, 3);
        mcubert_platform_write(" ms)");
    }
}

/* What a TFLM op's Prepare does, for every op: options, tensor shapes, constant contents; and each
 * op's scratch must fit the one buffer. MCUBERT_OK or the first refusal (named in *what). */
static mcubert_status validate_model(const char **what, mcubert_message *message)
{
    const mcubert_embedding_params *e = &text_embedding_params;
    const mcubert_classifier_head_params *h = &text_head_params;
    mcubert_status status;
    int32_t i;
    *what = "embedding validate";
    status = mcubert_embedding_validate(e, text_embedding_tensors, MCUBERT_EMBEDDING_NUM_TENSORS, message);
    if (status == MCUBERT_OK && mcubert_embedding_get_buffer_size(e->seq_len, e->hidden) > TEXT_SCRATCH_BYTES) {
        status = MCUBERT_ERROR_ARGUMENT;
    }
    for (i = 0; i < TEXT_LAYERS && status == MCUBERT_OK; ++i) {
        const mcubert_attention_params *a = text_attention_params[i];
        const mcubert_mlp_params *m = text_mlp_params[i];
        *what = "attention validate";
        status = mcubert_attention_validate(a, text_attention_tensors[i], MCUBERT_ATTENTION_NUM_TENSORS, message);
        if (status == MCUBERT_OK &&
            mcubert_attention_get_buffer_size(a->seq_len, a->hidden, a->heads, a->tile) > TEXT_SCRATCH_BYTES) {
            status = MCUBERT_ERROR_ARGUMENT;
        }
        if (status == MCUBERT_OK) {
            *what = "mlp validate";
            status = mcubert_mlp_validate(m, text_mlp_tensors[i], MCUBERT_MLP_NUM_TENSORS, message);
        }
        if (status == MCUBERT_OK &&
            mcubert_mlp_get_buffer_size(m->seq_len, m->hidden, m->ffn, m->tile) > TEXT_SCRATCH_BYTES) {
            status = MCUBERT_ERROR_ARGUMENT;
        }
    }
    if (status == MCUBERT_OK) {
        *what = "classifier head validate";
        status = mcubert_classifier_head_validate(h, text_head_tensors, MCUBERT_CLASSIFIER_HEAD_NUM_TENSORS, message);
    }
    if (status == MCUBERT_OK &&
        mcubert_classifier_head_get_buffer_size(h->seq_len, h->hidden, h->labels) > TEXT_SCRATCH_BYTES) {
        status = MCUBERT_ERROR_ARGUMENT;
    }
    if (status == MCUBERT_ERROR_ARGUMENT && message->text[0] == '\0') {
        (void)strcpy(message->text, "get_buffer_size exceeds the generated scratch size");
    }
    return status;
}

/* hidden = embedding(ids), then every layer in place, then logits = head(hidden). */
static mcubert_status run_model(int32_t valid, const char **what, mcubert_message *message)
{
    mcubert_context context;
    mcubert_status status;
    int32_t i;
    context.buf = scratch;
    context.size = TEXT_SCRATCH_BYTES;
    *what = "embedding";
    status = mcubert_embedding_s8(&text_embedding_params, &text_embedding_weights, ids, token_types, hidden, &context,
                                  message);
    for (i = 0; i < TEXT_LAYERS && status == MCUBERT_OK; ++i) {
        /* the key mask, or (mask_mode 1) the valid length */
        const void *key_mask = text_attention_params[i]->mask_mode == 0 ? (const void *)mask : (const void *)&valid;
        *what = "attention";
        status = mcubert_attention_s8(text_attention_params[i], text_attention_weights[i], hidden, key_mask, &context,
                                      message);
        if (status == MCUBERT_OK) {
            *what = "mlp";
            status = mcubert_mlp_s8(text_mlp_params[i], text_mlp_weights[i], hidden, &context, message);
        }
    }
    if (status == MCUBERT_OK) {
        *what = "classifier head";
        status = mcubert_classifier_head_s8(&text_head_params, &text_head_weights, hidden, logits, &context, message);
    }
    return status;
}

static const char *const label_names[TEXT_LABELS] = TEXT_LABEL_NAMES;

static void write_result(uint32_t number, uint32_t valid, uint32_t tokenize_cycles, uint32_t model_cycles)
{
    int32_t i, label = 0;
    for (i = 1; i < TEXT_LABELS; ++i) {
        if (logits[i] > logits[label]) {
            label = i;
        }
    }
    mcubert_platform_write("sentence ");
    mcubert_platform_write_uint(number);
    mcubert_platform_write(": label ");
    mcubert_platform_write(label_names[label]);
    mcubert_platform_write(" (");
    mcubert_platform_write_int(label);
    mcubert_platform_write("), logits [");
    for (i = 0; i < TEXT_LABELS; ++i) {
        mcubert_platform_write(i == 0 ? "" : ", ");
        mcubert_platform_write_int(logits[i]);
    }
    mcubert_platform_write("], tokens ");
    mcubert_platform_write_uint(valid);
    mcubert_platform_write(" of ");
    mcubert_platform_write_uint(TEXT_SEQ_LEN);
    write_cycles(", tokenize ", tokenize_cycles);
    write_cycles(", model ", model_cycles);
    mcubert_platform_write("\n");
}

/* Tokenizes and classifies every line of the input; the exit status. */
static int32_t classify_lines(const char *source)
{
    mcubert_message message = {{0}};
    mcubert_status status;
    const char *what = "tokenize";
    uint32_t number = 0u, length, valid, start, tokenize_cycles;
    int32_t stored;
    while ((stored = mcubert_platform_read_line(source, line, TEXT_LINE_BYTES, &length)) >= 0) {
        ++number;
        if (length > (uint32_t)stored) {
            mcubert_platform_write("sentence ");
            mcubert_platform_write_uint(number);
            mcubert_platform_write(": the line has ");
            mcubert_platform_write_uint(length);
            mcubert_platform_write(" bytes; only its first ");
            mcubert_platform_write_int(stored);
            mcubert_platform_write(" are read\n");
        }
        start = mcubert_cycles();
        status = mcubert_tokenize(&tokenizer, line, (uint32_t)stored, NULL, 0u, TEXT_SEQ_LEN, ids, token_types, mask,
                                  &valid, word_buffer, sizeof word_buffer, &message);
        tokenize_cycles = mcubert_cycles() - start;
        if (status != MCUBERT_OK) {
            return mcubert_report_refusal("tokenize", status, &message);
        }
        start = mcubert_cycles();
        status = run_model((int32_t)valid, &what, &message);
        if (status != MCUBERT_OK) {
            return mcubert_report_refusal(what, status, &message);
        }
        write_result(number, valid, tokenize_cycles, mcubert_cycles() - start);
    }
    if (number == 0u) {
        mcubert_platform_write("FAIL: no input: give `sentences=<file>` on QEMU's command line (-append), "
                               "or define mcubert_platform_read_line() for your board's UART\n");
        return 4;
    }
    mcubert_write_done(number, "sentences");
    return 0;
}

int main(void)
{
    mcubert_message message = {{0}};
    mcubert_status status;
    const char *what = "";

    mcubert_platform_write("mcubert_text_check: MCUBERT_EMBEDDING, ");
    mcubert_platform_write_int(TEXT_LAYERS);
    mcubert_platform_write(" x (MCUBERT_ATTENTION, MCUBERT_MLP), MCUBERT_CLASSIFIER_HEAD; seq_len ");
    mcubert_platform_write_int(TEXT_SEQ_LEN);
    mcubert_platform_write(", hidden ");
    mcubert_platform_write_int(TEXT_HIDDEN);
    mcubert_platform_write(", ");
    mcubert_platform_write_int(TEXT_LABELS);
    mcubert_platform_write(" labels, lines of up to ");
    mcubert_platform_write_int(TEXT_LINE_BYTES);
    mcubert_platform_write(" bytes, ");
    mcubert_platform_write(mcubert_kernel_path_name());
    mcubert_platform_write("\n");

    status = mcubert_tokenizer_init(&tokenizer, text_vocab, TEXT_VOCAB_BYTES, &message);
    if (status != MCUBERT_OK) {
        return mcubert_report_refusal("tokenizer init", status, &message);
    }
    if (mcubert_tokenizer_get_buffer_size(&tokenizer) > sizeof word_buffer) {
        mcubert_platform_write("FAIL: the tokenizer needs more scratch than the generated size\n");
        return 2;
    }
    status = validate_model(&what, &message);
    if (status != MCUBERT_OK) {
        return mcubert_report_refusal(what, status, &message);
    }
    static char source[SOURCE_BYTES];
    return classify_lines(
        mcubert_command_line_value(mcubert_platform_command_line(), "sentences=", source, SOURCE_BYTES));
}
