/*
 * FlashAttention-style schedule (mcubert_baselines.h), re-implemented on the 1x2x4 kernels.
 * Q, K, V^T resident; for each head and block of t queries, the keys stream in blocks of t:
 *
 *   S = scores(Q_block, K_block)                       int16 [t][t]
 *   per query row: m' = max(m, max of the block's valid scores)
 *       if m' > m (and m was set): acc *= exp(-(m' - m)), sum *= the same   (rescale)
 *       e[k] = exp(-(m' - S[k])) (0 if masked),  sum += e,  acc[c] += e . V^T[c][block]
 *   after the last block: context = requantize(rsh(acc * floor(2^44 / sum), 28))
 *
 * exp(-n) is exp_lut[min(n, 255)] (Q14) as in SPEC 3.4, and the rescale is
 * rsh(acc * exp_lut[min(rise, 255)], 14). A weight thus becomes exp_lut[a] exp_lut[b] / 2^14
 * (rounded, possibly several times) instead of the reference's exp_lut[min(a + b, 255)]: the
 * context can differ from the reference's by a rounding step, which is why this baseline is
 * compared within a tolerance (tests/kernels/test_kernels_baselines.py) and not bit for bit.
 * Everything after the context (output projection, add, LayerNorm) is as in the others.
 */
#include "baseline_kernels.h"
#include "mcubert_baselines.h"

#define NO_MAX INT32_MIN /* running maximum of a row that has seen no valid key yet */

typedef struct {
    int32_t q, k, v_t, acc, row_max, row_sum, block, context, y, z, total;
} flash_layout;

static void flash_layout_of(int32_t s, int32_t d, int32_t t, flash_layout *l)
{
    int32_t offset = 0;
    l->q = offset;
    offset += mcubert_align_up(s * d);
    l->k = offset;
    offset += mcubert_align_up(s * d);
    l->v_t = offset;
    offset += mcubert_align_up(s * d); /* [d][s] */
    l->acc = offset;
    offset += mcubert_align_up(4 * s * d); /* int32 output accumulator */
    l->row_max = offset;
    offset += mcubert_align_up(4 * t);
    l->row_sum = offset;
    offset += mcubert_align_up(4 * t);
    l->block = offset;
    offset += mcubert_align_up(2 * t * t); /* block scores, then weights */
    l->context = offset;
    offset += mcubert_align_up(s * d);
    l->y = offset;
    offset += mcubert_align_up(4 * s * d);
    l->z = offset;
    offset += mcubert_align_up(2 * s * d);
    l->total = offset;
}

int32_t mcubert_baseline_flash_attention_get_buffer_size(int32_t seq_len, int32_t hidden, int32_t heads, int32_t tile)
{
    flash_layout l;
    (void)heads;
    flash_layout_of(seq_len, hidden, tile, &l);
    return l.total;
}

static inline int key_valid(const mcubert_keys *keys, int32_t k)
{
    return keys->mask == NULL || keys->mask[k] != 0;
}

/* One query row against one key block [k0, k0 + kb): online-softmax update of its running
 * maximum, sum and dh accumulators (acc), turning row[0..kb) from scores into weights. */
static void update_row(int16_t *row, int32_t k0, int32_t kb, const mcubert_keys *keys, const int16_t *exp_lut,
                       int32_t *row_max, int32_t *row_sum, int32_t *acc, const int8_t *v_t, int32_t s, int32_t dh)
{
    int32_t m = *row_max, k, c;
    int32_t block_max = NO_MAX;
    for (k = 0; k < kb; ++k) {
        if (key_valid(keys, k0 + k) && row[k] > block_max) {
            block_max = row[k];
        }
    }
    if (block_max == NO_MAX) {
        return; /* no valid key in this block: nothing to add */
    }
    if (block_max > m) {
        if (m != NO_MAX) {
            const int32_t factor = exp_lut[mcubert_min_i32(block_max - m, 255)];
            for (c = 0; c < dh; ++c) {
                acc[c] = (int32_t)mcubert_rsh64((int64_t)acc[c] * factor, 14);
            }
            *row_sum = (int32_t)mcubert_rsh64((int64_t)*row_sum * factor, 14);
        }
        m = block_max;
        *row_max = m;
    }
    for (k = 0; k < kb; ++k) {
        const int32_t e = key_valid(keys, k0 + k) ? exp_lut[mcubert_min_i32(m - row[k], 255)] : 0;
        row[k] = (int16_t)e;
        *row_sum += e;
    }
    for (c = 0; c < dh; c += 2) {
        const int8_t *v0 = v_t + c * s + k0;
        int32_t a0, a1;
        baseline_dot2_s16(row, v0, c + 1 < dh ? v0 + s : v0, kb, &a0, &a1);
        acc[c] += a0;
        if (c + 1 < dh) {
            acc[c + 1] += a1;
        }
    }
}

mcubert_status mcubert_baseline_flash_attention_s8(const mcubert_attention_params *params,
                                                   const mcubert_attention_weights *weights, int8_t *hidden,
                                                   const void *mask, const mcubert_context *context,
                                                   mcubert_message *message)
{
    const int32_t s = params->seq_len, d = params->hidden, h = params->heads, t = params->tile, dh = d / h;
    const mcubert_keys keys = baseline_keys(params, mask);
    const mcubert_requant score = mcubert_requant_of(0, params->score_multiplier, params->score_shift);
    const mcubert_requant ctx = mcubert_requant_of(0, params->context_multiplier, params->context_shift);
    flash_layout l;
    int8_t *buf, *q, *k, *v_t, *out;
    int32_t *acc, *row_max, *row_sum;
    int16_t *block;
    int32_t j, q0, k0, r, c;
    mcubert_status st;
    flash_layout_of(s, d, t, &l);
    if ((st = baseline_check_scratch(context, l.total, message)) != MCUBERT_OK) {
        return st;
    }
    buf = (int8_t *)context->buf;
    q = buf + l.q;
    k = buf + l.k;
    v_t = buf + l.v_t;
    out = buf + l.context;
    acc = (int32_t *)(void *)(buf + l.acc);
    row_max = (int32_t *)(void *)(buf + l.row_max);
    row_sum = (int32_t *)(void *)(buf + l.row_sum);
    block = (int16_t *)(void *)(buf + l.block);
    baseline_fc_s8(hidden, d, s, d, weights->query_weights, weights->query_channels, 0, d, 0, q, d, 1);
    baseline_fc_s8(hidden, d, s, d, weights->key_weights, weights->key_channels, 0, d, 0, k, d, 1);
    baseline_fc_s8(hidden, d, s, d, weights->value_weights, weights->value_channels, 0, d, 0, v_t, 1, s);
    for (j = 0; j < h; ++j) {
        const int32_t c0 = j * dh;
        for (q0 = 0; q0 < s; q0 += t) {
            const int32_t n = mcubert_min_i32(t, s - q0);
            for (r = 0; r < n; ++r) {
                row_max[r] = NO_MAX;
                row_sum[r] = 0;
                for (c = 0; c < dh; ++c) {
                    acc[(q0 + r) * d + c0 + c] = 0;
                }
            }
            for (k0 = 0; k0 < keys.count; k0 += t) {
                const int32_t kb = mcubert_min_i32(t, keys.count - k0);
                baseline_scores(q + q0 * d + c0, d, n, k + k0 * d + c0, d, kb, dh, &score, block, t);
                for (r = 0; r < n; ++r) {
                    update_row(block + r * t, k0, kb, &keys, weights->exp_lut, row_max + r, row_sum + r,
                               acc + (q0 + r) * d + c0, v_t + c0 * s, s, dh);
                }
            }
            for (r = 0; r < n; ++r) {
                const int32_t recip = row_sum[r] > 0 ? (int32_t)(((uint64_t)1 << 44) / (uint32_t)row_sum[r]) : 0;
                for (c = 0; c < dh; ++c) {
                    const int32_t mean = mcubert_weighted_mean(acc[(q0 + r) * d + c0 + c], recip);
                    out[(q0 + r) * d + c0 + c] = mcubert_clamp8(mcubert_requant_apply(mean, &ctx));
                }
            }
        }
    }
    baseline_fc_s32(out, s, d, d, weights->output_weights, weights->output_channels, (int32_t *)(void *)(buf + l.y));
    baseline_add((const int32_t *)(void *)(buf + l.y), hidden, s, d, weights->residual, (int16_t *)(void *)(buf + l.z));
    baseline_layer_norm((const int16_t *)(void *)(buf + l.z), s, d, weights->layer_norm, params->ln_eps, hidden);
    return MCUBERT_OK;
}
