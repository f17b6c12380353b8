/*
 * On-device byte-level BPE tokenizer (GPT-2 / GPT-Neo) and detokenizer: UTF-8 text in, token ids out,
 * and ids back to UTF-8, one id at a time if need be (generation emits one token a step).
 *
 * It reproduces Hugging Face `tokenizers`' GPT-2 pipeline: added tokens ("<|endoftext|>") split out of
 * the text first (leftmost, longest), the ByteLevel pre-tokenizer's regex
 *     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * (its classes \s, \p{L}, \p{N} read from the blob, generated from `tokenizers` itself), GPT-2's
 * byte-to-unicode map (each byte starts as its one-byte token) and the merges by rank: the lowest-ranked
 * adjacent pair first, the leftmost of equal ranks, as its priority queue does. One blob the export
 * writes (layout: tflm_mcubert/tokenizer/bpe_blob.py); the Python reference is
 * tflm_mcubert/tokenizer/bpe_reference.py, and tests hold this to it byte for byte and it to Hugging Face.
 *
 * No heap. mcubert_bpe_init() checks the blob once (size, CRC-32, every offset, count, id and order)
 * and keeps a view of it; a damaged blob is refused with the reason in `message`, never read out of
 * bounds. mcubert_bpe_encode() needs caller-owned scratch of mcubert_bpe_get_buffer_size() bytes (8 per
 * byte of the longest pre-token it merges whole, max_pretoken_bytes: 256 by default, 2 KB) and a bounded
 * stack; decoding needs none.
 *
 * Work bound: a pre-token of n bytes (n <= max_pretoken_bytes) makes at most n - 1 merges, each a scan
 * of its n pair ranks (a merged pair's right symbol is marked dead in place) and at most two binary
 * searches of the merge table: O(n^2 + n log merges) per pre-token, so O(max_pretoken_bytes * text
 * bytes) for any text (plus, at each byte, a compare against each added token). A pre-token longer than
 * max_pretoken_bytes (a run of 300 letters) is cut into chunks of whole characters of at most that many
 * bytes, each merged by itself: Hugging Face merges it whole, so the ids can differ from its only there,
 * where a merge would cross a cut (never for pre-tokens up to the limit).
 *
 * Invalid UTF-8 is never read past the given length: each maximal invalid subpart (Unicode 15, 3.9) is
 * one U+FFFD (its bytes EF BF BD enter BPE), so the ids are Hugging Face's on Python's
 * text.decode("utf-8", "replace").
 *
 * Decoding (mcubert_bpe_decode; mcubert/mcubert_wordpiece_decode.h for WordPiece) writes the ids' bytes
 * through a mcubert_utf8_stream: complete characters come out at once, an unfinished one (a character
 * whose bytes two tokens share, an emoji over three byte tokens) waits in the stream for the next id, and
 * mcubert_utf8_finish() ends the text (an unfinished character there becomes U+FFFD). Invalid sequences
 * become U+FFFD as they are found. Decoding all ids at once or one at a time gives the same bytes, those
 * of Hugging Face's decode(ids, skip_special_tokens=True) (special tokens write nothing).
 *
 * Use (a prompt in, one token a step out):
 *     static mcubert_bpe_tokenizer bpe;          mcubert_bpe_init(&bpe, blob, blob_bytes, &message);
 *     static uint32_t scratch[N];                 N * 4 >= mcubert_bpe_get_buffer_size(&bpe)
 *     mcubert_bpe_encode(&bpe, prompt, prompt_bytes, ids, MAX_IDS, &n, scratch, sizeof scratch, &message);
 *     mcubert_utf8_stream stream = {{0}, 0, 0};   uint8_t out[M];   M >= mcubert_bpe_decode_bound(&bpe, 1)
 *     each step:  mcubert_bpe_decode(&bpe, &next_id, 1, &stream, out, sizeof out, &written, &message);
 *                 print out[0, written)
 *     at the end: written = mcubert_utf8_finish(&stream, out); print out[0, written)
 */
#ifndef MCUBERT_BPE_TOKENIZER_H
#define MCUBERT_BPE_TOKENIZER_H

#include <stdint.h>

#include "mcubert/mcubert_ops.h"
#include "mcubert/mcubert_tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MCUBERT_BPE_VERSION 1

/* A checked view of a BPE blob (fill it with mcubert_bpe_init). */
typedef struct {
    const uint8_t *blob;
    uint32_t size;
    uint32_t vocab_size;
    uint32_t merge_count;
    uint32_t max_token_bytes;    /* the longest id's bytes (decoding's bound) */
    uint32_t max_pretoken_bytes; /* merged whole up to this; the scratch is 8 bytes a byte of it */
    uint32_t added_count;
    mcubert_tokenizer classes; /* the regex's character classes: only the character-range fields are set */
    uint32_t id_bytes;         /* W: 2 (ids and ranks below 2^16) or 4 */
    const uint8_t *byte_ids;   /* W-byte [256] */
    const uint8_t *merges;     /* (left, right, rank), W bytes each [merge_count], sorted by (left, right) */
    const uint8_t *merged_ids; /* W-byte [merge_count] by rank */
    const uint8_t *lengths;    /* u16 [vocab_size]: byte length | 0x8000 special */
    const uint8_t *blocks;     /* u32 [(vocab_size + 31) / 32]: where ids 0, 32, 64, ... start in token_bytes */
    const uint8_t *token_bytes;
    const uint8_t *added; /* [added_count]: u8 length, the text, u32 id */
} mcubert_bpe_tokenizer;

/* Where a decoded text stands between calls: the bytes of an unfinished character, and the tokens written
 * (the WordPiece detokenizer puts no space before the first). Zero it (or call mcubert_utf8_reset) before
 * a text. */
typedef struct {
    uint8_t pending[4];
    uint32_t count;
    uint32_t tokens;
} mcubert_utf8_stream;

/* Checks `blob` and fills `tokenizer`. MCUBERT_ERROR_MODEL names what is wrong with a blob that is
 * truncated, corrupted (CRC-32), of another version, or inconsistent; MCUBERT_ERROR_ARGUMENT for NULL. */
mcubert_status mcubert_bpe_init(mcubert_bpe_tokenizer *tokenizer, const uint8_t *blob, uint32_t size,
                                mcubert_message *message);

/* Bytes of the scratch mcubert_bpe_encode() needs (4-byte aligned): 8 * max_pretoken_bytes. */
uint32_t mcubert_bpe_get_buffer_size(const mcubert_bpe_tokenizer *tokenizer);

/* Encodes `text` (no special tokens added: GPT-2 adds none). *count gets the number of ids the text
 * makes; the first min(*count, max_ids) are written to `ids` (max_ids may be 0 to count only). Returns
 * MCUBERT_OK when they all fit, MCUBERT_ERROR_INPUT when the text needs more than max_ids (the first
 * max_ids are written), MCUBERT_ERROR_ARGUMENT for NULL, a tokenizer whose init failed, or a small or
 * misaligned buffer (nothing written then). */
mcubert_status mcubert_bpe_encode(const mcubert_bpe_tokenizer *tokenizer, const uint8_t *text, uint32_t text_bytes,
                                  int32_t *ids, uint32_t max_ids, uint32_t *count, void *buffer, uint32_t buffer_bytes,
                                  mcubert_message *message);

/* Bytes `out` needs for mcubert_bpe_decode of `count` ids: 3 * (3 + count * max_token_bytes) (a byte can
 * become a 3-byte U+FFFD); 0xFFFFFFFF when that does not fit 32 bits. */
uint32_t mcubert_bpe_decode_bound(const mcubert_bpe_tokenizer *tokenizer, uint32_t count);

/* Appends the UTF-8 of `count` ids to `out` through `stream` (see above); *written gets the bytes
 * written. MCUBERT_ERROR_INPUT for an id outside [0, vocab_size), MCUBERT_ERROR_ARGUMENT for NULL or an
 * `out` smaller than this call needs (at most mcubert_bpe_decode_bound): nothing is written then and the
 * stream is unchanged. */
mcubert_status mcubert_bpe_decode(const mcubert_bpe_tokenizer *tokenizer, const int32_t *ids, uint32_t count,
                                  mcubert_utf8_stream *stream, uint8_t *out, uint32_t out_bytes, uint32_t *written,
                                  mcubert_message *message);

/* Starts a new text. */
void mcubert_utf8_reset(mcubert_utf8_stream *stream);

/* Ends the text: writes U+FFFD (3 bytes; `out` needs 3) for an unfinished character; the bytes written
 * (0 or 3). The stream is reset. */
uint32_t mcubert_utf8_finish(mcubert_utf8_stream *stream, uint8_t *out);

#ifdef __cplusplus
}
#endif

#endif
