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

#define OP "TOKENIZER"
#define HEADER_BYTES 72u
#define FLAG_NORMALIZED 1u /* an added token matched on the normalized input (vocab_blob.FLAG_NORMALIZED) */
#define MAX_VOCAB 0x1000000u
#define MAX_CHARS_PER_WORD 1000u
#define KIND_REMOVE 0u
#define KIND_SPACE 1u
#define KIND_ISOLATE 2u
#define MODE_DELTA 0u
#define MODE_CONST 1u
#define MODE_STRING 2u
#define HANGUL_FIRST 0xAC00u
#define HANGUL_COUNT 11172u
#define MAX_CODE_POINT 0x10FFFFu
#define PLANES 17u /* every plane starts a range: vocab_blob.PLANES */

static uint32_t rd16(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8;
}

static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* A rule: kind | mode << 2 | value << 4, the value 22 bits and signed (any code point or delta fits). */
#define RULE_KIND(rule) ((rule)&3u)
#define RULE_MODE(rule) (((rule) >> 2) & 3u)

static int32_t rule_value(uint32_t rule)
{
    return (int32_t)(((rule >> 4) & 0x3FFFFFu) ^ 0x200000u) - 0x200000; /* sign-extend 22 bits */
}

static uint32_t range_start(const mcubert_tokenizer *t, uint32_t i)
{
    return rd16(t->range_starts + 2u * i);
}

static uint32_t range_rule(const mcubert_tokenizer *t, uint32_t i)
{
    uint32_t index = t->rule_count > 256u ? rd16(t->range_rules + 2u * i) : t->range_rules[i];
    return rd32(t->rules + 4u * index);
}

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
static mcubert_status check_ranges(const mcubert_tokenizer *t, mcubert_message *message)
{
    uint32_t plane, i;
    if (rd16(t->planes) != 0u || rd16(t->planes + 2u * PLANES) != t->range_count) {
        return bad_blob(message, "ranges", "the plane index does not cover the ranges");
    }
    for (i = 0; i < t->rule_count; ++i) {
        uint32_t rule = rd32(t->rules + 4u * i), mode = RULE_MODE(rule);
        int32_t value = rule_value(rule);
        if ((rule >> 26) != 0u) {
            return bad_blob(message, "ranges", "reserved bits set in a rule");
        }
        if ((mode == MODE_CONST && (uint32_t)value > MAX_CODE_POINT) ||
            (mode == MODE_STRING && (uint32_t)value >= t->string_count)) {
            return bad_blob(message, "ranges", "a mapping names a code point or string that does not exist");
        }
    }
    for (plane = 0; plane < PLANES; ++plane) {
        uint32_t first = rd16(t->planes + 2u * plane), last = rd16(t->planes + 2u * (plane + 1u));
        if (first >= last || range_start(t, first) != 0u) {
            return bad_blob(message, "ranges", "a plane has no range starting at its first code point");
        }
        for (i = first; i < last; ++i) {
            uint32_t start = plane << 16 | range_start(t, i), rule, index;
            uint32_t end = i + 1u < last ? plane << 16 | range_start(t, i + 1u) : (plane + 1u) << 16;
            index = t->rule_count > 256u ? rd16(t->range_rules + 2u * i) : t->range_rules[i];
            if (end <= start || index >= t->rule_count) {
                return bad_blob(message, "ranges", "starts not increasing in a plane, or a rule index out of range");
            }
            rule = range_rule(t, i);
            if (RULE_MODE(rule) == MODE_DELTA && ((int64_t)start + rule_value(rule) < 0 ||
                                                  (int64_t)end - 1 + rule_value(rule) > (int64_t)MAX_CODE_POINT)) {
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
        uint32_t end = rd16(t->string_ends + 2u * i);
        if (end < previous_end || end - previous_end > t->max_chars_per_word * 4u) {
            return bad_blob(message, "strings", "string ends decrease or a string is too long");
        }
        previous_end = end;
    }
    if (!in_blob(t->size, (uint32_t)(t->string_bytes - t->blob), previous_end)) {
        return bad_blob(message, "strings", "strings run past the blob");
    }
    for (i = 0; i < t->special_count; ++i) { /* u8 flags, u8 length, the text, u32 id */
        if (!in_blob(t->size, at, 2u) || t->blob[at] > FLAG_NORMALIZED || t->blob[at + 1u] == 0u ||
            !in_blob(t->size, at + 2u, t->blob[at + 1u] + 4u) ||
            rd32(t->blob + at + 2u + t->blob[at + 1u]) >= t->vocab_size) {
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
    if (rd16(blob + 4) != MCUBERT_TOKENIZER_VERSION || rd16(blob + 6) != HEADER_BYTES) {
        mcubert_fail(message, MCUBERT_ERROR_MODEL, OP, "header");
        mcubert_append(message, "blob version ");
        mcubert_append_int(message, rd16(blob + 4));
        mcubert_append(message, "; this library reads version ");
        mcubert_append_int(message, MCUBERT_TOKENIZER_VERSION);
        mcubert_append(message, " (export the model again)");
        return MCUBERT_ERROR_MODEL;
    }
    if (size < HEADER_BYTES) {
        return bad_blob(message, "header", "shorter than the 72-byte header (truncated?)");
    }
    if (rd32(blob + 8) != size) {
        return bad_blob(message, "header", "the blob's size is not the size given (truncated?)");
    }
    if (~mcubert_crc32_update(0xFFFFFFFFu, blob + 16, size - 16u) != rd32(blob + 12)) {
        return bad_blob(message, "header", "CRC-32 mismatch: the blob is corrupted");
    }
    t->blob = blob;
    t->size = size;
    t->max_chars_per_word = rd16(blob + 16);
    t->special_count = rd16(blob + 18);
    t->range_count = rd16(blob + 20);
    t->rule_count = rd16(blob + 22);
    t->cls_id = (int32_t)rd32(blob + 24);
    t->sep_id = (int32_t)rd32(blob + 28);
    t->pad_id = (int32_t)rd32(blob + 32);
    t->unk_id = (int32_t)rd32(blob + 36);
    ranges_at = rd32(blob + 40);
    t->string_count = rd32(blob + 44);
    strings_at = rd32(blob + 48);
    specials_at = rd32(blob + 52);
    t->vocab_size = rd32(blob + 64);
    t->max_piece_bytes = rd32(blob + 68);
    if (t->max_chars_per_word == 0u || t->max_chars_per_word > MAX_CHARS_PER_WORD || t->max_piece_bytes == 0u ||
        t->max_piece_bytes > 255u || t->vocab_size == 0u || t->vocab_size > MAX_VOCAB || t->range_count == 0u ||
        (uint32_t)t->cls_id >= t->vocab_size || (uint32_t)t->sep_id >= t->vocab_size ||
        (uint32_t)t->pad_id >= t->vocab_size || (uint32_t)t->unk_id >= t->vocab_size) {
        return bad_blob(message, "header", "limits or special ids out of range");
    }
    if (t->rule_count == 0u ||
        !in_blob(size, ranges_at,
                 4u * t->rule_count + 2u * (PLANES + 1u) + (t->rule_count > 256u ? 4u : 3u) * t->range_count) ||
        t->string_count > 0xFFFFu || !in_blob(size, strings_at, 2u * t->string_count)) {
        return bad_blob(message, "header", "a section lies outside the blob");
    }
    t->rules = blob + ranges_at;
    t->planes = t->rules + 4u * t->rule_count;
    t->range_starts = t->planes + 2u * (PLANES + 1u);
    t->range_rules = t->range_starts + 2u * t->range_count;
    t->string_ends = blob + strings_at;
    t->string_bytes = blob + strings_at + 2u * t->string_count;
    t->specials = blob + specials_at;
    status = check_ranges(t, message);
    if (status == MCUBERT_OK) {
        status = check_strings_and_specials(t, specials_at, message);
    }
    if (status == MCUBERT_OK) {
        status = mcubert_check_piece_list(t, rd32(blob + 56), &t->word_pieces, "word pieces", message);
    }
    if (status == MCUBERT_OK) {
        status = mcubert_check_piece_list(t, rd32(blob + 60), &t->continuation_pieces, "continuation pieces", message);
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

typedef struct {
    uint8_t *bytes;      /* UTF-8 of the word's mapped characters, (max_chars + 1) * 4 bytes */
    uint16_t *char_ends; /* byte offset after each character, max_chars + 1 entries */
    uint32_t chars;      /* characters held (max_chars + 1 means: too long, [UNK]) */
} word_buffer;

uint32_t mcubert_tokenizer_get_buffer_size(const mcubert_tokenizer *tokenizer)
{
    uint32_t slots = tokenizer == NULL ? 0u : tokenizer->max_chars_per_word + 1u;
    return 4u * slots + ((2u * slots + 3u) & ~3u);
}

/* cp's UTF-8 into out[0..3]; the number of bytes */
static uint32_t utf8_encode(uint32_t cp, uint8_t *out)
{
    if (cp < 0x80u) {
        out[0] = (uint8_t)cp;
        return 1u;
    }
    if (cp < 0x800u) {
        out[0] = (uint8_t)(0xC0u | cp >> 6);
        out[1] = (uint8_t)(0x80u | (cp & 0x3Fu));
        return 2u;
    }
    if (cp < 0x10000u) {
        out[0] = (uint8_t)(0xE0u | cp >> 12);
        out[1] = (uint8_t)(0x80u | ((cp >> 6) & 0x3Fu));
        out[2] = (uint8_t)(0x80u | (cp & 0x3Fu));
        return 3u;
    }
    out[0] = (uint8_t)(0xF0u | cp >> 18);
    out[1] = (uint8_t)(0x80u | ((cp >> 12) & 0x3Fu));
    out[2] = (uint8_t)(0x80u | ((cp >> 6) & 0x3Fu));
    out[3] = (uint8_t)(0x80u | (cp & 0x3Fu));
    return 4u;
}

static void word_append(word_buffer *word, uint32_t cp, uint32_t max_chars)
{
    uint32_t at = word->chars == 0u ? 0u : word->char_ends[word->chars - 1u];
    if (word->chars > max_chars) {
        return; /* already too long: it becomes [UNK] whatever follows */
    }
    at += utf8_encode(cp, word->bytes + at);
    word->char_ends[word->chars++] = (uint16_t)at;
}

/* ---- UTF-8 in ------------------------------------------------------------------------------- */

/* The code point at text[*at] (advancing *at), or -1 for an invalid sequence, of which the maximal
 * subpart is consumed (Unicode 15, 3.9 "U+FFFD Substitution of Maximal Subparts"). */
static int32_t next_code_point(const uint8_t *text, uint32_t size, uint32_t *at)
{
    uint32_t lead = text[*at], need, k, cp, low = 0x80u, high = 0xBFu;
    *at += 1u;
    if (lead < 0x80u) {
        return (int32_t)lead;
    }
    if (lead >= 0xC2u && lead <= 0xDFu) {
        need = 1u;
    } else if (lead >= 0xE0u && lead <= 0xEFu) {
        need = 2u;
        low = lead == 0xE0u ? 0xA0u : 0x80u;
        high = lead == 0xEDu ? 0x9Fu : 0xBFu; /* no surrogates */
    } else if (lead >= 0xF0u && lead <= 0xF4u) {
        need = 3u;
        low = lead == 0xF0u ? 0x90u : 0x80u;
        high = lead == 0xF4u ? 0x8Fu : 0xBFu; /* nothing above U+10FFFF */
    } else {
        return -1;
    }
    cp = lead & (0x3Fu >> need);
    for (k = 0; k < need; ++k) {
        uint32_t byte;
        if (*at >= size) {
            return -1;
        }
        byte = text[*at];
        if (byte < (k == 0u ? low : 0x80u) || byte > (k == 0u ? high : 0xBFu)) {
            return -1; /* the offending byte starts the next character */
        }
        cp = cp << 6 | (byte & 0x3Fu);
        *at += 1u;
    }
    return (int32_t)cp;
}

/* The rule of the range holding cp: the last of its plane's ranges whose start <= cp (each plane's
 * first range starts at its first code point). cp <= MAX_CODE_POINT. */
static uint32_t rule_of(const mcubert_tokenizer *t, uint32_t cp)
{
    uint32_t low = cp & 0xFFFFu, lo = rd16(t->planes + 2u * (cp >> 16)),
             hi = rd16(t->planes + 2u * ((cp >> 16) + 1u)) - 1u;
    while (lo < hi) {
        uint32_t mid = (lo + hi + 1u) / 2u;
        if (range_start(t, mid) <= low) {
            lo = mid;
        } else {
            hi = mid - 1u;
        }
    }
    return range_rule(t, lo);
}

/* Receives the mapped characters of one code point, one at a time. */
typedef int (*char_sink)(void *context, uint32_t cp);

/* Feeds cp's mapped characters (kind letter or isolate) to `sink`; stops early when it returns 0. */
static int for_each_mapped(const mcubert_tokenizer *t, uint32_t rule, uint32_t cp, char_sink sink, void *context)
{
    uint32_t mode = RULE_MODE(rule);
    int32_t value = rule_value(rule);
    if (mode == MODE_DELTA) {
        return sink(context, (uint32_t)((int32_t)cp + value));
    }
    if (mode == MODE_CONST) {
        return sink(context, (uint32_t)value);
    }
    if (mode == MODE_STRING) {
        uint32_t begin = value == 0 ? 0u : rd16(t->string_ends + 2u * (uint32_t)(value - 1));
        uint32_t end = rd16(t->string_ends + 2u * (uint32_t)value);
        while (begin < end) {
            int32_t mapped = next_code_point(t->string_bytes, end, &begin);
            if (mapped >= 0 && !sink(context, (uint32_t)mapped)) {
                return 0;
            }
        }
        return 1;
    }
    if (cp - HANGUL_FIRST < HANGUL_COUNT) { /* NFD of a Hangul syllable: 2 or 3 jamo */
        uint32_t index = cp - HANGUL_FIRST, trail = index % 28u;
        if (!sink(context, 0x1100u + index / (21u * 28u)) || !sink(context, 0x1161u + (index % (21u * 28u)) / 28u)) {
            return 0;
        }
        return trail == 0u || sink(context, 0x11A7u + trail);
    }
    return sink(context, cp);
}

typedef struct {
    word_buffer *word;
    uint32_t max_chars;
} word_sink;

static int append_to_word(void *context, uint32_t cp)
{
    word_sink *sink = (word_sink *)context;
    word_append(sink->word, cp, sink->max_chars);
    return 1;
}

/* Appends cp's mapped characters (kind letter or isolate) to the word. */
static void append_mapped(const mcubert_tokenizer *t, uint32_t rule, uint32_t cp, word_buffer *word)
{
    word_sink sink;
    sink.word = word;
    sink.max_chars = t->max_chars_per_word;
    (void)for_each_mapped(t, rule, cp, append_to_word, &sink);
}

/* ---- byte comparison (special tokens) -------------------------------------------------------- */

/* <0, 0, >0 as piece (length `length`) compares with the query */
static int32_t compare(const uint8_t *piece, uint32_t length, const uint8_t *query, uint32_t query_length)
{
    uint32_t k, n = length < query_length ? length : query_length;
    for (k = 0; k < n; ++k) {
        if (piece[k] != query[k]) {
            return (int32_t)piece[k] - (int32_t)query[k];
        }
    }
    return (int32_t)length - (int32_t)query_length;
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
static void word_piece(const mcubert_tokenizer *t, word_buffer *word, id_sink *sink)
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
        if (found < 0) {
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

/* ---- added tokens (reference.added_token_at) ---------------------------------------------------- */

/* An entry: u8 flags, u8 length, the text, u32 id (checked at init). */
#define ADDED_LENGTH(entry) ((uint32_t)(entry)[1])
#define ADDED_TEXT(entry) ((entry) + 2)
#define ADDED_ID(entry) ((int32_t)rd32((entry) + 2u + (entry)[1]))
#define ADDED_NEXT(entry) ((entry) + 6u + (entry)[1])

/* The longest added token matched on the raw input that starts at text[at]: its length (id in *id), or 0. */
static uint32_t raw_token_at(const mcubert_tokenizer *t, const uint8_t *text, uint32_t size, uint32_t at, int32_t *id)
{
    const uint8_t *entry = t->specials;
    uint32_t i, best = 0;
    for (i = 0; i < t->special_count; ++i, entry = ADDED_NEXT(entry)) {
        uint32_t length = ADDED_LENGTH(entry);
        if ((entry[0] & FLAG_NORMALIZED) == 0u && length > best && length <= size - at &&
            ADDED_TEXT(entry)[0] == text[at] && compare(ADDED_TEXT(entry), length, text + at, length) == 0) {
            best = length;
            *id = ADDED_ID(entry);
        }
    }
    return best;
}

/* Whether a raw added token starts at a character of text(start, end). */
static int raw_token_inside(const mcubert_tokenizer *t, const uint8_t *text, uint32_t size, uint32_t start,
                            uint32_t end)
{
    uint32_t at = start;
    int32_t id;
    (void)next_code_point(text, size, &at);
    while (at < end) {
        if (raw_token_at(t, text, size, at, &id) > 0u) {
            return 1;
        }
        (void)next_code_point(text, size, &at);
    }
    return 0;
}

typedef struct {
    const uint8_t *pattern;
    uint32_t length;
    uint32_t matched; /* pattern bytes matched so far */
} pattern_sink;

static int match_char(void *context, uint32_t cp)
{
    pattern_sink *sink = (pattern_sink *)context;
    uint8_t bytes[4];
    uint32_t k, n = utf8_encode(cp, bytes);
    if (n > sink->length - sink->matched) {
        return 0;
    }
    for (k = 0; k < n; ++k) {
        if (sink->pattern[sink->matched + k] != bytes[k]) {
            return 0;
        }
    }
    sink->matched += n;
    return 1;
}

/* Where the input's normalized characters from text[at] spell the pattern exactly, whole characters
 * (removed ones skipped, a space stops): reference.normalized_end. 0: they do not. */
static uint32_t normalized_end(const mcubert_tokenizer *t, const uint8_t *text, uint32_t size, uint32_t at,
                               const uint8_t *pattern, uint32_t length)
{
    pattern_sink sink;
    sink.pattern = pattern;
    sink.length = length;
    sink.matched = 0;
    while (sink.matched < length) {
        int32_t cp;
        uint32_t rule;
        if (at >= size) {
            return 0;
        }
        cp = next_code_point(text, size, &at);
        if (cp < 0) {
            continue; /* dropped, as U+FFFD */
        }
        rule = rule_of(t, (uint32_t)cp);
        if (RULE_KIND(rule) == KIND_SPACE ||
            (RULE_KIND(rule) != KIND_REMOVE && !for_each_mapped(t, rule, (uint32_t)cp, match_char, &sink))) {
            return 0;
        }
    }
    return at;
}

/* The added token that starts at text[at], as `tokenizers` splits them: a raw one first (the longest);
 * else the longest normalized one none of whose later characters starts a raw one (Hugging Face cuts
 * the raw ones out before it normalizes). Its length in the input (id in *id), or 0. */
static uint32_t added_token_at(const mcubert_tokenizer *t, const uint8_t *text, uint32_t size, uint32_t at, int32_t *id)
{
    const uint8_t *entry = t->specials;
    uint32_t i, best = raw_token_at(t, text, size, at, id), best_pattern = 0;
    if (best > 0u) {
        return best;
    }
    for (i = 0; i < t->special_count; ++i, entry = ADDED_NEXT(entry)) {
        uint32_t end;
        if ((entry[0] & FLAG_NORMALIZED) == 0u || ADDED_LENGTH(entry) <= best_pattern) {
            continue;
        }
        end = normalized_end(t, text, size, at, ADDED_TEXT(entry), ADDED_LENGTH(entry));
        if (end != 0u && !raw_token_inside(t, text, size, at, end)) {
            best = end - at;
            best_pattern = ADDED_LENGTH(entry);
            *id = ADDED_ID(entry);
        }
    }
    return best;
}

/* All ids of one text into `sink`. With `stop_when_full`, stops at the first word boundary once the
 * sink's capacity is reached (later ids would be truncated away). */
static void tokenize_text(const mcubert_tokenizer *t, const uint8_t *text, uint32_t size, word_buffer *word,
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
            special_length = added_token_at(t, text, size, at, &special_id);
        }
        if (special_length > 0u) {
            word_piece(t, word, sink);
            emit(sink, special_id);
            at += special_length;
            continue;
        }
        cp = next_code_point(text, size, &at);
        if (cp < 0) {
            continue; /* dropped, as U+FFFD */
        }
        rule = rule_of(t, (uint32_t)cp);
        kind = RULE_KIND(rule);
        if (kind == KIND_REMOVE) {
            continue;
        }
        if (kind == KIND_SPACE || kind == KIND_ISOLATE) {
            word_piece(t, word, sink);
        }
        if (kind != KIND_SPACE) {
            append_mapped(t, rule, (uint32_t)cp, word);
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
    word_buffer word;
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
