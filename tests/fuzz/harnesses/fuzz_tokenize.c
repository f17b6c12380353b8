/*
 * libFuzzer harness: a tokenizer blob through mcubert_tokenizer_init, then text through
 * mcubert_tokenize. Input layout (little-endian):
 *
 *   u8 seq_len (2 + value mod 254), u8 flags (bit 0: the text is a sentence pair, split at the middle),
 *   u32 blob length, the blob, then the text (the rest of the input)
 *
 * The harness writes the blob's size and CRC-32 into its copy before init, so mutations get past the
 * checksum to the structural checks (a blob that passes its CRC must still never be read out of
 * bounds). Seeds (tests/fuzz/make_corpus.py) hold a real blob of a small vocabulary and sentences that
 * exercise every kind of character. Buffers are allocated at exactly their documented sizes, so ASan
 * catches a write or read one past them.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mcubert/mcubert_tokenizer.h"
#include "mcubert_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put32(uint8_t *p, uint32_t value)
{
    p[0] = (uint8_t)value;
    p[1] = (uint8_t)(value >> 8);
    p[2] = (uint8_t)(value >> 16);
    p[3] = (uint8_t)(value >> 24);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mcubert_tokenizer tokenizer;
    mcubert_message message;
    uint32_t seq_len, blob_bytes, text_bytes, valid = 0, half;
    uint8_t *blob, *text;
    void *buffer;
    int32_t *ids, *types;
    int8_t *mask;
    mcubert_status status;
    if (size < 6u) {
        return 0;
    }
    seq_len = 2u + data[0] % 254u;
    blob_bytes = le32(data + 2);
    if (blob_bytes > size - 6u) {
        return 0;
    }
    blob = (uint8_t *)malloc(blob_bytes ? blob_bytes : 1u);
    memcpy(blob, data + 6, blob_bytes);
    if (blob_bytes >= 16u) {
        put32(blob + 8, blob_bytes);
        put32(blob + 12, ~mcubert_crc32_update(0xFFFFFFFFu, blob + 16, blob_bytes - 16u));
    }
    status = mcubert_tokenizer_init(&tokenizer, blob, blob_bytes, &message);
#ifdef MCUBERT_FUZZ_PRINT_STATUS
    fprintf(stderr, "mcubert status %d: %s\n", (int)status, status == MCUBERT_OK ? "" : message.text);
#endif
    if (status == MCUBERT_OK) {
        text_bytes = (uint32_t)(size - 6u - blob_bytes);
        text = (uint8_t *)malloc(text_bytes ? text_bytes : 1u);
        memcpy(text, data + 6 + blob_bytes, text_bytes);
        buffer = malloc(mcubert_tokenizer_get_buffer_size(&tokenizer));
        ids = (int32_t *)malloc(sizeof(int32_t) * seq_len);
        types = (int32_t *)malloc(sizeof(int32_t) * seq_len);
        mask = (int8_t *)malloc(seq_len);
        half = text_bytes / 2u;
        if ((data[1] & 1u) != 0u) {
            status = mcubert_tokenize(&tokenizer, text, half, text + half, text_bytes - half, seq_len, ids, types, mask,
                                      &valid, buffer, mcubert_tokenizer_get_buffer_size(&tokenizer), &message);
        } else {
            status = mcubert_tokenize(&tokenizer, text, text_bytes, NULL, 0u, seq_len, ids, types, mask, &valid, buffer,
                                      mcubert_tokenizer_get_buffer_size(&tokenizer), &message);
        }
        if (status == MCUBERT_OK && (valid < 2u || valid > seq_len)) {
            abort(); /* a valid length outside [2, seq_len] is a bug */
        }
        free(mask);
        free(types);
        free(ids);
        free(buffer);
        free(text);
    }
    free(blob);
    return 0;
}
