/*
 * The tokenizer's text side (see mcubert_tokenizer_text.h): what the normalizer does to each code point,
 * read from the blob's character ranges (layout: tflm_mcubert/tokenizer/vocab_blob.py), and the added
 * tokens matched in the input as `tokenizers` splits them (tflm_mcubert/tokenizer/reference.py).
 */
#include "mcubert_tokenizer_text.h"

#include <stddef.h>
#include <stdint.h>

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

static void word_append(mcubert_word *word, uint32_t cp, uint32_t max_chars)
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
int32_t mcubert_next_code_point(const uint8_t *text, uint32_t size, uint32_t *at)
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
uint32_t mcubert_rule_of(const mcubert_tokenizer *t, uint32_t cp)
{
    uint32_t low = cp & 0xFFFFu, lo = mcubert_rd16(t->planes + 2u * (cp >> 16)),
             hi = mcubert_rd16(t->planes + 2u * ((cp >> 16) + 1u)) - 1u;
    while (lo < hi) {
        uint32_t mid = (lo + hi + 1u) / 2u;
        if (mcubert_range_start(t, mid) <= low) {
            lo = mid;
        } else {
            hi = mid - 1u;
        }
    }
    return mcubert_range_rule(t, lo);
}

/* Receives the mapped characters of one code point, one at a time. */
typedef int (*char_sink)(void *context, uint32_t cp);

/* Feeds cp's mapped characters (kind letter or isolate) to `sink`; stops early when it returns 0. */
static int for_each_mapped(const mcubert_tokenizer *t, uint32_t rule, uint32_t cp, char_sink sink, void *context)
{
    uint32_t mode = RULE_MODE(rule);
    int32_t value = mcubert_rule_value(rule);
    if (mode == MODE_DELTA) {
        return sink(context, (uint32_t)((int32_t)cp + value));
    }
    if (mode == MODE_CONST) {
        return sink(context, (uint32_t)value);
    }
    if (mode == MODE_STRING) {
        uint32_t begin = value == 0 ? 0u : mcubert_rd16(t->string_ends + 2u * (uint32_t)(value - 1));
        uint32_t end = mcubert_rd16(t->string_ends + 2u * (uint32_t)value);
        while (begin < end) {
            int32_t mapped = mcubert_next_code_point(t->string_bytes, end, &begin);
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

/* cp's canonical combining class when the blob lists it (a mark the normalizer reorders), else 0 */
static uint32_t combining_class(const mcubert_tokenizer *t, uint32_t cp)
{
    uint32_t lo = 0, hi = t->combining_count;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2u, entry = mcubert_rd32(t->combining + 4u * mid);
        if (entry >> 8 == cp) {
            return entry & 0xFFu;
        }
        if (entry >> 8 < cp) {
            lo = mid + 1u;
        } else {
            hi = mid;
        }
    }
    return 0u;
}

/* Moves the word's last character, of class `ccc` > 0, before the marks of a higher class it follows:
 * NFD's canonical ordering, which the normalizer applies when it strips accents (canonical_order). */
static void reorder_last(const mcubert_tokenizer *t, mcubert_word *word, uint32_t ccc)
{
    uint32_t last = word->chars - 1u;
    while (last > 0u) {
        uint32_t begin = last > 1u ? word->char_ends[last - 2u] : 0u, middle = word->char_ends[last - 1u];
        uint32_t end = word->char_ends[last], k, at = begin;
        int32_t previous = mcubert_next_code_point(word->bytes, middle, &at);
        uint8_t moved[4];
        if (previous < 0 || combining_class(t, (uint32_t)previous) <= ccc) {
            return;
        }
        for (k = 0; k < end - middle; ++k) { /* volatile: the library links no libc, and a plain copy */
            ((volatile uint8_t *)moved)[k] = word->bytes[middle + k]; /* loop may become a memcpy call */
        }
        for (k = middle - begin; k > 0u; --k) { /* volatile: a plain loop may become a memmove call */
            ((volatile uint8_t *)word->bytes)[begin + (end - middle) + k - 1u] = word->bytes[begin + k - 1u];
        }
        for (k = 0; k < end - middle; ++k) {
            ((volatile uint8_t *)word->bytes)[begin + k] = moved[k];
        }
        word->char_ends[last - 1u] = (uint16_t)(begin + (end - middle));
        --last;
    }
}

typedef struct {
    const mcubert_tokenizer *tokenizer;
    mcubert_word *word;
} word_sink;

static int append_to_word(void *context, uint32_t cp)
{
    word_sink *sink = (word_sink *)context;
    uint32_t chars = sink->word->chars, ccc;
    word_append(sink->word, cp, sink->tokenizer->max_chars_per_word);
    if (sink->word->chars > chars && sink->tokenizer->combining_count > 0u) {
        ccc = combining_class(sink->tokenizer, cp);
        if (ccc != 0u) {
            reorder_last(sink->tokenizer, sink->word, ccc);
        }
    }
    return 1;
}

/* Appends cp's mapped characters (kind letter or isolate) to the word. */
void mcubert_append_mapped(const mcubert_tokenizer *t, uint32_t rule, uint32_t cp, mcubert_word *word)
{
    word_sink sink;
    sink.tokenizer = t;
    sink.word = word;
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

/* ---- added tokens (reference.added_token_at) ---------------------------------------------------- */

/* An entry: u8 flags, u8 length, the text, u32 id (checked at init). */
#define ADDED_LENGTH(entry) ((uint32_t)(entry)[1])
#define ADDED_TEXT(entry) ((entry) + 2)
#define ADDED_ID(entry) ((int32_t)mcubert_rd32((entry) + 2u + (entry)[1]))
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
    (void)mcubert_next_code_point(text, size, &at);
    while (at < end) {
        if (raw_token_at(t, text, size, at, &id) > 0u) {
            return 1;
        }
        (void)mcubert_next_code_point(text, size, &at);
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
        cp = mcubert_next_code_point(text, size, &at);
        if (cp < 0) {
            continue; /* dropped, as U+FFFD */
        }
        rule = mcubert_rule_of(t, (uint32_t)cp);
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
uint32_t mcubert_added_token_at(const mcubert_tokenizer *t, const uint8_t *text, uint32_t size, uint32_t at,
                                int32_t *id)
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
