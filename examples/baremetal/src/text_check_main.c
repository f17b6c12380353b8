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

/* The graph's values in the app's buffers (text_data.h enumerates them). */
static int32_t valid_length; /* the attention mask as a count of valid tokens (TEXT_MASK_IS_LENGTH) */
static void *values[TEXT_VALUES];

static void bind_values(void)
{
    values[TEXT_VALUE_INPUT_IDS] = ids;
    values[TEXT_VALUE_TOKEN_TYPE_IDS] = token_types;
    values[TEXT_VALUE_ATTENTION_MASK] = TEXT_MASK_IS_LENGTH ? (void *)&valid_length : (void *)mask;
    values[TEXT_VALUE_HIDDEN] = hidden;
    values[TEXT_VALUE_LOGITS] = logits;
}

/* hidden = embedding(ids), then every layer in place, then logits = head(hidden): the nodes in order. */
static mcubert_status run_model(int32_t valid, const char **what, mcubert_message *message)
{
    mcubert_context context;
    context.buf = scratch;
    context.size = TEXT_SCRATCH_BYTES;
    valid_length = valid;
    return mcubert_app_run(text_nodes, TEXT_NODES, values, &context, what, message);
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
    bind_values();
    status = mcubert_app_validate(text_nodes, TEXT_NODES, TEXT_SCRATCH_BYTES, &what, &message);
    if (status != MCUBERT_OK) {
        return mcubert_report_refusal(what, status, &message);
    }
    static char source[SOURCE_BYTES];
    return classify_lines(
        mcubert_command_line_value(mcubert_platform_command_line(), "sentences=", source, SOURCE_BYTES));
}
