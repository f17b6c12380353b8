/*
 * mcubert_tokenize: BERT's tokenizer on the device (see mcubert/mcubert_tokenizer.h). The blob layout
 * and the algorithm's reference are tflm_mcubert/tokenizer/{vocab_blob,reference}.py.
 *
 * Text streams through once (twice for a sentence pair, whose truncation needs both lengths): each
 * code point's kind and mapping come from a binary search of its plane's character ranges; a word collects
 * its mapped characters in the caller's buffer and, at its end, greedy longest-match-first WordPiece
 * emits its ids, each piece found by a binary search of the bucket heads and one bucket's scan.
 */
#include "mcubert/mcubert_tokenizer.h"

#include <stddef.h>
#include <stdint.h>

#include "mcubert_internal.h"
#include "mcubert_tokenizer_pieces.h"
#include "mcubert_tokenizer_text.h"

#define OP "TOKENIZER"
#define HEADER_BYTES 80u
#define MAX_VOCAB 0x1000000u
#define MAX_CHARS_PER_WORD 1000u
#define PLANES 17u /* every plane starts a range: vocab_blob.PLANES */

/* ---- blob checks --------------------------------------------------------------------------- */

static mcubert_status bad_blob(mcubert_message *message, const char *field, const char *problem)
{
    return mcubert_fail_text(message, MCUBERT_ERROR_MODEL, OP, field, problem);
}

/* bytes [offset, offset + length) lie in the blob */
static int in_blob(uint32_t size, uint32_t offset, uint32_t length)
{
    return offset <= size && length <= size - offset;
}

/* Every plane's ranges start at its first code point and increase; rules are well formed and name
 * code points and strings that exist; a shifted range stays in Unicode. */
mcubert_status mcubert_tokenizer_check_ranges(const mcubert_tokenizer *t, mcubert_message *message)
{
    uint32_t plane, i;
    if (mcubert_rd16(t->planes) != 0u || mcubert_rd16(t->planes + 2u * PLANES) != t->range_count) {
        return bad_blob(message, "ranges", "the plane index does not cover the ranges");
    }
    for (i = 0; i < t->rule_count; ++i) {
        uint32_t rule = mcubert_rd32(t->rules + 4u * i), mode = RULE_MODE(rule);
        int32_t value = mcubert_rule_value(rule);
        if ((rule >> 26) != 0u) {
            return bad_blob(message, "ranges", "reserved bits set in a rule");
        }
        if ((mode == MODE_CONST && (uint32_t)value > MAX_CODE_POINT) ||
            (mode == MODE_STRING && (uint32_t)value >= t->string_count)) {
            return bad_blob(message, "ranges", "a mapping names a code point or string that does not exist");
        }
    }
    for (plane = 0; plane < PLANES; ++plane) {
        uint32_t first = mcubert_rd16(t->planes + 2u * plane), last = mcubert_rd16(t->planes + 2u * (plane + 1u));
        if (first >= last || mcubert_range_start(t, first) != 0u) {
            return bad_blob(message, "ranges", "a plane has no range starting at its first code point");
        }
        for (i = first; i < last; ++i) {
            uint32_t start = plane << 16 | mcubert_range_start(t, i), rule, index;
            uint32_t end = i + 1u < last ? plane << 16 | mcubert_range_start(t, i + 1u) : (plane + 1u) << 16;
            index = t->rule_count > 256u ? mcubert_rd16(t->range_rules + 2u * i) : t->range_rules[i];
            if (end <= start || index >= t->rule_count) {
                return bad_blob(message, "ranges", "starts not increasing in a plane, or a rule index out of range");
            }
            rule = mcubert_range_rule(t, i);
            if (RULE_MODE(rule) == MODE_DELTA &&
                ((int64_t)start + mcubert_rule_value(rule) < 0 ||
                 (int64_t)end - 1 + mcubert_rule_value(rule) > (int64_t)MAX_CODE_POINT)) {
                return bad_blob(message, "ranges", "a shifted range maps outside Unicode");
            }
        }
    }
    return MCUBERT_OK;
}

static mcubert_status check_strings_and_specials(const mcubert_tokenizer *t, uint32_t specials_at,
                                                 mcubert_message *message)
{
    uint32_t i, previous_end = 0, at = specials_at;
    for (i = 0; i < t->string_count; ++i) {
        uint32_t end = mcubert_rd16(t->string_ends + 2u * i);
        if (end < previous_end || end - previous_end > t->max_chars_per_word * 4u) {
            return bad_blob(message, "strings", "string ends decrease or a string is too long");
        }
        previous_end = end;
    }
    if (!in_blob(t->size, (uint32_t)(t->string_bytes - t->blob), previous_end)) {
        return bad_blob(message, "strings", "strings run past the blob");
    }
    for (i = 0; i < t->combining_count; ++i) { /* increasing code points, each with a class */
        uint32_t entry = mcubert_rd32(t->combining + 4u * i);
        if ((entry & 0xFFu) == 0u || (entry >> 8) > MAX_CODE_POINT ||
            (i > 0u && entry >> 8 <= mcubert_rd32(t->combining + 4u * (i - 1u)) >> 8)) {
            return bad_blob(message, "combining marks", "not increasing, outside Unicode or of class 0");
        }
    }
    for (i = 0; i < t->special_count; ++i) { /* u8 flags, u8 length, the text, u32 id */
        if (!in_blob(t->size, at, 2u) || t->blob[at] > FLAG_NORMALIZED || t->blob[at + 1u] == 0u ||
            !in_blob(t->size, at + 2u, t->blob[at + 1u] + 4u) ||
            mcubert_rd32(t->blob + at + 2u + t->blob[at + 1u]) >= t->vocab_size) {
            return bad_blob(message, "added tokens",
                            "an entry has unknown flags, is empty, runs past the blob or has an id out of range");
        }
        at += 6u + t->blob[at + 1u];
    }
    return MCUBERT_OK;
}

static mcubert_status read_header(mcubert_tokenizer *t, const uint8_t *blob, uint32_t size, mcubert_message *message)
{
    uint32_t ranges_at, strings_at, specials_at;
    mcubert_status status;
    if (size < 8u) {
        return bad_blob(message, "header", "shorter than the header (truncated?)");
    }
    if (blob[0] != 'M' || blob[1] != 'C' || blob[2] != 'T' || blob[3] != 'K') {
        return bad_blob(message, "header", "not a tokenizer blob (no 'MCTK' header)");
    }
    if (mcubert_rd16(blob + 4) != MCUBERT_TOKENIZER_VERSION || mcubert_rd16(blob + 6) != HEADER_BYTES) {
        mcubert_fail(message, MCUBERT_ERROR_MODEL, OP, "header");
        mcubert_append(message, "blob version ");
        mcubert_append_int(message, mcubert_rd16(blob + 4));
        mcubert_append(message, "; this library reads version ");
        mcubert_append_int(message, MCUBERT_TOKENIZER_VERSION);
        mcubert_append(message, " (export the model again)");
        return MCUBERT_ERROR_MODEL;
    }
    if (size < HEADER_BYTES) {
        return bad_blob(message, "header", "shorter than the 80-byte header (truncated?)");
    }
    if (mcubert_rd32(blob + 8) != size) {
        return bad_blob(message, "header", "the blob's size is not the size given (truncated?)");
    }
    if (~mcubert_crc32_update(0xFFFFFFFFu, blob + 16, size - 16u) != mcubert_rd32(blob + 12)) {
        return bad_blob(message, "header", "CRC-32 mismatch: the blob is corrupted");
    }
    t->blob = blob;
    t->size = size;
    t->max_chars_per_word = mcubert_rd16(blob + 16);
    t->special_count = mcubert_rd16(blob + 18);
    t->range_count = mcubert_rd16(blob + 20);
    t->rule_count = mcubert_rd16(blob + 22);
    t->cls_id = (int32_t)mcubert_rd32(blob + 24);
    t->sep_id = (int32_t)mcubert_rd32(blob + 28);
    t->pad_id = (int32_t)mcubert_rd32(blob + 32);
    t->unk_id = (int32_t)mcubert_rd32(blob + 36);
    ranges_at = mcubert_rd32(blob + 40);
    t->string_count = mcubert_rd32(blob + 44);
    strings_at = mcubert_rd32(blob + 48);
    specials_at = mcubert_rd32(blob + 52);
    t->vocab_size = mcubert_rd32(blob + 64);
    t->max_piece_bytes = mcubert_rd32(blob + 68);
    t->combining = blob + mcubert_rd32(blob + 72);
    t->combining_count = mcubert_rd32(blob + 76);
    if (t->max_chars_per_word == 0u || t->max_chars_per_word > MAX_CHARS_PER_WORD || t->max_piece_bytes == 0u ||
        t->max_piece_bytes > 255u || t->vocab_size == 0u || t->vocab_size > MAX_VOCAB || t->range_count == 0u ||
        (uint32_t)t->cls_id >= t->vocab_size || (uint32_t)t->sep_id >= t->vocab_size ||
        (uint32_t)t->pad_id >= t->vocab_size || (uint32_t)t->unk_id >= t->vocab_size) {
        return bad_blob(message, "header", "limits or special ids out of range");
    }
    if (t->rule_count == 0u ||
        !in_blob(size, ranges_at,
                 4u * t->rule_count + 2u * (PLANES + 1u) + (t->rule_count > 256u ? 4u : 3u) * t->range_count) ||
        t->string_count > 0xFFFFu || !in_blob(size, strings_at, 2u * t->string_count) || t->combining_count > 0xFFFFu ||
        !in_blob(size, mcubert_rd32(blob + 72), 4u * t->combining_count)) {
        return bad_blob(message, "header", "a section lies outside the blob");
    }
    t->rules = blob + ranges_at;
    t->planes = t->rules + 4u * t->rule_count;
    t->range_starts = t->planes + 2u * (PLANES + 1u);
    t->range_rules = t->range_starts + 2u * t->range_count;
    t->string_ends = blob + strings_at;
    t->string_bytes = blob + strings_at + 2u * t->string_count;
    t->specials = blob + specials_at;
    status = mcubert_tokenizer_check_ranges(t, message);
    if (status == MCUBERT_OK) {
        status = check_strings_and_specials(t, specials_at, message);
    }
    if (status == MCUBERT_OK) {
        status = mcubert_check_piece_list(t, mcubert_rd32(blob + 56), &t->word_pieces, "word pieces", message);
    }
    if (status == MCUBERT_OK) {
        status = mcubert_check_piece_list(t, mcubert_rd32(blob + 60), &t->continuation_pieces, "continuation pieces",
                                          message);
    }
    return status;
}

mcubert_status mcubert_tokenizer_init(mcubert_tokenizer *tokenizer, const uint8_t *blob, uint32_t size,
                                      mcubert_message *message)
{
    mcubert_status status;
    if (tokenizer == NULL || blob == NULL) {
        return mcubert_fail_text(message, MCUBERT_ERROR_ARGUMENT, OP, "blob", "NULL pointer");
    }
    tokenizer->blob = NULL;
    status = read_header(tokenizer, blob, size, message);
    if (status != MCUBERT_OK) {
        tokenizer->blob = NULL; /* mcubert_tokenize refuses a tokenizer whose init failed */
    }
    return status;
}

/* ---- the scratch: one word ------------------------------------------------------------------ */

uint32_t mcubert_tokenizer_get_buffer_size(const mcubert_tokenizer *tokenizer)
{
    uint32_t slots = tokenizer == NULL ? 0u : tokenizer->max_chars_per_word + 1u;
    return 4u * slots + ((2u * slots + 3u) & ~3u);
}

/* ---- WordPiece and the id sink ------------------------------------------------------------------ */

typedef struct {
    int32_t *ids;      /* NULL: count only */
    uint32_t capacity; /* ids stored; later ones are counted, not stored */
    uint32_t count;
} id_sink;

static void emit(id_sink *sink, int32_t id)
{
    if (sink->ids != NULL && sink->count < sink->capacity) {
        sink->ids[sink->count] = id;
    }
    sink->count += 1u;
}

/* Greedy longest-match-first over the word's characters; the whole word is [UNK] when a position
 * has no piece, or when it has more than max_chars_per_word characters. Each position is one search for
 * the longest piece that is a prefix of the rest of the word (mcubert_longest_piece), whatever the word's
 * length: a long word costs what its pieces cost. A piece is whole UTF-8 characters, so it ends where a
 * character does. */
static void word_piece(const mcubert_tokenizer *t, mcubert_word *word, id_sink *sink)
{
    uint32_t start = 0, mark = sink->count;
    if (word->chars == 0u) {
        return;
    }
    if (word->chars > t->max_chars_per_word) {
        emit(sink, t->unk_id);
        word->chars = 0;
        return;
    }
    while (start < word->chars) {
        uint32_t begin = start == 0u ? 0u : word->char_ends[start - 1u], piece_length;
        uint32_t length = word->char_ends[word->chars - 1u] - begin;
        int32_t found =
            mcubert_longest_piece(t, start == 0u ? &t->word_pieces : &t->continuation_pieces, word->bytes + begin,
                                  length < t->max_piece_bytes ? length : t->max_piece_bytes, &piece_length);
        /* a piece that ends inside a character is no UTF-8: only a damaged blob holds one */
        if (found < 0 || word->char_ends[start] > begin + piece_length) {
            sink->count = mark;
            emit(sink, t->unk_id);
            break;
        }
        emit(sink, found);
        while (start < word->chars && word->char_ends[start] <= begin + piece_length) {
            ++start; /* past the characters the piece covers */
        }
    }
    word->chars = 0;
}

/* All ids of one text into `sink`. With `stop_when_full`, stops at the first word boundary once the
 * sink's capacity is reached (later ids would be truncated away). */
static void tokenize_text(const mcubert_tokenizer *t, const uint8_t *text, uint32_t size, mcubert_word *word,
                          id_sink *sink, int stop_when_full)
{
    uint32_t at = 0;
    while (at < size) {
        uint32_t kind, special_length = 0;
        int32_t special_id = 0, cp;
        uint32_t rule;
        if (stop_when_full && word->chars == 0u && sink->count >= sink->capacity) {
            return;
        }
        if (t->special_count > 0u) {
            special_length = mcubert_added_token_at(t, text, size, at, &special_id);
        }
        if (special_length > 0u) {
            word_piece(t, word, sink);
            emit(sink, special_id);
            at += special_length;
            continue;
        }
        cp = mcubert_next_code_point(text, size, &at);
        if (cp < 0) {
            continue; /* dropped, as U+FFFD */
        }
        rule = mcubert_rule_of(t, (uint32_t)cp);
        kind = RULE_KIND(rule);
        if (kind == KIND_REMOVE) {
            continue;
        }
        if (kind == KIND_SPACE || kind == KIND_ISOLATE) {
            word_piece(t, word, sink);
        }
        if (kind != KIND_SPACE) {
            mcubert_append_mapped(t, rule, (uint32_t)cp, word);
        }
        if (kind == KIND_ISOLATE) {
            word_piece(t, word, sink);
        }
    }
    word_piece(t, word, sink);
}

/* Tokens kept of each text: `tokenizers`' LongestFirst truncation to `budget` (reference.py). */
static void truncated_lengths(uint32_t first, uint32_t second, uint32_t budget, uint32_t *keep_first,
                              uint32_t *keep_second)
{
    uint32_t shorter = first <= second ? first : second, longer;
    if (first + second <= budget) {
        *keep_first = first;
        *keep_second = second;
        return;
    }
    if (shorter > budget) {
        longer = shorter;
    } else {
        longer = budget - shorter > shorter ? budget - shorter : shorter;
    }
    if (shorter + longer > budget) {
        shorter = budget / 2u;
        longer = shorter + budget % 2u;
    }
    *keep_first = first <= second ? shorter : longer;
    *keep_second = first <= second ? longer : shorter;
}

mcubert_status mcubert_tokenize(const mcubert_tokenizer *tokenizer, const uint8_t *text, uint32_t text_bytes,
                                const uint8_t *pair, uint32_t pair_bytes, uint32_t seq_len, int32_t *ids,
                                int32_t *token_types, int8_t *mask, uint32_t *valid, void *buffer,
                                uint32_t buffer_bytes, mcubert_message *message)
{
    const uint32_t specials = pair != NULL && pair_bytes > 0u ? 3u : 2u;
    mcubert_word word;
    id_sink sink;
    uint32_t keep_first, keep_second = 0, first_end, i;
    if (tokenizer == NULL || tokenizer->blob == NULL || ids == NULL || valid == NULL || buffer == NULL ||
        (text == NULL && text_bytes > 0u) || (pair == NULL && pair_bytes > 0u) || ((uintptr_t)buffer & 3u) != 0u) {
        return mcubert_fail_text(message, MCUBERT_ERROR_ARGUMENT, OP, "arguments",
                                 "NULL tokenizer (or one whose init failed), text, pair, ids, valid or buffer, "
                                 "or a misaligned buffer");
    }
    if (buffer_bytes < mcubert_tokenizer_get_buffer_size(tokenizer)) {
        mcubert_fail(message, MCUBERT_ERROR_ARGUMENT, OP, "buffer_bytes");
        mcubert_append(message, "needs ");
        mcubert_append_int(message, mcubert_tokenizer_get_buffer_size(tokenizer));
        return MCUBERT_ERROR_ARGUMENT;
    }
    if (seq_len < specials) {
        return mcubert_fail_text(message, MCUBERT_ERROR_ARGUMENT, OP, "seq_len", "no room for [CLS] and [SEP]");
    }
    if (pair_bytes == 0u) {
        pair = NULL; /* an empty pair is no pair, as in `transformers` */
    }
    word.bytes = (uint8_t *)buffer;
    word.char_ends = (uint16_t *)(void *)((uint8_t *)buffer + 4u * (tokenizer->max_chars_per_word + 1u));
    word.chars = 0;
    if (pair == NULL) {
        keep_first = seq_len - specials;
    } else { /* LongestFirst needs both lengths: count them first */
        uint32_t first, second;
        sink.ids = NULL;
        sink.capacity = 0;
        sink.count = 0;
        tokenize_text(tokenizer, text, text_bytes, &word, &sink, 0);
        first = sink.count;
        sink.count = 0;
        tokenize_text(tokenizer, pair, pair_bytes, &word, &sink, 0);
        second = sink.count;
        truncated_lengths(first, second, seq_len - specials, &keep_first, &keep_second);
    }
    ids[0] = tokenizer->cls_id;
    sink.ids = ids + 1;
    sink.capacity = keep_first;
    sink.count = 0;
    tokenize_text(tokenizer, text, text_bytes, &word, &sink, 1);
    first_end = 1u + (sink.count < keep_first ? sink.count : keep_first);
    ids[first_end] = tokenizer->sep_id;
    *valid = first_end + 1u;
    if (pair != NULL) {
        sink.ids = ids + *valid;
        sink.capacity = keep_second;
        sink.count = 0;
        tokenize_text(tokenizer, pair, pair_bytes, &word, &sink, 1);
        *valid += sink.count < keep_second ? sink.count : keep_second;
        ids[*valid] = tokenizer->sep_id;
        *valid += 1u;
    }
    for (i = 0; i < seq_len; ++i) {
        if (i >= *valid) {
            ids[i] = tokenizer->pad_id;
        }
        if (token_types != NULL) {
            token_types[i] = (pair != NULL && i > first_end && i < *valid) ? 1 : 0;
        }
        if (mask != NULL) {
            mask[i] = (int8_t)(i < *valid ? 1 : 0);
        }
    }
    return MCUBERT_OK;
}
