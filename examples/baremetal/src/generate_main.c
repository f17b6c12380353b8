/*
 * mcubert_generate: prompt in, tokens out, on the target, no TFLM.
 *
 * Reads prompts, one a line (mcubert_platform_read_line: a host file named by `prompts=<path>` on QEMU's
 * command line, a UART on a board that defines it): text, tokenized on the device by the export's
 * byte-level BPE when it has one (GENERATE_HAS_TOKENIZER), else token ids in the export's id space,
 * separated by spaces or commas. For each prompt it zeroes every layer's KV cache (what TFLM's ResetVariableTensors
 * does), feeds the prompt one token per step, then feeds back the next id (the best one, or the one
 * MCUBERT_SAMPLE drew when GENERATE_SAMPLES is 1) until `tokens=<n>` new
 * tokens (default GENERATE_NEW_TOKENS) or the context is full. A step is the whole decoder through the C
 * kernels — MCUBERT_DECODER_EMBEDDING, each layer's MCUBERT_CAUSAL_ATTENTION over its cache and
 * MCUBERT_DECODER_MLP, MCUBERT_LM_HEAD — with the options and weights of generate_data.c
 * (tflm_mcubert/firmware/app_data.py). One output line a prompt: the ids generated and the DWT cycles
 * of the prompt and of each generated token (0 where there is no cycle counter, e.g. under QEMU); with the
 * tokenizer a second line, "text <n>: " and the generated ids detokenized one at a time as they would be
 * streamed (a newline in it written as \n).
 *
 * Exit status: 0 every prompt continued, 2 a kernel or the tokenizer refused its inputs (with its message),
 * 3 a prompt that is empty, longer than the context or (without a tokenizer) not ids of the vocabulary
 * (named, and skipped), 4 no input, 100 + exception number on a fault.
 */
#include <stdint.h>
#include <string.h>

#include "generate_data.h"
#include "mcubert/mcubert_ops.h"
#include "app_support.h"
#include "platform.h"
#if GENERATE_HAS_TOKENIZER
#include "mcubert/mcubert_bpe_tokenizer.h"
#endif

#ifndef GENERATE_NEW_TOKENS
#define GENERATE_NEW_TOKENS 16
#endif
/* A prompt of the whole context: 11 characters an id, or (text) 16 bytes a token, 1 KB at least. */
#define LINE_BYTES (12 * GENERATE_CONTEXT + 16 > 1024 ? 12 * GENERATE_CONTEXT + 16 : 1024)
#define SOURCE_BYTES 256 /* the `prompts=` path */

/* Each layer's KV cache, the residual stream, the head's output and the ops' one scratch: the arena. */
__attribute__((section(".bss.mcubert_arena"), aligned(16))) static int8_t caches[GENERATE_LAYERS][GENERATE_CACHE_BYTES];
__attribute__((section(".bss.mcubert_arena"), aligned(16))) static int8_t hidden[GENERATE_HIDDEN];
__attribute__((section(".bss.mcubert_arena"), aligned(16))) static int32_t top[2 * GENERATE_TOP_K];
__attribute__((section(".bss.mcubert_arena"), aligned(16))) static int32_t rng_state[1]; /* MCUBERT_SAMPLE's */
__attribute__((section(".bss.mcubert_arena"), aligned(16))) static uint8_t scratch[GENERATE_SCRATCH_BYTES];
static uint8_t line[LINE_BYTES];
static int32_t prompt[GENERATE_CONTEXT];
static int32_t generated_ids[GENERATE_CONTEXT + 1]; /* the ids one prompt's continuation made */
#if GENERATE_HAS_TOKENIZER
static mcubert_bpe_tokenizer bpe;
static uint32_t bpe_buffer[(GENERATE_TOKENIZER_BUFFER_BYTES + 3) / 4];
static uint8_t piece[GENERATE_DECODE_BYTES + 1];
#endif

/* The graph's values in the app's buffers (generate_data.h enumerates them). */
static int32_t token_in, position_in;
static void *values[GENERATE_VALUES];

static void bind_values(void)
{
    int32_t i;
    values[GENERATE_VALUE_INPUT_ID] = &token_in;
    values[GENERATE_VALUE_POSITION] = &position_in;
    values[GENERATE_VALUE_HIDDEN] = hidden;
    for (i = 0; i < GENERATE_LAYERS; ++i) {
        values[GENERATE_VALUE_CACHE0 + i] = caches[i];
    }
    values[GENERATE_VALUE_TOP] = top;
#if GENERATE_SAMPLES
    values[GENERATE_VALUE_RNG_STATE0] = rng_state;
#endif
}

/* One token at `position`: every node in order; top[0] is the next id after it (the best one, or the one
 * MCUBERT_SAMPLE drew and moved to the front). */
static mcubert_status step(int32_t token, int32_t position, const char **what, mcubert_message *message)
{
    mcubert_context context;
    context.buf = scratch;
    context.size = GENERATE_SCRATCH_BYTES;
    token_in = token;
    position_in = position;
    return mcubert_app_run(generate_nodes, GENERATE_NODES, values, &context, what, message);
}

static void write_prompt_problem(uint32_t number, const char *problem)
{
    mcubert_platform_write("prompt ");
    mcubert_platform_write_uint(number);
    mcubert_platform_write(": ");
    mcubert_platform_write(problem);
#if !GENERATE_HAS_TOKENIZER
    mcubert_platform_write(" (ids 0..");
    mcubert_platform_write_int(GENERATE_VOCAB - 1);
    mcubert_platform_write(",");
#else
    mcubert_platform_write(" (");
#endif
    mcubert_platform_write(" at most ");
    mcubert_platform_write_int(GENERATE_CONTEXT);
    mcubert_platform_write(" tokens)\n");
}

#if GENERATE_HAS_TOKENIZER
/* `bytes` of text, a newline written as \n and a carriage return as \r (one output line a prompt). */
static void write_escaped(const uint8_t *text, uint32_t bytes)
{
    char chunk[2] = {0, 0};
    uint32_t i;
    for (i = 0u; i < bytes; ++i) {
        if (text[i] == '\n' || text[i] == '\r') {
            mcubert_platform_write(text[i] == '\n' ? "\\n" : "\\r");
        } else if (text[i] != '\0') {
            chunk[0] = (char)text[i];
            mcubert_platform_write(chunk);
        }
    }
}

/* The ids the tokenizer makes of a prompt line: their count, -1 after naming what is wrong with the line
 * (empty, more tokens than the context holds), -2 when the tokenizer refused (*status, *message). */
static int32_t parse_prompt(uint32_t number, const uint8_t *text, uint32_t bytes, mcubert_status *status,
                            mcubert_message *message)
{
    uint32_t count = 0u;
    *status =
        mcubert_bpe_encode(&bpe, text, bytes, prompt, GENERATE_CONTEXT, &count, bpe_buffer, sizeof bpe_buffer, message);
    if (*status == MCUBERT_ERROR_INPUT && count > GENERATE_CONTEXT) {
        write_prompt_problem(number, "the text makes more tokens than the context holds");
        return -1;
    }
    if (*status != MCUBERT_OK) {
        return -2;
    }
    if (count == 0u) {
        write_prompt_problem(number, "the line is empty");
        return -1;
    }
    return (int32_t)count;
}

/* "text <number>: " and the generated ids detokenized one at a time, as a device streams them. */
static mcubert_status write_text(uint32_t number, uint32_t count, mcubert_message *message)
{
    mcubert_utf8_stream stream;
    mcubert_status status = MCUBERT_OK;
    uint32_t i, written = 0u;
    mcubert_utf8_reset(&stream);
    mcubert_platform_write("text ");
    mcubert_platform_write_uint(number);
    mcubert_platform_write(": ");
    for (i = 0u; i <= count && status == MCUBERT_OK; ++i) {
        if (i < count) {
            status = mcubert_bpe_decode(&bpe, &generated_ids[i], 1u, &stream, piece, GENERATE_DECODE_BYTES, &written,
                                        message);
        } else {
            written = mcubert_utf8_finish(&stream, piece);
        }
        write_escaped(piece, status == MCUBERT_OK ? written : 0u);
    }
    mcubert_platform_write("\n");
    return status;
}
#else
/* The ids of a prompt line (decimal, separated by spaces, tabs or commas): their count, or -1 after naming
 * what is wrong (not a number, outside the vocabulary, more than the context holds). */
static int32_t parse_prompt(uint32_t number, const uint8_t *text, uint32_t bytes, mcubert_status *status,
                            mcubert_message *message)
{
    int32_t count = 0;
    uint32_t i = 0u;
    const char *problem = NULL;
    (void)status;
    (void)message;
    while (i < bytes && problem == NULL) {
        uint32_t value = 0u, digits = 0u;
        if (text[i] == ' ' || text[i] == '\t' || text[i] == ',' || text[i] == '\r') {
            ++i;
            continue;
        }
        for (; i < bytes && text[i] >= '0' && text[i] <= '9' && value < GENERATE_VOCAB; ++i, ++digits) {
            value = 10u * value + (uint32_t)(text[i] - '0');
        }
        if (digits == 0u || (i < bytes && text[i] >= '0' && text[i] <= '9')) {
            problem = digits == 0u ? "the line is not token ids (decimal numbers)"
                                   : "the line has an id outside the vocabulary";
        } else if (value >= GENERATE_VOCAB) {
            problem = "the line has an id outside the vocabulary";
        } else if (count == GENERATE_CONTEXT) {
            problem = "the line has more ids than the context holds";
        } else {
            prompt[count++] = (int32_t)value;
        }
    }
    if (problem == NULL && count > 0) {
        return count;
    }
    write_prompt_problem(number, problem != NULL ? problem : "the line is empty");
    return -1;
}
#endif

/* The number after `key` on the command line, or `fallback`. */
static uint32_t number_argument(const char *command_line, const char *key, uint32_t fallback)
{
    char text[12];
    uint32_t value = 0u, i;
    if (mcubert_command_line_value(command_line, key, text, sizeof text)[0] == '\0') {
        return fallback;
    }
    for (i = 0u; text[i] >= '0' && text[i] <= '9' && value < 100000u; ++i) {
        value = 10u * value + (uint32_t)(text[i] - '0');
    }
    return value;
}

/* Continues one prompt of `count` ids by up to `new_tokens` (kept in generated_ids, *made of them), printing
 * the ids: MCUBERT_OK or a refusal. */
static mcubert_status continue_prompt(uint32_t number, int32_t count, uint32_t new_tokens, uint32_t *made,
                                      const char **what, mcubert_message *message)
{
    mcubert_status status = MCUBERT_OK;
    uint32_t start = mcubert_cycles(), prompt_cycles, generated = 0u;
    int32_t position;
    (void)memset(caches, 0, sizeof caches); /* what TFLM's Reset() does to its variable tensors */
    rng_state[0] = 0;
    for (position = 0; position < count && status == MCUBERT_OK; ++position) {
        status = step(prompt[position], position, what, message);
    }
    prompt_cycles = mcubert_cycles() - start;
    mcubert_platform_write("prompt ");
    mcubert_platform_write_uint(number);
    mcubert_platform_write(": ");
    mcubert_platform_write_int(count);
    mcubert_platform_write(" ids in, ids out:");
    start = mcubert_cycles();
    while (status == MCUBERT_OK && generated < new_tokens) {
        mcubert_platform_write(" ");
        mcubert_platform_write_int(top[0]); /* the next id: the best one, or the drawn one */
        generated_ids[generated] = top[0];
        if (++generated == new_tokens) {
            break;
        }
        if (position == GENERATE_CONTEXT) {
            mcubert_platform_write(" (the context is full)");
            break;
        }
        status = step(top[0], position++, what, message);
    }
    mcubert_platform_write("; prompt ");
    mcubert_platform_write_uint(prompt_cycles);
    mcubert_platform_write(" cycles, ");
    mcubert_platform_write_uint(generated > 1u ? (mcubert_cycles() - start) / (generated - 1u) : 0u);
    mcubert_platform_write(" cycles a generated token\n");
    *made = generated;
    return status;
}

static int32_t generate_lines(const char *source, uint32_t new_tokens)
{
    mcubert_message message = {{0}};
    mcubert_status status;
    const char *what = "";
    uint32_t number = 0u, length, made = 0u;
    int32_t stored, count, exit_status = 0;
    while ((stored = mcubert_platform_read_line(source, line, LINE_BYTES, &length)) >= 0) {
        ++number;
        status = MCUBERT_OK;
        if (length > (uint32_t)stored) {
            write_prompt_problem(number, "the line is longer than the line buffer");
            count = -1;
        } else {
            count = parse_prompt(number, line, (uint32_t)stored, &status, &message);
        }
        if (count == -2) {
            return mcubert_report_refusal("tokenize", status, &message);
        }
        if (count < 0) {
            exit_status = 3;
            continue;
        }
        status = continue_prompt(number, count, new_tokens, &made, &what, &message);
#if GENERATE_HAS_TOKENIZER
        if (status == MCUBERT_OK) {
            what = "detokenize";
            status = write_text(number, made, &message);
        }
#endif
        if (status != MCUBERT_OK) {
            return mcubert_report_refusal(what, status, &message);
        }
    }
    if (number == 0u) {
        mcubert_platform_write("FAIL: no input: give `prompts=<file>` on QEMU's command line (-append), "
                               "or define mcubert_platform_read_line() for your board's UART\n");
        return 4;
    }
    mcubert_write_done(number, "prompts");
    return exit_status;
}

int main(void)
{
    mcubert_message message = {{0}};
    mcubert_status status;
    const char *what = "";
    const char *command_line = mcubert_platform_command_line();

    mcubert_platform_write("mcubert_generate: MCUBERT_DECODER_EMBEDDING, ");
    mcubert_platform_write_int(GENERATE_LAYERS);
    mcubert_platform_write(" x (MCUBERT_CAUSAL_ATTENTION, MCUBERT_DECODER_MLP), MCUBERT_LM_HEAD; context ");
    mcubert_platform_write_int(GENERATE_CONTEXT);
    mcubert_platform_write(", hidden ");
    mcubert_platform_write_int(GENERATE_HIDDEN);
    mcubert_platform_write(", vocabulary ");
    mcubert_platform_write_int(GENERATE_VOCAB);
    mcubert_platform_write(GENERATE_HAS_TOKENIZER ? ", text prompts (byte-level BPE)" : ", id prompts");
    mcubert_platform_write(GENERATE_SAMPLES ? ", sampling, " : ", greedy, ");
    mcubert_platform_write(mcubert_kernel_path_name());
    mcubert_platform_write("\n");
    bind_values();
    status = mcubert_app_validate(generate_nodes, GENERATE_NODES, GENERATE_SCRATCH_BYTES, &what, &message);
    if (status != MCUBERT_OK) {
        return mcubert_report_refusal(what, status, &message);
    }
#if GENERATE_HAS_TOKENIZER
    status = mcubert_bpe_init(&bpe, generate_vocab, GENERATE_VOCAB_BYTES, &message);
    if (status != MCUBERT_OK) {
        return mcubert_report_refusal("tokenizer init", status, &message);
    }
    if (mcubert_bpe_get_buffer_size(&bpe) > sizeof bpe_buffer || mcubert_bpe_decode_bound(&bpe, 1u) > sizeof piece) {
        mcubert_platform_write("FAIL: the tokenizer needs more scratch than the generated sizes\n");
        return 2;
    }
#endif
    static char source[SOURCE_BYTES];
    return generate_lines(mcubert_command_line_value(command_line, "prompts=", source, SOURCE_BYTES),
                          number_argument(command_line, "tokens=", GENERATE_NEW_TOKENS));
}
