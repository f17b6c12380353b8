/*
 * The tokenizer blob's piece lists, version 4 and 5 (layout: tflm_mcubert/tokenizer/piece_list.py): sorted
 * pieces front-coded in buckets, every length and byte a canonical Huffman code of a code set the lists
 * share, ids implicit (base + rank) or bit-packed. The check at init decodes every piece once; a lookup
 * binary-searches each list's bucket heads and decodes one bucket. Codes are decoded as zlib's puff.c does, from the
 * per-length code counts alone, so the device needs no decoding table in RAM.
 */
#include "mcubert_tokenizer_pieces.h"

#include <stddef.h>
#include <stdint.h>

#include "mcubert_internal.h"

#define OP "TOKENIZER"
#define LIST_HEAD_BYTES 20u
#define CODE_SET_HEAD_BYTES 12u
#define MAX_LISTS MCUBERT_PIECE_MAX_LISTS
#define MAX_CODE_BITS 15u
#define CODE_COUNT_BYTES (2u * MAX_CODE_BITS)
#define CODE_LENGTHS 0
#define CODE_SHARED 1
#define CODE_BYTES 2
#define CODE_DELTAS 3
#define CODES 4u
#define CODE(list, k) ((list)->codes + (list)->code_at[k])
#define MAX_BUCKET_SHIFT 10u
#define MAX_PEEK_BITS 8u
#define MAX_ID_BITS 24u /* ids below vocab_blob.MAX_VOCAB */
#define MAX_LIST_PIECES 0xFFFFFFu

/* One piece list, read from its head (the state keeps only the list offsets: it stays small). */
typedef struct {
    uint32_t count;
    uint32_t data_bytes;
    uint32_t base;        /* the first piece's id when ids are implicit */
    const uint8_t *codes; /* its code set: four canonical Huffman codes (suffix lengths, shared lengths,
                             bytes, deltas) */
    uint16_t code_at[5];  /* each code's offset from `codes`, then the set's end */
    uint8_t bucket_shift; /* buckets of 1 << bucket_shift pieces */
    uint8_t id_bits;      /* 0: implicit ids */
    uint8_t offset_bytes; /* of each bucket offset: 2 or 4 */
    const uint8_t *bucket_offsets;
    const uint8_t *data;
} piece_list;

typedef struct {
    const uint8_t *data;
    uint32_t bit; /* the next bit, most significant first in each byte */
    uint32_t end; /* bits in data: reads past it give 0 and only the check looks (bit > end) */
} bit_reader;

#define NO_CODE_SET 0xFFFFFFFFu /* check_list has checked no code set yet */

static uint32_t rd16(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8;
}

static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint32_t read_bits(bit_reader *r, uint32_t width)
{
    uint32_t value = 0;
    for (; width > 0u; --width) {
        uint32_t bit = r->bit < r->end ? (uint32_t)(r->data[r->bit >> 3] >> (7u - (r->bit & 7u))) & 1u : 0u;
        value = value << 1 | bit;
        r->bit += 1u;
    }
    return value;
}

/* The code table's counts: after its peek bits and peek table. */
static const uint8_t *code_counts(const uint8_t *code)
{
    return code + 1u + (2u << code[0]);
}

/* The symbol whose canonical code starts `window` (its first bit at bit 31), as symbol | length << 8,
 * or 0: the codes of one length are consecutive numbers after those of the shorter lengths, so counting
 * them finds the symbol (zlib's puff.c) without a table in RAM. */
static uint32_t count_codes(const uint8_t *counts, uint32_t window, uint32_t max_length)
{
    uint32_t length, first = 0, index = 0;
    for (length = 1; length <= max_length; ++length) {
        uint32_t count = rd16(counts + 2u * (length - 1u)), value = window >> (32u - length);
        if (value - first < count) { /* value >= first holds for a code that is not oversubscribed */
            return counts[CODE_COUNT_BYTES + index + value - first] | length << 8;
        }
        index += count;
        first = (first + count) << 1;
    }
    return 0;
}

/* The next symbol of a code (layout in piece_list.py): most are one read of the peek table; the next 24
 * bits hold any code after the bit offset. -1: no symbol has these bits (only a damaged blob, which
 * the check catches). */
static int32_t decode(bit_reader *r, const uint8_t *code)
{
    uint32_t at = r->bit >> 3, window = 0, k, entry = 0;
    if (8u * at + 24u <= r->end) { /* the usual case, away from the end: no byte to check */
        window = (uint32_t)r->data[at] << 16 | (uint32_t)r->data[at + 1u] << 8 | r->data[at + 2u];
    } else {
        for (k = 0; k < 3u; ++k) {
            window = window << 8 | (8u * (at + k) < r->end ? (uint32_t)r->data[at + k] : 0u);
        }
    }
    window <<= 8u + (r->bit & 7u); /* the code's first bit at bit 31 */
    if (code[0] != 0u) {
        entry = rd16(code + 1u + 2u * (window >> (32u - code[0])));
    }
    if (entry == 0u) {
        entry = count_codes(code_counts(code), window, MAX_CODE_BITS);
    }
    if (entry == 0u) {
        r->bit += MAX_CODE_BITS;
        return -1;
    }
    r->bit += entry >> 8;
    return (int32_t)(entry & 0xFFu);
}

static uint32_t bucket_offset(const piece_list *list, uint32_t bucket)
{
    const uint8_t *at = list->bucket_offsets + list->offset_bytes * bucket;
    return list->offset_bytes == 2u ? rd16(at) : rd32(at);
}

static uint32_t bucket_count(const piece_list *list)
{
    return (list->count + (1u << list->bucket_shift) - 1u) >> list->bucket_shift;
}

static uint32_t piece_id(const piece_list *list, uint32_t index)
{
    bit_reader r;
    if (list->id_bits == 0u) {
        return list->base + index;
    }
    r.data = list->bucket_offsets + list->offset_bytes * bucket_count(list);
    r.bit = index * list->id_bits;
    r.end = list->count * list->id_bits;
    return read_bits(&r, list->id_bits);
}

/* ---- the check ------------------------------------------------------------------------------- */

static mcubert_status bad_list(mcubert_message *message, const char *name, const char *problem)
{
    return mcubert_fail_text(message, MCUBERT_ERROR_MODEL, OP, name, problem);
}

static int in_blob(uint32_t size, uint32_t offset, uint32_t length)
{
    return offset <= size && length <= size - offset;
}

/* A code's table at *at lies in the blob, is not oversubscribed (so decoding never indexes past its
 * symbols) and its peek table agrees with its counts; *at moves past it. */
static int check_code(const mcubert_tokenizer *t, uint32_t *at)
{
    const uint8_t *code = t->blob + *at;
    uint32_t length, symbols = 0, peek, entry;
    int32_t left = 1; /* codes of the current length still free */
    if (!in_blob(t->size, *at, 1u) || code[0] > MAX_PEEK_BITS ||
        !in_blob(t->size, *at, 1u + (2u << code[0]) + CODE_COUNT_BYTES)) {
        return 0;
    }
    for (length = 0; length < MAX_CODE_BITS; ++length) {
        uint32_t count = rd16(code_counts(code) + 2u * length);
        left = 2 * left - (int32_t)count;
        if (left < 0) {
            return 0;
        }
        symbols += count;
    }
    if (symbols > 256u || !in_blob(t->size, *at + 1u + (2u << code[0]) + CODE_COUNT_BYTES, symbols)) {
        return 0;
    }
    for (peek = 0; peek < (1u << code[0]); ++peek) {
        entry = code[0] == 0u ? 0u : count_codes(code_counts(code), peek << (32u - code[0]), code[0]);
        if (rd16(code + 1u + 2u * peek) != entry) {
            return 0;
        }
    }
    *at += 1u + (2u << code[0]) + CODE_COUNT_BYTES + symbols;
    return 1;
}

/* Decodes every piece: each bucket starts at its offset, codes exist, pieces strictly increase, are
 * 1..max_piece_bytes long, share no more than the piece before has and, inside a bucket, exactly the
 * prefix they have in common with it (a delta >= 1; the lookup's scan relies on that), and the data ends
 * with them. */
static mcubert_status check_pieces(const mcubert_tokenizer *t, const piece_list *list, const char *name,
                                   mcubert_message *message)
{
    uint8_t piece[256]; /* the piece before, overwritten in place by the next (pieces are <= 255 bytes) */
    uint32_t i, length = 0, mask = (1u << list->bucket_shift) - 1u;
    bit_reader r;
    r.data = list->data;
    r.bit = 0;
    r.end = 8u * list->data_bytes;
    for (i = 0; i < list->count; ++i) {
        int32_t shared = 0, suffix, byte = 0, order = 0, k, delta_coded;
        if ((i & mask) == 0u) {
            r.bit = (r.bit + 7u) & ~7u;
            if (r.bit != 8u * bucket_offset(list, i >> list->bucket_shift)) {
                return bad_list(message, name, "a bucket offset does not point at its first piece");
            }
        } else {
            shared = decode(&r, CODE(list, CODE_SHARED));
        }
        suffix = decode(&r, CODE(list, CODE_LENGTHS));
        if (shared < 0 || suffix < 0 || (uint32_t)shared > length || shared + suffix == 0 ||
            (uint32_t)(shared + suffix) > t->max_piece_bytes) {
            return bad_list(message, name, "a piece is empty, too long, or shares more than its predecessor has");
        }
        delta_coded = (i & mask) != 0u && (uint32_t)shared < length;
        for (k = 0; k < suffix && byte >= 0; ++k) {
            if (k == 0 && delta_coded) { /* above the piece before's byte: sorted and shared is maximal */
                int32_t delta = decode(&r, CODE(list, CODE_DELTAS));
                byte = delta < 1 || piece[shared] + delta > 0xFF ? -1 : piece[shared] + delta;
            } else {
                byte = decode(&r, CODE(list, CODE_BYTES));
            }
            if (order == 0 && (uint32_t)(shared + k) < length && byte != piece[shared + k]) {
                order = byte > piece[shared + k] ? 1 : -1;
            }
            /* volatile: a plain byte loop would become a call to memcpy, which the kernels do not link */
            ((volatile uint8_t *)piece)[shared + k] = (uint8_t)byte;
        }
        if (byte < 0 || r.bit > r.end) {
            return bad_list(message, name, "a piece has an invalid code or delta, or runs past the list");
        }
        if (order == 0) { /* equal through the shorter: only a longer piece comes after */
            order = (uint32_t)(shared + suffix) > length ? 1 : -1;
        }
        if (i > 0u && order != 1) {
            return bad_list(message, name, "pieces are not strictly increasing or not front-coded");
        }
        length = (uint32_t)(shared + suffix);
    }
    return ((r.bit + 7u) & ~7u) == r.end ? MCUBERT_OK : bad_list(message, name, "bytes left after the last piece");
}

/* The list whose head is at `head` (checked by check_list, or being checked: its code set offset is
 * then in the blob). */
static void open_list(const uint8_t *blob, const uint8_t *head, piece_list *list)
{
    uint32_t k;
    list->count = rd32(head);
    list->data_bytes = rd32(head + 4);
    list->base = rd32(head + 8);
    list->codes = blob + rd32(head + 12);
    list->bucket_shift = head[16];
    list->id_bits = head[17];
    list->offset_bytes = head[18];
    for (k = 0; k <= CODES; ++k) {
        list->code_at[k] = (uint16_t)rd16(list->codes + 2u * k);
    }
    list->bucket_offsets = head + LIST_HEAD_BYTES;
    list->data =
        list->bucket_offsets + list->offset_bytes * bucket_count(list) + (list->count * list->id_bits + 7u) / 8u;
}

/* The code set at blob offset `at`: its head, then four code tables exactly where it says. */
static int check_code_set(const mcubert_tokenizer *t, uint32_t at)
{
    uint32_t k, tables = at + CODE_SET_HEAD_BYTES;
    if ((at & 3u) != 0u || !in_blob(t->size, at, CODE_SET_HEAD_BYTES) || rd16(t->blob + at + 10u) != 0u) {
        return 0;
    }
    for (k = 0; k < CODES; ++k) {
        if (rd16(t->blob + at + 2u * k) != tables - at || !check_code(t, &tables)) {
            return 0;
        }
    }
    return rd16(t->blob + at + 2u * CODES) == tables - at;
}

/* One list at blob offset `at`: its head, code tables, sizes and ids; then every piece (check_pieces). */
static mcubert_status check_list(const mcubert_tokenizer *t, uint32_t at, uint32_t *checked_codes, piece_list *list,
                                 const char *name, mcubert_message *message)
{
    const uint8_t *head = t->blob + at;
    uint32_t i, buckets, ids_bytes, tables = at + LIST_HEAD_BYTES;
    if (!in_blob(t->size, at, LIST_HEAD_BYTES)) {
        return bad_list(message, name, "piece list outside the blob");
    }
    if (rd32(head) > MAX_LIST_PIECES || head[16] > MAX_BUCKET_SHIFT || head[17] > MAX_ID_BITS ||
        (head[18] != 2u && head[18] != 4u) || head[19] != 0u || rd32(head + 4) > 0x1FFFFFFFu) {
        return bad_list(message, name, "counts or field widths out of range");
    }
    /* lists share code sets: each is checked once in a row (NO_CODE_SET: none yet, whatever the offset) */
    if (*checked_codes == NO_CODE_SET || rd32(head + 12) != *checked_codes) {
        if (!check_code_set(t, rd32(head + 12))) {
            return bad_list(message, name,
                            "a Huffman code table is oversubscribed, inconsistent, misplaced or runs past the blob");
        }
        *checked_codes = rd32(head + 12);
    }
    open_list(t->blob, head, list);
    buckets = bucket_count(list);
    ids_bytes = (list->count * list->id_bits + 7u) / 8u;
    if (!in_blob(t->size, tables, list->offset_bytes * buckets + ids_bytes) ||
        !in_blob(t->size, tables + list->offset_bytes * buckets + ids_bytes, list->data_bytes)) {
        return bad_list(message, name, "counts or sizes do not fit the blob");
    }
    if (list->id_bits == 0u ? list->base > t->vocab_size || list->count > t->vocab_size - list->base
                            : list->base != 0u) {
        return bad_list(message, name, "a piece's id is not below vocab_size");
    }
    for (i = 0; list->id_bits != 0u && i < list->count; ++i) {
        if (piece_id(list, i) >= t->vocab_size) {
            return bad_list(message, name, "a piece's id is not below vocab_size");
        }
    }
    return check_pieces(t, list, name, message);
}

mcubert_status mcubert_check_piece_list(const mcubert_tokenizer *t, uint32_t at, mcubert_piece_list *lists,
                                        const char *name, mcubert_message *message)
{
    uint32_t i, implicit_end = 0, checked_codes = NO_CODE_SET;
    piece_list list;
    mcubert_status status;
    if (!in_blob(t->size, at, 4u) || rd32(t->blob + at) > MAX_LISTS ||
        !in_blob(t->size, at + 4u, 4u * rd32(t->blob + at)) || (at & 3u) != 0u) {
        return bad_list(message, name, "list group outside the blob or more lists than the lookup searches");
    }
    lists->count = rd32(t->blob + at);
    lists->offsets = t->blob + at + 4u;
    for (i = 0; i < lists->count; ++i) {
        status = check_list(t, rd32(lists->offsets + 4u * i), &checked_codes, &list, name, message);
        if (status != MCUBERT_OK) {
            return status;
        }
        if (list.id_bits == 0u) { /* implicit ranges in id order and apart: every id names one piece */
            if (list.base < implicit_end) {
                return bad_list(message, name, "implicit id ranges overlap or are out of order");
            }
            implicit_end = list.base + list.count;
        }
    }
    return MCUBERT_OK;
}

/* ---- the lookup ------------------------------------------------------------------------------ */

/* <0, 0, >0 as the piece at r (a bucket's first) compares with the query; decodes only what decides. */
static int32_t compare_head(bit_reader *r, const piece_list *list, const uint8_t *query, uint32_t length)
{
    uint32_t k, piece_length = (uint32_t)decode(r, CODE(list, CODE_LENGTHS));
    for (k = 0; k < piece_length; ++k) {
        int32_t byte;
        if (k == length) {
            return 1;
        }
        byte = decode(r, CODE(list, CODE_BYTES));
        if (byte != (int32_t)query[k]) {
            return byte - (int32_t)query[k];
        }
    }
    return piece_length == length ? 0 : -1;
}

/* What a lookup learned besides the query's own id: the common prefix of the query and the last piece
 * below it, and the longest piece of the searched bucket that is a prefix of the query. */
typedef struct {
    uint32_t prefix;
    int32_t index; /* of that piece in the list, -1: none */
    uint32_t index_length;
} prefix_hint;

/* The bucket is scanned without rebuilding its pieces: `matched` is the common prefix of the query and
 * the piece before, which with a piece's shared length decides most pieces before their bytes. On a miss
 * hint->prefix gets the common prefix of the query and the last piece below it: every piece that is a
 * prefix of the query lies between those two in byte order, so is a prefix of that piece too, and is no
 * longer. The longest prefix piece sorts last of them and every piece after it up to the query starts
 * with it: so when the bucket holds one, the last the scan meets (hint->index) is the list's longest. */
static int32_t find_in_list(const piece_list *list, const uint8_t *query, uint32_t length, prefix_hint *hint)
{
    uint32_t lo = 0, hi, i, end, matched = 0;
    uint32_t previous_length = 0, at_matched = 0; /* the piece before's length, its byte at `matched` */
    bit_reader r;
    hint->prefix = 0;
    hint->index = -1;
    hint->index_length = 0;
    if (list->count == 0u) {
        return -1;
    }
    r.data = list->data;
    r.end = 8u * list->data_bytes;
    hi = (list->count - 1u) >> list->bucket_shift;
    while (lo < hi) { /* the last bucket whose first piece <= query */
        uint32_t mid = (lo + hi + 1u) / 2u;
        r.bit = 8u * bucket_offset(list, mid);
        if (compare_head(&r, list, query, length) <= 0) {
            lo = mid;
        } else {
            hi = mid - 1u;
        }
    }
    r.bit = 8u * bucket_offset(list, lo);
    end = (lo + 1u) << list->bucket_shift;
    end = end < list->count ? end : list->count;
    for (i = lo << list->bucket_shift; i < end; ++i) {
        uint32_t head = i == lo << list->bucket_shift;
        uint32_t shared = head ? 0u : (uint32_t)decode(&r, CODE(list, CODE_SHARED));
        uint32_t k, agree = 0, differing = 0, suffix = (uint32_t)decode(&r, CODE(list, CODE_LENGTHS));
        uint32_t delta_coded = !head && shared < previous_length;
        int below = shared > matched; /* agrees with the piece before past where that one left the query */
        if (shared < matched) {
            break; /* differs from the query where the piece before agreed with it: past the query */
        }
        for (k = 0; k < suffix; ++k) { /* every byte is decoded: the next piece's codes follow */
            uint32_t byte;
            if (k == 0 && delta_coded) { /* below: the value is not needed, at_matched may not be its base */
                byte = (uint32_t)decode(&r, CODE(list, CODE_DELTAS)) + (below ? 0u : at_matched);
            } else {
                byte = (uint32_t)decode(&r, CODE(list, CODE_BYTES));
            }
            if (below) {
                continue;
            }
            if (matched + k == length || byte > query[matched + k]) {
                hint->prefix = matched;
                return -1; /* the first piece above the query */
            }
            below = byte < query[matched + k];
            differing = byte;
            agree += below ? 0u : 1u;
        }
        if (!below && matched + agree == length) {
            return (int32_t)piece_id(list, i);
        }
        if (!below) { /* all of it agrees with the longer query: a prefix of it */
            hint->index = (int32_t)i;
            hint->index_length = matched + agree;
        }
        if (shared == matched) { /* this piece is the new piece before: its byte where it leaves the query */
            matched += agree;
            at_matched = differing;
        }
        previous_length = shared + suffix;
    }
    hint->prefix = matched; /* or the bucket's last piece is below the query, the next bucket's first above */
    return -1;
}

int32_t mcubert_longest_piece(const mcubert_tokenizer *t, const mcubert_piece_list *lists, const uint8_t *query,
                              uint32_t length, uint32_t *piece_length)
{
    uint8_t bounds[MAX_LISTS]; /* per list: no longer piece of it is a prefix of the query */
    uint32_t i, best_length = 0, pending = 1;
    int32_t best = -1;
    for (i = 0; i < lists->count; ++i) {
        ((volatile uint8_t *)bounds)[i] = (uint8_t)length; /* volatile: a plain loop may become a memset call */
    }
    while (pending) { /* each pass lowers every bound it searches: at most one pass per byte of the query */
        pending = 0;
        for (i = 0; i < lists->count; ++i) {
            piece_list list;
            prefix_hint hint;
            int32_t found;
            if (bounds[i] <= best_length) {
                continue; /* nothing in list i can beat the best */
            }
            open_list(t->blob, t->blob + rd32(lists->offsets + 4u * i), &list);
            found = find_in_list(&list, query, bounds[i], &hint);
            if (found >= 0 || hint.index >= 0) { /* list i's longest prefix piece */
                uint32_t candidate = found >= 0 ? bounds[i] : hint.index_length;
                if (candidate > best_length) {
                    best = found >= 0 ? found : (int32_t)piece_id(&list, (uint32_t)hint.index);
                    best_length = candidate;
                }
                bounds[i] = 0;
            } else {
                /* below bounds[i] even for a blob whose order lies: the bounds always fall */
                uint32_t prefix = hint.prefix < bounds[i] ? hint.prefix : bounds[i] - 1u;
                while (prefix > 0u && (query[prefix] & 0xC0u) == 0x80u) {
                    --prefix; /* pieces are whole UTF-8 characters: none ends inside one */
                }
                bounds[i] = (uint8_t)prefix;
                pending |= prefix > best_length;
            }
        }
    }
    *piece_length = best_length;
    return best;
}
