/*
 * mcubert_bpe_encode: GPT-2's byte-level BPE on the device (see mcubert/mcubert_bpe_tokenizer.h; the
 * reference is tflm_mcubert/tokenizer/bpe_reference.py).
 *
 * The text streams through once: added tokens are matched at each byte; between them the pre-tokenizer's
 * regex is a hand-written matcher over code points (each one's class a binary search of its plane's
 * ranges); each pre-token's bytes become their one-byte tokens in the scratch, and the merge loop
 * repeatedly merges the lowest-ranked adjacent pair (leftmost first), ranks cached per pair.
 */
#include <stddef.h>
#include <stdint.h>

#include "mcubert/mcubert_bpe_tokenizer.h"
#include "mcubert_bpe_tokenizer_internal.h"
#include "mcubert_internal.h"
#include "mcubert_tokenizer_text.h"

#define CLASS_OTHER 0u
#define CLASS_SPACE 1u
#define NO_RANK 0xFFFFFFFFu
#define DEAD 0xFFFFFFFFu /* a symbol merged into the one before it (ids are below 2^24) */
#define REPLACEMENT 0xFFFDu

typedef struct {
    int32_t *ids;
    uint32_t capacity; /* ids stored; later ones are counted, not stored */
    uint32_t count;
} id_sink;

/* The scratch: one chunk's symbols and the rank of each adjacent pair. */
typedef struct {
    uint32_t *symbols;
    uint32_t *ranks;
    uint32_t count;
} chunk;

static void emit(id_sink *sink, uint32_t id)
{
    if (sink->count < sink->capacity) {
        sink->ids[sink->count] = (int32_t)id;
    }
    sink->count += 1u;
}

/* ---- the merge loop -------------------------------------------------------------------------- */

/* The rank of merging (left, right), NO_RANK when no merge has that pair: a binary search on the 64-bit
 * key left << 32 | right (one loop per id width, so the width is tested once). */
static uint32_t rank_of(const mcubert_bpe_tokenizer *t, uint32_t left, uint32_t right)
{
    uint64_t key = (uint64_t)left << 32 | right;
    uint32_t lo = 0, hi = t->merge_count;
    if (t->id_bytes == 2u) {
        while (lo < hi) {
            uint32_t mid = lo + (hi - lo) / 2u;
            const uint8_t *e = t->merges + 6u * mid;
            uint64_t at = (uint64_t)mcubert_rd16(e) << 32 | mcubert_rd16(e + 2);
            if (at == key) {
                return mcubert_rd16(e + 4);
            }
            lo = at < key ? mid + 1u : lo;
            hi = at < key ? hi : mid;
        }
        return NO_RANK;
    }
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2u;
        const uint8_t *e = t->merges + 12u * mid;
        uint64_t at = (uint64_t)mcubert_rd32(e) << 32 | mcubert_rd32(e + 4);
        if (at == key) {
            return mcubert_rd32(e + 8);
        }
        lo = at < key ? mid + 1u : lo;
        hi = at < key ? hi : mid;
    }
    return NO_RANK;
}

/* The next live symbol after i (a merged pair's right one is dead), or n */
static uint32_t next_live(const uint32_t *s, uint32_t i, uint32_t n)
{
    do {
        i += 1u;
    } while (i < n && s[i] == DEAD);
    return i;
}

/* rank[i]: the rank of merging symbol i with the next live one (NO_RANK: none, or i is dead) */
static void rank_pair(const mcubert_bpe_tokenizer *t, chunk *c, uint32_t i)
{
    uint32_t j = next_live(c->symbols, i, c->count);
    c->ranks[i] = j < c->count ? rank_of(t, c->symbols[i], c->symbols[j]) : NO_RANK;
}

/* BPE of the chunk's symbols, then their ids out. At most count - 1 merges, each a scan of the pairs
 * and two searches; a merged pair's right symbol is marked dead in place (no shifting: no memmove). */
static void merge_and_emit(const mcubert_bpe_tokenizer *t, chunk *c, id_sink *sink)
{
    uint32_t *s = c->symbols, *r = c->ranks, n = c->count, i;
    for (i = 0; i < n; ++i) {
        r[i] = i + 1u < n ? rank_of(t, s[i], s[i + 1u]) : NO_RANK;
    }
    for (;;) {
        uint32_t best = NO_RANK, where = 0, before;
        for (i = 0; i < n; ++i) {
            if (r[i] < best) {
                best = r[i];
                where = i;
            }
        }
        if (best == NO_RANK) {
            break;
        }
        i = next_live(s, where, n);
        s[where] = mcubert_bpe_id(t, t->merged_ids, best);
        s[i] = DEAD;
        r[i] = NO_RANK;
        rank_pair(t, c, where);
        for (before = where; before > 0u && s[before - 1u] == DEAD; --before) {
        }
        if (before > 0u) {
            rank_pair(t, c, before - 1u);
        }
    }
    for (i = 0; i < n; ++i) {
        if (s[i] != DEAD) {
            emit(sink, s[i]);
        }
    }
    c->count = 0;
}

/* ---- the pre-tokenizer ----------------------------------------------------------------------- */

/* The code point at text[*at] (advancing *at); U+FFFD for a maximal invalid subpart. */
static uint32_t next_cp(const uint8_t *text, uint32_t size, uint32_t *at)
{
    int32_t cp = mcubert_next_code_point(text, size, at);
    return cp < 0 ? REPLACEMENT : (uint32_t)cp;
}

static uint32_t class_of(const mcubert_bpe_tokenizer *t, uint32_t cp)
{
    return RULE_KIND(mcubert_rule_of(&t->classes, cp));
}

/* The end of the run of code points of class `cls` from `at` */
static uint32_t run_end(const mcubert_bpe_tokenizer *t, const uint8_t *text, uint32_t size, uint32_t at, uint32_t cls)
{
    while (at < size) {
        uint32_t next = at;
        if (class_of(t, next_cp(text, size, &next)) != cls) {
            break;
        }
        at = next;
    }
    return at;
}

/* 's|'t|'re|'ve|'m|'ll|'d at text[at] ('\'' there): the match's length, or 0 */
static uint32_t contraction(const uint8_t *text, uint32_t size, uint32_t at)
{
    static const char *const suffixes[] = {"s", "t", "re", "ve", "m", "ll", "d"};
    uint32_t k, i;
    for (k = 0; k < sizeof suffixes / sizeof suffixes[0]; ++k) {
        for (i = 0; suffixes[k][i] != '\0' && at + 1u + i < size && text[at + 1u + i] == (uint8_t)suffixes[k][i]; ++i) {
        }
        if (suffixes[k][i] == '\0') {
            return 1u + i;
        }
    }
    return 0u;
}

/* \s+(?!\S) else \s+ from `at`: the run up to the last space before a non-space, or one character (at
 * least one: progress whatever the classes say) */
static uint32_t whitespace_end(const mcubert_bpe_tokenizer *t, const uint8_t *text, uint32_t size, uint32_t at)
{
    uint32_t end = at, last = at, chars = 0;
    while (end < size) {
        uint32_t next = end;
        if (class_of(t, next_cp(text, size, &next)) != CLASS_SPACE && chars > 0u) {
            break;
        }
        last = end;
        end = next;
        chars += 1u;
    }
    return end < size && chars > 1u ? last : end;
}

/* The end of the pre-token at text[at] (bpe_reference.pretoken_end: the regex, leftmost alternative) */
static uint32_t pretoken_end(const mcubert_bpe_tokenizer *t, const uint8_t *text, uint32_t size, uint32_t at)
{
    uint32_t start = at, next, cls;
    if (text[at] == '\'') {
        uint32_t length = contraction(text, size, at);
        if (length > 0u) {
            return at + length;
        }
    }
    if (text[at] == ' ' && at + 1u < size) {
        start = at + 1u;
    }
    next = start;
    cls = class_of(t, next_cp(text, size, &next));
    if (cls != CLASS_SPACE) {
        return run_end(t, text, size, next, cls);
    }
    return whitespace_end(t, text, size, at);
}

/* One pre-token's bytes as one-byte tokens, in chunks of whole characters of at most
 * max_pretoken_bytes (an invalid subpart is U+FFFD's three bytes), each chunk merged. */
static void encode_pretoken(const mcubert_bpe_tokenizer *t, const uint8_t *text, uint32_t at, uint32_t end, chunk *c,
                            id_sink *sink)
{
    static const uint8_t replacement[3] = {0xEFu, 0xBFu, 0xBDu};
    while (at < end) {
        uint32_t from = at, k, length;
        const uint8_t *bytes = text + at;
        if (mcubert_next_code_point(text, end, &at) < 0) {
            bytes = replacement;
            length = 3u;
        } else {
            length = at - from;
        }
        if (c->count + length > t->max_pretoken_bytes) {
            merge_and_emit(t, c, sink);
        }
        for (k = 0; k < length; ++k) {
            c->symbols[c->count++] = mcubert_bpe_id(t, t->byte_ids, bytes[k]);
        }
    }
    merge_and_emit(t, c, sink);
}

static void encode_segment(const mcubert_bpe_tokenizer *t, const uint8_t *text, uint32_t size, chunk *c, id_sink *sink)
{
    uint32_t at = 0;
    while (at < size) {
        uint32_t end = pretoken_end(t, text, size, at);
        encode_pretoken(t, text, at, end, c, sink);
        at = end;
    }
}

/* ---- added tokens and the entry point ---------------------------------------------------------- */

/* The longest added token whose text starts at text[at]: its length (id in *id), or 0 */
static uint32_t added_token_at(const mcubert_bpe_tokenizer *t, const uint8_t *text, uint32_t size, uint32_t at,
                               uint32_t *id)
{
    const uint8_t *entry = t->added;
    uint32_t k, best = 0;
    for (k = 0; k < t->added_count; ++k) {
        uint32_t length = entry[0], i = 0;
        if (length > best && length <= size - at) {
            while (i < length && text[at + i] == entry[1u + i]) {
                ++i;
            }
            if (i == length) {
                best = length;
                *id = mcubert_rd32(entry + 1u + length);
            }
        }
        entry += 5u + length;
    }
    return best;
}

mcubert_status mcubert_bpe_encode(const mcubert_bpe_tokenizer *tokenizer, const uint8_t *text, uint32_t text_bytes,
                                  int32_t *ids, uint32_t max_ids, uint32_t *count, void *buffer, uint32_t buffer_bytes,
                                  mcubert_message *message)
{
    id_sink sink;
    chunk c;
    uint32_t at = 0, segment = 0;
    if (tokenizer == NULL || tokenizer->blob == NULL || (text == NULL && text_bytes > 0u) ||
        (ids == NULL && max_ids > 0u) || count == NULL || buffer == NULL || ((uintptr_t)buffer & 3u) != 0u ||
        buffer_bytes < mcubert_bpe_get_buffer_size(tokenizer)) {
        return mcubert_fail_text(message, MCUBERT_ERROR_ARGUMENT, MCUBERT_BPE_OP, "encode",
                                 "NULL pointer, uninitialised tokenizer, or a small or misaligned buffer");
    }
    *count = 0;
    if (text_bytes == 0u) {
        return MCUBERT_OK;
    }
    sink.ids = ids;
    sink.capacity = max_ids;
    sink.count = 0;
    c.symbols = (uint32_t *)buffer;
    c.ranks = c.symbols + tokenizer->max_pretoken_bytes;
    c.count = 0;
    while (at < text_bytes) {
        uint32_t id = 0, length = added_token_at(tokenizer, text, text_bytes, at, &id);
        if (length == 0u) {
            at += 1u;
            continue;
        }
        encode_segment(tokenizer, text + segment, at - segment, &c, &sink);
        emit(&sink, id);
        at += length;
        segment = at;
    }
    encode_segment(tokenizer, text + segment, text_bytes - segment, &c, &sink);
    *count = sink.count;
    if (sink.count > max_ids) {
        return mcubert_fail_text(message, MCUBERT_ERROR_INPUT, MCUBERT_BPE_OP, "ids",
                                 "the text makes more than max_ids ids (the first max_ids are written)");
    }
    return MCUBERT_OK;
}
