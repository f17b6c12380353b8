/*
 * MCUBERT_SAMPLE (SPEC 4.9; reference ops/sample.py): a decoder's next token drawn from the LM head's k
 * candidates, in place on top[2][k] (ids best first, then their scores):
 *
 *   state  = state + 0x6D2B79F5;  u = mix(state + seed)                  mulberry32, uint32
 *   w_i    = exp_lut[min(255, requantize(clamp32(score_0 - score_i), M, shift))]     i < keep
 *   c_i    = w_0 + ... + w_i;  m = first i with c_i * 2^15 >= top_p * c_(keep-1)
 *   r      = (u * c_m) >> 32;  drawn = first i with c_i > r;  rotate top[:, 0..drawn] right by one
 *
 * One scalar body for every core: a few operations for each of at most 256 candidates, against the LM head's
 * scoring of the whole vocabulary, so neither a DSP nor an MVE path would show. Scratch: the running sums c_i.
 */
#include <stddef.h>

#include "mcubert_fixed_point.h"
#include "mcubert_internal.h"

#define OP "MCUBERT_SAMPLE"
#define LUT_SIZE 256
#define EXP_ONE (1 << 14)
#define TOP_P_ONE (1 << 15)
#define STATE_STEP 0x6D2B79F5u

int32_t mcubert_sample_get_buffer_size(int32_t top_k)
{
    if (top_k < 1 || top_k > MCUBERT_MAX_TOP_K) {
        return -1;
    }
    return mcubert_align_up(4 * top_k);
}

static mcubert_status validate_options(const mcubert_sample_params *p, mcubert_message *m)
{
    mcubert_status st;
    if ((st = mcubert_check_params(OP, p, m)) != MCUBERT_OK ||
        (st = mcubert_check_spec(OP, p->spec_version, p->spec_hash, m)) != MCUBERT_OK ||
        (st = mcubert_check_range(OP, "top_k", p->top_k, 1, MCUBERT_MAX_TOP_K, m)) != MCUBERT_OK ||
        (st = mcubert_check_range(OP, "keep", p->keep, 1, MCUBERT_MAX_TOP_K, m)) != MCUBERT_OK ||
        (st = mcubert_check_range(OP, "top_p", p->top_p, 1, TOP_P_ONE, m)) != MCUBERT_OK) {
        return st;
    }
    if (p->keep > p->top_k) {
        st = mcubert_fail(m, MCUBERT_ERROR_OPTION, OP, "keep");
        mcubert_append_int(m, p->keep);
        mcubert_append(m, " exceeds top_k ");
        mcubert_append_int(m, p->top_k);
        return st;
    }
    {
        const int32_t requant[2] = {p->index_multiplier, p->index_shift};
        return mcubert_check_requant(OP, "index_multiplier", requant, 1, m);
    }
}

/* Entries in [0, EXP_ONE], entry 0 = EXP_ONE (the best candidate's weight, so the kept total is > 0). */
static mcubert_status check_exp_lut(const int16_t *lut, mcubert_message *m)
{
    int32_t j;
    if (lut[0] != EXP_ONE) {
        return mcubert_fail_text(m, MCUBERT_ERROR_TENSOR, OP, "exp_lut", "entry 0 must be EXP_ONE = 16384");
    }
    for (j = 1; j < LUT_SIZE; ++j) {
        if (lut[j] < 0 || lut[j] > EXP_ONE) {
            return mcubert_fail_text(m, MCUBERT_ERROR_TENSOR, OP, "exp_lut", "entries must be in [0, 16384]");
        }
    }
    return MCUBERT_OK;
}

mcubert_status mcubert_sample_validate(const mcubert_sample_params *params, const mcubert_tensor_view *tensors,
                                       int32_t count, mcubert_message *message)
{
    const mcubert_tensor_view *t = tensors;
    mcubert_status st = validate_options(params, message);
    if (st != MCUBERT_OK || tensors == NULL) {
        return st;
    }
    if ((st = mcubert_check_count(OP, count, MCUBERT_SAMPLE_NUM_TENSORS, message)) != MCUBERT_OK ||
        (st = mcubert_check_tensor(OP, "top", &t[MCUBERT_SAMPLE_TOP], MCUBERT_DTYPE_INT32, 2 * params->top_k,
                                   message)) != MCUBERT_OK ||
        (st = mcubert_check_tensor(OP, "rng_state", &t[MCUBERT_SAMPLE_RNG_STATE], MCUBERT_DTYPE_INT32, 1, message)) !=
            MCUBERT_OK ||
        (st = mcubert_check_tensor(OP, "exp_lut", &t[MCUBERT_SAMPLE_EXP_LUT], MCUBERT_DTYPE_INT16, LUT_SIZE,
                                   message)) != MCUBERT_OK) {
        return st;
    }
    if (t[MCUBERT_SAMPLE_EXP_LUT].data != NULL &&
        (st = check_exp_lut((const int16_t *)t[MCUBERT_SAMPLE_EXP_LUT].data, message)) != MCUBERT_OK) {
        return st;
    }
    return mcubert_check_tensor(OP, "output", &t[MCUBERT_SAMPLE_OUTPUT], MCUBERT_DTYPE_INT32, 2 * params->top_k,
                                message);
}

/* mulberry32's output function (Tommy Ettinger), uint32 arithmetic. */
static uint32_t mix(uint32_t z)
{
    z = (z ^ (z >> 15)) * (z | 1u);
    z ^= z + (z ^ (z >> 7)) * (z | 61u);
    return z ^ (z >> 14);
}

/* c_i of the best `keep` candidates; returns m, the last index top-p keeps. */
static int32_t cumulative_weights(const mcubert_sample_params *p, const int16_t *lut, const int32_t *scores,
                                  uint32_t *cumulative)
{
    uint32_t sum = 0;
    int32_t i;
    for (i = 0; i < p->keep; ++i) {
        const int64_t difference = (int64_t)scores[0] - scores[i];
        const int32_t clamped = difference < 0 ? 0 : difference > INT32_MAX ? INT32_MAX : (int32_t)difference;
        const int32_t index = mcubert_requantize(clamped, p->index_multiplier, p->index_shift);
        const int16_t weight = lut[index < LUT_SIZE - 1 ? index : LUT_SIZE - 1];
        sum += weight > 0 ? (uint32_t)weight : 0u; /* (validate refuses negative entries) */
        cumulative[i] = sum;
    }
    for (i = 0; i < p->keep - 1; ++i) {
        if ((uint64_t)cumulative[i] * TOP_P_ONE >= (uint64_t)(uint32_t)p->top_p * sum) {
            break;
        }
    }
    return i;
}

mcubert_status mcubert_sample_s8(const mcubert_sample_params *params, const mcubert_sample_weights *weights,
                                 int32_t *top, int32_t *rng_state, const mcubert_context *context,
                                 mcubert_message *message)
{
    uint32_t *cumulative, state, r;
    int32_t kept, drawn, i;
    mcubert_status st = validate_options(params, message);
    if (st != MCUBERT_OK) {
        return st;
    }
    if (weights == NULL || weights->exp_lut == NULL || top == NULL || rng_state == NULL) {
        return mcubert_fail_text(message, MCUBERT_ERROR_ARGUMENT, OP,
                                 top == NULL         ? "top"
                                 : rng_state == NULL ? "rng_state"
                                                     : "weights",
                                 "NULL pointer");
    }
    if ((st = mcubert_check_context(OP, context, mcubert_sample_get_buffer_size(params->top_k), message)) !=
        MCUBERT_OK) {
        return st;
    }
    cumulative = (uint32_t *)context->buf;
    state = (uint32_t)*rng_state + STATE_STEP;
    *rng_state = (int32_t)state;
    kept = cumulative_weights(params, weights->exp_lut, top + params->top_k, cumulative);
    r = (uint32_t)(((uint64_t)mix(state + params->seed) * cumulative[kept]) >> 32);
    for (drawn = 0; drawn < kept && cumulative[drawn] <= r; ++drawn) {
    }
    {
        const int32_t id = top[drawn], score = top[params->top_k + drawn];
        for (i = drawn; i > 0; --i) {
            top[i] = top[i - 1];
            top[params->top_k + i] = top[params->top_k + i - 1];
        }
        top[0] = id;
        top[params->top_k] = score;
    }
    return MCUBERT_OK;
}
