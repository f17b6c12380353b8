/*
 * The CMSIS-NN strategy baseline (mcubert_baselines.h): a BERT layer as an untiled TFLite graph
 * of 1x2x4 vector x matrix ops, every intermediate materialised. A re-implementation for
 * measurement, not CMSIS-NN code.
 */
#include "baseline_kernels.h"
#include "mcubert_baselines.h"

#include <stddef.h>

int32_t mcubert_baseline_cmsis_linear_s8(const int8_t *x, int32_t tokens, int32_t in_features, int32_t out_features,
                                         const int8_t *weights, const int32_t *channels, int8_t *y)
{
    baseline_fc_s8(x, in_features, tokens, in_features, weights, channels, 0, out_features, 0, y, out_features, 1);
    return MCUBERT_OK;
}

/* ---- attention ---------------------------------------------------------------------------- */

typedef struct {
    int32_t q, k, v, q_heads, k_heads, v_heads, scores, recip, context_heads, context, y, z, total;
} cmsis_attention_layout;

static void cmsis_attention_layout_of(int32_t s, int32_t d, int32_t h, cmsis_attention_layout *l)
{
    int32_t offset = 0;
    l->q = offset;
    offset += mcubert_align_up(s * d); /* FC outputs [s][d] */
    l->k = offset;
    offset += mcubert_align_up(s * d);
    l->v = offset;
    offset += mcubert_align_up(s * d);
    l->q_heads = offset;
    offset += mcubert_align_up(s * d); /* [h][s][dh] */
    l->k_heads = offset;
    offset += mcubert_align_up(s * d);
    l->v_heads = offset;
    offset += mcubert_align_up(s * d); /* [h][dh][s] */
    l->scores = offset;
    offset += mcubert_align_up(2 * h * s * s); /* [h][s][s], softmax in place */
    l->recip = offset;
    offset += mcubert_align_up(4 * h * s);
    l->context_heads = offset;
    offset += mcubert_align_up(s * d); /* [h][s][dh] */
    l->context = offset;
    offset += mcubert_align_up(s * d); /* [s][d] */
    l->y = offset;
    offset += mcubert_align_up(4 * s * d); /* output FC, int32 */
    l->z = offset;
    offset += mcubert_align_up(2 * s * d); /* add, int16 */
    l->total = offset;
}

int32_t mcubert_baseline_cmsis_attention_get_buffer_size(int32_t seq_len, int32_t hidden, int32_t heads, int32_t tile)
{
    cmsis_attention_layout l;
    (void)tile;
    cmsis_attention_layout_of(seq_len, hidden, heads, &l);
    return l.total;
}

/* The transpose ops: [s][h][dh] -> [h][s][dh] and [s][h][dh] -> [h][dh][s], and back. */
static void heads_from_tokens(const int8_t *x, int32_t s, int32_t h, int32_t dh, int8_t *out)
{
    int32_t j, i, c;
    for (j = 0; j < h; ++j) {
        for (i = 0; i < s; ++i) {
            for (c = 0; c < dh; ++c) {
                *out++ = x[i * h * dh + j * dh + c];
            }
        }
    }
}

static void heads_transposed_from_tokens(const int8_t *x, int32_t s, int32_t h, int32_t dh, int8_t *out)
{
    int32_t j, i, c;
    for (j = 0; j < h; ++j) {
        for (c = 0; c < dh; ++c) {
            for (i = 0; i < s; ++i) {
                *out++ = x[i * h * dh + j * dh + c];
            }
        }
    }
}

static void tokens_from_heads(const int8_t *x, int32_t s, int32_t h, int32_t dh, int8_t *out)
{
    int32_t j, i, c;
    for (j = 0; j < h; ++j) {
        for (i = 0; i < s; ++i) {
            for (c = 0; c < dh; ++c) {
                out[i * h * dh + j * dh + c] = *x++;
            }
        }
    }
}

mcubert_status mcubert_baseline_cmsis_attention_s8(const mcubert_attention_params *params,
                                                   const mcubert_attention_weights *weights, int8_t *hidden,
                                                   const void *mask, const mcubert_context *context,
                                                   mcubert_message *message)
{
    const int32_t s = params->seq_len, d = params->hidden, h = params->heads, dh = d / h;
    const mcubert_keys keys = baseline_keys(params, mask);
    const mcubert_requant score = mcubert_requant_of(0, params->score_multiplier, params->score_shift);
    const mcubert_requant ctx = mcubert_requant_of(0, params->context_multiplier, params->context_shift);
    cmsis_attention_layout l;
    int8_t *buf;
    int32_t j, i;
    mcubert_status st;
    cmsis_attention_layout_of(s, d, h, &l);
    if ((st = baseline_check_scratch(context, l.total, message)) != MCUBERT_OK) {
        return st;
    }
    buf = (int8_t *)context->buf;
    baseline_fc_s8(hidden, d, s, d, weights->query_weights, weights->query_channels, 0, d, 0, buf + l.q, d, 1);
    baseline_fc_s8(hidden, d, s, d, weights->key_weights, weights->key_channels, 0, d, 0, buf + l.k, d, 1);
    baseline_fc_s8(hidden, d, s, d, weights->value_weights, weights->value_channels, 0, d, 0, buf + l.v, d, 1);
    heads_from_tokens(buf + l.q, s, h, dh, buf + l.q_heads);
    heads_from_tokens(buf + l.k, s, h, dh, buf + l.k_heads);
    heads_transposed_from_tokens(buf + l.v, s, h, dh, buf + l.v_heads);
    for (j = 0; j < h; ++j) {
        int16_t *scores = (int16_t *)(void *)(buf + l.scores) + j * s * s;
        int32_t *recip = (int32_t *)(void *)(buf + l.recip) + j * s;
        baseline_scores(buf + l.q_heads + j * s * dh, dh, s, buf + l.k_heads + j * s * dh, dh, keys.count, dh, &score,
                        scores, s);
        for (i = 0; i < s; ++i) {
            recip[i] = mcubert_softmax_weights_s16(scores + i * s, &keys, weights->exp_lut);
        }
        baseline_context(scores, s, recip, s, buf + l.v_heads + j * dh * s, s, dh, keys.count, &ctx,
                         buf + l.context_heads + j * s * dh, dh);
    }
    tokens_from_heads(buf + l.context_heads, s, h, dh, buf + l.context);
    baseline_fc_s32(buf + l.context, s, d, d, weights->output_weights, weights->output_channels,
                    (int32_t *)(void *)(buf + l.y));
    baseline_add((const int32_t *)(void *)(buf + l.y), hidden, s, d, weights->residual, (int16_t *)(void *)(buf + l.z));
    baseline_layer_norm((const int16_t *)(void *)(buf + l.z), s, d, weights->layer_norm, params->ln_eps, hidden);
    return MCUBERT_OK;
}

/* ---- MLP ---------------------------------------------------------------------------------- */

typedef struct {
    int32_t a, y, z, total;
} cmsis_mlp_layout;

static void cmsis_mlp_layout_of(int32_t s, int32_t d, int32_t f, cmsis_mlp_layout *l)
{
    int32_t offset = 0;
    l->a = offset;
    offset += mcubert_align_up(s * f); /* FC1, then the table op in place */
    l->y = offset;
    offset += mcubert_align_up(4 * s * d); /* FC2, int32 */
    l->z = offset;
    offset += mcubert_align_up(2 * s * d); /* add, int16 */
    l->total = offset;
}

int32_t mcubert_baseline_cmsis_mlp_get_buffer_size(int32_t seq_len, int32_t hidden, int32_t ffn, int32_t tile)
{
    cmsis_mlp_layout l;
    (void)tile;
    cmsis_mlp_layout_of(seq_len, hidden, ffn, &l);
    return l.total;
}

mcubert_status mcubert_baseline_cmsis_mlp_s8(const mcubert_mlp_params *params, const mcubert_mlp_weights *weights,
                                             int8_t *hidden, const mcubert_context *context, mcubert_message *message)
{
    const int32_t s = params->seq_len, d = params->hidden, f = params->ffn;
    cmsis_mlp_layout l;
    int8_t *buf;
    mcubert_status st;
    cmsis_mlp_layout_of(s, d, f, &l);
    if ((st = baseline_check_scratch(context, l.total, message)) != MCUBERT_OK) {
        return st;
    }
    buf = (int8_t *)context->buf;
    baseline_fc_s8(hidden, d, s, d, weights->fc1_weights, weights->fc1_channels, 0, f, params->fc1_output_zero_point,
                   buf + l.a, f, 1);
    baseline_lookup(buf + l.a, s * f, weights->activation_lut);
    baseline_fc_s32(buf + l.a, s, f, d, weights->fc2_weights, weights->fc2_channels, (int32_t *)(void *)(buf + l.y));
    baseline_add((const int32_t *)(void *)(buf + l.y), hidden, s, d, weights->residual, (int16_t *)(void *)(buf + l.z));
    baseline_layer_norm((const int16_t *)(void *)(buf + l.z), s, d, weights->layer_norm, params->ln_eps, hidden);
    return MCUBERT_OK;
}
