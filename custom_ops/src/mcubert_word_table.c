/*
 * The clustered word table (SPEC 4.1), shared by the ops that read it: MCUBERT_EMBEDDING and
 * MCUBERT_DECODER_EMBEDDING (the lookups) and MCUBERT_LM_HEAD (the tied head), at int8 or int4 storage (4.1.1). Cluster
 * i owns ids [end_{i-1}, end_i), stores rows of rank r_i (r_0 = d, full rows) and, for i > 0, a pair4 projection V_i (d
 * outputs, r_i inputs).
 */
#include "mcubert_internal.h"

mcubert_status mcubert_check_cluster_count(const char *op, int32_t cluster_count, int32_t vocab_size,
                                           mcubert_message *m)
{
    if (cluster_count > vocab_size) {
        const mcubert_status st = mcubert_fail(m, MCUBERT_ERROR_OPTION, op, "cluster_count");
        mcubert_append_int(m, cluster_count);
        mcubert_append(m, " clusters for a vocabulary of ");
        mcubert_append_int(m, vocab_size);
        return st;
    }
    return MCUBERT_OK;
}

int32_t mcubert_word_row_bytes(int32_t i, int32_t rank, int32_t bits)
{
    return bits == 8 ? rank : ((rank + 1) >> 1) + (i == 0 ? MCUBERT_INT4_ROW_SCALE_BYTES : 0);
}

mcubert_status mcubert_check_word_clusters(const char *op, const mcubert_word_table *table, int64_t *rows_total,
                                           int64_t *projections_total, mcubert_message *m)
{
    const int32_t *clusters = table->clusters;
    int64_t rows = 0, projections = 0;
    int32_t i, start = 0;
    /* Same order as the reference: the id ranges, then the ranks. */
    for (i = 0; i < table->cluster_count; ++i) {
        const int32_t end = clusters[2 * i];
        if (end <= start || (i == table->cluster_count - 1 && end != table->vocab_size)) {
            mcubert_status st = mcubert_fail(m, MCUBERT_ERROR_TENSOR, op, "clusters");
            mcubert_append(m, "cluster ends must increase strictly and the last must equal vocab_size ");
            mcubert_append_int(m, table->vocab_size);
            return st;
        }
        start = end;
    }
    start = 0;
    for (i = 0; i < table->cluster_count; ++i) {
        const int32_t rank = clusters[2 * i + 1];
        if ((i == 0 && rank != table->hidden) || rank < 1 || rank > table->hidden) {
            mcubert_status st = mcubert_fail(m, MCUBERT_ERROR_TENSOR, op, "clusters");
            mcubert_append(m, "rank of cluster 0 must be d=");
            mcubert_append_int(m, table->hidden);
            mcubert_append(m, "; others in [1, d]");
            return st;
        }
        rows += (int64_t)(clusters[2 * i] - start) * mcubert_word_row_bytes(i, rank, table->bits);
        if (i > 0) {
            projections += mcubert_packed_size(table->hidden, rank);
        }
        start = clusters[2 * i];
    }
    *rows_total = rows;
    *projections_total = projections;
    return MCUBERT_OK;
}

void mcubert_word_cluster_at(const mcubert_word_table *table, int32_t i, mcubert_word_cluster *info)
{
    const int32_t *clusters = table->clusters;
    int64_t rows = 0, projections = 0;
    int32_t j, start = 0;
    for (j = 0; j < i; ++j) {
        rows += (int64_t)(clusters[2 * j] - start) * mcubert_word_row_bytes(j, clusters[2 * j + 1], table->bits);
        if (j > 0) {
            projections += mcubert_packed_size(table->hidden, clusters[2 * j + 1]);
        }
        start = clusters[2 * j];
    }
    info->start = start;
    info->end = clusters[2 * i];
    info->rank = clusters[2 * i + 1];
    info->row_bytes = mcubert_word_row_bytes(i, info->rank, table->bits);
    info->row_offset = rows;
    info->projection_offset = projections;
}

mcubert_status mcubert_check_int4_word_padding(const char *op, const mcubert_word_table *table, const uint8_t *rows,
                                               mcubert_message *m)
{
    int32_t i, row;
    for (i = 0; i < table->cluster_count; ++i) {
        mcubert_word_cluster info;
        mcubert_word_cluster_at(table, i, &info);
        if ((info.rank & 1) == 0) {
            continue;
        }
        for (row = 0; row < info.end - info.start; ++row) {
            const int32_t last = rows[info.row_offset + (int64_t)(row + 1) * info.row_bytes - 1];
            if ((last >> 4) != 0) {
                mcubert_status st = mcubert_fail(m, MCUBERT_ERROR_TENSOR, op, "word_rows");
                mcubert_append(m, "cluster ");
                mcubert_append_int(m, i);
                mcubert_append(m, " row ");
                mcubert_append_int(m, row);
                mcubert_append(m, ": the padding nibble of an odd-length int4 row (rank ");
                mcubert_append_int(m, info.rank);
                mcubert_append(m, ") must be 0, got ");
                mcubert_append_int(m, last >> 4);
                return st;
            }
        }
    }
    return MCUBERT_OK;
}

mcubert_status mcubert_check_word_tensors(const char *op, const mcubert_word_table *table,
                                          const mcubert_tensor_view *rows, const mcubert_tensor_view *projections,
                                          mcubert_message *m)
{
    int64_t rows_total, projections_total;
    int32_t i;
    mcubert_status st;
    if ((st = mcubert_check_word_clusters(op, table, &rows_total, &projections_total, m)) != MCUBERT_OK ||
        (st = mcubert_check_tensor(op, "word_rows", rows, MCUBERT_DTYPE_INT8, rows_total, m)) != MCUBERT_OK ||
        (st = mcubert_check_tensor(op, "word_projections", projections, MCUBERT_DTYPE_INT8, projections_total, m)) !=
            MCUBERT_OK) {
        return st;
    }
    if (table->bits == 4 && rows->data != NULL &&
        (st = mcubert_check_int4_word_padding(op, table, (const uint8_t *)rows->data, m)) != MCUBERT_OK) {
        return st;
    }
    for (i = 1; i < table->cluster_count && projections->data != NULL; ++i) {
        mcubert_word_cluster info;
        mcubert_word_cluster_at(table, i, &info);
        st = mcubert_check_pair4(op, "word_projections", (const int8_t *)projections->data + info.projection_offset,
                                 table->hidden, info.rank, m);
        if (st != MCUBERT_OK) {
            return st;
        }
    }
    return MCUBERT_OK;
}
