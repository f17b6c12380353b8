/*
 * MCUBERT_EMBEDDING (SPEC 4.1; reference ops/embedding.py): clustered low-rank word lookup,
 * position and token type, summed in the pre-norm scale, then LayerNorm. Per token at position p:
 *
 *   word[c] = requantize(U_0[id][c], Mw_0[c])                                 (cluster 0)
 *           = requantize(sum_l U_i[id - start_i][l] V_i[c][l], Mw_i[c])       (cluster i > 0)
 *   z[c]    = clamp16(word[c] + requantize(P[p][c], Mp[c]) + requantize(T[type][c], Mt[c]))
 *   hidden[p] = LayerNorm(z)
 *
 * Tokens go in blocks of 4 (the z scratch); within a block, the tokens of one low-rank cluster
 * share one micro-kernel pass over V_i.
 *
 * int4 tables (word_bits = 4, SPEC 4.1.1) change only the gather: a cluster-0 row is a uint16 row
 * scale then d nibbles, word[c] = requantize(q[c] * row_scale, Mw_0[c]); a U_i row is r_i nibbles
 * that the micro-kernel's row widening unpacks (V_i carries U_i's column scales).
 */
#include <stddef.h>

#include "mcubert_dsp.h"
#include "mcubert_fixed_point.h"
#include "mcubert_internal.h"

#define OP "MCUBERT_EMBEDDING"
#define ROWS 4 /* contract embedding_rows */

void mcubert_embedding_layout_of(int32_t s, int32_t d, mcubert_embedding_layout *layout)
{
    int32_t offset = 0;
    (void)s;
    layout->z = offset;
    offset += mcubert_align_up(2 * ROWS * d);
    layout->widened = offset;
    offset += mcubert_align_up(2 * MCUBERT_BLOCK_ROWS * d);
    layout->total = offset;
}

int32_t mcubert_embedding_get_buffer_size(int32_t seq_len, int32_t hidden)
{
    mcubert_embedding_layout layout;
    if (seq_len < 1 || seq_len > MCUBERT_MAX_SEQ_LEN || hidden < 1 || hidden > MCUBERT_MAX_HIDDEN) {
        return -1;
    }
    mcubert_embedding_layout_of(seq_len, hidden, &layout);
    return layout.total;
}

/* 4 or 8; version 1's params (word_bits 0, as its options parser leaves it) are int8. */
static int32_t word_bits(const mcubert_embedding_params *p)
{
    return mcubert_word_bits(p->word_bits);
}

static mcubert_status validate_options(const mcubert_embedding_params *p, mcubert_message *m)
{
    mcubert_status st;
    if ((st = mcubert_check_params(OP, p, m)) != MCUBERT_OK) {
        return st;
    }
    if ((st = mcubert_check_common_options(OP, p->spec_version, p->spec_hash, p->seq_len, p->hidden, m)) !=
            MCUBERT_OK ||
        (st = mcubert_check_range(OP, "vocab_size", p->vocab_size, 1, INT32_MAX, m)) != MCUBERT_OK ||
        (st = mcubert_check_range(OP, "cluster_count", p->cluster_count, 1, MCUBERT_MAX_CLUSTERS, m)) != MCUBERT_OK ||
        (st = mcubert_check_range(OP, "type_vocab_size", p->type_vocab_size, 1, MCUBERT_MAX_TYPE_VOCAB, m)) !=
            MCUBERT_OK ||
        (st = mcubert_check_ln_eps(OP, p->ln_eps, m)) != MCUBERT_OK ||
        (st = mcubert_check_word_bits(OP, p->word_bits, p->spec_version, MCUBERT_SPEC_VERSION_INT4, m)) != MCUBERT_OK) {
        return st;
    }
    return mcubert_check_cluster_count(OP, p->cluster_count, p->vocab_size, m);
}

/* The word table's cluster view of the options and the cluster tensor (mcubert_word_table.c). */
static mcubert_word_table word_table(const mcubert_embedding_params *p, const int32_t *clusters)
{
    return mcubert_word_table_of(clusters, p->cluster_count, p->vocab_size, p->hidden, word_bits(p));
}

/* int4 rows of odd length end in a padding nibble that must be 0 (SPEC 4.1.1), as pair4 padding. */
mcubert_status mcubert_embedding_validate(const mcubert_embedding_params *params, const mcubert_tensor_view *tensors,
                                          int32_t count, mcubert_message *message)
{
    const mcubert_tensor_view *t = tensors;
    int64_t s, d, c;
    int32_t i;
    mcubert_status st = validate_options(params, message);
    if (st != MCUBERT_OK || tensors == NULL) {
        return st;
    }
    if ((st = mcubert_check_count(OP, count, MCUBERT_EMBEDDING_NUM_TENSORS, message)) != MCUBERT_OK) {
        return st;
    }
    s = params->seq_len;
    d = params->hidden;
    c = params->cluster_count;
    if ((st = mcubert_check_tensor(OP, "input_ids", &t[MCUBERT_EMBEDDING_INPUT_IDS], MCUBERT_DTYPE_INT32, s,
                                   message)) != MCUBERT_OK ||
        (st = mcubert_check_tensor(OP, "token_type_ids", &t[MCUBERT_EMBEDDING_TOKEN_TYPE_IDS], MCUBERT_DTYPE_INT32, s,
                                   message)) != MCUBERT_OK ||
        (st = mcubert_check_tensor(OP, "clusters", &t[MCUBERT_EMBEDDING_CLUSTERS], MCUBERT_DTYPE_INT32, 2 * c,
                                   message)) != MCUBERT_OK) {
        return st;
    }
    /* The sizes of the word tables follow from the cluster table's contents. */
    if (t[MCUBERT_EMBEDDING_CLUSTERS].data != NULL) {
        const int32_t *clusters = (const int32_t *)t[MCUBERT_EMBEDDING_CLUSTERS].data;
        const int8_t *projections = (const int8_t *)t[MCUBERT_EMBEDDING_WORD_PROJECTIONS].data;
        int64_t rows_total, projections_total;
        const mcubert_word_table table = word_table(params, clusters);
        if ((st = mcubert_check_word_clusters(OP, &table, &rows_total, &projections_total, message)) != MCUBERT_OK ||
            (st = mcubert_check_tensor(OP, "word_rows", &t[MCUBERT_EMBEDDING_WORD_ROWS], MCUBERT_DTYPE_INT8, rows_total,
                                       message)) != MCUBERT_OK ||
            (st = mcubert_check_tensor(OP, "word_projections", &t[MCUBERT_EMBEDDING_WORD_PROJECTIONS],
                                       MCUBERT_DTYPE_INT8, projections_total, message)) != MCUBERT_OK) {
            return st;
        }
        if (word_bits(params) == 4 && t[MCUBERT_EMBEDDING_WORD_ROWS].data != NULL &&
            (st = mcubert_check_int4_word_padding(OP, &table, (const uint8_t *)t[MCUBERT_EMBEDDING_WORD_ROWS].data,
                                                  message)) != MCUBERT_OK) {
            return st;
        }
        for (i = 1; i < params->cluster_count && projections != NULL; ++i) {
            mcubert_word_cluster info;
            mcubert_word_cluster_at(&table, i, &info);
            st = mcubert_check_pair4(OP, "word_projections", projections + info.projection_offset, (int32_t)d,
                                     info.rank, message);
            if (st != MCUBERT_OK) {
                return st;
            }
        }
    }
    if ((st = mcubert_check_requant_tensor(OP, "word_requant", &t[MCUBERT_EMBEDDING_WORD_REQUANT], (int32_t)(c * d),
                                           message)) != MCUBERT_OK ||
        (st = mcubert_check_tensor(OP, "position_table", &t[MCUBERT_EMBEDDING_POSITION_TABLE], MCUBERT_DTYPE_INT8,
                                   s * d, message)) != MCUBERT_OK ||
        (st = mcubert_check_requant_tensor(OP, "position_requant", &t[MCUBERT_EMBEDDING_POSITION_REQUANT], (int32_t)d,
                                           message)) != MCUBERT_OK ||
        (st = mcubert_check_tensor(OP, "token_type_table", &t[MCUBERT_EMBEDDING_TOKEN_TYPE_TABLE], MCUBERT_DTYPE_INT8,
                                   params->type_vocab_size * d, message)) != MCUBERT_OK ||
        (st = mcubert_check_requant_tensor(OP, "token_type_requant", &t[MCUBERT_EMBEDDING_TOKEN_TYPE_REQUANT],
                                           (int32_t)d, message)) != MCUBERT_OK ||
        (st = mcubert_check_tensor(OP, "layer_norm", &t[MCUBERT_EMBEDDING_LAYER_NORM], MCUBERT_DTYPE_INT32, 2 * d,
                                   message)) != MCUBERT_OK) {
        return st;
    }
    return mcubert_check_tensor(OP, "output", &t[MCUBERT_EMBEDDING_OUTPUT], MCUBERT_DTYPE_INT8, s * d, message);
}

static mcubert_status check_ids(const int32_t *ids, int32_t s, int32_t limit, const char *field, mcubert_message *m)
{
    int32_t p;
    for (p = 0; p < s; ++p) {
        if (ids[p] < 0 || ids[p] >= limit) {
            mcubert_status st = mcubert_fail(m, MCUBERT_ERROR_INPUT, OP, field);
            mcubert_append(m, "id ");
            mcubert_append_int(m, ids[p]);
            mcubert_append(m, " at position ");
            mcubert_append_int(m, p);
            mcubert_append(m, " is outside [0, ");
            mcubert_append_int(m, limit);
            mcubert_append(m, ")");
            return st;
        }
    }
    return MCUBERT_OK;
}

/* z = clamp16(word + position term + type term), each term already saturated to int32. */
static inline int16_t pre_norm(int32_t word, const mcubert_embedding_weights *w, const int8_t *position_row,
                               const int8_t *type_row, int32_t c)
{
    const int32_t position =
        mcubert_requantize(position_row[c], w->position_requant[2 * c], w->position_requant[2 * c + 1]);
    const int32_t type =
        mcubert_requantize(type_row[c], w->token_type_requant[2 * c], w->token_type_requant[2 * c + 1]);
    return mcubert_clamp16((int64_t)word + position + type);
}

/* What the stages of one call share. */
typedef struct {
    const mcubert_embedding_params *params;
    const mcubert_embedding_weights *weights;
    const int32_t *input_ids;
    const int32_t *token_type_ids;
    int16_t *z;        /* [4][d] pre-norm rows of the current block */
    uint32_t *widened; /* DSP: [4][d] int16 */
} embedding_state;

/* An int4 cluster-0 row's z (SPEC 4.1.1): word[c] = requantize(q[c] * row_scale, Mw_0[c]),
 * two channels per stored byte. */
static void word_full_row_int4(const embedding_state *e, const uint8_t *row, const int8_t *position_row,
                               const int8_t *type_row, int16_t *z)
{
    const mcubert_embedding_weights *w = e->weights;
    const int32_t d = e->params->hidden;
    const int32_t scale = (int32_t)row[0] | ((int32_t)row[1] << 8);
    const uint8_t *nibbles = row + MCUBERT_INT4_ROW_SCALE_BYTES;
    int32_t c;
    for (c = 0; c < d; ++c) {
        const int32_t byte = nibbles[c >> 1];
        const int32_t q = ((((c & 1) ? byte >> 4 : byte) & 0xF) ^ 8) - 8;
        const int32_t word = mcubert_requantize(q * scale, w->word_requant[2 * c], w->word_requant[2 * c + 1]);
        z[c] = pre_norm(word, w, position_row, type_row, c);
    }
}

/* Cluster-0 tokens of the block: word[c] = requantize(U_0[id][c], Mw_0[c]). */
MCUBERT_NOINLINE static void word_full_rows(const embedding_state *e, int32_t p0, const int32_t *cluster_of, int32_t n)
{
    const mcubert_embedding_weights *w = e->weights;
    const int32_t d = e->params->hidden;
    const int32_t bits = word_bits(e->params);
    int32_t r, c;
    for (r = 0; r < n; ++r) {
        const int32_t token = p0 + r;
        const int8_t *u, *position_row, *type_row;
        if (cluster_of[r] != 0) {
            continue;
        }
        u = w->word_rows + (int64_t)e->input_ids[token] * mcubert_word_row_bytes(0, d, bits);
        position_row = w->position_table + token * d;
        type_row = w->token_type_table + e->token_type_ids[token] * d;
        if (bits == 4) {
            word_full_row_int4(e, (const uint8_t *)u, position_row, type_row, e->z + r * d);
            continue;
        }
        for (c = 0; c < d; ++c) {
            const int32_t word = mcubert_requantize(u[c], w->word_requant[2 * c], w->word_requant[2 * c + 1]);
            e->z[r * d + c] = pre_norm(word, w, position_row, type_row, c);
        }
    }
}

/* Channels per micro-kernel call of the low-rank clusters. The plain path gains nothing from
 * chunks and its deeper frames would pass MCUBERT_STACK_BOUND_BYTES with eight: it takes four. */
#if MCUBERT_DSP
#define LOW_RANK_CHUNK MCUBERT_CHUNK_CHANNELS
#else
#define LOW_RANK_CHUNK (MCUBERT_CHUNK_CHANNELS / 2)
#endif

/* z of channels [c0, c0 + n) for the m gathered tokens (block rows member[g]) of one cluster. */
MCUBERT_NOINLINE static void store_low_rank_chunk(const embedding_state *e, int32_t p0, const int32_t *member,
                                                  int32_t m, const int32_t *requant, int32_t c0, int32_t n,
                                                  int32_t acc[][MCUBERT_BLOCK_ROWS])
{
    const mcubert_embedding_weights *w = e->weights;
    const int32_t d = e->params->hidden;
    int32_t j, g;
    for (j = 0; j < n; ++j) {
        const int32_t c = c0 + j;
        for (g = 0; g < m; ++g) {
            const int32_t token = p0 + member[g];
            const int32_t word = mcubert_requantize(acc[j][g], requant[2 * c], requant[2 * c + 1]);
            e->z[member[g] * d + c] =
                pre_norm(word, w, w->position_table + token * d, w->token_type_table + e->token_type_ids[token] * d, c);
        }
    }
}

/* The block's tokens of low-rank cluster i (i > 0), in one micro-kernel pass over V_i:
 * word[c] = requantize(sum_l U_i[id - start_i][l] V_i[c][l], Mw_i[c]). */
MCUBERT_NOINLINE static void word_low_rank(const embedding_state *e, int32_t p0, const int32_t *cluster_of, int32_t n,
                                           int32_t i)
{
    const mcubert_embedding_weights *w = e->weights;
    const int32_t d = e->params->hidden;
    const int32_t *requant = w->word_requant + 2 * i * d;
    const int8_t *row_pointers[ROWS];
    int32_t member[ROWS];
    const mcubert_word_table table = word_table(e->params, w->clusters);
    mcubert_word_cluster cluster;
    const int8_t *projection;
    int32_t pair_bytes, c, r, m = 0;
    mcubert_rows rows;
    for (r = 0; r < n; ++r) {
        if (cluster_of[r] == i) {
            member[m++] = r;
        }
    }
    if (m == 0) {
        return;
    }
    mcubert_word_cluster_at(&table, i, &cluster);
    projection = w->word_projections + cluster.projection_offset;
    pair_bytes = ((cluster.rank + 3) >> 2) * 8;
    for (r = 0; r < m; ++r) {
        row_pointers[r] = w->word_rows + cluster.row_offset +
                          (int64_t)(e->input_ids[p0 + member[r]] - cluster.start) * cluster.row_bytes;
    }
    if (word_bits(e->params) == 4) {
        mcubert_rows_init_gather_s4(&rows, (const uint8_t *const *)row_pointers, m, cluster.rank);
    } else {
        mcubert_rows_init_gather_s8(&rows, row_pointers, m, cluster.rank);
    }
    mcubert_rows_widen_pair4(&rows, e->widened);
    for (c = 0; c < d; c += LOW_RANK_CHUNK) {
        const int32_t chunk = mcubert_min_i32(LOW_RANK_CHUNK, d - c);
        int32_t acc[LOW_RANK_CHUNK][MCUBERT_BLOCK_ROWS];
        mcubert_gemm_4xn_pair4(&rows, projection + (c >> 1) * pair_bytes, pair_bytes, chunk, acc);
        store_low_rank_chunk(e, p0, member, m, requant, c, chunk, acc);
    }
}

MCUBERT_NOINLINE static mcubert_status prepare(embedding_state *e, const mcubert_embedding_params *params,
                                               const mcubert_embedding_weights *weights, const int32_t *input_ids,
                                               const int32_t *token_type_ids, const int8_t *hidden,
                                               const mcubert_context *context, mcubert_message *message)
{
    mcubert_embedding_layout layout;
    mcubert_word_table table;
    int64_t rows_total, projections_total;
    mcubert_status st = validate_options(params, message);
    if (st != MCUBERT_OK) {
        return st;
    }
    if (weights == NULL || weights->clusters == NULL || weights->word_rows == NULL ||
        (weights->word_projections == NULL && params->cluster_count > 1) || weights->word_requant == NULL ||
        weights->position_table == NULL || weights->position_requant == NULL || weights->token_type_table == NULL ||
        weights->token_type_requant == NULL || weights->layer_norm == NULL || input_ids == NULL ||
        token_type_ids == NULL || hidden == NULL) {
        return mcubert_fail_text(message, MCUBERT_ERROR_ARGUMENT, OP, weights == NULL ? "weights" : "inputs",
                                 "NULL pointer");
    }
    mcubert_embedding_layout_of(params->seq_len, params->hidden, &layout);
    table = word_table(params, weights->clusters);
    if ((st = mcubert_check_context(OP, context, layout.total, message)) != MCUBERT_OK ||
        (st = mcubert_check_word_clusters(OP, &table, &rows_total, &projections_total, message)) != MCUBERT_OK ||
        (st = check_ids(input_ids, params->seq_len, params->vocab_size, "input_ids", message)) != MCUBERT_OK ||
        (st = check_ids(token_type_ids, params->seq_len, params->type_vocab_size, "token_type_ids", message)) !=
            MCUBERT_OK) {
        return st;
    }
    e->params = params;
    e->weights = weights;
    e->input_ids = input_ids;
    e->token_type_ids = token_type_ids;
    e->z = (int16_t *)(void *)((int8_t *)context->buf + layout.z);
    e->widened = (uint32_t *)(void *)((int8_t *)context->buf + layout.widened);
    return MCUBERT_OK;
}

mcubert_status mcubert_embedding_s8(const mcubert_embedding_params *params, const mcubert_embedding_weights *weights,
                                    const int32_t *input_ids, const int32_t *token_type_ids, int8_t *hidden,
                                    const mcubert_context *context, mcubert_message *message)
{
    embedding_state e;
    int32_t p0;
    const mcubert_status st = prepare(&e, params, weights, input_ids, token_type_ids, hidden, context, message);
    if (st != MCUBERT_OK) {
        return st; /* nothing written: ids and types are checked before the first token */
    }
    for (p0 = 0; p0 < params->seq_len; p0 += ROWS) {
        const int32_t n = mcubert_min_i32(ROWS, params->seq_len - p0);
        const int32_t d = params->hidden;
        int32_t cluster_of[ROWS];
        int32_t r, i;
        for (r = 0; r < n; ++r) {
            /* Cluster of the id: the first whose end exceeds it (ids < vocab_size = last end). */
            for (i = 0; input_ids[p0 + r] >= weights->clusters[2 * i]; ++i) {
            }
            cluster_of[r] = i;
        }
        word_full_rows(&e, p0, cluster_of, n);
        for (i = 1; i < params->cluster_count; ++i) {
            word_low_rank(&e, p0, cluster_of, n, i);
        }
        for (r = 0; r < n; ++r) {
            mcubert_layer_norm_s8(e.z + r * d, d, weights->layer_norm, params->ln_eps, hidden + (p0 + r) * d);
        }
    }
    return MCUBERT_OK;
}
