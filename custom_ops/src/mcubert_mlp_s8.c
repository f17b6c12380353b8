/*
 * MCUBERT_MLP (SPEC 4.3; reference ops/mlp.py): FC1, activation table, FC2, residual and
 * LayerNorm, tiled along tokens and in place on hidden[s][d]:
 *
 *   for each tile T of t tokens, in blocks of 4 rows:
 *       a = activation_lut[clamp8(requantize(fc1(x[T])) + fc1_output_zero_point) + 128]   [t][f]
 *       z = clamp16(requantize(fc2(a)) + ((x[T] - zp[c]) << R[c]))                          [t][d]
 *       x[T] = LayerNorm(z)
 */
#include <stddef.h>

#include "mcubert_fixed_point.h"
#include "mcubert_internal.h"

#define OP "MCUBERT_MLP"

void mcubert_mlp_layout_of(int32_t s, int32_t d, int32_t f, int32_t t, mcubert_mlp_layout *layout)
{
    int32_t offset = 0;
    (void)s;
    layout->intermediate = offset;
    offset += mcubert_align_up(t * f);
    layout->residual = offset;
    offset += mcubert_align_up(2 * t * d);
    layout->widened = offset;
    offset += mcubert_align_up(8 * mcubert_max_i32(d, f));
    layout->total = offset;
}

int32_t mcubert_mlp_get_buffer_size(int32_t seq_len, int32_t hidden, int32_t ffn, int32_t tile)
{
    mcubert_mlp_layout layout;
    if (seq_len < 1 || seq_len > MCUBERT_MAX_SEQ_LEN || hidden < 1 || hidden > MCUBERT_MAX_HIDDEN || ffn < 1 ||
        ffn > MCUBERT_MAX_FFN || tile < 1 || tile > seq_len) {
        return -1;
    }
    mcubert_mlp_layout_of(seq_len, hidden, ffn, tile, &layout);
    return layout.total;
}

static mcubert_status validate_options(const mcubert_mlp_params *p, mcubert_message *m)
{
    mcubert_status st;
    if ((st = mcubert_check_params(OP, p, m)) != MCUBERT_OK) {
        return st;
    }
    if ((st = mcubert_check_common_options(OP, p->spec_version, p->spec_hash, p->seq_len, p->hidden, m)) !=
            MCUBERT_OK ||
        (st = mcubert_check_range(OP, "ffn", p->ffn, 1, MCUBERT_MAX_FFN, m)) != MCUBERT_OK ||
        (st = mcubert_check_range(OP, "tile", p->tile, 1, MCUBERT_MAX_SEQ_LEN, m)) != MCUBERT_OK ||
        (st = mcubert_check_zero_point(OP, "fc1_output_zero_point", p->fc1_output_zero_point, m)) != MCUBERT_OK ||
        (st = mcubert_check_ln_eps(OP, p->ln_eps, m)) != MCUBERT_OK ||
        (st = mcubert_check_weight_bits(OP, p->weight_bits, p->spec_version, MCUBERT_MLP_WEIGHT_BITS_SINCE, m)) !=
            MCUBERT_OK ||
        (st = mcubert_check_int4_layers(OP, p->int4_layers, 2, p->weight_bits, p->spec_version,
                                        MCUBERT_MLP_INT4_LAYERS_SINCE, m)) != MCUBERT_OK) {
        return st;
    }
    return mcubert_check_tile(OP, p->tile, p->seq_len, m);
}

mcubert_status mcubert_mlp_validate(const mcubert_mlp_params *params, const mcubert_tensor_view *tensors, int32_t count,
                                    mcubert_message *message)
{
    const mcubert_tensor_view *t = tensors;
    mcubert_status st = validate_options(params, message);
    int64_t s, d, f;
    if (st != MCUBERT_OK || tensors == NULL) {
        return st;
    }
    if ((st = mcubert_check_count(OP, count, MCUBERT_MLP_NUM_TENSORS, message)) != MCUBERT_OK) {
        return st;
    }
    s = params->seq_len;
    d = params->hidden;
    f = params->ffn;
    if ((st = mcubert_check_tensor(OP, "hidden", &t[MCUBERT_MLP_HIDDEN], MCUBERT_DTYPE_INT8, s * d, message)) !=
            MCUBERT_OK ||
        (st = mcubert_check_linear_bits(
             OP, "fc1_weights", &t[MCUBERT_MLP_FC1_WEIGHTS], "fc1_channels", &t[MCUBERT_MLP_FC1_CHANNELS], (int32_t)f,
             (int32_t)d, mcubert_layer_width(params->int4_layers, 0, params->weight_bits), message)) != MCUBERT_OK ||
        (st = mcubert_check_tensor(OP, "activation_lut", &t[MCUBERT_MLP_ACTIVATION_LUT], MCUBERT_DTYPE_INT8, 256,
                                   message)) != MCUBERT_OK ||
        (st = mcubert_check_linear_bits(
             OP, "fc2_weights", &t[MCUBERT_MLP_FC2_WEIGHTS], "fc2_channels", &t[MCUBERT_MLP_FC2_CHANNELS], (int32_t)d,
             (int32_t)f, mcubert_layer_width(params->int4_layers, 1, params->weight_bits), message)) != MCUBERT_OK ||
        (st = mcubert_check_tensor(OP, "layer_norm", &t[MCUBERT_MLP_LAYER_NORM], MCUBERT_DTYPE_INT32, 2 * d,
                                   message)) != MCUBERT_OK ||
        (st = mcubert_check_residual_tensor(OP, "residual", &t[MCUBERT_MLP_RESIDUAL], (int32_t)d, message)) !=
            MCUBERT_OK) {
        return st;
    }
    return mcubert_check_tensor(OP, "output", &t[MCUBERT_MLP_OUTPUT], MCUBERT_DTYPE_INT8, s * d, message);
}

/* One tile of t0 + [0, n) tokens: FC1 + activation into `intermediate`, FC2 + residual into
 * `residual`, LayerNorm back into the tile's rows of hidden. */
MCUBERT_NOINLINE static void mlp_tile(const mcubert_mlp_params *params, const mcubert_mlp_weights *weights,
                                      int8_t *hidden, int32_t t0, int32_t n, int8_t *intermediate, int16_t *residual,
                                      uint32_t *widened)
{
    const int32_t d = params->hidden;
    const int32_t f = params->ffn;
    const mcubert_linear fc1 = mcubert_linear_of(weights->fc1_weights, weights->fc1_channels, d, f,
                                                 mcubert_layer_width(params->int4_layers, 0, params->weight_bits));
    const mcubert_linear fc2 = mcubert_linear_of(weights->fc2_weights, weights->fc2_channels, f, d,
                                                 mcubert_layer_width(params->int4_layers, 1, params->weight_bits));
    int32_t r0, r;
    for (r0 = 0; r0 < n; r0 += MCUBERT_BLOCK_ROWS) {
        mcubert_rows rows;
        mcubert_rows_init_s8(&rows, hidden + (t0 + r0) * d, d, mcubert_min_i32(MCUBERT_BLOCK_ROWS, n - r0), d);
        mcubert_linear_widen(&rows, &fc1, widened);
        mcubert_linear_to_s8(&rows, &fc1, 0, f, params->fc1_output_zero_point, weights->activation_lut,
                             intermediate + r0 * f, f, 1);
    }
    for (r0 = 0; r0 < n; r0 += MCUBERT_BLOCK_ROWS) {
        mcubert_rows rows;
        mcubert_rows_init_s8(&rows, intermediate + r0 * f, f, mcubert_min_i32(MCUBERT_BLOCK_ROWS, n - r0), f);
        mcubert_linear_widen(&rows, &fc2, widened);
        mcubert_linear_residual_to_s16(&rows, &fc2, hidden + (t0 + r0) * d, weights->residual, residual + r0 * d);
    }
    for (r = 0; r < n; ++r) {
        mcubert_layer_norm_s8(residual + r * d, d, weights->layer_norm, params->ln_eps, hidden + (t0 + r) * d);
    }
}

mcubert_status mcubert_mlp_s8(const mcubert_mlp_params *params, const mcubert_mlp_weights *weights, int8_t *hidden,
                              const mcubert_context *context, mcubert_message *message)
{
    mcubert_mlp_layout layout;
    int8_t *scratch;
    int32_t t0;
    mcubert_status st = validate_options(params, message);
    if (st != MCUBERT_OK) {
        return st;
    }
    if (weights == NULL || weights->fc1_weights == NULL || weights->fc1_channels == NULL ||
        weights->activation_lut == NULL || weights->fc2_weights == NULL || weights->fc2_channels == NULL ||
        weights->layer_norm == NULL || weights->residual == NULL || hidden == NULL) {
        return mcubert_fail_text(message, MCUBERT_ERROR_ARGUMENT, OP, hidden == NULL ? "hidden" : "weights",
                                 "NULL pointer");
    }
    mcubert_mlp_layout_of(params->seq_len, params->hidden, params->ffn, params->tile, &layout);
    if ((st = mcubert_check_context(OP, context, layout.total, message)) != MCUBERT_OK) {
        return st;
    }
    scratch = (int8_t *)context->buf;
    for (t0 = 0; t0 < params->seq_len; t0 += params->tile) {
        mlp_tile(params, weights, hidden, t0, mcubert_min_i32(params->tile, params->seq_len - t0),
                 scratch + layout.intermediate, (int16_t *)(void *)(scratch + layout.residual),
                 (uint32_t *)(void *)(scratch + layout.widened));
    }
    return MCUBERT_OK;
}
