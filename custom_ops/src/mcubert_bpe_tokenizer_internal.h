/*
 * Shared by the BPE tokenizer's sources (mcubert_bpe_tokenizer*.c) and the detokenizers: the blob's flag
 * bits and the UTF-8 stream that turns decoded bytes into valid UTF-8 (mcubert_utf8_stream.c).
 */
#ifndef MCUBERT_BPE_TOKENIZER_INTERNAL_H
#define MCUBERT_BPE_TOKENIZER_INTERNAL_H

#include <stdint.h>

#include "mcubert/mcubert_bpe_tokenizer.h"

#define MCUBERT_BPE_OP "BPE_TOKENIZER"
#define MCUBERT_BPE_FLAG_SPECIAL 0x8000u /* bpe_blob.FLAG_SPECIAL, in an id's u16 length: decoding skips it */
#define MCUBERT_BPE_LENGTH_MASK 0x7FFFu
#define MCUBERT_BPE_BLOCK 32u /* bpe_blob.BLOCK: ids per block start */

/* Entry `index` of an array of W-byte ids (W = t->id_bytes) */
static inline uint32_t mcubert_bpe_id(const mcubert_bpe_tokenizer *t, const uint8_t *array, uint32_t index)
{
    return t->id_bytes == 2u ? (uint32_t)array[2u * index] | (uint32_t)array[2u * index + 1u] << 8
                             : (uint32_t)array[4u * index] | (uint32_t)array[4u * index + 1u] << 8 |
                                   (uint32_t)array[4u * index + 2u] << 16 | (uint32_t)array[4u * index + 3u] << 24;
}

/* Where id's bytes start in token_bytes and (the return) how many; *special set for a special id */
uint32_t mcubert_bpe_token_span(const mcubert_bpe_tokenizer *t, uint32_t id, uint32_t *start, int *special);

/* Feeds one byte of decoded text: writes to `out` the bytes it completes (a character, or U+FFFD for
 * each maximal invalid subpart, Unicode 15, 3.9) and returns how many (at most 6). */
uint32_t mcubert_utf8_put(mcubert_utf8_stream *stream, uint8_t byte, uint8_t *out);

#endif
