/*
 * mcubert_generate: prompt in, tokens out, on the target, no TFLM.
 *
 * Reads prompts, one a line (mcubert_platform_read_line: a host file named by `prompts=<path>` on QEMU's
 * command line, a UART on a board that defines it): token ids in the export's id space, separated by
 * spaces or commas. For each prompt it zeroes every layer's KV cache (what TFLM's ResetVariableTensors
 * does), feeds the prompt one token per step, then feeds back the best id (greedy) until `tokens=<n>` new
 * tokens (default GENERATE_NEW_TOKENS) or the context is full. A step is the whole decoder through the C
 * kernels — MCUBERT_DECODER_EMBEDDING, each layer's MCUBERT_CAUSAL_ATTENTION over its cache and
 * MCUBERT_DECODER_MLP, MCUBERT_LM_HEAD — with the options and weights of generate_data.c
 * (tflm_mcubert/firmware/decoder_data.py). One output line a prompt: the ids generated and the DWT cycles
 * of the prompt and of each generated token (0 where there is no cycle counter, e.g. under QEMU).
 *
 * Exit status: 0 every prompt continued, 2 a kernel refused its inputs (with its message), 3 a prompt that
 * is not ids of the vocabulary (named), 4 no input, 100 + exception number on a fault.
 */
#include <stdint.h>
#include <string.h>

#include "generate_data.h"
#include "mcubert/mcubert_ops.h"
#include "platform.h"

#ifndef GENERATE_NEW_TOKENS
#define GENERATE_NEW_TOKENS 16
#endif
#define LINE_BYTES (12 * GENERATE_CONTEXT + 16) /* a prompt of the whole context, 11 characters an id */
#define SOURCE_BYTES 256                        /* the `prompts=` path */

/* Each layer's KV cache, the residual stream, the head's output and the ops' one scratch: the arena. */
__attribute__((section(".bss.mcubert_arena"), aligned(16))) static int8_t caches[GENERATE_LAYERS][GENERATE_CACHE_BYTES];
__attribute__((section(".bss.mcubert_arena"), aligned(16))) static int8_t hidden[GENERATE_HIDDEN];
__attribute__((section(".bss.mcubert_arena"), aligned(16))) static int32_t top[2 * GENERATE_TOP_K];
__attribute__((section(".bss.mcubert_arena"), aligned(16))) static uint8_t scratch[GENERATE_SCRATCH_BYTES];
static uint8_t line[LINE_BYTES];
static int32_t prompt[GENERATE_CONTEXT];

static int32_t report_error(const char *what, mcubert_status status, const mcubert_message *message)
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

/* What a TFLM op's Prepare does, for every op; each op's scratch must fit the one buffer. */
static mcubert_status validate_model(const char **what, mcubert_message *message)
{
    const mcubert_decoder_embedding_params *e = &generate_embedding_params;
    const mcubert_lm_head_params *h = &generate_head_params;
    mcubert_status status;
    int32_t i, largest;
    *what = "decoder embedding validate";
    status = mcubert_decoder_embedding_validate(e, generate_embedding_tensors, MCUBERT_DECODER_EMBEDDING_NUM_TENSORS,
                                                message);
    largest = mcubert_decoder_embedding_get_buffer_size(e->context, e->hidden);
    for (i = 0; i < GENERATE_LAYERS && status == MCUBERT_OK; ++i) {
        const mcubert_causal_attention_params *a = generate_causal_attention_params[i];
        const mcubert_decoder_mlp_params *m = generate_decoder_mlp_params[i];
        int32_t size = mcubert_causal_attention_get_buffer_size(a->context, a->hidden, a->heads);
        largest = size > largest ? size : largest;
        size = mcubert_decoder_mlp_get_buffer_size(m->hidden, m->ffn);
        largest = size > largest ? size : largest;
        *what = "causal attention validate";
        status = mcubert_causal_attention_validate(a, generate_causal_attention_tensors[i],
                                                   MCUBERT_CAUSAL_ATTENTION_NUM_TENSORS, message);
        if (status == MCUBERT_OK) {
            *what = "decoder mlp validate";
            status = mcubert_decoder_mlp_validate(m, generate_decoder_mlp_tensors[i], MCUBERT_DECODER_MLP_NUM_TENSORS,
                                                  message);
        }
    }
    if (status == MCUBERT_OK) {
        int32_t size = mcubert_lm_head_get_buffer_size(h->hidden, h->top_k);
        largest = size > largest ? size : largest;
        *what = "lm head validate";
        status = mcubert_lm_head_validate(h, generate_head_tensors, MCUBERT_LM_HEAD_NUM_TENSORS, message);
    }
    if (status == MCUBERT_OK && largest > GENERATE_SCRATCH_BYTES) {
        *what = "scratch";
        (void)strcpy(message->text, "get_buffer_size exceeds the generated scratch size");
        status = MCUBERT_ERROR_ARGUMENT;
    }
    return status;
}

/* One token at `position`: every op in node order; top holds the best ids and scores after it. */
static mcubert_status step(int32_t token, int32_t position, const char **what, mcubert_message *message)
{
    mcubert_context context;
    mcubert_status status;
    int32_t i;
    context.buf = scratch;
    context.size = GENERATE_SCRATCH_BYTES;
    *what = "decoder embedding";
    status = mcubert_decoder_embedding_s8(&generate_embedding_params, &generate_embedding_weights, &token, &position,
                                          hidden, &context, message);
    for (i = 0; i < GENERATE_LAYERS && status == MCUBERT_OK; ++i) {
        *what = "causal attention";
        status = mcubert_causal_attention_s8(generate_causal_attention_params[i], generate_causal_attention_weights[i],
                                             hidden, &position, caches[i], &context, message);
        if (status == MCUBERT_OK) {
            *what = "decoder mlp";
            status = mcubert_decoder_mlp_s8(generate_decoder_mlp_params[i], generate_decoder_mlp_weights[i], hidden,
                                            &context, message);
        }
    }
    if (status == MCUBERT_OK) {
        *what = "lm head";
        status = mcubert_lm_head_s8(&generate_head_params, &generate_head_weights, hidden, top, &context, message);
    }
    return status;
}

/* The ids of a prompt line (decimal, separated by spaces, tabs or commas): their count, or -1 after naming
 * what is wrong (not a number, outside the vocabulary, more than the context holds). */
static int32_t parse_prompt(uint32_t number, const uint8_t *text, uint32_t bytes)
{
    int32_t count = 0;
    uint32_t i = 0u;
    const char *problem = NULL;
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
            problem = digits == 0u ? "is not token ids (decimal numbers)" : "has an id outside the vocabulary";
        } else if (value >= GENERATE_VOCAB) {
            problem = "has an id outside the vocabulary";
        } else if (count == GENERATE_CONTEXT) {
            problem = "has more ids than the context holds";
        } else {
            prompt[count++] = (int32_t)value;
        }
    }
    if (problem == NULL && count > 0) {
        return count;
    }
    mcubert_platform_write("prompt ");
    mcubert_platform_write_uint(number);
    mcubert_platform_write(problem != NULL ? ": the line " : ": the line is empty");
    mcubert_platform_write(problem != NULL ? problem : "");
    mcubert_platform_write(" (ids 0..");
    mcubert_platform_write_int(GENERATE_VOCAB - 1);
    mcubert_platform_write(", at most ");
    mcubert_platform_write_int(GENERATE_CONTEXT);
    mcubert_platform_write(")\n");
    return -1;
}

/* The number after `key` on the command line (up to a space), or `fallback`. */
static uint32_t number_argument(const char *command_line, const char *key, uint32_t fallback)
{
    const char *at = strstr(command_line, key);
    uint32_t value = 0u;
    if (at == NULL) {
        return fallback;
    }
    for (at += strlen(key); *at >= '0' && *at <= '9' && value < 100000u; ++at) {
        value = 10u * value + (uint32_t)(*at - '0');
    }
    return value;
}

/* The path after `prompts=` on the command line (up to a space), or "". */
static const char *source_from_command_line(const char *command_line)
{
    static char source[SOURCE_BYTES];
    const char *at = strstr(command_line, "prompts=");
    uint32_t n = 0u;
    if (at != NULL) {
        for (at += 8; at[n] != '\0' && at[n] != ' ' && n < SOURCE_BYTES - 1u; ++n) {
            source[n] = at[n];
        }
    }
    source[n] = '\0';
    return source;
}

/* Continues one prompt of `count` ids by up to `new_tokens`, printing the ids: MCUBERT_OK or a refusal. */
static mcubert_status continue_prompt(uint32_t number, int32_t count, uint32_t new_tokens, const char **what,
                                      mcubert_message *message)
{
    mcubert_status status = MCUBERT_OK;
    uint32_t start = mcubert_cycles(), prompt_cycles, generated = 0u;
    int32_t position;
    (void)memset(caches, 0, sizeof caches);
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
        mcubert_platform_write_int(top[0]); /* the best id: greedy */
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
    return status;
}

static int32_t generate_lines(const char *source, uint32_t new_tokens)
{
    mcubert_message message = {{0}};
    mcubert_status status;
    const char *what = "";
    uint32_t number = 0u, length;
    int32_t stored, count, exit_status = 0;
    while ((stored = mcubert_platform_read_line(source, line, LINE_BYTES, &length)) >= 0) {
        ++number;
        count = length > (uint32_t)stored ? -1 : parse_prompt(number, line, (uint32_t)stored);
        if (count < 0) {
            exit_status = 3;
            continue;
        }
        status = continue_prompt(number, count, new_tokens, &what, &message);
        if (status != MCUBERT_OK) {
            return report_error(what, status, &message);
        }
    }
    if (number == 0u) {
        mcubert_platform_write("FAIL: no input: give `prompts=<file>` on QEMU's command line (-append), "
                               "or define mcubert_platform_read_line() for your board's UART\n");
        return 4;
    }
    mcubert_platform_write("done: ");
    mcubert_platform_write_uint(number);
    mcubert_platform_write(" prompts; stack used ");
    mcubert_platform_write_uint(mcubert_stack_used_bytes());
    mcubert_platform_write(" of ");
    mcubert_platform_write_uint(mcubert_stack_size_bytes());
    mcubert_platform_write(" B\n");
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
    mcubert_platform_write(mcubert_uses_dsp_path() ? ", greedy, DSP path\n" : ", greedy, plain C path\n");
    status = validate_model(&what, &message);
    if (status != MCUBERT_OK) {
        return report_error(what, status, &message);
    }
    return generate_lines(source_from_command_line(command_line),
                          number_argument(command_line, "tokens=", GENERATE_NEW_TOKENS));
}
