/*
 * On-device WordPiece detokenizer: a BERT model's ids back to UTF-8 text, all at once or one id at a time.
 *
 * It writes what Hugging Face's decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
 * gives: the checkpoint's WordPiece decoder ('##' continuations joined to the token before, a space before
 * every other token but the first, and its per-token cleanup when tokenizer.json enables it: no space
 * before ". , ! ?" or "n't", "'s", ...), special tokens ([CLS], [SEP], [PAD], [UNK], [MASK]) skipped,
 * without transformers' extra whole-text clean-up (clean_up_tokenization_spaces=True joins " ' " and
 * the like across tokens too; not reproduced). The table is its own blob (the tokenizer blob keeps only
 * the pieces text can produce, sorted by bytes): layout and reference in
 * tflm_mcubert/tokenizer/wordpiece_decode.py. Ids are in the blob's id space (the export's, when it
 * permuted the vocabulary).
 *
 * No heap, no scratch: mcubert_wordpiece_decoder_init() checks the blob once (size, CRC-32, every length,
 * block start and flag). Decoding one id at a time through a mcubert_utf8_stream (its `tokens` says
 * whether a token came before: no space before the first) gives the same bytes as decoding them all.
 */
#ifndef MCUBERT_WORDPIECE_DECODE_H
#define MCUBERT_WORDPIECE_DECODE_H

#include <stdint.h>

#include "mcubert/mcubert_bpe_tokenizer.h"
#include "mcubert/mcubert_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MCUBERT_WORDPIECE_DECODE_VERSION 1

/* A checked view of a WordPiece detokenizer blob (fill it with mcubert_wordpiece_decoder_init). */
typedef struct {
    const uint8_t *blob;
    uint32_t size;
    uint32_t vocab_size;
    uint32_t max_token_bytes;
    const uint8_t *entries; /* u16 [vocab_size]: length | flags << 8 */
    const uint8_t *blocks;  /* u32 [(vocab_size + 31) / 32]: byte offsets of ids 0, 32, 64, ... */
    const uint8_t *bytes;
} mcubert_wordpiece_decoder;

/* Checks `blob` and fills `decoder`. MCUBERT_ERROR_MODEL names what is wrong with a blob that is
 * truncated, corrupted (CRC-32), of another version, or inconsistent; MCUBERT_ERROR_ARGUMENT for NULL. */
mcubert_status mcubert_wordpiece_decoder_init(mcubert_wordpiece_decoder *decoder, const uint8_t *blob, uint32_t size,
                                              mcubert_message *message);

/* Bytes `out` needs for `count` ids: count * (max_token_bytes + 1); 0xFFFFFFFF past 32 bits. */
uint32_t mcubert_wordpiece_decode_bound(const mcubert_wordpiece_decoder *decoder, uint32_t count);

/* Appends the text of `count` ids to `out`; *written gets the bytes written. MCUBERT_ERROR_INPUT for an
 * id outside [0, vocab_size), MCUBERT_ERROR_ARGUMENT for NULL or an `out` smaller than
 * mcubert_wordpiece_decode_bound(count): nothing is written then and the stream is unchanged. Start a
 * text with a zeroed stream (mcubert_utf8_reset); mcubert_utf8_finish ends it (it writes nothing here). */
mcubert_status mcubert_wordpiece_decode(const mcubert_wordpiece_decoder *decoder, const int32_t *ids, uint32_t count,
                                        mcubert_utf8_stream *stream, uint8_t *out, uint32_t out_bytes,
                                        uint32_t *written, mcubert_message *message);

#ifdef __cplusplus
}
#endif

#endif
