/*
 * MCUBERT_LM_HEAD (SPEC 4.5; reference ops/lm_head.py): a decoder's tied LM head over the clustered
 * word table, one token:
 *
 *   h       = LN_f((x[c] - zp_x[c]) << R[c])                                     int8, zero point zp
 *   g_i[c]  = clamp(requantize(h[c] - zp, Mg_i[c]), -G, G)                      G = gain_limit(d)
 *   p_i[l]  = clamp(requantize(sum_c V_i[c][l] g_i[c], Mp_i), -G, G)             clusters i > 0
 *   score_t = clamp32(requantize(U_i[t] . (g_0 | p_i), Ms_i))
 *
 * and the k best (score, id), ties to the smaller id, kept sorted while the clusters stream by: a
 * token enters only when it beats the k-th score, so after the first k the cost per token is one
 * compare. G bounds every dot product of int8 values and clamped ones inside int32 (SPEC 4.5), so the
 * accumulators are int32 with no overflow check. Scratch: `residual` int16[d] (z), `normed` int8[d] (h),
 * `scaled` int16[d] (g_i) and `projected` int16[d] (p_i, rank <= d). The DSP path reads four int8 row values a word and
 * multiplies them with two SMLADs against the vector, stored once per cluster in SMLAD's pair order (pair_for_smlad);
 * the MVE path takes 8 row values a VMLADAVA.S16 against the vector in order;
 * V_i^T g_i reads V_i's pair4 groups once per cluster. A token whose accumulator cannot beat the k-th
 * score costs its dot product and one compare (score_cluster).
 *
 * int4 tables (word_bits = 4, version 11; SPEC 4.1.1): the rows are nibbles; the DSP path (and MVE builds) masks
 * eight of them a word into the tops of its bytes and takes four SMLADs against the vector in its own pairing
 * order (pair_for_int4), the plain path reads them one by one. A cluster-0 row's accumulator is scaled by its uint16
 * row scale into a 48-bit product, requantized by requantize_wide (score_cluster_int4).
 */
#include <stddef.h>

#include "mcubert_dsp.h"
#include "mcubert_fixed_point.h"
#include "mcubert_internal.h"

#if MCUBERT_MVE
#include <arm_mve.h>
#endif

#define OP "MCUBERT_LM_HEAD"

typedef struct {
    int32_t residual, normed, scaled, projected, total;
} lm_head_layout;

static void layout_of(int32_t d, lm_head_layout *layout)
{
    layout->residual = 0;
    layout->normed = mcubert_align_up(2 * d);
    layout->scaled = layout->normed + mcubert_align_up(d);
    layout->projected = layout->scaled + mcubert_align_up(2 * d);
    layout->total = layout->projected + mcubert_align_up(2 * d);
}

static int32_t gain_limit(int32_t d)
{
    const int32_t limit = 0x7FFFFFFF / (128 * d);
    return limit < 32767 ? limit : 32767;
}

int32_t mcubert_lm_head_get_buffer_size(int32_t hidden, int32_t top_k)
{
    lm_head_layout layout;
    if (hidden < 1 || hidden > MCUBERT_MAX_HIDDEN || top_k < 1 || top_k > MCUBERT_MAX_TOP_K) {
        return -1;
    }
    layout_of(hidden, &layout);
    return layout.total;
}

static mcubert_status validate_options(const mcubert_lm_head_params *p, mcubert_message *m)
{
    mcubert_status st;
    if ((st = mcubert_check_params(OP, p, m)) != MCUBERT_OK ||
        (st = mcubert_check_spec(OP, p->spec_version, p->spec_hash, m)) != MCUBERT_OK ||
        (st = mcubert_check_range(OP, "hidden", p->hidden, 1, MCUBERT_MAX_HIDDEN, m)) != MCUBERT_OK ||
        (st = mcubert_check_range(OP, "vocab_size", p->vocab_size, 1, 0x7FFFFFFF, m)) != MCUBERT_OK ||
        (st = mcubert_check_range(OP, "cluster_count", p->cluster_count, 1, MCUBERT_MAX_CLUSTERS, m)) != MCUBERT_OK ||
        (st = mcubert_check_range(OP, "top_k", p->top_k, 1, MCUBERT_MAX_TOP_K, m)) != MCUBERT_OK ||
        (st = mcubert_check_zero_point(OP, "normed_zero_point", p->normed_zero_point, m)) != MCUBERT_OK ||
        (st = mcubert_check_ln_eps(OP, p->ln_eps, m)) != MCUBERT_OK ||
        (st = mcubert_check_word_bits(OP, p->word_bits, p->spec_version, MCUBERT_LM_HEAD_WORD_BITS_SINCE, m)) !=
            MCUBERT_OK) {
        return st;
    }
    if ((st = mcubert_check_cluster_count(OP, p->cluster_count, p->vocab_size, m)) != MCUBERT_OK) {
        return st;
    }
    if (p->top_k > p->vocab_size) {
        st = mcubert_fail(m, MCUBERT_ERROR_OPTION, OP, "top_k");
        mcubert_append_int(m, p->top_k);
        mcubert_append(m, " exceeds vocab_size ");
        mcubert_append_int(m, p->vocab_size);
        return st;
    }
    return MCUBERT_OK;
}

#define WIDE_SHIFT_MAX 14 /* requantize_wide's shift bound (SPEC 4.5) */

/* Every (multiplier, shift) pair valid ([c][4] is [2c][2] pairs); cluster 0 has no projection, so its
 * (Mp, shift) must be (0, 0), as the reference requires; int4 rows: its score shift at most 14. */
static mcubert_status check_cluster_requant(const int32_t *table, int32_t c, int32_t bits, mcubert_message *m)
{
    mcubert_status st = mcubert_check_requant(OP, "cluster_requant", table, 2 * c, m);
    if (st == MCUBERT_OK && (table[0] != 0 || table[1] != 0)) {
        return mcubert_fail_text(m, MCUBERT_ERROR_TENSOR, OP, "cluster_requant",
                                 "cluster 0 has no projection: its (Mp, shift) must be (0, 0)");
    }
    if (st == MCUBERT_OK && bits == 4 && table[3] > WIDE_SHIFT_MAX) {
        st = mcubert_fail(m, MCUBERT_ERROR_TENSOR, OP, "cluster_requant");
        mcubert_append(m, "cluster 0's score shift ");
        mcubert_append_int(m, table[3]);
        mcubert_append(m, " exceeds 14 (int4 rows)");
    }
    return st;
}

mcubert_status mcubert_lm_head_validate(const mcubert_lm_head_params *params, const mcubert_tensor_view *tensors,
                                        int32_t count, mcubert_message *message)
{
    const mcubert_tensor_view *t = tensors;
    mcubert_status st = validate_options(params, message);
    int64_t d, c;
    if (st != MCUBERT_OK || tensors == NULL) {
        return st;
    }
    if ((st = mcubert_check_count(OP, count, MCUBERT_LM_HEAD_NUM_TENSORS, message)) != MCUBERT_OK) {
        return st;
    }
    d = params->hidden;
    c = params->cluster_count;
    if ((st = mcubert_check_tensor(OP, "hidden", &t[MCUBERT_LM_HEAD_HIDDEN], MCUBERT_DTYPE_INT8, d, message)) !=
            MCUBERT_OK ||
        (st = mcubert_check_residual_tensor(OP, "residual", &t[MCUBERT_LM_HEAD_RESIDUAL], (int32_t)d, message)) !=
            MCUBERT_OK ||
        (st = mcubert_check_tensor(OP, "layer_norm", &t[MCUBERT_LM_HEAD_LAYER_NORM], MCUBERT_DTYPE_INT32, 2 * d,
                                   message)) != MCUBERT_OK ||
        (st = mcubert_check_tensor(OP, "clusters", &t[MCUBERT_LM_HEAD_CLUSTERS], MCUBERT_DTYPE_INT32, 2 * c,
                                   message)) != MCUBERT_OK) {
        return st;
    }
    if (t[MCUBERT_LM_HEAD_CLUSTERS].data != NULL) {
        const mcubert_word_table table =
            mcubert_word_table_of((const int32_t *)t[MCUBERT_LM_HEAD_CLUSTERS].data, params->cluster_count,
                                  params->vocab_size, params->hidden, mcubert_word_bits(params->word_bits));
        if ((st = mcubert_check_word_tensors(OP, &table, &t[MCUBERT_LM_HEAD_WORD_ROWS],
                                             &t[MCUBERT_LM_HEAD_WORD_PROJECTIONS], message)) != MCUBERT_OK) {
            return st;
        }
    }
    if ((st = mcubert_check_requant_tensor(OP, "channel_requant", &t[MCUBERT_LM_HEAD_CHANNEL_REQUANT], (int32_t)(c * d),
                                           message)) != MCUBERT_OK ||
        (st = mcubert_check_tensor(OP, "cluster_requant", &t[MCUBERT_LM_HEAD_CLUSTER_REQUANT], MCUBERT_DTYPE_INT32,
                                   4 * c, message)) != MCUBERT_OK) {
        return st;
    }
    if (t[MCUBERT_LM_HEAD_CLUSTER_REQUANT].data != NULL &&
        (st = check_cluster_requant((const int32_t *)t[MCUBERT_LM_HEAD_CLUSTER_REQUANT].data, (int32_t)c,
                                    mcubert_word_bits(params->word_bits), message)) != MCUBERT_OK) {
        return st;
    }
    return mcubert_check_tensor(OP, "output", &t[MCUBERT_LM_HEAD_OUTPUT], MCUBERT_DTYPE_INT32, 2 * params->top_k,
                                message);
}

/* The k best so far: ids[0..count) and scores, best first. */
typedef struct {
    int32_t *ids;
    int32_t *scores;
    int32_t count, k;
} top_k;

/* Ids arrive in increasing order, so a tie never displaces an earlier (smaller) id. 0: not taken. */
static MCUBERT_ALWAYS_INLINE int offer(top_k *top, int32_t id, int32_t score)
{
    int32_t at;
    if (top->count == top->k && score <= top->scores[top->k - 1]) {
        return 0;
    }
    at = top->count < top->k ? top->count++ : top->k - 1;
    while (at > 0 && top->scores[at - 1] < score) {
        top->ids[at] = top->ids[at - 1];
        top->scores[at] = top->scores[at - 1];
        --at;
    }
    top->ids[at] = id;
    top->scores[at] = score;
    return 1;
}

/* g[c] = clamp(requantize(h[c] - zp, Mg[c]), -G, G). */
static void scale_hidden(const int8_t *hidden, int32_t d, int32_t zero_point, const int32_t *requant, int32_t limit,
                         int16_t *g)
{
    int32_t c;
    for (c = 0; c < d; ++c) {
        const int32_t v = mcubert_requantize(hidden[c] - zero_point, requant[2 * c], requant[2 * c + 1]);
        g[c] = (int16_t)mcubert_clamp_i32(v, -limit, limit);
    }
}

/* p[l] = clamp(requantize(sum_c V[c][l] g[c], Mp), -G, G): V is pair4 (d outputs, r inputs), read as
 * its transpose. Element (c, l) sits in group (c/2, l/4) of 8 bytes at (c%2)*4 + l%4. */
static void project(const int8_t *v, int32_t d, int32_t r, const int16_t *g, const int32_t *requant, int32_t limit,
                    int16_t *p)
{
    const int32_t stride = ((r + 3) >> 2) * 8;
    int32_t l, c;
    for (l = 0; l < r; ++l) {
        const int8_t *column = v + (l >> 2) * 8 + (l & 3);
        int32_t acc = 0;
        for (c = 0; c + 1 < d; c += 2, column += stride) {
            acc += column[0] * g[c] + column[4] * g[c + 1];
        }
        if (c < d) {
            acc += column[0] * g[c];
        }
        p[l] = (int16_t)mcubert_clamp_i32(mcubert_requantize(acc, requant[0], requant[1]), -limit, limit);
    }
}

#if MCUBERT_MVE

/* MVE: the vector stays in order (no SMLAD pairing). */
static void pair_for_smlad(int16_t *x, int32_t n)
{
    (void)x;
    (void)n;
}

/* row[0..n) . x[0..n): 8 values a step, the row sign-extended by VLDRB.S16, one VMLADAVA.S16; the tail
 * by zeroing predicated loads (nothing read past the row). */
static inline int32_t dot_s8_s16(const int8_t *row, const int16_t *x, int32_t n)
{
    int32_t acc = 0, k = 0;
    for (; k + 8 <= n; k += 8) {
        acc = vmladavaq_s16(acc, vldrbq_s16(row + k), vldrhq_s16(x + k));
    }
    if (k < n) {
        const mve_pred16_t live = vctp16q((uint32_t)(n - k));
        acc = vmladavaq_s16(acc, vldrbq_z_s16(row + k, live), vldrhq_z_s16(x + k, live));
    }
    return acc;
}

#elif MCUBERT_DSP

/* The DSP path's vector layout: in every full group of four, values 1 and 2 swap places, so the words
 * (x0, x2) and (x1, x3) pair with SXTB16's (r0, r2) and SXTB16 ROR 8's (r1, r3) of a row word. The
 * tail (n % 4 values) stays in order. Applying it twice restores the order. */
static void pair_for_smlad(int16_t *x, int32_t n)
{
    int32_t k;
    for (k = 0; k + 4 <= n; k += 4) {
        const int16_t swap = x[k + 1];
        x[k + 1] = x[k + 2];
        x[k + 2] = swap;
    }
}

/* row[0..n) . x[0..n) for an int8 row and an int16 vector in the paired layout (4-byte aligned). */
static inline int32_t dot_s8_s16(const int8_t *row, const int16_t *x, int32_t n)
{
    const uint32_t *pairs = (const uint32_t *)(const void *)x;
    int32_t acc = 0, k = 0;
    for (; k + 4 <= n; k += 4, pairs += 2) {
        const uint32_t word = mcubert_read_u32(row + k);
        acc = mcubert_smlad(mcubert_sxtb16(word), pairs[0], acc);
        acc = mcubert_smlad(mcubert_sxtb16_ror8(word), pairs[1], acc);
    }
    for (; k < n; ++k) {
        acc += row[k] * x[k];
    }
    return acc;
}

#else /* !MCUBERT_DSP */

static void pair_for_smlad(int16_t *x, int32_t n)
{
    (void)x;
    (void)n;
}

static inline int32_t dot_s8_s16(const int8_t *row, const int16_t *x, int32_t n)
{
    int32_t acc = 0, k;
    for (k = 0; k < n; ++k) {
        acc += row[k] * x[k];
    }
    return acc;
}

#endif /* MCUBERT_DSP */

/* Scores the cluster's tokens into `top`. requantize is non-decreasing in acc (its multiplier is >= 0)
 * and the k-th score only grows, so once an accumulator was turned away every later one of the cluster
 * that is not larger would be too: those skip the requantization (the result is the same). Every
 * |acc| < 2^31 (SPEC 4.5), so INT32_MIN is below all of them. */
MCUBERT_NOINLINE static void score_cluster(const mcubert_word_cluster *cluster, const int8_t *rows,
                                           const int16_t *vector, const int32_t *requant, top_k *top)
{
    int32_t t, refused = INT32_MIN;
    for (t = cluster->start; t < cluster->end; ++t, rows += cluster->rank) {
        const int32_t acc = dot_s8_s16(rows, vector, cluster->rank);
        if (acc > refused && !offer(top, t, mcubert_requantize(acc, requant[0], requant[1]))) {
            refused = acc;
        }
    }
}

/* acc + row[k..n) . x[k..n) for a packed int4 row and an int16 vector in order (k even), a byte at a time. */
static inline int32_t dot_s4_s16_from(const uint8_t *row, const int16_t *x, int32_t k, int32_t n, int32_t acc)
{
    for (; k + 1 < n; k += 2) {
        const int32_t byte = row[k >> 1];
        acc += (((byte & 0xF) ^ 8) - 8) * x[k] + (((byte >> 4) ^ 8) - 8) * x[k + 1];
    }
    if (k < n) {
        acc += ((((int32_t)row[k >> 1] & 0xF) ^ 8) - 8) * x[k];
    }
    return acc;
}

#if MCUBERT_DSP

/* The int4 rows' vector layout on the DSP path (MVE builds too): per full group of eight,
 * (x0, x4), (x2, x6), (x1, x5), (x3, x7), the halves that SXTB16 and SXTB16 ROR 8 give of a row word's low
 * nibbles (values 0, 2, 4, 6) and high nibbles (1, 3, 5, 7). The tail (n % 8 values) stays in order. */
static void pair_for_int4(int16_t *x, int32_t n)
{
    static const int8_t order[8] = {0, 4, 2, 6, 1, 5, 3, 7};
    int32_t k, j;
    for (k = 0; k + 8 <= n; k += 8) {
        int16_t group[8];
        for (j = 0; j < 8; ++j) {
            group[j] = x[k + order[j]];
        }
        for (j = 0; j < 8; ++j) {
            x[k + j] = group[j];
        }
    }
}

/* row[0..n) . x[0..n) for a packed int4 row (SPEC 4.1.1) and a vector in pair_for_int4's layout: eight values a
 * word, each nibble masked into the top of its byte (16 v), four SMLADs; the sum of 16 v x is exact in int32
 * (|16 v| <= 128, as an int8's, so G bounds it) and shifts back by 4 exactly. The tail is in order. */
static inline int32_t dot_s4_s16(const uint8_t *row, const int16_t *x, int32_t n)
{
    const uint32_t *pairs = (const uint32_t *)(const void *)x;
    int32_t sixteen = 0, k = 0;
    for (; k + 8 <= n; k += 8, pairs += 4) {
        const uint32_t word = mcubert_read_u32(row + (k >> 1));
        const uint32_t low = (word << 4) & 0xF0F0F0F0u, high = word & 0xF0F0F0F0u;
        sixteen = mcubert_smlad(mcubert_sxtb16(low), pairs[0], sixteen);
        sixteen = mcubert_smlad(mcubert_sxtb16_ror8(low), pairs[1], sixteen);
        sixteen = mcubert_smlad(mcubert_sxtb16(high), pairs[2], sixteen);
        sixteen = mcubert_smlad(mcubert_sxtb16_ror8(high), pairs[3], sixteen);
    }
    return dot_s4_s16_from(row, x, k, n, sixteen >> 4);
}

#else /* !MCUBERT_DSP */

static void pair_for_int4(int16_t *x, int32_t n)
{
    (void)x;
    (void)n;
}

/* row[0..n) . x[0..n) for a packed int4 row (SPEC 4.1.1) and an int16 vector in order: |acc| <= 8 n G < 2^31. */
static inline int32_t dot_s4_s16(const uint8_t *row, const int16_t *x, int32_t n)
{
    return dot_s4_s16_from(row, x, 0, n, 0);
}

#endif /* MCUBERT_DSP */

/* score_cluster for int4 rows (SPEC 4.5.1): a low-rank row is ceil(r/2) bytes, scored as int8's; a cluster-0
 * row starts with its row scale, and its score is requantize_wide(acc * row_scale, Ms_0), |acc * row_scale|
 * < 2^43. requantize_wide is non-decreasing in the product, so a refused one skips it as in score_cluster. */
MCUBERT_NOINLINE static void score_cluster_int4(const mcubert_word_cluster *cluster, const uint8_t *rows,
                                                const int16_t *vector, const int32_t *requant, top_k *top)
{
    int64_t refused = INT64_MIN;
    int32_t t;
    if (cluster->start != 0) { /* low-rank rows: as score_cluster */
        for (t = cluster->start; t < cluster->end; ++t, rows += cluster->row_bytes) {
            const int32_t acc = dot_s4_s16(rows, vector, cluster->rank);
            if (acc > refused && !offer(top, t, mcubert_requantize(acc, requant[0], requant[1]))) {
                refused = acc;
            }
        }
        return;
    }
    for (t = 0; t < cluster->end; ++t, rows += cluster->row_bytes) {
        const int32_t row_scale = (int32_t)rows[0] | ((int32_t)rows[1] << 8);
        const int64_t wide =
            (int64_t)dot_s4_s16(rows + MCUBERT_INT4_ROW_SCALE_BYTES, vector, cluster->rank) * row_scale;
        if (wide > refused && !offer(top, t, mcubert_requantize_wide(wide, requant[0], requant[1]))) {
            refused = wide;
        }
    }
}

/* One cluster's tokens into `top`, by storage: `vector` (g_0 or p_i) is paired here for the int8 or the int4 dot. */
static void score_rows(const mcubert_word_cluster *cluster, const int8_t *rows, int32_t bits, int16_t *vector,
                       const int32_t *requant, top_k *top)
{
    if (bits == 8) {
        pair_for_smlad(vector, cluster->rank);
        score_cluster(cluster, rows, vector, requant, top);
    } else {
        pair_for_int4(vector, cluster->rank);
        score_cluster_int4(cluster, (const uint8_t *)rows, vector, requant, top);
    }
}

mcubert_status mcubert_lm_head_s8(const mcubert_lm_head_params *params, const mcubert_lm_head_weights *weights,
                                  const int8_t *hidden, int32_t *top, const mcubert_context *context,
                                  mcubert_message *message)
{
    lm_head_layout layout;
    mcubert_word_table table;
    int64_t rows_total, projections_total;
    int16_t *scaled, *projected, *z;
    int8_t *normed;
    top_k best;
    int32_t i, limit;
    mcubert_status st = validate_options(params, message);
    if (st != MCUBERT_OK) {
        return st;
    }
    if (weights == NULL || weights->clusters == NULL || weights->word_rows == NULL ||
        (weights->word_projections == NULL && params->cluster_count > 1) || weights->channel_requant == NULL ||
        weights->cluster_requant == NULL || weights->residual == NULL || weights->layer_norm == NULL ||
        hidden == NULL || top == NULL) {
        return mcubert_fail_text(message, MCUBERT_ERROR_ARGUMENT, OP,
                                 hidden == NULL ? "hidden"
                                 : top == NULL  ? "top"
                                                : "weights",
                                 "NULL pointer");
    }
    layout_of(params->hidden, &layout);
    table = mcubert_word_table_of(weights->clusters, params->cluster_count, params->vocab_size, params->hidden,
                                  mcubert_word_bits(params->word_bits));
    if ((st = mcubert_check_context(OP, context, layout.total, message)) != MCUBERT_OK ||
        (st = mcubert_check_word_clusters(OP, &table, &rows_total, &projections_total, message)) != MCUBERT_OK) {
        return st;
    }
    normed = (int8_t *)context->buf + layout.normed;
    scaled = (int16_t *)(void *)((int8_t *)context->buf + layout.scaled);
    projected = (int16_t *)(void *)((int8_t *)context->buf + layout.projected);
    limit = gain_limit(params->hidden);
    z = (int16_t *)(void *)((int8_t *)context->buf + layout.residual);
    mcubert_stream_to_z(hidden, weights->residual, params->hidden, z);
    mcubert_layer_norm_s8(z, params->hidden, weights->layer_norm, params->ln_eps, normed); /* LN_f */
    best.ids = top;
    best.scores = top + params->top_k;
    best.count = 0;
    best.k = params->top_k;
    for (i = 0; i < params->cluster_count; ++i) {
        const int32_t *cluster_requant = weights->cluster_requant + 4 * i;
        mcubert_word_cluster cluster;
        mcubert_word_cluster_at(&table, i, &cluster);
        scale_hidden(normed, params->hidden, params->normed_zero_point,
                     weights->channel_requant + 2 * (int64_t)i * params->hidden, limit, scaled);
        if (i > 0) {
            project(weights->word_projections + cluster.projection_offset, params->hidden, cluster.rank, scaled,
                    cluster_requant, limit, projected);
        }
        score_rows(&cluster, weights->word_rows + cluster.row_offset, table.bits, i > 0 ? projected : scaled,
                   cluster_requant + 2, &best);
    }
    return MCUBERT_OK;
}
