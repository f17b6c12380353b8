/*
 * libFuzzer harness: each op's kernel after a validate that passes. The input does not describe
 * options or tensors directly: every field is derived from it and clamped into its valid range
 * (cross-field rules included: heads divides hidden, tile <= seq_len, cluster ends up to
 * vocab_size, spec_version for int4), the constant tensors get valid contents (pair4 / w4row
 * padding zero, no -128 / -8, multipliers 0 or in [2^30, 2^31), biases within +-2^30, LUTs in
 * range), and only the run-time inputs are hostile: token ids and types out of range, mask bytes,
 * a valid length outside [0, s], saturated activations. Input layout (little-endian):
 *
 *   u8 op (0 embedding, 1 attention, 2 mlp, 3 classifier head; mod 4)
 *   u8 flags: bit 0 int4 weights (embedding, attention, mlp), bit 1 hostile run-time inputs,
 *             bit 2 saturated activations
 *   then the bytes every derivation takes in order (zeros past the end of the input)
 *
 * Every tensor and the scratch (get_buffer_size bytes) is its own heap block of exactly its size,
 * so ASan reports any read or write past it. Checks: validate returns OK; the kernel returns OK
 * for valid inputs and MCUBERT_ERROR_INPUT (output untouched) for an id, type or length out of
 * range; two runs with differently filled scratch give the same bytes (no read of scratch before
 * it is written). Build with -DMCUBERT_EMULATE_DSP for the DSP path.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mcubert/mcubert_ops.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
#ifdef MCUBERT_FUZZ_OUTPUT_HOOK
void MCUBERT_FUZZ_OUTPUT_HOOK(const int8_t *out, int32_t size);
#endif

typedef struct {
    const uint8_t *data;
    size_t size;
    size_t at;
    int hostile; /* flags bit 1 */
} reader;

static uint32_t take(reader *r, size_t bytes)
{
    uint32_t value = 0;
    size_t i;
    for (i = 0; i < bytes; ++i) {
        value |= (uint32_t)(r->at < r->size ? r->data[r->at] : 0u) << (8u * i);
        r->at += r->at < r->size;
    }
    return value;
}

static int32_t in_range(reader *r, int32_t lo, int32_t hi)
{
    return lo + (int32_t)(take(r, 2) % (uint32_t)(hi - lo + 1));
}

static void fail(const char *what, const mcubert_message *message)
{
    fprintf(stderr, "fuzz_op_run: %s: %s\n", what, message != NULL ? message->text : "");
    abort();
}

/* Exact-size heap blocks, freed together at the end of one input. */
#define MAX_BLOCKS 32
typedef struct {
    void *blocks[MAX_BLOCKS];
    int count;
} arena;

static void *block(arena *a, size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (p == NULL || a->count == MAX_BLOCKS) {
        fail("out of memory or blocks", NULL);
    }
    a->blocks[a->count++] = p;
    return p;
}

static void release(arena *a)
{
    while (a->count > 0) {
        free(a->blocks[--a->count]);
    }
}

static int8_t *bytes_of(arena *a, reader *r, int32_t n)
{
    int8_t *p = (int8_t *)block(a, (size_t)n);
    int32_t i;
    for (i = 0; i < n; ++i) {
        p[i] = (int8_t)take(r, 1);
    }
    return p;
}

/* Valid multiplier: 0 (one time in 16) or in [2^30, 2^31); shift in [-31, 30]. */
static void multiplier(reader *r, int32_t *out)
{
    const uint32_t raw = take(r, 4);
    out[0] = (raw & 0xFu) == 0u ? 0 : (int32_t)(0x40000000u | (raw >> 2));
    out[1] = in_range(r, -31, 30);
}

static int32_t *requant_table(arena *a, reader *r, int32_t n)
{
    int32_t *p = (int32_t *)block(a, sizeof(int32_t) * 2u * (size_t)n);
    int32_t c;
    for (c = 0; c < n; ++c) {
        multiplier(r, p + 2 * c);
    }
    return p;
}

static int32_t *channels_table(arena *a, reader *r, int32_t n)
{
    int32_t *p = (int32_t *)block(a, sizeof(int32_t) * 3u * (size_t)n);
    int32_t c;
    for (c = 0; c < n; ++c) {
        p[3 * c] = (int32_t)(int64_t)((int64_t)(take(r, 4) % ((1u << 31) + 1u)) - ((int64_t)1 << 30));
        multiplier(r, p + 3 * c + 1);
    }
    return p;
}

static int32_t *layer_norm_table(arena *a, reader *r, int32_t d)
{
    int32_t *p = (int32_t *)block(a, sizeof(int32_t) * 2u * (size_t)d);
    int32_t i;
    for (i = 0; i < 2 * d; ++i) {
        p[i] = (int32_t)take(r, 4);
    }
    return p;
}

static int32_t *residual_table(arena *a, reader *r, int32_t d)
{
    int32_t *p = (int32_t *)block(a, sizeof(int32_t) * 2u * (size_t)d);
    int32_t c;
    for (c = 0; c < d; ++c) {
        p[2 * c] = in_range(r, -128, 127);
        p[2 * c + 1] = in_range(r, 0, 7);
    }
    return p;
}

/* pair4 packed(out, in) with zero padding and no -128 (SPEC 4.2), at `p`. */
static void fill_pair4(reader *r, int8_t *p, int32_t out, int32_t in)
{
    const int32_t groups = (in + 3) / 4, total = ((out + 1) / 2) * groups * 8;
    int32_t i;
    for (i = 0; i < total; ++i) {
        const int32_t channel = 2 * (i / (groups * 8)) + (i % 8) / 4, k = 4 * ((i / 8) % groups) + i % 4;
        const int8_t value = (int8_t)take(r, 1);
        p[i] = (channel >= out || k >= in) ? 0 : value == -128 ? -127 : value;
    }
}

/* A linear layer's weights: pair4 (bits 8) or w4row (bits 4: zero padding nibbles, none 0 = -8). */
static int8_t *linear_weights(arena *a, reader *r, int32_t out, int32_t in, int32_t bits)
{
    const int32_t row_bytes = ((in + 7) >> 3) * 4;
    const size_t total = bits == 4 ? (size_t)out * (size_t)row_bytes : (size_t)(((out + 1) / 2) * ((in + 3) / 4) * 8);
    uint8_t *p = (uint8_t *)block(a, total);
    int32_t c, k;
    if (bits == 8) {
        fill_pair4(r, (int8_t *)p, out, in);
        return (int8_t *)p;
    }
    for (c = 0; c < out; ++c) {
        uint8_t *row = p + (size_t)c * (size_t)row_bytes;
        memset(row, 0, (size_t)row_bytes);
        for (k = 0; k < in; ++k) {
            uint32_t nibble = take(r, 1) & 0xFu;
            row[k >> 1] |= (uint8_t)((nibble == 0u ? 1u : nibble) << (4 * (k & 1)));
        }
    }
    return (int8_t *)p;
}

/* Run-time int8 activations: fuzzer bytes, or saturated (all -128, all 127 or alternating). */
static int8_t *activations(arena *a, reader *r, int32_t n, int saturated)
{
    int8_t *p = bytes_of(a, r, n);
    const uint32_t pattern = take(r, 1) % 3u;
    int32_t i;
    for (i = 0; saturated && i < n; ++i) {
        p[i] = pattern == 0u ? -128 : pattern == 1u ? 127 : (i & 1) ? 127 : -128;
    }
    return p;
}

/* An id for [0, limit): in range, or (hostile inputs, one time in 8) just outside or extreme. */
static int32_t run_time_id(reader *r, int32_t limit, int *bad)
{
    static const int32_t extremes[4] = {-1, INT32_MIN, INT32_MAX, 0};
    const uint32_t pick = take(r, 1);
    if (r->hostile && (pick & 7u) == 0u) {
        const int32_t id = (pick >> 3) % 5u == 4u   ? limit
                           : (pick >> 3) % 5u == 3u ? limit + (int32_t)take(r, 1)
                                                    : extremes[(pick >> 3) % 5u];
        *bad |= id < 0 || id >= limit;
        return id;
    }
    return (int32_t)(take(r, 2) % (uint32_t)limit);
}

/* Scratch of exactly `size` bytes; the kernel runs twice on copies of the run-time buffers, with the
 * scratch filled 0x00 then 0xA5, and both runs must give the same status and bytes. */
typedef mcubert_status (*kernel_call)(const void *op, const mcubert_context *context, int8_t *out,
                                      mcubert_message *message);

static void run_twice(kernel_call call, const void *op, int32_t scratch_size, int8_t *out, int32_t out_size,
                      int expect_input_error)
{
    mcubert_context context;
    mcubert_message message;
    int8_t *before = (int8_t *)malloc((size_t)out_size), *first = (int8_t *)malloc((size_t)out_size);
    mcubert_status st[2];
    int pass;
    if (scratch_size < 0 || before == NULL || first == NULL) {
        fail("get_buffer_size < 0 for validated options, or out of memory", NULL);
    }
    memcpy(before, out, (size_t)out_size);
    for (pass = 0; pass < 2; ++pass) {
        context.size = scratch_size;
        context.buf = malloc(scratch_size ? (size_t)scratch_size : 1u); /* exact: ASan sees past it */
        if (context.buf == NULL) {
            fail("out of memory", NULL);
        }
        memset(context.buf, pass ? 0xA5 : 0x00, (size_t)scratch_size);
        memcpy(out, before, (size_t)out_size);
        message.text[0] = '\0';
        st[pass] = call(op, &context, out, &message);
        free(context.buf);
        if (expect_input_error ? st[pass] != MCUBERT_ERROR_INPUT : st[pass] != MCUBERT_OK) {
            fail(expect_input_error ? "an input out of range was not MCUBERT_ERROR_INPUT" : "the kernel failed",
                 &message);
        }
        if (expect_input_error && memcmp(out, before, (size_t)out_size) != 0) {
            fail("the output was written although the input was refused", &message);
        }
        if (pass == 0) {
            memcpy(first, out, (size_t)out_size);
        } else if (memcmp(first, out, (size_t)out_size) != 0) {
            fail("the output depends on the scratch's previous contents", &message);
        }
    }
#ifdef MCUBERT_FUZZ_OUTPUT_HOOK /* op_run_inputs_main.c: the bytes, to compare across kernel paths */
    MCUBERT_FUZZ_OUTPUT_HOOK(first, out_size);
#endif
#ifdef MCUBERT_FUZZ_PRINT_STATUS /* test_fuzz_c.py: the seeds must reach a kernel that runs */
    fprintf(stderr, "mcubert run status %d: %s\n", (int)st[0], message.text);
#endif
    free(before);
    free(first);
}

#include "fuzz_op_run_ops.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    reader r = {data, size, 0, 0};
    arena a;
    const uint32_t op = take(&r, 1) % 4u, flags = take(&r, 1);
    const int32_t bits = (flags & 1u) ? 4 : 8;
    a.count = 0;
    r.hostile = (flags & 2u) != 0u;
#ifdef MCUBERT_EMULATE_DSP
    if (mcubert_uses_dsp_path() != 1) {
        fail("MCUBERT_EMULATE_DSP build without the DSP path", NULL);
    }
#endif
    switch (op) {
    case 0: fuzz_embedding(&a, &r, bits); break;
    case 1: fuzz_attention(&a, &r, bits, (flags & 4u) != 0u); break;
    case 2: fuzz_mlp(&a, &r, bits, (flags & 4u) != 0u); break;
    default: fuzz_classifier_head(&a, &r, (flags & 4u) != 0u); break;
    }
    release(&a);
    return 0;
}
