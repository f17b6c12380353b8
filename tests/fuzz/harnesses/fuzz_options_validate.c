/*
 * libFuzzer harness: an op's custom options through its parser, then its validate step with
 * tensors described by the rest of the input. Input layout (little-endian):
 *
 *   u8 op (0 embedding, 1 attention, 2 mlp, 3 classifier head; taken mod 4)
 *   u16 options length, options bytes
 *   per tensor of the op: u8 dtype (mod 3: int8, int16, int32), u8 flags (bit 0: constant, data
 *   follows), u32 elements; a constant's data is the next elements * size bytes (zeros past the
 *   end of the input)
 *
 * Seeds (tests/fuzz/make_corpus.py) are the ops of a real export, so mutations start from models
 * that validate. Parsers and validators must stay inside the buffers they are given and reject
 * whatever they do not accept with a status and a NUL-terminated message.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mcubert/mcubert_ops.h"

#define MAX_ELEMENTS (1 << 20)
#define MAX_TENSORS 32

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct {
    const uint8_t *data;
    size_t size;
    size_t at;
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

static int element_size(int32_t dtype)
{
    return dtype == MCUBERT_DTYPE_INT32 ? 4 : dtype == MCUBERT_DTYPE_INT16 ? 2 : 1;
}

/* Tensor views from the input; constant data in exact-size heap buffers (ASan sees past them). */
static int read_tensors(reader *r, int32_t count, mcubert_tensor_view *views, void **owned)
{
    static const int32_t dtypes[3] = {MCUBERT_DTYPE_INT8, MCUBERT_DTYPE_INT16, MCUBERT_DTYPE_INT32};
    int32_t i;
    for (i = 0; i < count; ++i) {
        uint32_t dtype = take(r, 1), flags = take(r, 1), elements = take(r, 4);
        size_t bytes, available;
        views[i].dtype = dtypes[dtype % 3u];
        views[i].elements = (int32_t)(elements % (MAX_ELEMENTS + 1u));
        views[i].data = NULL;
        owned[i] = NULL;
        if (!(flags & 1u)) {
            continue;
        }
        bytes = (size_t)views[i].elements * (size_t)element_size(views[i].dtype);
        owned[i] = calloc(bytes ? bytes : 1, 1);
        if (owned[i] == NULL) {
            return 0;
        }
        available = r->size - r->at < bytes ? r->size - r->at : bytes;
        memcpy(owned[i], r->data + r->at, available);
        r->at += available;
        views[i].data = owned[i];
    }
    return 1;
}

static mcubert_status parse_and_validate(uint32_t op, const uint8_t *options, int32_t length, reader *r,
                                         mcubert_message *message)
{
    mcubert_tensor_view views[MAX_TENSORS];
    void *owned[MAX_TENSORS] = {0};
    mcubert_status status = MCUBERT_ERROR_ARGUMENT;
    int32_t i, count = 0;
    union {
        mcubert_embedding_params embedding;
        mcubert_attention_params attention;
        mcubert_mlp_params mlp;
        mcubert_classifier_head_params head;
    } params;
    switch (op) {
    case 0:
        status = mcubert_embedding_parse_options(options, length, &params.embedding, message);
        count = MCUBERT_EMBEDDING_NUM_TENSORS;
        break;
    case 1:
        status = mcubert_attention_parse_options(options, length, &params.attention, message);
        count = MCUBERT_ATTENTION_NUM_TENSORS;
        break;
    case 2:
        status = mcubert_mlp_parse_options(options, length, &params.mlp, message);
        count = MCUBERT_MLP_NUM_TENSORS;
        break;
    default:
        status = mcubert_classifier_head_parse_options(options, length, &params.head, message);
        count = MCUBERT_CLASSIFIER_HEAD_NUM_TENSORS;
        break;
    }
    if (status != MCUBERT_OK || !read_tensors(r, count, views, owned)) {
        goto done;
    }
    /* A tensor count one short must be refused, never read past. */
    count -= (int32_t)(take(r, 1) & 1u);
    switch (op) {
    case 0: status = mcubert_embedding_validate(&params.embedding, views, count, message); break;
    case 1: status = mcubert_attention_validate(&params.attention, views, count, message); break;
    case 2: status = mcubert_mlp_validate(&params.mlp, views, count, message); break;
    default: status = mcubert_classifier_head_validate(&params.head, views, count, message); break;
    }
done:
    for (i = 0; i < MAX_TENSORS; ++i) {
        free(owned[i]);
    }
    return status;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    reader r = {data, size, 0};
    mcubert_message message;
    uint32_t op = take(&r, 1) % 4u;
    uint32_t length = take(&r, 2);
    uint8_t *options;
    mcubert_status status;
    if (length > r.size - r.at) {
        length = (uint32_t)(r.size - r.at);
    }
    options = (uint8_t *)malloc(length ? length : 1); /* exact size: ASan sees past the end */
    if (options == NULL) {
        return 0;
    }
    memcpy(options, data + r.at, length);
    r.at += length;
    message.text[0] = '\0';
    status = parse_and_validate(op, options, (int32_t)length, &r, &message);
#ifdef MCUBERT_FUZZ_PRINT_STATUS /* test_fuzz_c.py: the seeds must reach a validate that passes */
    fprintf(stderr, "mcubert status %d: %s\n", (int)status, message.text);
#endif
    if (status < MCUBERT_OK || status > MCUBERT_ERROR_MODEL ||
        memchr(message.text, '\0', sizeof message.text) == NULL) {
        abort();
    }
    free(options);
    return 0;
}
