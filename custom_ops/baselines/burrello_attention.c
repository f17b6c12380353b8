/*
 * Burrello et al. 2021's attention schedule (mcubert_baselines.h), re-implemented on the 1x2x4
 * kernels: per head, untiled along tokens —
 *
 *   for head j:  Q_j, K_j = x W_{q,k}[j]^T  [s][dh];  V_j^T [dh][s] (stored transposed)
 *                S = scores(Q_j, K_j) [s][s], softmax weights in place
 *                context[:, j] = S V_j (normalized), into a full [s][d] context
 *   y = context W_o^T (int32), z = y + residual (int16), x = LayerNorm(z)
 */
#include "baseline_kernels.h"
#include "mcubert_baselines.h"

typedef struct {
    int32_t q, k, v_t, scores, recip, context, y, z, total;
} burrello_layout;

static void burrello_layout_of(int32_t s, int32_t d, int32_t h, burrello_layout *l)
{
    const int32_t dh = d / h;
    int32_t offset = 0;
    l->q = offset;
    offset += mcubert_align_up(s * dh);
    l->k = offset;
    offset += mcubert_align_up(s * dh);
    l->v_t = offset;
    offset += mcubert_align_up(s * dh);
    l->scores = offset;
    offset += mcubert_align_up(2 * s * s);
    l->recip = offset;
    offset += mcubert_align_up(4 * s);
    l->context = offset;
    offset += mcubert_align_up(s * d);
    l->y = offset;
    offset += mcubert_align_up(4 * s * d);
    l->z = offset;
    offset += mcubert_align_up(2 * s * d);
    l->total = offset;
}

int32_t mcubert_baseline_burrello_attention_get_buffer_size(int32_t seq_len, int32_t hidden, int32_t heads,
                                                            int32_t tile)
{
    burrello_layout l;
    (void)tile;
    burrello_layout_of(seq_len, hidden, heads, &l);
    return l.total;
}

mcubert_status mcubert_baseline_burrello_attention_s8(const mcubert_attention_params *params,
                                                      const mcubert_attention_weights *weights, int8_t *hidden,
                                                      const void *mask, const mcubert_context *context,
                                                      mcubert_message *message)
{
    const int32_t s = params->seq_len, d = params->hidden, h = params->heads, dh = d / h;
    const mcubert_keys keys = baseline_keys(params, mask);
    const mcubert_requant score = mcubert_requant_of(0, params->score_multiplier, params->score_shift);
    const mcubert_requant ctx = mcubert_requant_of(0, params->context_multiplier, params->context_shift);
    burrello_layout l;
    int8_t *buf;
    int16_t *scores;
    int32_t *recip;
    int32_t j, i;
    mcubert_status st;
    burrello_layout_of(s, d, h, &l);
    if ((st = baseline_check_scratch(context, l.total, message)) != MCUBERT_OK) {
        return st;
    }
    buf = (int8_t *)context->buf;
    scores = (int16_t *)(void *)(buf + l.scores);
    recip = (int32_t *)(void *)(buf + l.recip);
    for (j = 0; j < h; ++j) {
        const int32_t c0 = j * dh;
        baseline_fc_s8(hidden, d, s, d, weights->query_weights, weights->query_channels, c0, c0 + dh, 0, buf + l.q, dh,
                       1);
        baseline_fc_s8(hidden, d, s, d, weights->key_weights, weights->key_channels, c0, c0 + dh, 0, buf + l.k, dh, 1);
        baseline_fc_s8(hidden, d, s, d, weights->value_weights, weights->value_channels, c0, c0 + dh, 0, buf + l.v_t, 1,
                       s);
        baseline_scores(buf + l.q, dh, s, buf + l.k, dh, keys.count, dh, &score, scores, s);
        for (i = 0; i < s; ++i) {
            recip[i] = mcubert_softmax_weights_s16(scores + i * s, &keys, weights->exp_lut);
        }
        baseline_context(scores, s, recip, s, buf + l.v_t, s, dh, keys.count, &ctx, buf + l.context + c0, d);
    }
    baseline_fc_s32(buf + l.context, s, d, d, weights->output_weights, weights->output_channels,
                    (int32_t *)(void *)(buf + l.y));
    baseline_add((const int32_t *)(void *)(buf + l.y), hidden, s, d, weights->residual, (int16_t *)(void *)(buf + l.z));
    baseline_layer_norm((const int16_t *)(void *)(buf + l.z), s, d, weights->layer_norm, params->ln_eps, hidden);
    return MCUBERT_OK;
}
