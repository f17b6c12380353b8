/*
 * Shared by the BPE tokenizer's sources (mcubert_bpe_tokenizer*.c) and the detokenizers: the blob's flag
 * bits and the UTF-8 stream that turns decoded bytes into valid UTF-8 (mcubert_utf8_stream.c).
 */
#ifndef MCUBERT_BPE_TOKENIZER_INTERNAL_H
#define MCUBERT_BPE_TOKENIZER_INTERNAL_H

#include <stdint.h>

#include "mcubert/mcubert_bpe_tokenizer.h"

#define MCUBERT_BPE_OP "BPE_TOKENIZER"
#define MCUBERT_BPE_FLAG_SPECIAL 1u /* bpe_blob.FLAG_SPECIAL: decoding skips the id */

/* Feeds one byte of decoded text: writes to `out` the bytes it completes (a character, or U+FFFD for
 * each maximal invalid subpart, Unicode 15, 3.9) and returns how many (at most 6). */
uint32_t mcubert_utf8_put(mcubert_utf8_stream *stream, uint8_t byte, uint8_t *out);

#endif
