/*
 * MCUBERT_ATTENTION (SPEC 4.2; reference ops/attention.py): self-attention, output projection,
 * residual and LayerNorm, fused and in place on hidden[s][d].
 *
 *   for head j:
 *       K_j = k(x)[:, j] -> key[s][dh];  V_j^T -> value_t[dh][s]        (from the whole x)
 *       for each query tile T (t rows, the last may be shorter), in blocks of 4 rows:
 *           Q = q(x[T])[:, j];  S = int16 scores(Q, K_j);  e = exp weights of S (in place)
 *           C = (e . V_j) * recip  -> context[T, j]  (or, for the last head, context_tile)
 *           last head: z = o(context[T] | context_tile) + residual(x[T]);  x[T] = LayerNorm(z)
 *
 * Writing x[T] during the last head is safe: that head's K and V came from the untouched x,
 * and tile T reads only its own rows before overwriting them. With mask mode 1 (valid length
 * L) keys >= L are never attended, so their K/V rows and scores are not computed at all.
 */
#include <stddef.h>

#include "mcubert_fixed_point.h"
#include "mcubert_internal.h"

#define OP "MCUBERT_ATTENTION"

void mcubert_attention_layout_of(int32_t s, int32_t d, int32_t h, int32_t t, mcubert_attention_layout *layout)
{
    const int32_t dh = d / h;
    int32_t offset = 0, query_end, residual_end;
    layout->key = offset;
    offset += mcubert_align_up(s * dh);
    layout->value_t = offset;
    offset += mcubert_align_up(s * dh);
    layout->context = offset;
    offset += mcubert_align_up(s * (h - 1) * dh);
    layout->context_tile = offset;
    offset += mcubert_align_up(t * dh);
    /* One slot: query, scores and row statistics die before the tile's residual is born. */
    layout->query = offset;
    layout->scores = layout->query + mcubert_align_up(t * dh);
    layout->row_max = layout->scores + mcubert_align_up(2 * t * s);
    layout->row_recip = layout->row_max + mcubert_align_up(4 * t);
    query_end = layout->row_recip + mcubert_align_up(4 * t);
    layout->residual = offset;
    residual_end = layout->residual + mcubert_align_up(2 * t * d);
    offset = mcubert_max_i32(query_end, residual_end);
    layout->widened = offset;
    offset += mcubert_align_up(8 * mcubert_max_i32(d, s));
    layout->total = offset;
}

int32_t mcubert_attention_get_buffer_size(int32_t seq_len, int32_t hidden, int32_t heads, int32_t tile)
{
    mcubert_attention_layout layout;
    if (seq_len < 1 || seq_len > MCUBERT_MAX_SEQ_LEN || hidden < 1 || hidden > MCUBERT_MAX_HIDDEN || heads < 1 ||
        heads > MCUBERT_MAX_HEADS || hidden % heads != 0 || tile < 1 || tile > seq_len) {
        return -1;
    }
    mcubert_attention_layout_of(seq_len, hidden, heads, tile, &layout);
    return layout.total;
}

enum { QUERY, KEY, VALUE, OUTPUT }; /* the projections, in the order of their weight inputs */

/* The width of projection `which` (SPEC 3.1.2). */
static int32_t projection_width(const mcubert_attention_params *p, int32_t which)
{
    return mcubert_layer_width(p->int4_layers, which, p->weight_bits);
}

static mcubert_status validate_options(const mcubert_attention_params *p, mcubert_message *m)
{
    mcubert_status st;
    if ((st = mcubert_check_params(OP, p, m)) != MCUBERT_OK) {
        return st;
    }
    if ((st = mcubert_check_common_options(OP, p->spec_version, p->spec_hash, p->seq_len, p->hidden, m)) !=
            MCUBERT_OK ||
        (st = mcubert_check_range(OP, "heads", p->heads, 1, MCUBERT_MAX_HEADS, m)) != MCUBERT_OK ||
        (st = mcubert_check_range(OP, "tile", p->tile, 1, MCUBERT_MAX_SEQ_LEN, m)) != MCUBERT_OK ||
        (st = mcubert_check_range(OP, "mask_mode", p->mask_mode, 0, 1, m)) != MCUBERT_OK ||
        (st = mcubert_check_range(OP, "score_multiplier", p->score_multiplier, 0, INT32_MAX, m)) != MCUBERT_OK ||
        (st = mcubert_check_range(OP, "score_shift", p->score_shift, -31, 30, m)) != MCUBERT_OK ||
        (st = mcubert_check_range(OP, "context_multiplier", p->context_multiplier, 0, INT32_MAX, m)) != MCUBERT_OK ||
        (st = mcubert_check_range(OP, "context_shift", p->context_shift, -31, 30, m)) != MCUBERT_OK ||
        (st = mcubert_check_ln_eps(OP, p->ln_eps, m)) != MCUBERT_OK ||
        (st = mcubert_check_weight_bits(OP, p->weight_bits, p->spec_version, MCUBERT_ATTENTION_WEIGHT_BITS_SINCE, m)) !=
            MCUBERT_OK ||
        (st = mcubert_check_int4_layers(OP, p->int4_layers, 4, p->weight_bits, p->spec_version,
                                        MCUBERT_ATTENTION_INT4_LAYERS_SINCE, m)) != MCUBERT_OK) {
        return st;
    }
    if (p->hidden % p->heads != 0) {
        st = mcubert_fail(m, MCUBERT_ERROR_OPTION, OP, "heads");
        mcubert_append(m, "hidden ");
        mcubert_append_int(m, p->hidden);
        mcubert_append(m, " is not a multiple of heads ");
        mcubert_append_int(m, p->heads);
        return st;
    }
    if ((st = mcubert_check_tile(OP, p->tile, p->seq_len, m)) != MCUBERT_OK) {
        return st;
    }
    if ((st = mcubert_check_multiplier(OP, "score_multiplier", p->score_multiplier, p->score_shift, m)) != MCUBERT_OK) {
        return st;
    }
    return mcubert_check_multiplier(OP, "context_multiplier", p->context_multiplier, p->context_shift, m);
}

static mcubert_status validate_exp_lut(const int16_t *lut, mcubert_message *m)
{
    int32_t k;
    mcubert_status st;
    if (lut == NULL) {
        return MCUBERT_OK;
    }
    for (k = 0; k < 256; ++k) {
        if (lut[k] < 0 || lut[k] > MCUBERT_EXP_ONE) {
            st = mcubert_fail(m, MCUBERT_ERROR_TENSOR, OP, "exp_lut");
            mcubert_append(m, "entry ");
            mcubert_append_int(m, k);
            mcubert_append(m, " is outside [0, 16384]");
            return st;
        }
    }
    if (lut[0] != MCUBERT_EXP_ONE) {
        st = mcubert_fail(m, MCUBERT_ERROR_TENSOR, OP, "exp_lut");
        mcubert_append(m, "entry 0 must be EXP_ONE = 16384 (the row max contributes exactly one), got ");
        mcubert_append_int(m, lut[0]);
        return st;
    }
    return MCUBERT_OK;
}

mcubert_status mcubert_attention_validate(const mcubert_attention_params *params, const mcubert_tensor_view *tensors,
                                          int32_t count, mcubert_message *message)
{
    static const char *const linear_names[4][2] = {{"query_weights", "query_channels"},
                                                   {"key_weights", "key_channels"},
                                                   {"value_weights", "value_channels"},
                                                   {"output_weights", "output_channels"}};
    const mcubert_tensor_view *t = tensors;
    mcubert_status st = validate_options(params, message);
    int64_t s, d;
    int32_t i;
    if (st != MCUBERT_OK || tensors == NULL) {
        return st;
    }
    if ((st = mcubert_check_count(OP, count, MCUBERT_ATTENTION_NUM_TENSORS, message)) != MCUBERT_OK) {
        return st;
    }
    s = params->seq_len;
    d = params->hidden;
    if ((st = mcubert_check_tensor(OP, "hidden", &t[MCUBERT_ATTENTION_HIDDEN], MCUBERT_DTYPE_INT8, s * d, message)) !=
        MCUBERT_OK) {
        return st;
    }
    st = params->mask_mode == 0
             ? mcubert_check_tensor(OP, "mask", &t[MCUBERT_ATTENTION_MASK], MCUBERT_DTYPE_INT8, s, message)
             : mcubert_check_tensor(OP, "mask", &t[MCUBERT_ATTENTION_MASK], MCUBERT_DTYPE_INT32, 1, message);
    if (st != MCUBERT_OK) {
        return st;
    }
    for (i = 0; i < 4; ++i) {
        st = mcubert_check_linear_bits(OP, linear_names[i][0], &t[MCUBERT_ATTENTION_QUERY_WEIGHTS + 2 * i],
                                       linear_names[i][1], &t[MCUBERT_ATTENTION_QUERY_CHANNELS + 2 * i], (int32_t)d,
                                       (int32_t)d, projection_width(params, i), message);
        if (st != MCUBERT_OK) {
            return st;
        }
    }
    if ((st = mcubert_check_tensor(OP, "exp_lut", &t[MCUBERT_ATTENTION_EXP_LUT], MCUBERT_DTYPE_INT16, 256, message)) !=
            MCUBERT_OK ||
        (st = validate_exp_lut((const int16_t *)t[MCUBERT_ATTENTION_EXP_LUT].data, message)) != MCUBERT_OK ||
        (st = mcubert_check_tensor(OP, "layer_norm", &t[MCUBERT_ATTENTION_LAYER_NORM], MCUBERT_DTYPE_INT32, 2 * d,
                                   message)) != MCUBERT_OK ||
        (st = mcubert_check_residual_tensor(OP, "residual", &t[MCUBERT_ATTENTION_RESIDUAL], (int32_t)d, message)) !=
            MCUBERT_OK) {
        return st;
    }
    return mcubert_check_tensor(OP, "output", &t[MCUBERT_ATTENTION_OUTPUT], MCUBERT_DTYPE_INT8, s * d, message);
}

/* Everything one call needs, resolved once. */
typedef struct {
    int32_t s, d, h, t, dh;
    const mcubert_attention_params *params;
    const mcubert_attention_weights *weights;
    mcubert_keys keys;
    int8_t *key_rows;     /* [s][dh] */
    int8_t *value_t;      /* [dh][s] */
    int8_t *context;      /* [s][(h-1) dh] */
    int8_t *context_tile; /* [t][dh] */
    int8_t *query_rows;   /* [t][dh] */
    int16_t *scores;      /* [t][s]: scores, then exp weights */
    int16_t *residual;    /* [t][d] */
    uint32_t *widened;    /* [4][max(d, s)] int16 */
} attention_state;

/* One d x d projection of the op as a linear layer at its width (built where used: keeps frames small). */
static inline mcubert_linear layer(const attention_state *a, const int8_t *weights, const int32_t *channels,
                                   int32_t which)
{
    return mcubert_linear_of(weights, channels, a->d, a->d, projection_width(a->params, which));
}

/* K and V of head `head` for the first keys.count tokens: key[r][.] and value_t[.][r]. */
MCUBERT_NOINLINE static void project_keys_values(const attention_state *a, int8_t *hidden, int32_t head)
{
    const mcubert_attention_weights *w = a->weights;
    const mcubert_linear key = layer(a, w->key_weights, w->key_channels, KEY);
    const mcubert_linear value = layer(a, w->value_weights, w->value_channels, VALUE);
    const int32_t c0 = head * a->dh;
    int32_t r0;
    for (r0 = 0; r0 < a->keys.count; r0 += MCUBERT_BLOCK_ROWS) {
        mcubert_rows rows;
        mcubert_rows_init_s8(&rows, hidden + r0 * a->d, a->d, mcubert_min_i32(MCUBERT_BLOCK_ROWS, a->keys.count - r0),
                             a->d);
        mcubert_linear_widen(&rows, &key, a->widened);
        mcubert_linear_to_s8(&rows, &key, c0, c0 + a->dh, 0, NULL, a->key_rows + r0 * a->dh, a->dh, 1);
        if (value.weight_bits != key.weight_bits) { /* widened rows serve one width (SPEC 3.1.2) */
            mcubert_linear_widen(&rows, &value, a->widened);
        }
        mcubert_linear_to_s8(&rows, &value, c0, c0 + a->dh, 0, NULL, a->value_t + r0, 1, a->s);
    }
}

/* Scores of one key pair for the block's rows: row r's scores at block + r * s + j (and j + 1
 * when `both`). Scores are clamped to int16; in the fast case |y| < 2^30, so no int32 clamp
 * first, and a full block with both keys (shift <= -2, the usual) is straight-line code. */
static inline void store_scores(const int32_t acc[2][MCUBERT_BLOCK_ROWS], int32_t count, int32_t both,
                                const mcubert_requant *q, int16_t *block, int32_t s)
{
    int32_t r;
    if (q->fast && q->scale == 1 && count == MCUBERT_BLOCK_ROWS && both) {
        int16_t *row = block;
        for (r = 0; r < MCUBERT_BLOCK_ROWS; ++r, row += s) {
            row[0] = mcubert_clamp16_i32(mcubert_requant_fast_unbiased(acc[0][r], q));
            row[1] = mcubert_clamp16_i32(mcubert_requant_fast_unbiased(acc[1][r], q));
        }
        return;
    }
    for (r = 0; r < count; ++r) {
        block[r * s] = mcubert_clamp16(mcubert_requant_apply(acc[0][r], q));
        if (both) {
            block[r * s + 1] = mcubert_clamp16(mcubert_requant_apply(acc[1][r], q));
        }
    }
}

/* Q rows of tile rows [t0, t0 + n) for one head. (Apart from the scores below so that the
 * deepest call chain, through the linear stage, does not carry the scores loop's frame.) */
MCUBERT_NOINLINE static void project_queries(const attention_state *a, const int8_t *hidden, int32_t head, int32_t t0,
                                             int32_t n)
{
    const mcubert_linear query = layer(a, a->weights->query_weights, a->weights->query_channels, QUERY);
    const int32_t c0 = head * a->dh;
    int32_t r0;
    for (r0 = 0; r0 < n; r0 += MCUBERT_BLOCK_ROWS) {
        mcubert_rows rows;
        mcubert_rows_init_s8(&rows, hidden + (t0 + r0) * a->d, a->d, mcubert_min_i32(MCUBERT_BLOCK_ROWS, n - r0), a->d);
        mcubert_linear_widen(&rows, &query, a->widened);
        mcubert_linear_to_s8(&rows, &query, c0, c0 + a->dh, 0, NULL, a->query_rows + r0 * a->dh, a->dh, 1);
    }
}

/* int16 scores of the tile's n Q rows against every visited key. */
MCUBERT_NOINLINE static void query_scores(const attention_state *a, int32_t n)
{
    const mcubert_attention_params *p = a->params;
    const mcubert_requant score = mcubert_requant_of(0, p->score_multiplier, p->score_shift);
    const int32_t keys = a->keys.count;
    int32_t r0;
    for (r0 = 0; r0 < n; r0 += MCUBERT_BLOCK_ROWS) {
        const int32_t count = mcubert_min_i32(MCUBERT_BLOCK_ROWS, n - r0);
        int16_t *block = a->scores + r0 * a->s;
        mcubert_rows rows;
        int32_t j;
        mcubert_rows_init_s8(&rows, a->query_rows + r0 * a->dh, a->dh, count, a->dh);
        mcubert_rows_widen(&rows, a->widened);
        for (j = 0; j < keys; j += MCUBERT_CHUNK_CHANNELS) {
            const int32_t chunk = mcubert_min_i32(MCUBERT_CHUNK_CHANNELS, keys - j);
            int32_t acc[MCUBERT_CHUNK_CHANNELS][MCUBERT_BLOCK_ROWS], c;
            mcubert_gemm_4xn_rows(&rows, a->key_rows + j * a->dh, a->dh, chunk, acc);
            for (c = 0; c < chunk; c += 2) {
                store_scores((const int32_t(*)[MCUBERT_BLOCK_ROWS])(acc + c), count, c + 1 < chunk, &score,
                             block + j + c, a->s);
            }
        }
    }
}

/* Context values of one channel for the block's rows: dst[r * stride] = clamp8(requantize(mean)). */
static inline void store_context(const int32_t *acc, const int32_t *recip, int32_t count, const mcubert_requant *q,
                                 int8_t *dst, int32_t stride)
{
    int32_t r;
    if (q->fast && q->scale == 1 && count == MCUBERT_BLOCK_ROWS) {
        dst[0] = mcubert_clamp8(mcubert_requant_fast_unbiased(mcubert_weighted_mean(acc[0], recip[0]), q));
        dst[stride] = mcubert_clamp8(mcubert_requant_fast_unbiased(mcubert_weighted_mean(acc[1], recip[1]), q));
        dst += 2 * stride;
        dst[0] = mcubert_clamp8(mcubert_requant_fast_unbiased(mcubert_weighted_mean(acc[2], recip[2]), q));
        dst[stride] = mcubert_clamp8(mcubert_requant_fast_unbiased(mcubert_weighted_mean(acc[3], recip[3]), q));
        return;
    }
    for (r = 0; r < count; ++r) {
        dst[r * stride] = mcubert_clamp8(mcubert_requant_apply(mcubert_weighted_mean(acc[r], recip[r]), q));
    }
}

/* Softmax weights of the tile's score rows (in place), then the normalized P.V context:
 * target[r][c] = clamp8(requantize(rsh(sum_k e[k] v[k][c] * recip, 28), M_ctx)). */
MCUBERT_NOINLINE static void attend_values(const attention_state *a, int32_t n, int8_t *target, int32_t target_stride)
{
    const mcubert_attention_params *p = a->params;
    const mcubert_requant context = mcubert_requant_of(0, p->context_multiplier, p->context_shift);
    int32_t r0;
    for (r0 = 0; r0 < n; r0 += MCUBERT_BLOCK_ROWS) {
        const int32_t count = mcubert_min_i32(MCUBERT_BLOCK_ROWS, n - r0);
        int8_t *block = target + r0 * target_stride;
        int32_t recip[MCUBERT_BLOCK_ROWS];
        mcubert_rows rows;
        int32_t r, c;
        for (r = 0; r < count; ++r) {
            recip[r] = mcubert_softmax_weights_s16(a->scores + (r0 + r) * a->s, &a->keys, a->weights->exp_lut);
        }
        mcubert_rows_init_s16(&rows, a->scores + r0 * a->s, a->s, count, a->keys.count);
        mcubert_rows_widen(&rows, a->widened);
        for (c = 0; c < a->dh; c += MCUBERT_CHUNK_CHANNELS) {
            const int32_t chunk = mcubert_min_i32(MCUBERT_CHUNK_CHANNELS, a->dh - c);
            int32_t acc[MCUBERT_CHUNK_CHANNELS][MCUBERT_BLOCK_ROWS], j;
            mcubert_gemm_4xn_rows(&rows, a->value_t + c * a->s, a->s, chunk, acc);
            for (j = 0; j < chunk; ++j) {
                store_context(acc[j], recip, count, &context, block + c + j, target_stride);
            }
        }
    }
}

/* Last head: output projection of [context | context_tile] + residual, then LayerNorm into x[T]. */
MCUBERT_NOINLINE static void finish_tile(const attention_state *a, int8_t *hidden, int32_t t0, int32_t n)
{
    const mcubert_linear output = layer(a, a->weights->output_weights, a->weights->output_channels, OUTPUT);
    const int32_t earlier = (a->h - 1) * a->dh;
    int32_t r0, r;
    for (r0 = 0; r0 < n; r0 += MCUBERT_BLOCK_ROWS) {
        mcubert_rows rows;
        mcubert_rows_init_split_s8(&rows, a->context + (t0 + r0) * earlier, earlier, earlier,
                                   a->context_tile + r0 * a->dh, a->dh, mcubert_min_i32(MCUBERT_BLOCK_ROWS, n - r0),
                                   a->d);
        mcubert_linear_widen(&rows, &output, a->widened);
        mcubert_linear_residual_to_s16(&rows, &output, hidden + (t0 + r0) * a->d, a->weights->residual,
                                       a->residual + r0 * a->d);
    }
    for (r = 0; r < n; ++r) {
        mcubert_layer_norm_s8(a->residual + r * a->d, a->d, a->weights->layer_norm, a->params->ln_eps,
                              hidden + (t0 + r) * a->d);
    }
}

static mcubert_status check_pointers(const mcubert_attention_weights *w, const int8_t *hidden, const void *mask,
                                     mcubert_message *m)
{
    const char *missing = NULL;
    if (w == NULL) {
        missing = "weights";
    } else if (w->query_weights == NULL || w->query_channels == NULL || w->key_weights == NULL ||
               w->key_channels == NULL || w->value_weights == NULL || w->value_channels == NULL ||
               w->output_weights == NULL || w->output_channels == NULL || w->exp_lut == NULL || w->layer_norm == NULL ||
               w->residual == NULL) {
        missing = "weights";
    } else if (hidden == NULL) {
        missing = "hidden";
    } else if (mask == NULL) {
        missing = "mask";
    }
    if (missing != NULL) {
        return mcubert_fail_text(m, MCUBERT_ERROR_ARGUMENT, OP, missing, "NULL pointer");
    }
    return MCUBERT_OK;
}

/* Everything before the first head: checks, the key set, and the scratch regions. */
MCUBERT_NOINLINE static mcubert_status prepare(attention_state *a, const mcubert_attention_params *params,
                                               const mcubert_attention_weights *weights, int8_t *hidden,
                                               const void *mask, const mcubert_context *context,
                                               mcubert_message *message)
{
    mcubert_attention_layout layout;
    int8_t *scratch;
    mcubert_status st = validate_options(params, message);
    if (st != MCUBERT_OK || (st = check_pointers(weights, hidden, mask, message)) != MCUBERT_OK) {
        return st;
    }
    a->s = params->seq_len;
    a->d = params->hidden;
    a->h = params->heads;
    a->t = params->tile;
    a->dh = a->d / a->h;
    a->params = params;
    a->weights = weights;
    mcubert_attention_layout_of(a->s, a->d, a->h, a->t, &layout);
    if ((st = mcubert_check_context(OP, context, layout.total, message)) != MCUBERT_OK) {
        return st;
    }
    if (params->mask_mode == 0) {
        a->keys.mask = (const int8_t *)mask;
        a->keys.count = a->s;
    } else {
        const int32_t length = (int32_t)mcubert_read_u32(mask);
        if (length < 0 || length > a->s) {
            st = mcubert_fail(message, MCUBERT_ERROR_INPUT, OP, "mask");
            mcubert_append(message, "valid length ");
            mcubert_append_int(message, length);
            mcubert_append(message, " is outside [0, ");
            mcubert_append_int(message, a->s);
            mcubert_append(message, "]");
            return st;
        }
        a->keys.mask = NULL;
        a->keys.count = length; /* keys >= L are never attended: not even projected */
    }
    /* Regions are 16-byte offsets into a 4-byte aligned buffer (checked above). */
    scratch = (int8_t *)context->buf;
    a->key_rows = scratch + layout.key;
    a->value_t = scratch + layout.value_t;
    a->context = scratch + layout.context;
    a->context_tile = scratch + layout.context_tile;
    a->query_rows = scratch + layout.query;
    a->scores = (int16_t *)(void *)(scratch + layout.scores);
    a->residual = (int16_t *)(void *)(scratch + layout.residual);
    a->widened = (uint32_t *)(void *)(scratch + layout.widened);
    return MCUBERT_OK;
}

mcubert_status mcubert_attention_s8(const mcubert_attention_params *params, const mcubert_attention_weights *weights,
                                    int8_t *hidden, const void *mask, const mcubert_context *context,
                                    mcubert_message *message)
{
    attention_state a;
    int32_t head, t0;
    const mcubert_status st = prepare(&a, params, weights, hidden, mask, context, message);
    if (st != MCUBERT_OK) {
        return st;
    }
    for (head = 0; head < a.h; ++head) {
        const int last = head == a.h - 1;
        project_keys_values(&a, hidden, head);
        for (t0 = 0; t0 < a.s; t0 += a.t) {
            const int32_t n = mcubert_min_i32(a.t, a.s - t0);
            project_queries(&a, hidden, head, t0, n);
            query_scores(&a, n);
            if (!last) {
                const int32_t earlier = (a.h - 1) * a.dh;
                attend_values(&a, n, a.context + t0 * earlier + head * a.dh, earlier);
            } else {
                attend_values(&a, n, a.context_tile, a.dh);
                finish_tile(&a, hidden, t0, n);
            }
        }
    }
    return MCUBERT_OK;
}
