/*
 * The byte-level BPE tokenizer's blob check and its detokenizer (see mcubert/mcubert_bpe_tokenizer.h;
 * layout: tflm_mcubert/tokenizer/bpe_blob.py). Encoding is in mcubert_bpe_tokenizer_encode.c.
 */
#include "mcubert/mcubert_bpe_tokenizer.h"

#include <stddef.h>
#include <stdint.h>

#include "mcubert_bpe_tokenizer_internal.h"
#include "mcubert_internal.h"
#include "mcubert_tokenizer_text.h"

#define HEADER_BYTES 72u
#define MAX_VOCAB 0x1000000u
#define MAX_TOKEN_BYTES 1024u
#define MAX_PRETOKEN_BYTES 0x10000u
#define CLASS_COUNT 4u
#define CLASS_SPACE 1u

/* ---- blob checks --------------------------------------------------------------------------- */

static mcubert_status bad_blob(mcubert_message *message, const char *field, const char *problem)
{
    return mcubert_fail_text(message, MCUBERT_ERROR_MODEL, MCUBERT_BPE_OP, field, problem);
}

/* bytes [offset, offset + length) lie in the blob, offset 4-byte aligned */
static int in_blob(uint32_t size, uint32_t offset, uint64_t length)
{
    return (offset & 3u) == 0u && offset <= size && length <= (uint64_t)(size - offset);
}

static mcubert_status check_version(const uint8_t *blob, uint32_t size, mcubert_message *message)
{
    if (size < 8u) {
        return bad_blob(message, "header", "shorter than the header (truncated?)");
    }
    if (blob[0] != 'M' || blob[1] != 'C' || blob[2] != 'B' || blob[3] != 'P') {
        return bad_blob(message, "header", "not a BPE tokenizer blob (no 'MCBP' header)");
    }
    if (mcubert_rd16(blob + 4) != MCUBERT_BPE_VERSION || mcubert_rd16(blob + 6) != HEADER_BYTES) {
        mcubert_fail(message, MCUBERT_ERROR_MODEL, MCUBERT_BPE_OP, "header");
        mcubert_append(message, "blob version ");
        mcubert_append_int(message, mcubert_rd16(blob + 4));
        mcubert_append(message, "; this library reads version ");
        mcubert_append_int(message, MCUBERT_BPE_VERSION);
        mcubert_append(message, " (export the model again)");
        return MCUBERT_ERROR_MODEL;
    }
    if (size < HEADER_BYTES) {
        return bad_blob(message, "header", "shorter than the 72-byte header (truncated?)");
    }
    if (mcubert_rd32(blob + 8) != size) {
        return bad_blob(message, "header", "the blob's size is not the size given (truncated?)");
    }
    if (~mcubert_crc32_update(0xFFFFFFFFu, blob + 16, size - 16u) != mcubert_rd32(blob + 12)) {
        return bad_blob(message, "header", "CRC-32 mismatch: the blob is corrupted");
    }
    return MCUBERT_OK;
}

/* The class ranges: the WordPiece blob's range format, each rule a class (mode 0, value 0). */
static mcubert_status check_classes(mcubert_bpe_tokenizer *t, uint32_t ranges_at, mcubert_message *message)
{
    mcubert_tokenizer *c = &t->classes;
    mcubert_status status;
    uint32_t i, index_bytes = c->rule_count > 256u ? 2u : 1u;
    if (c->rule_count == 0u || c->rule_count > CLASS_COUNT || c->range_count == 0u ||
        !in_blob(t->size, ranges_at, 4u * c->rule_count + 2u * 18u + (2u + index_bytes) * c->range_count)) {
        return bad_blob(message, "classes", "the character classes lie outside the blob or have no rules");
    }
    c->rules = t->blob + ranges_at;
    c->planes = c->rules + 4u * c->rule_count;
    c->range_starts = c->planes + 2u * 18u;
    c->range_rules = c->range_starts + 2u * c->range_count;
    c->max_chars_per_word = 1u;
    for (i = 0; i < c->rule_count; ++i) {
        if (mcubert_rd32(c->rules + 4u * i) >= CLASS_COUNT) {
            return bad_blob(message, "classes", "a rule is not one of the four classes");
        }
    }
    status = mcubert_tokenizer_check_ranges(c, message);
    if (status == MCUBERT_OK && RULE_KIND(mcubert_rule_of(c, ' ')) != CLASS_SPACE) {
        return bad_blob(message, "classes", "the space is not whitespace");
    }
    return status;
}

/* merge entry a's (left, right) below entry b's */
static int merge_key_less(const mcubert_bpe_tokenizer *t, const uint8_t *a, const uint8_t *b)
{
    uint32_t al = mcubert_bpe_id(t, a, 0), bl = mcubert_bpe_id(t, b, 0);
    return al < bl || (al == bl && mcubert_bpe_id(t, a, 1) < mcubert_bpe_id(t, b, 1));
}

static mcubert_status check_ids_and_merges(const mcubert_bpe_tokenizer *t, mcubert_message *message)
{
    uint32_t i, entry_bytes = 3u * t->id_bytes;
    for (i = 0; i < 256u; ++i) {
        if (mcubert_bpe_id(t, t->byte_ids, i) >= t->vocab_size) {
            return bad_blob(message, "byte ids", "a byte's id is not below vocab_size");
        }
    }
    for (i = 0; i < t->merge_count; ++i) {
        const uint8_t *entry = t->merges + entry_bytes * i;
        if (mcubert_bpe_id(t, entry, 0) >= t->vocab_size || mcubert_bpe_id(t, entry, 1) >= t->vocab_size ||
            mcubert_bpe_id(t, entry, 2) >= t->merge_count || mcubert_bpe_id(t, t->merged_ids, i) >= t->vocab_size) {
            return bad_blob(message, "merges", "an id not below vocab_size or a rank not below the merge count");
        }
        if (i > 0u && !merge_key_less(t, entry - entry_bytes, entry)) {
            return bad_blob(message, "merges", "not sorted by (left, right) or a pair twice");
        }
    }
    return MCUBERT_OK;
}

/* Lengths within max_token_bytes, each block starting where its ids' bytes do, the bytes inside the blob,
 * the added tokens well formed. */
static mcubert_status check_tokens(const mcubert_bpe_tokenizer *t, uint32_t added_at, mcubert_message *message)
{
    uint32_t i, at = 0;
    for (i = 0; i < t->vocab_size; ++i) {
        uint32_t length = mcubert_rd16(t->lengths + 2u * i) & MCUBERT_BPE_LENGTH_MASK;
        if (length > t->max_token_bytes) {
            return bad_blob(message, "tokens", "a token is over max_token_bytes");
        }
        if (i % MCUBERT_BPE_BLOCK == 0u && mcubert_rd32(t->blocks + 4u * (i / MCUBERT_BPE_BLOCK)) != at) {
            return bad_blob(message, "tokens", "a block does not start where its ids' bytes do");
        }
        at += length;
    }
    if ((uint64_t)(t->token_bytes - t->blob) + at > added_at) {
        return bad_blob(message, "tokens", "the token bytes run past their section");
    }
    for (i = 0, at = added_at; i < t->added_count; ++i) { /* u8 length, the text, u32 id */
        if (at >= t->size || t->blob[at] == 0u || (uint64_t)at + 5u + t->blob[at] > t->size ||
            mcubert_rd32(t->blob + at + 1u + t->blob[at]) >= t->vocab_size) {
            return bad_blob(message, "added tokens", "an entry is empty, runs past the blob or has an id out of range");
        }
        at += 5u + t->blob[at];
    }
    return MCUBERT_OK;
}

/* The header's counts and section offsets, each section inside the blob, aligned and in order. */
static mcubert_status read_sections(mcubert_bpe_tokenizer *t, mcubert_message *message)
{
    const uint8_t *blob = t->blob;
    uint32_t n = t->vocab_size, m = t->merge_count, w = t->id_bytes, blocks = (n + MCUBERT_BPE_BLOCK - 1u) / 32u;
    uint32_t byte_ids_at = mcubert_rd32(blob + 40), merges_at = mcubert_rd32(blob + 44),
             merged_at = mcubert_rd32(blob + 48), lengths_at = mcubert_rd32(blob + 52),
             blocks_at = mcubert_rd32(blob + 56), bytes_at = mcubert_rd32(blob + 60),
             added_at = mcubert_rd32(blob + 64);
    if (n == 0u || n > MAX_VOCAB || m > MAX_VOCAB || (w != 2u && w != 4u) ||
        (w == 2u && (n > 0x10000u || m > 0x10000u)) || t->max_token_bytes == 0u ||
        t->max_token_bytes > MAX_TOKEN_BYTES || t->max_pretoken_bytes < 4u ||
        t->max_pretoken_bytes > MAX_PRETOKEN_BYTES || t->added_count > n) {
        return bad_blob(message, "header", "limits out of range");
    }
    if (!in_blob(t->size, byte_ids_at, 256u * w) || merges_at < byte_ids_at + 256u * w ||
        !in_blob(t->size, merges_at, 3ull * w * m) || merged_at < merges_at + 3ull * w * m ||
        !in_blob(t->size, merged_at, (uint64_t)w * m) || lengths_at < merged_at + (uint64_t)w * m ||
        !in_blob(t->size, lengths_at, 2ull * n) || blocks_at < lengths_at + 2ull * n ||
        !in_blob(t->size, blocks_at, 4ull * blocks) || bytes_at != blocks_at + 4u * blocks || added_at < bytes_at ||
        !in_blob(t->size, added_at, 0u)) {
        return bad_blob(message, "header", "a section lies outside the blob or out of order");
    }
    t->byte_ids = blob + byte_ids_at;
    t->merges = blob + merges_at;
    t->merged_ids = blob + merged_at;
    t->lengths = blob + lengths_at;
    t->blocks = blob + blocks_at;
    t->token_bytes = blob + bytes_at;
    t->added = blob + added_at;
    return MCUBERT_OK;
}

static mcubert_status read_blob(mcubert_bpe_tokenizer *t, const uint8_t *blob, uint32_t size, mcubert_message *message)
{
    mcubert_status status = check_version(blob, size, message);
    if (status != MCUBERT_OK) {
        return status;
    }
    t->blob = blob;
    t->size = size;
    t->vocab_size = mcubert_rd32(blob + 16);
    t->merge_count = mcubert_rd32(blob + 20);
    t->max_token_bytes = mcubert_rd16(blob + 24);
    t->id_bytes = mcubert_rd16(blob + 26);
    t->max_pretoken_bytes = mcubert_rd32(blob + 28);
    t->classes.range_count = mcubert_rd16(blob + 32);
    t->classes.rule_count = mcubert_rd16(blob + 34);
    t->added_count = mcubert_rd32(blob + 68);
    status = read_sections(t, message);
    if (status == MCUBERT_OK) {
        status = check_classes(t, mcubert_rd32(blob + 36), message);
    }
    if (status == MCUBERT_OK) {
        status = check_ids_and_merges(t, message);
    }
    if (status == MCUBERT_OK) {
        status = check_tokens(t, mcubert_rd32(blob + 64), message);
    }
    return status;
}

mcubert_status mcubert_bpe_init(mcubert_bpe_tokenizer *tokenizer, const uint8_t *blob, uint32_t size,
                                mcubert_message *message)
{
    mcubert_status status;
    if (tokenizer == NULL || blob == NULL) {
        return mcubert_fail_text(message, MCUBERT_ERROR_ARGUMENT, MCUBERT_BPE_OP, "blob", "NULL pointer");
    }
    tokenizer->blob = NULL;
    tokenizer->classes.blob = NULL; /* only the character-range fields are used */
    tokenizer->classes.string_count = 0;
    status = read_blob(tokenizer, blob, size, message);
    if (status != MCUBERT_OK) {
        tokenizer->blob = NULL; /* encode and decode refuse a tokenizer whose init failed */
    }
    return status;
}

uint32_t mcubert_bpe_get_buffer_size(const mcubert_bpe_tokenizer *tokenizer)
{
    return tokenizer == NULL || tokenizer->blob == NULL ? 0u : 8u * tokenizer->max_pretoken_bytes;
}

/* ---- decoding -------------------------------------------------------------------------------- */

uint32_t mcubert_bpe_decode_bound(const mcubert_bpe_tokenizer *tokenizer, uint32_t count)
{
    uint64_t bound;
    if (tokenizer == NULL || tokenizer->blob == NULL) {
        return 0u;
    }
    bound = 3u * (3u + (uint64_t)count * tokenizer->max_token_bytes);
    return bound > 0xFFFFFFFFu ? 0xFFFFFFFFu : (uint32_t)bound;
}

uint32_t mcubert_bpe_token_span(const mcubert_bpe_tokenizer *t, uint32_t id, uint32_t *start, int *special)
{
    uint32_t k, entry = mcubert_rd16(t->lengths + 2u * id);
    *start = mcubert_rd32(t->blocks + 4u * (id / MCUBERT_BPE_BLOCK));
    for (k = id - id % MCUBERT_BPE_BLOCK; k < id; ++k) {
        *start += mcubert_rd16(t->lengths + 2u * k) & MCUBERT_BPE_LENGTH_MASK;
    }
    *special = (entry & MCUBERT_BPE_FLAG_SPECIAL) != 0u;
    return entry & MCUBERT_BPE_LENGTH_MASK;
}

mcubert_status mcubert_bpe_decode(const mcubert_bpe_tokenizer *tokenizer, const int32_t *ids, uint32_t count,
                                  mcubert_utf8_stream *stream, uint8_t *out, uint32_t out_bytes, uint32_t *written,
                                  mcubert_message *message)
{
    uint32_t i, at = 0;
    uint64_t need;
    if (tokenizer == NULL || tokenizer->blob == NULL || stream == NULL || written == NULL ||
        (count > 0u && (ids == NULL || out == NULL))) {
        return mcubert_fail_text(message, MCUBERT_ERROR_ARGUMENT, MCUBERT_BPE_OP, "decode",
                                 "NULL pointer or uninitialised tokenizer");
    }
    *written = 0;
    need = stream->count;
    for (i = 0; i < count; ++i) {
        if (ids[i] < 0 || (uint32_t)ids[i] >= tokenizer->vocab_size) {
            return mcubert_fail_text(message, MCUBERT_ERROR_INPUT, MCUBERT_BPE_OP, "ids",
                                     "an id outside [0, vocab_size)");
        }
        need += mcubert_rd16(tokenizer->lengths + 2u * (uint32_t)ids[i]) & MCUBERT_BPE_LENGTH_MASK;
    }
    if (3u * need > out_bytes) {
        return mcubert_fail_text(message, MCUBERT_ERROR_ARGUMENT, MCUBERT_BPE_OP, "out",
                                 "smaller than the ids need (mcubert_bpe_decode_bound)");
    }
    for (i = 0; i < count; ++i) {
        uint32_t start, k, length;
        int special;
        length = mcubert_bpe_token_span(tokenizer, (uint32_t)ids[i], &start, &special);
        if (special) {
            continue; /* skip_special_tokens=True */
        }
        for (k = 0; k < length; ++k) {
            at += mcubert_utf8_put(stream, tokenizer->token_bytes[start + k], out + at);
        }
    }
    *written = at;
    return MCUBERT_OK;
}
