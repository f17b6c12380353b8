/*
 * MCUBERT_CAUSAL_ATTENTION (SPEC 4.6; reference ops/causal_attention.py): a decoder's pre-LayerNorm
 * self-attention for one token at position p over the int8 KV cache, in place on its residual stream:
 *
 *   z = (x - zp) << R;  a = LN1(z);  q, k, v = int8 linear(a);  cache[0][p] = k, cache[1][p] = v
 *   per head: int16 scores of q against keys first..p, exp weights, the Q16 mean of values first..p
 *             (SPEC 3.4; first = 0, or p - window + 1 for GPT-Neo's local attention)
 *   z' = clamp16(requantize(ctx . Wo) + z);  x' = clamp8(rsh(z', R') + zp')
 *
 * The building blocks are the encoder's: the shared LayerNorm, the linear layers through the gemm
 * (one activation row, widened once for Q, K and V; DSP or plain as built), the softmax weights, the
 * weighted mean and the pre-norm sum. The cache is the caller's (a TFLM variable tensor): this op
 * writes row p of each half and reads rows 0..p, nothing else. Scratch (the spec's layout):
 * `residual` int16[d], `normed`, `query`, `context` int8[d], `scores` int16[n], `widened` int16[4][d].
 */
#include <stddef.h>

#include "mcubert_fixed_point.h"
#include "mcubert_gemm_s8.h"
#include "mcubert_internal.h"

#if MCUBERT_MVE
#include <arm_mve.h>
#endif

#define OP "MCUBERT_CAUSAL_ATTENTION"

typedef struct {
    int32_t residual, normed, query, context, scores, widened, total;
} causal_attention_layout;

static void layout_of(int32_t n, int32_t d, causal_attention_layout *layout)
{
    int32_t offset = 0;
    layout->residual = offset;
    offset += mcubert_align_up(2 * d);
    layout->normed = offset;
    offset += mcubert_align_up(d);
    layout->query = offset;
    offset += mcubert_align_up(d);
    layout->context = offset;
    offset += mcubert_align_up(d);
    layout->scores = offset;
    offset += mcubert_align_up(2 * n);
    layout->widened = offset;
    offset += mcubert_align_up(2 * MCUBERT_BLOCK_ROWS * d);
    layout->total = offset;
}

int32_t mcubert_causal_attention_get_buffer_size(int32_t context, int32_t hidden, int32_t heads)
{
    causal_attention_layout layout;
    if (context < 1 || context > MCUBERT_MAX_SEQ_LEN || hidden < 1 || hidden > MCUBERT_MAX_HIDDEN || heads < 1 ||
        heads > MCUBERT_MAX_HEADS || hidden % heads != 0) {
        return -1;
    }
    layout_of(context, hidden, &layout);
    return layout.total;
}

static mcubert_status validate_options(const mcubert_causal_attention_params *p, mcubert_message *m)
{
    mcubert_status st;
    if ((st = mcubert_check_params(OP, p, m)) != MCUBERT_OK ||
        (st = mcubert_check_spec(OP, p->spec_version, p->spec_hash, m)) != MCUBERT_OK ||
        (st = mcubert_check_range(OP, "context", p->context, 1, MCUBERT_MAX_SEQ_LEN, m)) != MCUBERT_OK ||
        (st = mcubert_check_range(OP, "hidden", p->hidden, 1, MCUBERT_MAX_HIDDEN, m)) != MCUBERT_OK ||
        (st = mcubert_check_range(OP, "heads", p->heads, 1, MCUBERT_MAX_HEADS, m)) != MCUBERT_OK ||
        (st = mcubert_check_range(OP, "window", p->window, 0, MCUBERT_MAX_SEQ_LEN, m)) != MCUBERT_OK ||
        (st = mcubert_check_multiplier(OP, "score_multiplier", p->score_multiplier, p->score_shift, m)) != MCUBERT_OK ||
        (st = mcubert_check_multiplier(OP, "context_multiplier", p->context_multiplier, p->context_shift, m)) !=
            MCUBERT_OK ||
        (st = mcubert_check_ln_eps(OP, p->ln_eps, m)) != MCUBERT_OK ||
        (st = mcubert_check_int4_layers(OP, p->int4_layers, 4, 8, p->spec_version,
                                        MCUBERT_CAUSAL_ATTENTION_INT4_LAYERS_SINCE, m)) != MCUBERT_OK) {
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
    return MCUBERT_OK;
}

mcubert_status mcubert_causal_attention_validate(const mcubert_causal_attention_params *params,
                                                 const mcubert_tensor_view *tensors, int32_t count,
                                                 mcubert_message *message)
{
    static const char *const layers[4][2] = {{"query_weights", "query_channels"},
                                             {"key_weights", "key_channels"},
                                             {"value_weights", "value_channels"},
                                             {"output_weights", "output_channels"}};
    const mcubert_tensor_view *t = tensors;
    mcubert_status st = validate_options(params, message);
    int32_t d, i;
    if (st != MCUBERT_OK || tensors == NULL) {
        return st;
    }
    if ((st = mcubert_check_count(OP, count, MCUBERT_CAUSAL_ATTENTION_NUM_TENSORS, message)) != MCUBERT_OK) {
        return st;
    }
    d = params->hidden;
    if ((st = mcubert_check_tensor(OP, "hidden", &t[MCUBERT_CAUSAL_ATTENTION_HIDDEN], MCUBERT_DTYPE_INT8, d,
                                   message)) != MCUBERT_OK ||
        (st = mcubert_check_tensor(OP, "position", &t[MCUBERT_CAUSAL_ATTENTION_POSITION], MCUBERT_DTYPE_INT32, 1,
                                   message)) != MCUBERT_OK ||
        (st = mcubert_check_tensor(OP, "cache", &t[MCUBERT_CAUSAL_ATTENTION_CACHE], MCUBERT_DTYPE_INT8,
                                   2 * (int64_t)params->context * d, message)) != MCUBERT_OK ||
        (st = mcubert_check_tensor(OP, "layer_norm", &t[MCUBERT_CAUSAL_ATTENTION_LAYER_NORM], MCUBERT_DTYPE_INT32,
                                   2 * d, message)) != MCUBERT_OK) {
        return st;
    }
    for (i = 0; i < 4; ++i) {
        const int32_t w = MCUBERT_CAUSAL_ATTENTION_QUERY_WEIGHTS + 2 * i;
        if ((st = mcubert_check_linear_bits(OP, layers[i][0], &t[w], layers[i][1], &t[w + 1], d, d,
                                            mcubert_layer_width(params->int4_layers, i, 8), message)) != MCUBERT_OK) {
            return st;
        }
    }
    if ((st = mcubert_check_tensor(OP, "exp_lut", &t[MCUBERT_CAUSAL_ATTENTION_EXP_LUT], MCUBERT_DTYPE_INT16, 256,
                                   message)) != MCUBERT_OK ||
        (st = mcubert_check_residual_tensor(OP, "residual", &t[MCUBERT_CAUSAL_ATTENTION_RESIDUAL], d, message)) !=
            MCUBERT_OK ||
        (st = mcubert_check_residual_tensor(OP, "output_residual", &t[MCUBERT_CAUSAL_ATTENTION_OUTPUT_RESIDUAL], d,
                                            message)) != MCUBERT_OK) {
        return st;
    }
    return mcubert_check_tensor(OP, "output", &t[MCUBERT_CAUSAL_ATTENTION_OUTPUT], MCUBERT_DTYPE_INT8, d, message);
}

#if MCUBERT_MVE
/* a[0..n) . b[0..n) of two int8 rows: VMLADAVA.S8 per 16, the tail by zeroing predicated loads. */
static inline int32_t dot_s8(const int8_t *a, const int8_t *b, int32_t n)
{
    int32_t acc = 0, k = 0;
    for (; k + 16 <= n; k += 16) {
        acc = vmladavaq_s8(acc, vldrbq_s8(a + k), vldrbq_s8(b + k));
    }
    if (k < n) {
        const mve_pred16_t live = vctp8q((uint32_t)(n - k));
        acc = vmladavaq_s8(acc, vldrbq_z_s8(a + k, live), vldrbq_z_s8(b + k, live));
    }
    return acc;
}

/* acc[j] = sum_t e[t] v[t][c0 + j] for the n <= 16 channels from values = v[0] + c0 (rows d apart): four
 * channels a vector (VLDRB.S32 sign-extends them), VMLA by the key's weight; lanes past n load nothing. */
static void weighted_channels(const int16_t *e, const int8_t *values, int32_t d, int32_t keys, int32_t n,
                              int32_t acc[16])
{
    const mve_pred16_t p0 = vctp32q((uint32_t)n), p1 = vctp32q((uint32_t)(n > 4 ? n - 4 : 0));
    const mve_pred16_t p2 = vctp32q((uint32_t)(n > 8 ? n - 8 : 0)), p3 = vctp32q((uint32_t)(n > 12 ? n - 12 : 0));
    int32x4_t a0 = vdupq_n_s32(0), a1 = a0, a2 = a0, a3 = a0;
    int32_t t = 0;
    for (; n == 16 && t < keys; ++t, values += d) { /* whole: no predicate to switch per load */
        const int32_t weight = e[t];
        a0 = vmlaq_n_s32(a0, vldrbq_s32(values), weight);
        a1 = vmlaq_n_s32(a1, vldrbq_s32(values + 4), weight);
        a2 = vmlaq_n_s32(a2, vldrbq_s32(values + 8), weight);
        a3 = vmlaq_n_s32(a3, vldrbq_s32(values + 12), weight);
    }
    for (; t < keys; ++t, values += d) {
        const int32_t weight = e[t];
        a0 = vmlaq_n_s32(a0, vldrbq_z_s32(values, p0), weight);
        a1 = vmlaq_n_s32(a1, vldrbq_z_s32(values + 4, p1), weight);
        a2 = vmlaq_n_s32(a2, vldrbq_z_s32(values + 8, p2), weight);
        a3 = vmlaq_n_s32(a3, vldrbq_z_s32(values + 12, p3), weight);
    }
    vst1q_s32(acc, a0);
    vst1q_s32(acc + 4, a1);
    vst1q_s32(acc + 8, a2);
    vst1q_s32(acc + 12, a3);
}
#endif

/* The context of every head for the token's query over keys and values 0..p (SPEC 3.4). On MVE the scores
 * are VMLADAVA dot products and P.V goes 16 channels at a time (weighted_channels). */
MCUBERT_NOINLINE static void attend_heads(const mcubert_causal_attention_params *params, const int8_t *query,
                                          const int8_t *keys, const int8_t *values, int32_t keys_count,
                                          const int16_t *exp_lut, int16_t *scores, int8_t *context)
{
    const int32_t d = params->hidden;
    const int32_t dh = d / params->heads;
    mcubert_keys all;
    int32_t j, t, c, k;
    all.mask = NULL;
    all.count = keys_count;
    for (j = 0; j < params->heads; ++j) {
        const int8_t *q = query + j * dh;
        int32_t recip;
        for (t = 0; t < keys_count; ++t) {
            const int8_t *key = keys + (int64_t)t * d + j * dh;
#if MCUBERT_MVE
            const int32_t acc = dot_s8(q, key, dh);
#else
            int32_t acc = 0;
            for (k = 0; k < dh; ++k) {
                acc += q[k] * key[k];
            }
#endif
            scores[t] = mcubert_clamp16_i32(mcubert_requantize(acc, params->score_multiplier, params->score_shift));
        }
        recip = mcubert_softmax_weights_s16(scores, &all, exp_lut); /* scores -> exp weights */
#if MCUBERT_MVE
        for (c = j * dh; c < (j + 1) * dh; c += 16) {
            const int32_t n = mcubert_min_i32(16, (j + 1) * dh - c);
            int32_t acc[16];
            weighted_channels(scores, values + c, d, keys_count, n, acc);
            for (k = 0; k < n; ++k) {
                context[c + k] = mcubert_clamp8(mcubert_requantize(mcubert_weighted_mean(acc[k], recip),
                                                                   params->context_multiplier, params->context_shift));
            }
        }
#else
        for (c = j * dh; c < (j + 1) * dh; ++c) {
            int32_t acc = 0;
            for (t = 0; t < keys_count; ++t) {
                acc += scores[t] * values[(int64_t)t * d + c];
            }
            context[c] = mcubert_clamp8(mcubert_requantize(mcubert_weighted_mean(acc, recip),
                                                           params->context_multiplier, params->context_shift));
        }
#endif
    }
}

static mcubert_status check_arguments(const mcubert_causal_attention_weights *w, const int8_t *hidden,
                                      const int32_t *position, const int8_t *cache, mcubert_message *m)
{
    if (w == NULL || w->layer_norm == NULL || w->query_weights == NULL || w->query_channels == NULL ||
        w->key_weights == NULL || w->key_channels == NULL || w->value_weights == NULL || w->value_channels == NULL ||
        w->output_weights == NULL || w->output_channels == NULL || w->exp_lut == NULL || w->residual == NULL ||
        w->output_residual == NULL || hidden == NULL || position == NULL || cache == NULL) {
        return mcubert_fail_text(m, MCUBERT_ERROR_ARGUMENT, OP,
                                 hidden == NULL     ? "hidden"
                                 : position == NULL ? "position"
                                 : cache == NULL    ? "cache"
                                                    : "weights",
                                 "NULL pointer");
    }
    return MCUBERT_OK;
}

mcubert_status mcubert_causal_attention_s8(const mcubert_causal_attention_params *params,
                                           const mcubert_causal_attention_weights *weights, int8_t *hidden,
                                           const int32_t *position, int8_t *cache, const mcubert_context *context,
                                           mcubert_message *message)
{
    causal_attention_layout layout;
    mcubert_linear query, key, value, output;
    mcubert_rows rows;
    int8_t *scratch, *normed, *q, *ctx;
    int16_t *z;
    uint32_t *widened;
    int32_t d, n, p, first;
    mcubert_status st = validate_options(params, message);
    if (st != MCUBERT_OK || (st = check_arguments(weights, hidden, position, cache, message)) != MCUBERT_OK) {
        return st;
    }
    d = params->hidden;
    n = params->context;
    layout_of(n, d, &layout);
    if ((st = mcubert_check_context(OP, context, layout.total, message)) != MCUBERT_OK) {
        return st;
    }
    p = *position;
    if (p < 0 || p >= n) {
        st = mcubert_fail(message, MCUBERT_ERROR_INPUT, OP, "position");
        mcubert_append_int(message, p);
        mcubert_append(message, " is outside [0, ");
        mcubert_append_int(message, n);
        mcubert_append(message, ")");
        return st;
    }
    scratch = (int8_t *)context->buf;
    z = (int16_t *)(void *)(scratch + layout.residual);
    normed = scratch + layout.normed;
    q = scratch + layout.query;
    ctx = scratch + layout.context;
    widened = (uint32_t *)(void *)(scratch + layout.widened);
    query = mcubert_linear_of(weights->query_weights, weights->query_channels, d, d,
                              mcubert_layer_width(params->int4_layers, 0, 8));
    key = mcubert_linear_of(weights->key_weights, weights->key_channels, d, d,
                            mcubert_layer_width(params->int4_layers, 1, 8));
    value = mcubert_linear_of(weights->value_weights, weights->value_channels, d, d,
                              mcubert_layer_width(params->int4_layers, 2, 8));
    output = mcubert_linear_of(weights->output_weights, weights->output_channels, d, d,
                               mcubert_layer_width(params->int4_layers, 3, 8));

    mcubert_stream_to_z(hidden, weights->residual, d, z);
    mcubert_layer_norm_s8(z, d, weights->layer_norm, params->ln_eps, normed);
    mcubert_rows_init_s8(&rows, normed, d, 1, d);
    /* Q, K and V read the same row: it is widened again only where a layer's width differs (the int8 and
     * int4 gemms lay the widened row out differently). */
    mcubert_linear_widen(&rows, &query, widened);
    mcubert_linear_to_s8(&rows, &query, 0, d, 0, NULL, q, d, 1);
    if (key.weight_bits != query.weight_bits) {
        mcubert_linear_widen(&rows, &key, widened);
    }
    mcubert_linear_to_s8(&rows, &key, 0, d, 0, NULL, cache + (int64_t)p * d, d, 1);
    if (value.weight_bits != key.weight_bits) {
        mcubert_linear_widen(&rows, &value, widened);
    }
    mcubert_linear_to_s8(&rows, &value, 0, d, 0, NULL, cache + ((int64_t)n + p) * d, d, 1);
    first = params->window > 0 && p - params->window + 1 > 0 ? p - params->window + 1 : 0; /* local attention */
    attend_heads(params, q, cache + (int64_t)first * d, cache + ((int64_t)n + first) * d, p + 1 - first,
                 weights->exp_lut, (int16_t *)(void *)(scratch + layout.scores), ctx);
    mcubert_rows_init_s8(&rows, ctx, d, 1, d);
    mcubert_linear_widen(&rows, &output, widened);
    mcubert_linear_residual_to_s16(&rows, &output, hidden, weights->residual, z);
    mcubert_stream_from_z(z, weights->output_residual, d, hidden);
    return MCUBERT_OK;
}
