/*
 * MCUBERT_DECODER_MLP (SPEC 4.7; reference ops/decoder_mlp.py): a decoder's pre-LayerNorm MLP for one
 * token, in place on its residual stream:
 *
 *   z = (x - zp) << R;  a = LN2(z);  f = lut[clamp8(requantize(fc1(a)) + zp_fc1) + 128]
 *   z' = clamp16(requantize(fc2(f)) + z);  x' = clamp8(rsh(z', R') + zp')
 *
 * The encoder MLP's building blocks in the other order (LayerNorm first): the gemm rows (one row,
 * DSP or plain as built), the activation table, the pre-norm sum with the residual. Scratch (the spec's
 * layout): `residual` int16[d], `normed` int8[d], `intermediate` int8[ffn], `widened` int16[4][max(d, ffn)].
 */
#include <stddef.h>

#include "mcubert_fixed_point.h"
#include "mcubert_gemm_s8.h"
#include "mcubert_internal.h"

#define OP "MCUBERT_DECODER_MLP"

typedef struct {
    int32_t residual, normed, intermediate, widened, total;
} decoder_mlp_layout;

static void layout_of(int32_t d, int32_t f, decoder_mlp_layout *layout)
{
    int32_t offset = 0;
    layout->residual = offset;
    offset += mcubert_align_up(2 * d);
    layout->normed = offset;
    offset += mcubert_align_up(d);
    layout->intermediate = offset;
    offset += mcubert_align_up(f);
    layout->widened = offset;
    offset += mcubert_align_up(2 * MCUBERT_BLOCK_ROWS * mcubert_max_i32(d, f));
    layout->total = offset;
}

int32_t mcubert_decoder_mlp_get_buffer_size(int32_t hidden, int32_t ffn)
{
    decoder_mlp_layout layout;
    if (hidden < 1 || hidden > MCUBERT_MAX_HIDDEN || ffn < 1 || ffn > MCUBERT_MAX_FFN) {
        return -1;
    }
    layout_of(hidden, ffn, &layout);
    return layout.total;
}

static mcubert_status validate_options(const mcubert_decoder_mlp_params *p, mcubert_message *m)
{
    mcubert_status st;
    if ((st = mcubert_check_params(OP, p, m)) != MCUBERT_OK ||
        (st = mcubert_check_spec(OP, p->spec_version, p->spec_hash, m)) != MCUBERT_OK ||
        (st = mcubert_check_range(OP, "hidden", p->hidden, 1, MCUBERT_MAX_HIDDEN, m)) != MCUBERT_OK ||
        (st = mcubert_check_range(OP, "ffn", p->ffn, 1, MCUBERT_MAX_FFN, m)) != MCUBERT_OK ||
        (st = mcubert_check_zero_point(OP, "fc1_output_zero_point", p->fc1_output_zero_point, m)) != MCUBERT_OK ||
        (st = mcubert_check_ln_eps(OP, p->ln_eps, m)) != MCUBERT_OK) {
        return st;
    }
    return mcubert_check_int4_layers(OP, p->int4_layers, 2, 8, p->spec_version, MCUBERT_DECODER_MLP_INT4_LAYERS_SINCE,
                                     m);
}

mcubert_status mcubert_decoder_mlp_validate(const mcubert_decoder_mlp_params *params,
                                            const mcubert_tensor_view *tensors, int32_t count, mcubert_message *message)
{
    const mcubert_tensor_view *t = tensors;
    mcubert_status st = validate_options(params, message);
    int32_t d, f;
    if (st != MCUBERT_OK || tensors == NULL) {
        return st;
    }
    if ((st = mcubert_check_count(OP, count, MCUBERT_DECODER_MLP_NUM_TENSORS, message)) != MCUBERT_OK) {
        return st;
    }
    d = params->hidden;
    f = params->ffn;
    if ((st = mcubert_check_tensor(OP, "hidden", &t[MCUBERT_DECODER_MLP_HIDDEN], MCUBERT_DTYPE_INT8, d, message)) !=
            MCUBERT_OK ||
        (st = mcubert_check_tensor(OP, "layer_norm", &t[MCUBERT_DECODER_MLP_LAYER_NORM], MCUBERT_DTYPE_INT32, 2 * d,
                                   message)) != MCUBERT_OK ||
        (st = mcubert_check_linear_bits(OP, "fc1_weights", &t[MCUBERT_DECODER_MLP_FC1_WEIGHTS], "fc1_channels",
                                        &t[MCUBERT_DECODER_MLP_FC1_CHANNELS], f, d,
                                        mcubert_layer_width(params->int4_layers, 0, 8), message)) != MCUBERT_OK ||
        (st = mcubert_check_tensor(OP, "activation_lut", &t[MCUBERT_DECODER_MLP_ACTIVATION_LUT], MCUBERT_DTYPE_INT8,
                                   256, message)) != MCUBERT_OK ||
        (st = mcubert_check_linear_bits(OP, "fc2_weights", &t[MCUBERT_DECODER_MLP_FC2_WEIGHTS], "fc2_channels",
                                        &t[MCUBERT_DECODER_MLP_FC2_CHANNELS], d, f,
                                        mcubert_layer_width(params->int4_layers, 1, 8), message)) != MCUBERT_OK ||
        (st = mcubert_check_residual_tensor(OP, "residual", &t[MCUBERT_DECODER_MLP_RESIDUAL], d, message)) !=
            MCUBERT_OK ||
        (st = mcubert_check_residual_tensor(OP, "output_residual", &t[MCUBERT_DECODER_MLP_OUTPUT_RESIDUAL], d,
                                            message)) != MCUBERT_OK) {
        return st;
    }
    return mcubert_check_tensor(OP, "output", &t[MCUBERT_DECODER_MLP_OUTPUT], MCUBERT_DTYPE_INT8, d, message);
}

mcubert_status mcubert_decoder_mlp_s8(const mcubert_decoder_mlp_params *params,
                                      const mcubert_decoder_mlp_weights *weights, int8_t *hidden,
                                      const mcubert_context *context, mcubert_message *message)
{
    decoder_mlp_layout layout;
    mcubert_linear fc1, fc2;
    mcubert_rows rows;
    int8_t *scratch;
    int16_t *z;
    uint32_t *widened;
    int32_t d, f;
    mcubert_status st = validate_options(params, message);
    if (st != MCUBERT_OK) {
        return st;
    }
    if (weights == NULL || weights->layer_norm == NULL || weights->fc1_weights == NULL ||
        weights->fc1_channels == NULL || weights->activation_lut == NULL || weights->fc2_weights == NULL ||
        weights->fc2_channels == NULL || weights->residual == NULL || weights->output_residual == NULL ||
        hidden == NULL) {
        return mcubert_fail_text(message, MCUBERT_ERROR_ARGUMENT, OP, hidden == NULL ? "hidden" : "weights",
                                 "NULL pointer");
    }
    d = params->hidden;
    f = params->ffn;
    layout_of(d, f, &layout);
    if ((st = mcubert_check_context(OP, context, layout.total, message)) != MCUBERT_OK) {
        return st;
    }
    scratch = (int8_t *)context->buf;
    z = (int16_t *)(void *)(scratch + layout.residual);
    widened = (uint32_t *)(void *)(scratch + layout.widened);
    fc1 = mcubert_linear_of(weights->fc1_weights, weights->fc1_channels, d, f,
                            mcubert_layer_width(params->int4_layers, 0, 8));
    fc2 = mcubert_linear_of(weights->fc2_weights, weights->fc2_channels, f, d,
                            mcubert_layer_width(params->int4_layers, 1, 8));

    mcubert_stream_to_z(hidden, weights->residual, d, z);
    mcubert_layer_norm_s8(z, d, weights->layer_norm, params->ln_eps, scratch + layout.normed);
    mcubert_rows_init_s8(&rows, scratch + layout.normed, d, 1, d);
    mcubert_linear_widen(&rows, &fc1, widened);
    mcubert_linear_to_s8(&rows, &fc1, 0, f, params->fc1_output_zero_point, weights->activation_lut,
                         scratch + layout.intermediate, f, 1);
    mcubert_rows_init_s8(&rows, scratch + layout.intermediate, f, 1, f);
    mcubert_linear_widen(&rows, &fc2, widened);
    mcubert_linear_residual_to_s16(&rows, &fc2, hidden, weights->residual, z);
    mcubert_stream_from_z(z, weights->output_residual, d, hidden);
    return MCUBERT_OK;
}
