/*
 * On-device BERT tokenizer: UTF-8 text in, the model's input_ids / token_type_ids / attention_mask out.
 *
 * It reproduces Hugging Face `tokenizers`' BERT pipeline (BertNormalizer, BertPreTokenizer, WordPiece
 * with '##' continuations, [CLS] ... [SEP] (... [SEP]) with LongestFirst truncation, [PAD] padding, the
 * checkpoint's added tokens whatever their spelling, raw or normalized, and the canonical reordering of
 * combining marks its NFD does) from one blob the export writes (model_vocab.cc; layout in
 * tflm_mcubert/tokenizer/vocab_blob.py).
 * Ids are in the export's id space (the permuted vocabulary of a compressed embedding), ready for the
 * model. The Python reference is tflm_mcubert/tokenizer/reference.py; tests hold this to it byte for
 * byte and it to Hugging Face's tokenizer.
 *
 * No heap: mcubert_tokenizer_init() checks the blob once (size, CRC-32, every offset, count and piece)
 * and keeps a view of it; mcubert_tokenize() needs caller-owned scratch of
 * mcubert_tokenizer_get_buffer_size() bytes (one word's characters) and a bounded stack.
 *
 * Invalid UTF-8 is never read past the given length: each maximal invalid subpart (Unicode 15, 3.9) is
 * one dropped character, as U+FFFD is dropped by BERT's normalizer (Python: bytes.decode("utf-8",
 * "replace") then the tokenizer gives the same ids).
 */
#ifndef MCUBERT_TOKENIZER_H
#define MCUBERT_TOKENIZER_H

#include <stdint.h>

#include "mcubert/mcubert_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MCUBERT_TOKENIZER_VERSION 5

/* The piece lists of one kind (word starts or '##' continuations): one per embedding cluster, each
 * sorted with implicit ids (or one with explicit ids). A lookup reads each list's head from the blob. */
typedef struct {
    const uint8_t *offsets; /* u32 [count]: each list's offset in the blob */
    uint32_t count;
} mcubert_piece_list;

/* A checked view of a tokenizer blob (fill it with mcubert_tokenizer_init). */
typedef struct {
    const uint8_t *blob;
    uint32_t size;
    uint32_t max_chars_per_word;
    uint32_t max_piece_bytes;
    uint32_t vocab_size;
    int32_t cls_id, sep_id, pad_id, unk_id;
    uint32_t range_count;
    uint32_t rule_count;
    const uint8_t *rules;        /* u32 [rule_count] */
    const uint8_t *planes;       /* u16 [18]: each plane's first range, then range_count */
    const uint8_t *range_starts; /* u16 [range_count], within the plane */
    const uint8_t *range_rules;  /* u8 (u16 past 256 rules) [range_count]: an index into rules */
    uint32_t string_count;
    const uint8_t *string_ends; /* u16 [string_count] */
    const uint8_t *string_bytes;
    uint32_t special_count;
    const uint8_t *specials;
    uint32_t combining_count;
    const uint8_t *combining; /* u32 [combining_count]: code point << 8 | class, sorted (marks NFD reorders) */
    mcubert_piece_list word_pieces;
    mcubert_piece_list continuation_pieces;
} mcubert_tokenizer;

/* Checks `blob` and fills `tokenizer`. MCUBERT_ERROR_MODEL names what is wrong with a blob that is
 * truncated, corrupted (CRC-32), of another version, or inconsistent; MCUBERT_ERROR_ARGUMENT for NULL. */
mcubert_status mcubert_tokenizer_init(mcubert_tokenizer *tokenizer, const uint8_t *blob, uint32_t size,
                                      mcubert_message *message);

/* Bytes of the scratch mcubert_tokenize() needs (4-byte aligned). */
uint32_t mcubert_tokenizer_get_buffer_size(const mcubert_tokenizer *tokenizer);

/* Tokenizes `text` (and `pair` unless it is NULL or empty: a sentence pair) into `seq_len` positions: ids,
 * token_types (may be NULL) and mask (1 valid, 0 padding; may be NULL); *valid gets the number of
 * valid positions. `buffer` of at least mcubert_tokenizer_get_buffer_size() bytes, 4-byte aligned.
 * MCUBERT_ERROR_ARGUMENT for NULL outputs, a small buffer or seq_len without room for the special
 * tokens (nothing is written then). */
mcubert_status mcubert_tokenize(const mcubert_tokenizer *tokenizer, const uint8_t *text, uint32_t text_bytes,
                                const uint8_t *pair, uint32_t pair_bytes, uint32_t seq_len, int32_t *ids,
                                int32_t *token_types, int8_t *mask, uint32_t *valid, void *buffer,
                                uint32_t buffer_bytes, mcubert_message *message);

#ifdef __cplusplus
}
#endif

#endif
