/* GENERATED FILE - do not edit. Generated from custom_ops/src/mcubert_tokenizer_pieces.h by arduino_lib/extras/sync_from_custom_ops.py;
 * edit the source, not this copy, and re-run the script. */
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

/* The id of the piece equal to query[0, length) in any of `lists`, or -1; `lists` checked by
 * mcubert_check_piece_list. bounds[i] (set to 255 before the first, longest query from one position):
 * list i is searched only if length <= bounds[i]; a miss there lowers bounds[i] to the common prefix of
 * the query and the last piece below it, the longest piece of list i that can be a prefix of the query
 * (such pieces sort between the two). On -1, *limit gets the largest bound: greedy longest-match need not
 * look up any longer prefix. */
int32_t mcubert_find_piece(const mcubert_tokenizer *t, const mcubert_piece_list *lists, const uint8_t *query,
                           uint32_t length, uint8_t *bounds, uint32_t *limit);

#endif
