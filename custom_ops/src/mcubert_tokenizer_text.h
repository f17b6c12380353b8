/*
 * The tokenizer's text side (mcubert_tokenizer_text.c), shared with mcubert_tokenizer.c: UTF-8 in, each
 * code point's rule from the blob's character ranges, its mapped characters into the word being built
 * (with the canonical reordering of combining marks), and the added tokens matched in the input.
 */
#ifndef MCUBERT_TOKENIZER_TEXT_H
#define MCUBERT_TOKENIZER_TEXT_H

#include <stdint.h>

#include "mcubert/mcubert_tokenizer.h"

#define FLAG_NORMALIZED 1u /* an added token matched on the normalized input (vocab_blob.FLAG_NORMALIZED) */
#define KIND_REMOVE 0u
#define KIND_SPACE 1u
#define KIND_ISOLATE 2u
#define MODE_DELTA 0u
#define MODE_CONST 1u
#define MODE_STRING 2u
#define HANGUL_FIRST 0xAC00u
#define HANGUL_COUNT 11172u
#define MAX_CODE_POINT 0x10FFFFu

static inline uint32_t mcubert_rd16(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8;
}

static inline uint32_t mcubert_rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* A rule: kind | mode << 2 | value << 4, the value 22 bits and signed (any code point or delta fits). */
#define RULE_KIND(rule) ((rule)&3u)
#define RULE_MODE(rule) (((rule) >> 2) & 3u)

static inline int32_t mcubert_rule_value(uint32_t rule)
{
    return (int32_t)(((rule >> 4) & 0x3FFFFFu) ^ 0x200000u) - 0x200000; /* sign-extend 22 bits */
}

static inline uint32_t mcubert_range_start(const mcubert_tokenizer *t, uint32_t i)
{
    return mcubert_rd16(t->range_starts + 2u * i);
}

static inline uint32_t mcubert_range_rule(const mcubert_tokenizer *t, uint32_t i)
{
    uint32_t index = t->rule_count > 256u ? mcubert_rd16(t->range_rules + 2u * i) : t->range_rules[i];
    return mcubert_rd32(t->rules + 4u * index);
}

/* The scratch: one word. */
typedef struct {
    uint8_t *bytes;      /* UTF-8 of the word's mapped characters, (max_chars + 1) * 4 bytes */
    uint16_t *char_ends; /* byte offset after each character, max_chars + 1 entries */
    uint32_t chars;      /* characters held (max_chars + 1 means: too long, [UNK]) */
} mcubert_word;

/* The code point at text[*at] (advancing *at), or -1 for an invalid sequence, of which the maximal
 * subpart is consumed (Unicode 15, 3.9 "U+FFFD Substitution of Maximal Subparts"). */
int32_t mcubert_next_code_point(const uint8_t *text, uint32_t size, uint32_t *at);

/* Checks the character ranges of `t` (its range fields and string_count, max_chars_per_word): every plane
 * covered, starts increasing, rules well formed (mcubert_tokenizer.c; the BPE blob's classes use it too). */
mcubert_status mcubert_tokenizer_check_ranges(const mcubert_tokenizer *t, mcubert_message *message);

/* The rule of the character range holding cp (cp <= MAX_CODE_POINT). */
uint32_t mcubert_rule_of(const mcubert_tokenizer *t, uint32_t cp);

/* Appends cp's mapped characters (kind letter or isolate) to the word, marks in canonical order. */
void mcubert_append_mapped(const mcubert_tokenizer *t, uint32_t rule, uint32_t cp, mcubert_word *word);

/* The added token that starts at text[at] (reference.added_token_at): its length in the input, its id
 * in *id; 0 when none does. */
uint32_t mcubert_added_token_at(const mcubert_tokenizer *t, const uint8_t *text, uint32_t size, uint32_t at,
                                int32_t *id);

#endif
