/*
 * The WordPiece detokenizer (see mcubert/mcubert_wordpiece_decode.h; layout and reference:
 * tflm_mcubert/tokenizer/wordpiece_decode.py).
 */
#include "mcubert/mcubert_wordpiece_decode.h"

#include <stddef.h>
#include <stdint.h>

#include "mcubert_internal.h"
#include "mcubert_tokenizer_text.h"

#define OP "WORDPIECE_DECODE"
#define HEADER_BYTES 32u
#define BLOCK 32u
#define MAX_VOCAB 0x1000000u
#define FLAG_SPECIAL 1u
#define FLAG_CONTINUATION 2u
#define FLAG_GLUED 4u
#define FLAGS_KNOWN 7u

static mcubert_status bad_blob(mcubert_message *message, const char *field, const char *problem)
{
    return mcubert_fail_text(message, MCUBERT_ERROR_MODEL, OP, field, problem);
}

static mcubert_status check_header(const uint8_t *blob, uint32_t size, mcubert_message *message)
{
    if (size < 8u || blob[0] != 'M' || blob[1] != 'C' || blob[2] != 'W' || blob[3] != 'D') {
        return bad_blob(message, "header", "not a WordPiece detokenizer blob (no 'MCWD' header)");
    }
    if (mcubert_rd16(blob + 4) != MCUBERT_WORDPIECE_DECODE_VERSION || mcubert_rd16(blob + 6) != HEADER_BYTES) {
        mcubert_fail(message, MCUBERT_ERROR_MODEL, OP, "header");
        mcubert_append(message, "blob version ");
        mcubert_append_int(message, mcubert_rd16(blob + 4));
        mcubert_append(message, "; this library reads version ");
        mcubert_append_int(message, MCUBERT_WORDPIECE_DECODE_VERSION);
        return MCUBERT_ERROR_MODEL;
    }
    if (size < HEADER_BYTES || mcubert_rd32(blob + 8) != size) {
        return bad_blob(message, "header", "the blob's size is not the size given (truncated?)");
    }
    if (~mcubert_crc32_update(0xFFFFFFFFu, blob + 16, size - 16u) != mcubert_rd32(blob + 12)) {
        return bad_blob(message, "header", "CRC-32 mismatch: the blob is corrupted");
    }
    return MCUBERT_OK;
}

/* Sections in order inside the blob; every flag known; each block's start the sum of the lengths before. */
static mcubert_status check_table(mcubert_wordpiece_decoder *d, mcubert_message *message)
{
    uint32_t n = d->vocab_size, entries_at = mcubert_rd32(d->blob + 20), blocks_at = mcubert_rd32(d->blob + 24),
             bytes_at = mcubert_rd32(d->blob + 28), i, at = 0;
    if (n == 0u || n > MAX_VOCAB || entries_at != HEADER_BYTES || blocks_at < entries_at + 2u * n ||
        (blocks_at & 3u) != 0u || bytes_at < blocks_at || (bytes_at - blocks_at) / 4u != (n + BLOCK - 1u) / BLOCK ||
        bytes_at > d->size) {
        return bad_blob(message, "header", "the vocabulary size or a section offset is out of range");
    }
    d->entries = d->blob + entries_at;
    d->blocks = d->blob + blocks_at;
    d->bytes = d->blob + bytes_at;
    d->max_token_bytes = 0;
    for (i = 0; i < n; ++i) {
        uint32_t entry = mcubert_rd16(d->entries + 2u * i), length = entry & 0xFFu;
        if (((entry >> 8) & ~FLAGS_KNOWN) != 0u || (((entry >> 8) & FLAG_CONTINUATION) != 0u && length < 2u)) {
            return bad_blob(message, "entries", "unknown flags, or a '##' continuation shorter than '##'");
        }
        if (i % BLOCK == 0u && mcubert_rd32(d->blocks + 4u * (i / BLOCK)) != at) {
            return bad_blob(message, "blocks", "a block does not start where its ids' bytes do");
        }
        at += length;
        d->max_token_bytes = length > d->max_token_bytes ? length : d->max_token_bytes;
    }
    if (at > d->size - bytes_at) {
        return bad_blob(message, "bytes", "the tokens' bytes run past the blob");
    }
    return MCUBERT_OK;
}

mcubert_status mcubert_wordpiece_decoder_init(mcubert_wordpiece_decoder *decoder, const uint8_t *blob, uint32_t size,
                                              mcubert_message *message)
{
    mcubert_status status;
    if (decoder == NULL || blob == NULL) {
        return mcubert_fail_text(message, MCUBERT_ERROR_ARGUMENT, OP, "blob", "NULL pointer");
    }
    decoder->blob = NULL;
    status = check_header(blob, size, message);
    if (status != MCUBERT_OK) {
        return status;
    }
    decoder->blob = blob;
    decoder->size = size;
    decoder->vocab_size = mcubert_rd32(blob + 16);
    status = check_table(decoder, message);
    if (status != MCUBERT_OK) {
        decoder->blob = NULL; /* decoding refuses a decoder whose init failed */
    }
    return status;
}

uint32_t mcubert_wordpiece_decode_bound(const mcubert_wordpiece_decoder *decoder, uint32_t count)
{
    uint64_t bound;
    if (decoder == NULL || decoder->blob == NULL) {
        return 0u;
    }
    bound = (uint64_t)count * (decoder->max_token_bytes + 1u);
    return bound > 0xFFFFFFFFu ? 0xFFFFFFFFu : (uint32_t)bound;
}

/* One id's text as the decoder writes it (after `tokens` others): the bytes written */
static uint32_t put_token(const mcubert_wordpiece_decoder *d, uint32_t id, uint32_t tokens, uint8_t *out)
{
    uint32_t entry = mcubert_rd16(d->entries + 2u * id), flags = entry >> 8, k, n = 0;
    uint32_t at = mcubert_rd32(d->blocks + 4u * (id / BLOCK)), length = entry & 0xFFu;
    for (k = id - id % BLOCK; k < id; ++k) {
        at += mcubert_rd16(d->entries + 2u * k) & 0xFFu;
    }
    if (tokens > 0u && (flags & FLAG_CONTINUATION) != 0u) {
        at += 2u; /* "##" */
        length -= 2u;
    } else if (tokens > 0u && (flags & FLAG_GLUED) == 0u) {
        out[n++] = ' ';
    }
    for (k = 0; k < length; ++k) {
        out[n++] = d->bytes[at + k];
    }
    return n;
}

mcubert_status mcubert_wordpiece_decode(const mcubert_wordpiece_decoder *decoder, const int32_t *ids, uint32_t count,
                                        mcubert_utf8_stream *stream, uint8_t *out, uint32_t out_bytes,
                                        uint32_t *written, mcubert_message *message)
{
    uint32_t i, at = 0;
    if (decoder == NULL || decoder->blob == NULL || stream == NULL || written == NULL ||
        (count > 0u && (ids == NULL || out == NULL))) {
        return mcubert_fail_text(message, MCUBERT_ERROR_ARGUMENT, OP, "decode",
                                 "NULL pointer or uninitialised decoder");
    }
    *written = 0;
    for (i = 0; i < count; ++i) {
        if (ids[i] < 0 || (uint32_t)ids[i] >= decoder->vocab_size) {
            return mcubert_fail_text(message, MCUBERT_ERROR_INPUT, OP, "ids", "an id outside [0, vocab_size)");
        }
    }
    if (out_bytes < mcubert_wordpiece_decode_bound(decoder, count)) {
        return mcubert_fail_text(message, MCUBERT_ERROR_ARGUMENT, OP, "out",
                                 "smaller than mcubert_wordpiece_decode_bound(count)");
    }
    for (i = 0; i < count; ++i) {
        uint32_t id = (uint32_t)ids[i];
        if ((mcubert_rd16(decoder->entries + 2u * id) >> 8) & FLAG_SPECIAL) {
            continue; /* skip_special_tokens=True */
        }
        at += put_token(decoder, id, stream->tokens, out + at);
        stream->tokens += 1u;
    }
    *written = at;
    return MCUBERT_OK;
}
