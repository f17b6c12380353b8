/*
 * Decoded bytes to valid UTF-8, one byte at a time (see mcubert_utf8_stream in
 * mcubert/mcubert_bpe_tokenizer.h): what Python's bytes.decode("utf-8", "replace") and Rust's
 * String::from_utf8_lossy give for the whole text, without holding more than one character.
 */
#include <stddef.h>
#include <stdint.h>

#include "mcubert_bpe_tokenizer_internal.h"

static uint32_t put_replacement(uint8_t *out)
{
    out[0] = 0xEFu;
    out[1] = 0xBFu;
    out[2] = 0xBDu;
    return 3u;
}

/* The bytes a sequence led by `lead` takes after it (0: not a lead byte) */
static uint32_t continuation_count(uint32_t lead)
{
    if (lead >= 0xC2u && lead <= 0xDFu) {
        return 1u;
    }
    if (lead >= 0xE0u && lead <= 0xEFu) {
        return 2u;
    }
    return lead >= 0xF0u && lead <= 0xF4u ? 3u : 0u;
}

/* Whether `byte` may follow the stream's pending bytes (the second byte's range depends on the lead) */
static int continues(const mcubert_utf8_stream *stream, uint32_t byte)
{
    uint32_t lead = stream->pending[0], low = 0x80u, high = 0xBFu;
    if (stream->count == 1u) {
        low = lead == 0xE0u ? 0xA0u : (lead == 0xF0u ? 0x90u : 0x80u);
        high = lead == 0xEDu ? 0x9Fu : (lead == 0xF4u ? 0x8Fu : 0xBFu);
    }
    return byte >= low && byte <= high;
}

/* A byte with nothing pending */
static uint32_t start(mcubert_utf8_stream *stream, uint8_t byte, uint8_t *out)
{
    if (byte < 0x80u) {
        out[0] = byte;
        return 1u;
    }
    if (continuation_count(byte) == 0u) {
        return put_replacement(out);
    }
    stream->pending[0] = byte;
    stream->count = 1u;
    return 0u;
}

uint32_t mcubert_utf8_put(mcubert_utf8_stream *stream, uint8_t byte, uint8_t *out)
{
    uint32_t k, n;
    if (stream->count == 0u) {
        return start(stream, byte, out);
    }
    if (!continues(stream, byte)) {
        stream->count = 0u; /* the pending bytes are a maximal invalid subpart; the byte starts anew */
        n = put_replacement(out);
        return n + start(stream, byte, out + n);
    }
    stream->pending[stream->count++] = byte;
    if (stream->count <= continuation_count(stream->pending[0])) {
        return 0u;
    }
    for (k = 0; k < stream->count; ++k) {
        out[k] = stream->pending[k];
    }
    stream->count = 0u;
    return k;
}

void mcubert_utf8_reset(mcubert_utf8_stream *stream)
{
    if (stream != NULL) {
        stream->count = 0u;
        stream->tokens = 0u;
    }
}

uint32_t mcubert_utf8_finish(mcubert_utf8_stream *stream, uint8_t *out)
{
    uint32_t pending;
    if (stream == NULL) {
        return 0u;
    }
    pending = stream->count;
    stream->count = 0u;
    stream->tokens = 0u;
    if (pending == 0u) {
        return 0u;
    }
    return out == NULL ? 0u : put_replacement(out);
}
