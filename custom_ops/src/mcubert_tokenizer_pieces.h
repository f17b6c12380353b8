/*
 * The tokenizer blob's piece lists (mcubert_tokenizer_pieces.c), shared with mcubert_tokenizer.c.
 */
#ifndef MCUBERT_TOKENIZER_PIECES_H
#define MCUBERT_TOKENIZER_PIECES_H

#include <stdint.h>

#include "mcubert/mcubert_tokenizer.h"

#define MCUBERT_PIECE_MAX_LISTS 16u /* per kind: vocab_blob.MAX_LISTS */

/* Fills `lists` from the list group at blob offset `at` and decodes every piece once: sizes in the blob,
 * codes well formed, pieces strictly increasing and front-coded as the lookup expects, ids below
 * vocab_size, implicit id ranges increasing and apart. MCUBERT_ERROR_MODEL naming `name` and the
 * problem otherwise. */
mcubert_status mcubert_check_piece_list(const mcubert_tokenizer *t, uint32_t at, mcubert_piece_list *lists,
                                        const char *name, mcubert_message *message);

/* The id of the longest piece of `lists` that is a prefix of query[0, length) (length <= 255), its byte
 * length in *piece_length; -1 when none is. `lists` checked by mcubert_check_piece_list. Each list is
 * searched once for the query: a miss tells the longest of its pieces that can still be a prefix (the
 * common prefix of the query and the last piece below it, which is that piece when it is all prefix), so
 * a list is searched again only for a shorter query that can beat the best found. */
int32_t mcubert_longest_piece(const mcubert_tokenizer *t, const mcubert_piece_list *lists, const uint8_t *query,
                              uint32_t length, uint32_t *piece_length);

#endif
