/*
 * MCUBERT_CLASSIFIER_HEAD (SPEC 4.4; reference ops/classifier_head.py): BERT's pooler and the
 * sequence classifier on the [CLS] row, hidden[0][0..d):
 *
 *   a[c]      = clamp8(requantize(bias_p + x[0] . Wp[c]) + pooler_zero_point)    tanh table index
 *   pooled[c] = tanh_lut[a[c] + 128]                                               int8, in place
 *   logit[j]  = clamp8(requantize(bias_c + pooled . Wc[j]) + logits_zero_point)
 *
 * Scratch (the spec's layout, A(d) + A(2d) bytes): `pooled` int8[d] (the index, then the tanh
 * output in place) and `widened` int16[d] (DSP path: the one activation row, widened once per
 * layer). Both layers are one activation row against pair4 weights, so they use a one-row
 * matrix-vector product instead of the shared 4-row micro-kernel: mcubert_rows_widen's block
 * layout interleaves four rows ([K/4][4 rows][2 words]) and would need int16[4][d], four times
 * the region the spec (and the planner) reserves for this op. The row is widened here into
 * [K/4][2 words] with the same word order — (x0, x2) then (x1, x3), as SXTB16 and SXTB16 ROR 8
 * produce from a weight word — so each 4-group costs 2 SMLADs per channel. The output stage is
 * the shared one's arithmetic (mcubert_linear_s8.c: store_channel_s8): clamp8(clamp16(
 * requantize(acc + bias)) + offset), through the shared fixed-point helpers. On MVE the row stays int8
 * and goes through the linear layers' pair4 gemm itself (one row, read in place: no widening needed).
 */
#include <stddef.h>

#include "mcubert_dsp.h"
#include "mcubert_fixed_point.h"
#include "mcubert_gemm_s8.h"
#include "mcubert_internal.h"

#define OP "MCUBERT_CLASSIFIER_HEAD"

typedef struct {
    int32_t pooled, widened, total;
} classifier_head_layout;

static void layout_of(int32_t d, classifier_head_layout *layout)
{
    int32_t offset = 0;
    layout->pooled = offset;
    offset += mcubert_align_up(d);
    layout->widened = offset;
    offset += mcubert_align_up(2 * d);
    layout->total = offset;
}

int32_t mcubert_classifier_head_get_buffer_size(int32_t seq_len, int32_t hidden, int32_t labels)
{
    classifier_head_layout layout;
    if (seq_len < 1 || seq_len > MCUBERT_MAX_SEQ_LEN || hidden < 1 || hidden > MCUBERT_MAX_HIDDEN || labels < 1 ||
        labels > MCUBERT_MAX_LABELS) {
        return -1;
    }
    layout_of(hidden, &layout);
    return layout.total;
}

static mcubert_status validate_options(const mcubert_classifier_head_params *p, mcubert_message *m)
{
    mcubert_status st;
    if ((st = mcubert_check_params(OP, p, m)) != MCUBERT_OK) {
        return st;
    }
    if ((st = mcubert_check_common_options(OP, p->spec_version, p->spec_hash, p->seq_len, p->hidden, m)) !=
            MCUBERT_OK ||
        (st = mcubert_check_range(OP, "labels", p->labels, 1, MCUBERT_MAX_LABELS, m)) != MCUBERT_OK ||
        (st = mcubert_check_zero_point(OP, "pooler_zero_point", p->pooler_zero_point, m)) != MCUBERT_OK ||
        (st = mcubert_check_zero_point(OP, "logits_zero_point", p->logits_zero_point, m)) != MCUBERT_OK) {
        return st;
    }
    return MCUBERT_OK; /* no cross-field rules (contract: _no_cross_field_rules) */
}

mcubert_status mcubert_classifier_head_validate(const mcubert_classifier_head_params *params,
                                                const mcubert_tensor_view *tensors, int32_t count,
                                                mcubert_message *message)
{
    const mcubert_tensor_view *t = tensors;
    mcubert_status st = validate_options(params, message);
    int64_t s, d, n;
    if (st != MCUBERT_OK || tensors == NULL) {
        return st;
    }
    if ((st = mcubert_check_count(OP, count, MCUBERT_CLASSIFIER_HEAD_NUM_TENSORS, message)) != MCUBERT_OK) {
        return st;
    }
    s = params->seq_len;
    d = params->hidden;
    n = params->labels;
    if ((st = mcubert_check_tensor(OP, "hidden", &t[MCUBERT_CLASSIFIER_HEAD_HIDDEN], MCUBERT_DTYPE_INT8, s * d,
                                   message)) != MCUBERT_OK ||
        (st = mcubert_check_linear(OP, "pooler_weights", &t[MCUBERT_CLASSIFIER_HEAD_POOLER_WEIGHTS], "pooler_channels",
                                   &t[MCUBERT_CLASSIFIER_HEAD_POOLER_CHANNELS], (int32_t)d, (int32_t)d, message)) !=
            MCUBERT_OK ||
        (st = mcubert_check_tensor(OP, "tanh_lut", &t[MCUBERT_CLASSIFIER_HEAD_TANH_LUT], MCUBERT_DTYPE_INT8, 256,
                                   message)) != MCUBERT_OK ||
        (st = mcubert_check_linear(OP, "classifier_weights", &t[MCUBERT_CLASSIFIER_HEAD_CLASSIFIER_WEIGHTS],
                                   "classifier_channels", &t[MCUBERT_CLASSIFIER_HEAD_CLASSIFIER_CHANNELS], (int32_t)n,
                                   (int32_t)d, message)) != MCUBERT_OK) {
        return st;
    }
    return mcubert_check_tensor(OP, "output", &t[MCUBERT_CLASSIFIER_HEAD_OUTPUT], MCUBERT_DTYPE_INT8, n, message);
}

/* One activation row against one pair4 layer (any K, any N): out[c] = clamp8(clamp16(
 * requantize(bias + x . w_c)) + offset), through `lut` when given. `widened` (DSP path):
 * int16[K] of scratch, 4-byte aligned. out must not overlap x (the pooler reads hidden and
 * writes pooled; the classifier reads pooled and writes logits). */
typedef struct {
    const int8_t *weights;
    const int32_t *channels;
    int32_t in_features;
    int32_t out_features;
    int32_t offset;
    const int8_t *lut;
} row_layer;

static inline int8_t output_s8(int32_t acc, const int32_t *ch, const row_layer *layer)
{
    const int8_t y = mcubert_clamp8(mcubert_clamp16_i32(mcubert_requantize(acc + ch[0], ch[1], ch[2])) + layer->offset);
    return layer->lut != NULL ? layer->lut[y + 128] : y;
}

#if MCUBERT_MVE

/* MVE: the one row through the linear layers' pair4 gemm (mcubert_gemm_s8_mve.c), read in place, 16 channels
 * a call. */
MCUBERT_NOINLINE static void row_linear_s8(const int8_t *x, const row_layer *layer, uint32_t *widened, int8_t *out)
{
    const int32_t stride = ((layer->in_features + 3) >> 2) * 8;
    int32_t acc[16][MCUBERT_BLOCK_ROWS];
    mcubert_rows rows;
    int32_t c, j;
    mcubert_rows_init_s8(&rows, x, layer->in_features, 1, layer->in_features);
    mcubert_rows_widen_pair4(&rows, widened); /* one contiguous int8 row: nothing copied */
    for (c = 0; c < layer->out_features; c += 16) {
        const int32_t chunk = mcubert_min_i32(16, layer->out_features - c);
        mcubert_gemm_4xn_pair4(&rows, layer->weights + (c >> 1) * stride, stride, chunk, acc);
        for (j = 0; j < chunk; ++j) {
            out[c + j] = output_s8(acc[j][0], layer->channels + 3 * (c + j), layer);
        }
    }
}

#elif MCUBERT_DSP

/* x[0..K) -> widened[2g] = (x4g, x4g+2), widened[2g + 1] = (x4g+1, x4g+3) for full groups g. */
static void widen_row(const int8_t *x, int32_t groups, uint32_t *widened)
{
    int32_t g;
    for (g = 0; g < groups; ++g, x += 4, widened += 2) {
        const uint32_t word = mcubert_read_u32(x);
        widened[0] = mcubert_sxtb16(word);
        widened[1] = mcubert_sxtb16_ror8(word);
    }
}

MCUBERT_NOINLINE static void row_linear_s8(const int8_t *x, const row_layer *layer, uint32_t *widened, int8_t *out)
{
    const int32_t k_len = layer->in_features;
    const int32_t n = layer->out_features;
    const int32_t groups = k_len >> 2;
    const int32_t stride = ((k_len + 3) >> 2) * 8;
    int32_t c;
    widen_row(x, groups, widened);
    for (c = 0; c < n; c += 2) {
        const int8_t *group = layer->weights + (c >> 1) * stride;
        const int8_t *w = group;
        const uint32_t *xw = widened;
        int32_t a0 = 0, a1 = 0;
        int32_t g, k;
        for (g = 0; g < groups; ++g, w += 8, xw += 2) {
            const uint32_t w0 = mcubert_read_u32(w), w1 = mcubert_read_u32(w + 4);
            a0 = mcubert_smlad(mcubert_sxtb16(w0), xw[0], a0);
            a0 = mcubert_smlad(mcubert_sxtb16_ror8(w0), xw[1], a0);
            a1 = mcubert_smlad(mcubert_sxtb16(w1), xw[0], a1);
            a1 = mcubert_smlad(mcubert_sxtb16_ror8(w1), xw[1], a1);
        }
        /* K % 4 tail: the last group's lanes, read in place. */
        for (k = groups << 2; k < k_len; ++k) {
            const int8_t *wk = group + 2 * k - (k & 3);
            a0 += x[k] * wk[0];
            a1 += x[k] * wk[4];
        }
        out[c] = output_s8(a0, layer->channels + 3 * c, layer);
        if (c + 1 < n) {
            out[c + 1] = output_s8(a1, layer->channels + 3 * (c + 1), layer);
        }
    }
}

#else /* plain */

MCUBERT_NOINLINE static void row_linear_s8(const int8_t *x, const row_layer *layer, uint32_t *widened, int8_t *out)
{
    const int32_t k_len = layer->in_features;
    const int32_t n = layer->out_features;
    const int32_t stride = ((k_len + 3) >> 2) * 8;
    int32_t c;
    (void)widened;
    for (c = 0; c < n; c += 2) {
        const int8_t *group = layer->weights + (c >> 1) * stride;
        int32_t a0 = 0, a1 = 0;
        int32_t k;
        for (k = 0; k + 4 <= k_len; k += 4) {
            const int8_t *w = group + 2 * k;
            a0 += x[k] * w[0] + x[k + 1] * w[1] + x[k + 2] * w[2] + x[k + 3] * w[3];
            a1 += x[k] * w[4] + x[k + 1] * w[5] + x[k + 2] * w[6] + x[k + 3] * w[7];
        }
        for (; k < k_len; ++k) {
            const int8_t *w = group + 2 * k - (k & 3);
            a0 += x[k] * w[0];
            a1 += x[k] * w[4];
        }
        out[c] = output_s8(a0, layer->channels + 3 * c, layer);
        if (c + 1 < n) {
            out[c + 1] = output_s8(a1, layer->channels + 3 * (c + 1), layer);
        }
    }
}

#endif /* MCUBERT_MVE, MCUBERT_DSP */

mcubert_status mcubert_classifier_head_s8(const mcubert_classifier_head_params *params,
                                          const mcubert_classifier_head_weights *weights, const int8_t *hidden,
                                          int8_t *logits, const mcubert_context *context, mcubert_message *message)
{
    classifier_head_layout layout;
    row_layer pooler, classifier;
    int8_t *scratch;
    int8_t *pooled;
    uint32_t *widened;
    mcubert_status st = validate_options(params, message);
    if (st != MCUBERT_OK) {
        return st;
    }
    if (weights == NULL || weights->pooler_weights == NULL || weights->pooler_channels == NULL ||
        weights->tanh_lut == NULL || weights->classifier_weights == NULL || weights->classifier_channels == NULL ||
        hidden == NULL || logits == NULL) {
        return mcubert_fail_text(message, MCUBERT_ERROR_ARGUMENT, OP,
                                 hidden == NULL   ? "hidden"
                                 : logits == NULL ? "logits"
                                                  : "weights",
                                 "NULL pointer");
    }
    layout_of(params->hidden, &layout);
    if ((st = mcubert_check_context(OP, context, layout.total, message)) != MCUBERT_OK) {
        return st;
    }
    scratch = (int8_t *)context->buf;
    pooled = scratch + layout.pooled;
    widened = (uint32_t *)(void *)(scratch + layout.widened);

    pooler.weights = weights->pooler_weights;
    pooler.channels = weights->pooler_channels;
    pooler.in_features = params->hidden;
    pooler.out_features = params->hidden;
    pooler.offset = params->pooler_zero_point;
    pooler.lut = weights->tanh_lut; /* index a[c] + 128 -> pooled[c] */
    classifier.weights = weights->classifier_weights;
    classifier.channels = weights->classifier_channels;
    classifier.in_features = params->hidden;
    classifier.out_features = params->labels;
    classifier.offset = params->logits_zero_point;
    classifier.lut = NULL;

    row_linear_s8(hidden, &pooler, widened, pooled); /* row 0 only: the [CLS] token */
    row_linear_s8(pooled, &classifier, widened, logits);
    return MCUBERT_OK;
}
