/*
 * MCUBERT_DECODER_EMBEDDING (SPEC 4.8; reference ops/decoder_embedding.py): one token's word row (the
 * embedding's clustered tables, int8 or int4 storage, SPEC 4.1 and 4.1.1) plus its position row, written as the
 * decoder's residual stream, no LayerNorm (GPT-2: wte[id] + wpe[p]):
 *
 *   z[c] = clamp16(clamp32(word[c]) + clamp32(requantize(P[p][c], Mp[c])));  x[c] = clamp8(rsh(z[c], R[c]) + zp[c])
 *
 * One token, so the low-rank word row is d dot products of length r_i read straight from V_i's pair4
 * layout (element (c, l) at group (c/2, l/4), byte (c%2)*4 + l%4). Scratch: `residual` int16[d].
 */
#include <stddef.h>

#include "mcubert_fixed_point.h"
#include "mcubert_internal.h"

#define OP "MCUBERT_DECODER_EMBEDDING"

int32_t mcubert_decoder_embedding_get_buffer_size(int32_t context, int32_t hidden)
{
    if (context < 1 || context > MCUBERT_MAX_SEQ_LEN || hidden < 1 || hidden > MCUBERT_MAX_HIDDEN) {
        return -1;
    }
    return mcubert_align_up(2 * hidden);
}

static mcubert_status validate_options(const mcubert_decoder_embedding_params *p, mcubert_message *m)
{
    mcubert_status st;
    if ((st = mcubert_check_params(OP, p, m)) != MCUBERT_OK ||
        (st = mcubert_check_spec(OP, p->spec_version, p->spec_hash, m)) != MCUBERT_OK ||
        (st = mcubert_check_range(OP, "context", p->context, 1, MCUBERT_MAX_SEQ_LEN, m)) != MCUBERT_OK ||
        (st = mcubert_check_range(OP, "hidden", p->hidden, 1, MCUBERT_MAX_HIDDEN, m)) != MCUBERT_OK ||
        (st = mcubert_check_range(OP, "vocab_size", p->vocab_size, 1, 0x7FFFFFFF, m)) != MCUBERT_OK ||
        (st = mcubert_check_range(OP, "cluster_count", p->cluster_count, 1, MCUBERT_MAX_CLUSTERS, m)) != MCUBERT_OK ||
        (st = mcubert_check_word_bits(OP, p->word_bits, p->spec_version, MCUBERT_DECODER_EMBEDDING_WORD_BITS_SINCE,
                                      m)) != MCUBERT_OK) {
        return st;
    }
    return mcubert_check_cluster_count(OP, p->cluster_count, p->vocab_size, m);
}

mcubert_status mcubert_decoder_embedding_validate(const mcubert_decoder_embedding_params *params,
                                                  const mcubert_tensor_view *tensors, int32_t count,
                                                  mcubert_message *message)
{
    const mcubert_tensor_view *t = tensors;
    mcubert_status st = validate_options(params, message);
    int32_t d, c;
    if (st != MCUBERT_OK || tensors == NULL) {
        return st;
    }
    if ((st = mcubert_check_count(OP, count, MCUBERT_DECODER_EMBEDDING_NUM_TENSORS, message)) != MCUBERT_OK) {
        return st;
    }
    d = params->hidden;
    c = params->cluster_count;
    if ((st = mcubert_check_tensor(OP, "input_id", &t[MCUBERT_DECODER_EMBEDDING_INPUT_ID], MCUBERT_DTYPE_INT32, 1,
                                   message)) != MCUBERT_OK ||
        (st = mcubert_check_tensor(OP, "position", &t[MCUBERT_DECODER_EMBEDDING_POSITION], MCUBERT_DTYPE_INT32, 1,
                                   message)) != MCUBERT_OK ||
        (st = mcubert_check_tensor(OP, "clusters", &t[MCUBERT_DECODER_EMBEDDING_CLUSTERS], MCUBERT_DTYPE_INT32, 2 * c,
                                   message)) != MCUBERT_OK) {
        return st;
    }
    if (t[MCUBERT_DECODER_EMBEDDING_CLUSTERS].data != NULL) {
        const mcubert_word_table table =
            mcubert_word_table_of((const int32_t *)t[MCUBERT_DECODER_EMBEDDING_CLUSTERS].data, params->cluster_count,
                                  params->vocab_size, params->hidden, mcubert_word_bits(params->word_bits));
        if ((st = mcubert_check_word_tensors(OP, &table, &t[MCUBERT_DECODER_EMBEDDING_WORD_ROWS],
                                             &t[MCUBERT_DECODER_EMBEDDING_WORD_PROJECTIONS], message)) != MCUBERT_OK) {
            return st;
        }
    }
    if ((st = mcubert_check_requant_tensor(OP, "word_requant", &t[MCUBERT_DECODER_EMBEDDING_WORD_REQUANT], c * d,
                                           message)) != MCUBERT_OK ||
        (st = mcubert_check_tensor(OP, "position_table", &t[MCUBERT_DECODER_EMBEDDING_POSITION_TABLE],
                                   MCUBERT_DTYPE_INT8, (int64_t)params->context * d, message)) != MCUBERT_OK ||
        (st = mcubert_check_requant_tensor(OP, "position_requant", &t[MCUBERT_DECODER_EMBEDDING_POSITION_REQUANT], d,
                                           message)) != MCUBERT_OK ||
        (st = mcubert_check_residual_tensor(OP, "output_residual", &t[MCUBERT_DECODER_EMBEDDING_OUTPUT_RESIDUAL], d,
                                            message)) != MCUBERT_OK) {
        return st;
    }
    return mcubert_check_tensor(OP, "output", &t[MCUBERT_DECODER_EMBEDDING_OUTPUT], MCUBERT_DTYPE_INT8, d, message);
}

/* An index input in [0, limit), else MCUBERT_ERROR_INPUT naming it. */
static mcubert_status check_index(int32_t value, int32_t limit, const char *field, mcubert_message *m)
{
    if (value < 0 || value >= limit) {
        const mcubert_status st = mcubert_fail(m, MCUBERT_ERROR_INPUT, OP, field);
        mcubert_append_int(m, value);
        mcubert_append(m, " is outside [0, ");
        mcubert_append_int(m, limit);
        mcubert_append(m, ")");
        return st;
    }
    return MCUBERT_OK;
}

/* Value l of a stored word row: an int8, or nibble l of an int4 row (past a cluster-0 row's scale). */
static int32_t row_value(const int8_t *u, int32_t l, int32_t bits)
{
    return bits == 8 ? u[l] : mcubert_nibble((const uint8_t *)u, l);
}

/* The pre-norm sum of one token (SPEC 4.8): z[c] = clamp16(word[c] + requantize(P[p][c])), each term
 * clamped to int32, channel by channel (no int32[d] buffer). An int4 cluster-0 row's term is
 * requantize(q[c] * row_scale, Mw_0[c]) (SPEC 4.1.1; |q * row_scale| < 2^19). */
static void pre_stream_sum(const mcubert_decoder_embedding_weights *w, const mcubert_word_table *table, int32_t token,
                           int32_t p, int16_t *z)
{
    const int32_t d = table->hidden, bits = table->bits;
    const int8_t *position_row = w->position_table + (int64_t)p * d;
    mcubert_word_cluster cluster;
    const int32_t *requant;
    const int8_t *u;
    int32_t i = 0, c, l, row_scale = 1;
    while (token >= w->clusters[2 * i]) {
        ++i;
    }
    mcubert_word_cluster_at(table, i, &cluster);
    requant = w->word_requant + 2 * (int64_t)i * d;
    u = w->word_rows + cluster.row_offset + (int64_t)(token - cluster.start) * cluster.row_bytes;
    if (bits == 4 && i == 0) {
        row_scale = (int32_t)((const uint8_t *)u)[0] | ((int32_t)((const uint8_t *)u)[1] << 8);
        u += MCUBERT_INT4_ROW_SCALE_BYTES;
    }
    for (c = 0; c < d; ++c) {
        int32_t acc = 0;
        if (i == 0) {
            acc = row_value(u, c, bits) * row_scale;
        } else {
            const int8_t *column = w->word_projections + cluster.projection_offset +
                                   (int64_t)(c >> 1) * ((cluster.rank + 3) >> 2) * 8 + (c & 1) * 4;
            for (l = 0; l < cluster.rank; ++l) {
                acc += column[(l >> 2) * 8 + (l & 3)] * row_value(u, l, bits);
            }
        }
        z[c] = mcubert_clamp16(
            (int64_t)mcubert_requantize(acc, requant[2 * c], requant[2 * c + 1]) +
            mcubert_requantize(position_row[c], w->position_requant[2 * c], w->position_requant[2 * c + 1]));
    }
}

mcubert_status mcubert_decoder_embedding_s8(const mcubert_decoder_embedding_params *params,
                                            const mcubert_decoder_embedding_weights *weights, const int32_t *input_id,
                                            const int32_t *position, int8_t *hidden, const mcubert_context *context,
                                            mcubert_message *message)
{
    mcubert_word_table table;
    int64_t rows_total, projections_total;
    int16_t *z;
    int32_t d;
    mcubert_status st = validate_options(params, message);
    if (st != MCUBERT_OK) {
        return st;
    }
    if (weights == NULL || weights->clusters == NULL || weights->word_rows == NULL ||
        (weights->word_projections == NULL && params->cluster_count > 1) || weights->word_requant == NULL ||
        weights->position_table == NULL || weights->position_requant == NULL || weights->output_residual == NULL ||
        input_id == NULL || position == NULL || hidden == NULL) {
        return mcubert_fail_text(message, MCUBERT_ERROR_ARGUMENT, OP, hidden == NULL ? "hidden" : "inputs",
                                 "NULL pointer");
    }
    d = params->hidden;
    table = mcubert_word_table_of(weights->clusters, params->cluster_count, params->vocab_size, d,
                                  mcubert_word_bits(params->word_bits));
    if ((st = mcubert_check_context(OP, context, mcubert_align_up(2 * d), message)) != MCUBERT_OK ||
        (st = mcubert_check_word_clusters(OP, &table, &rows_total, &projections_total, message)) != MCUBERT_OK ||
        (st = check_index(*input_id, params->vocab_size, "input_id", message)) != MCUBERT_OK ||
        (st = check_index(*position, params->context, "position", message)) != MCUBERT_OK) {
        return st;
    }
    z = (int16_t *)context->buf;
    pre_stream_sum(weights, &table, *input_id, *position, z);
    mcubert_stream_from_z(z, weights->output_residual, d, hidden);
    return MCUBERT_OK;
}
