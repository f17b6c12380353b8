/*
 * libFuzzer harness: a byte-level BPE blob through mcubert_bpe_init, then text through mcubert_bpe_encode
 * and the ids back through mcubert_bpe_decode (all at once, then one id a call). Input layout:
 *
 *   u8 max_ids (value, or the documented worst case 3 * text bytes + 1 when 255), u8 flags (bit 0: also
 *   decode the text's bytes read as hostile int32 ids), u32 blob length, the blob, then the text
 *
 * The harness writes the blob's size and CRC-32 into its copy before init, so mutations reach the
 * structural checks. Seeds (tests/fuzz/make_corpus.py) hold the blob of a small GPT-2-style tokenizer
 * trained there and sentences exercising every class of the pre-tokenizer. Buffers are allocated at
 * exactly their documented sizes, so ASan catches a write or read one past them.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mcubert/mcubert_bpe_tokenizer.h"
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

/* Decodes `count` ids at once and one a call: the same bytes, or abort. */
static void decode_twice(const mcubert_bpe_tokenizer *t, const int32_t *ids, uint32_t count)
{
    uint32_t bound = mcubert_bpe_decode_bound(t, count), step = mcubert_bpe_decode_bound(t, 1), i, n, total = 0;
    uint8_t *whole = (uint8_t *)malloc(bound + 3u), *one = (uint8_t *)malloc(step),
            *streamed = (uint8_t *)malloc(bound + 3u);
    mcubert_utf8_stream stream = {{0}, 0, 0};
    mcubert_message message;
    mcubert_status status = mcubert_bpe_decode(t, ids, count, &stream, whole, bound, &n, &message);
    if (status == MCUBERT_OK) {
        n += mcubert_utf8_finish(&stream, whole + n);
        for (i = 0; i < count; ++i) {
            uint32_t got = 0;
            if (mcubert_bpe_decode(t, ids + i, 1, &stream, one, step, &got, &message) != MCUBERT_OK) {
                abort(); /* an id the whole call took */
            }
            memcpy(streamed + total, one, got);
            total += got;
        }
        total += mcubert_utf8_finish(&stream, streamed + total);
        if (total != n || memcmp(whole, streamed, n) != 0) {
            abort(); /* streaming must give the same text */
        }
    } else if (status != MCUBERT_ERROR_INPUT) {
        abort();
    }
    free(whole);
    free(one);
    free(streamed);
}

static void run_text(const mcubert_bpe_tokenizer *t, const uint8_t *data, const uint8_t *text, uint32_t text_bytes)
{
    uint32_t max_ids = data[0] == 255u ? 3u * text_bytes + 1u : data[0], count = 0;
    int32_t *ids = (int32_t *)malloc(sizeof(int32_t) * (max_ids ? max_ids : 1u));
    void *buffer = malloc(mcubert_bpe_get_buffer_size(t));
    mcubert_message message;
    mcubert_status status =
        mcubert_bpe_encode(t, text, text_bytes, ids, max_ids, &count, buffer, mcubert_bpe_get_buffer_size(t), &message);
#ifdef MCUBERT_FUZZ_PRINT_STATUS
    fprintf(stderr, "mcubert encode status %d: %u ids\n", (int)status, count);
#endif
    if ((status != MCUBERT_OK && status != MCUBERT_ERROR_INPUT) || (status == MCUBERT_OK && count > max_ids) ||
        count > 3u * text_bytes + 1u) {
        abort();
    }
    decode_twice(t, ids, count < max_ids ? count : max_ids);
    if ((data[1] & 1u) != 0u) {
        decode_twice(t, (const int32_t *)(const void *)text, text_bytes / 4u); /* hostile ids (aligned copy) */
    }
    free(buffer);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mcubert_bpe_tokenizer tokenizer;
    mcubert_message message;
    uint32_t blob_bytes, text_bytes;
    uint8_t *blob, *text;
    mcubert_status status;
    if (size < 6u) {
        return 0;
    }
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
    status = mcubert_bpe_init(&tokenizer, blob, blob_bytes, &message);
#ifdef MCUBERT_FUZZ_PRINT_STATUS
    fprintf(stderr, "mcubert status %d: %s\n", (int)status, status == MCUBERT_OK ? "" : message.text);
#endif
    if (status == MCUBERT_OK) {
        text_bytes = (uint32_t)(size - 6u - blob_bytes);
        text = (uint8_t *)malloc(text_bytes ? text_bytes : 1u); /* malloc: aligned for the hostile ids */
        memcpy(text, data + 6 + blob_bytes, text_bytes);
        run_text(&tokenizer, data, text, text_bytes);
        free(text);
    }
    free(blob);
    return 0;
}
