/*
 * Error messages and the checks every op's validate step shares. Messages follow the Python
 * reference ("OP: field: problem", same wording for options), built without printf.
 */
#include <stddef.h>
#include <stdint.h>

#include "mcubert_internal.h"

#define BIAS_LIMIT ((int32_t)1 << 30)
#define MULTIPLIER_MIN ((int32_t)1 << 30)

void mcubert_append(mcubert_message *message, const char *text)
{
    size_t len = 0;
    if (message == NULL) {
        return;
    }
    while (len < MCUBERT_MESSAGE_CAPACITY - 1 && message->text[len] != '\0') {
        ++len;
    }
    while (len < MCUBERT_MESSAGE_CAPACITY - 1 && *text != '\0') {
        message->text[len++] = *text++;
    }
    message->text[len] = '\0';
}

void mcubert_append_int(mcubert_message *message, int64_t value)
{
    char digits[24];
    char *p = digits + sizeof digits - 1;
    /* Magnitude in uint64: INT64_MIN has no positive int64. */
    uint64_t magnitude = value < 0 ? (uint64_t)0 - (uint64_t)value : (uint64_t)value;
    *p = '\0';
    do {
        *--p = (char)('0' + (int)(magnitude % 10u));
        magnitude /= 10u;
    } while (magnitude != 0u);
    if (value < 0) {
        *--p = '-';
    }
    mcubert_append(message, p);
}

void mcubert_append_hex(mcubert_message *message, uint32_t value)
{
    static const char hex[] = "0123456789abcdef";
    char text[11];
    int i;
    text[0] = '0';
    text[1] = 'x';
    for (i = 0; i < 8; ++i) {
        text[2 + i] = hex[(value >> (28 - 4 * i)) & 0xFu];
    }
    text[10] = '\0';
    mcubert_append(message, text);
}

mcubert_status mcubert_fail(mcubert_message *message, mcubert_status status, const char *op, const char *field)
{
    if (message != NULL) {
        message->text[0] = '\0';
        mcubert_append(message, op);
        mcubert_append(message, ": ");
        mcubert_append(message, field);
        mcubert_append(message, ": ");
    }
    return status;
}

mcubert_status mcubert_fail_text(mcubert_message *message, mcubert_status status, const char *op, const char *field,
                                 const char *text)
{
    mcubert_fail(message, status, op, field);
    mcubert_append(message, text);
    return status;
}

const char *mcubert_status_name(mcubert_status status)
{
    switch (status) {
    case MCUBERT_OK: return "ok";
    case MCUBERT_ERROR_ARGUMENT: return "argument";
    case MCUBERT_ERROR_SPEC: return "spec";
    case MCUBERT_ERROR_OPTION: return "option";
    case MCUBERT_ERROR_TENSOR: return "tensor";
    case MCUBERT_ERROR_INPUT: return "input";
    case MCUBERT_ERROR_MODEL: return "model";
    case MCUBERT_UNVERIFIED: return "unverified";
    }
    return "unknown";
}

/* The (version, hash) pairs each op reads, from the generated contract (SPEC.md section 8). */
typedef struct {
    int32_t version;
    uint32_t hash;
} spec_version_entry;

typedef struct {
    const char *code;
    const spec_version_entry *versions;
    uint32_t count;
} op_spec_versions;

#define SPEC_ENTRY(version, hash) {version, hash},
#define OP_VERSIONS(lower, upper, code)                                                                                \
    static const spec_version_entry lower##_versions[] = {MCUBERT_##upper##_SPEC_VERSIONS(SPEC_ENTRY)};
MCUBERT_OPS(OP_VERSIONS)
#define OP_ENTRY(lower, upper, code) {code, lower##_versions, sizeof lower##_versions / sizeof lower##_versions[0]},
static const op_spec_versions op_versions[] = {MCUBERT_OPS(OP_ENTRY)};

static int same_text(const char *a, const char *b)
{
    while (*a != '\0' && *a == *b) {
        ++a;
        ++b;
    }
    return *a == *b;
}

static const op_spec_versions *versions_of(const char *op)
{
    uint32_t i;
    for (i = 0; i < sizeof op_versions / sizeof op_versions[0]; ++i) {
        if (same_text(op_versions[i].code, op)) {
            return &op_versions[i];
        }
    }
    return NULL;
}

mcubert_status mcubert_check_spec(const char *op, int32_t version, uint32_t hash, mcubert_message *message)
{
    const op_spec_versions *known = versions_of(op);
    uint32_t i;
    mcubert_status st;
    if (known == NULL) {
        return mcubert_fail_text(message, MCUBERT_ERROR_SPEC, op, "spec_version", "not an op of this build");
    }
    for (i = 0; i < known->count && known->versions[i].version != version; ++i) {
    }
    /* Version first: a newer model should read "unsupported version", not a hash mismatch. */
    if (i == known->count) {
        st = mcubert_fail(message, MCUBERT_ERROR_SPEC, op, "spec_version");
        mcubert_append(message, "unsupported version ");
        mcubert_append_int(message, version);
        mcubert_append(message, " (this build implements ");
        for (i = 0; i < known->count; ++i) {
            mcubert_append(message, i == 0 ? "" : " and ");
            mcubert_append_int(message, known->versions[i].version);
        }
        mcubert_append(message, ")");
        return st;
    }
    if (hash != known->versions[i].hash) {
        st = mcubert_fail(message, MCUBERT_ERROR_SPEC, op, "spec_hash");
        mcubert_append_hex(message, hash);
        mcubert_append(message, " does not match this build's contract ");
        mcubert_append_hex(message, known->versions[i].hash);
        return st;
    }
    return MCUBERT_OK;
}

mcubert_status mcubert_check_range(const char *op, const char *field, int64_t value, int64_t lo, int64_t hi,
                                   mcubert_message *message)
{
    if (value < lo || value > hi) {
        mcubert_status st = mcubert_fail(message, MCUBERT_ERROR_OPTION, op, field);
        mcubert_append_int(message, value);
        mcubert_append(message, " is outside [");
        mcubert_append_int(message, lo);
        mcubert_append(message, ", ");
        mcubert_append_int(message, hi);
        mcubert_append(message, "]");
        return st;
    }
    return MCUBERT_OK;
}

mcubert_status mcubert_check_params(const char *op, const void *params, mcubert_message *message)
{
    return params == NULL ? mcubert_fail_text(message, MCUBERT_ERROR_ARGUMENT, op, "params", "NULL") : MCUBERT_OK;
}

mcubert_status mcubert_check_common_options(const char *op, int32_t spec_version, uint32_t spec_hash, int32_t seq_len,
                                            int32_t hidden, mcubert_message *message)
{
    mcubert_status st;
    if ((st = mcubert_check_spec(op, spec_version, spec_hash, message)) != MCUBERT_OK ||
        (st = mcubert_check_range(op, "seq_len", seq_len, 1, MCUBERT_MAX_SEQ_LEN, message)) != MCUBERT_OK) {
        return st;
    }
    return mcubert_check_range(op, "hidden", hidden, 1, MCUBERT_MAX_HIDDEN, message);
}

mcubert_status mcubert_check_zero_point(const char *op, const char *field, int32_t zero_point, mcubert_message *message)
{
    return mcubert_check_range(op, field, zero_point, -128, 127, message);
}

mcubert_status mcubert_check_ln_eps(const char *op, int64_t ln_eps, mcubert_message *message)
{
    return mcubert_check_range(op, "ln_eps", ln_eps, 0, (int64_t)1 << 50, message);
}

mcubert_status mcubert_check_tile(const char *op, int32_t tile, int32_t seq_len, mcubert_message *message)
{
    if (tile > seq_len) {
        mcubert_status st = mcubert_fail(message, MCUBERT_ERROR_OPTION, op, "tile");
        mcubert_append(message, "tile ");
        mcubert_append_int(message, tile);
        mcubert_append(message, " exceeds seq_len ");
        mcubert_append_int(message, seq_len);
        return st;
    }
    return MCUBERT_OK;
}

/* The problem text of ops/fixed_point.check_multipliers, or NULL-free success. */
static int multiplier_problem(int32_t multiplier, int32_t shift, mcubert_message *message, mcubert_status status,
                              const char *op, const char *field)
{
    if (multiplier != 0 && multiplier < MULTIPLIER_MIN) {
        mcubert_fail(message, status, op, field);
        mcubert_append(message, "multiplier ");
        mcubert_append_int(message, multiplier);
        mcubert_append(message, " is neither 0 nor in [2^30, 2^31)");
        return 1;
    }
    if (shift < -31 || shift > 30) {
        mcubert_fail(message, status, op, field);
        mcubert_append(message, "shift ");
        mcubert_append_int(message, shift);
        mcubert_append(message, " is outside [-31, 30]");
        return 1;
    }
    return 0;
}

mcubert_status mcubert_check_multiplier(const char *op, const char *field, int32_t multiplier, int32_t shift,
                                        mcubert_message *message)
{
    return multiplier_problem(multiplier, shift, message, MCUBERT_ERROR_OPTION, op, field) ? MCUBERT_ERROR_OPTION
                                                                                           : MCUBERT_OK;
}

static const char *dtype_name(int32_t dtype)
{
    switch (dtype) {
    case MCUBERT_DTYPE_INT8: return "int8";
    case MCUBERT_DTYPE_INT16: return "int16";
    case MCUBERT_DTYPE_INT32: return "int32";
    default: return NULL;
    }
}

mcubert_status mcubert_check_tensor(const char *op, const char *field, const mcubert_tensor_view *view, int32_t dtype,
                                    int64_t elements, mcubert_message *message)
{
    const int32_t size = dtype == MCUBERT_DTYPE_INT8 ? 1 : dtype == MCUBERT_DTYPE_INT16 ? 2 : 4;
    if (view->dtype != dtype) {
        const char *got = dtype_name(view->dtype);
        mcubert_status st = mcubert_fail(message, MCUBERT_ERROR_TENSOR, op, field);
        mcubert_append(message, "expected dtype ");
        mcubert_append(message, dtype_name(dtype));
        mcubert_append(message, ", got ");
        if (got != NULL) {
            mcubert_append(message, got);
        } else {
            mcubert_append(message, "type ");
            mcubert_append_int(message, view->dtype);
        }
        return st;
    }
    if (view->elements != elements) {
        mcubert_status st = mcubert_fail(message, MCUBERT_ERROR_TENSOR, op, field);
        mcubert_append(message, "expected ");
        mcubert_append_int(message, elements);
        mcubert_append(message, " elements, got ");
        mcubert_append_int(message, view->elements);
        return st;
    }
    if (view->data != NULL && ((uintptr_t)view->data % (uintptr_t)size) != 0u) {
        mcubert_status st = mcubert_fail(message, MCUBERT_ERROR_TENSOR, op, field);
        mcubert_append(message, "data is not ");
        mcubert_append_int(message, size);
        mcubert_append(message, "-byte aligned");
        return st;
    }
    return MCUBERT_OK;
}

mcubert_status mcubert_check_pair4(const char *op, const char *field, const int8_t *packed, int32_t out_features,
                                   int32_t in_features, mcubert_message *message)
{
    const int32_t pairs = (out_features + 1) / 2;
    const int32_t groups = (in_features + 3) / 4;
    const int32_t total = pairs * groups * 8;
    int32_t i;
    if (packed == NULL) {
        return MCUBERT_OK;
    }
    /* Padding first, as the reference's unpack does: the kernel may run padded K lanes. */
    for (i = 0; i < total; ++i) {
        const int32_t channel = 2 * (i / (groups * 8)) + (i % 8) / 4;
        const int32_t k = 4 * ((i / 8) % groups) + i % 4;
        if ((channel >= out_features || k >= in_features) && packed[i] != 0) {
            return mcubert_fail_text(message, MCUBERT_ERROR_TENSOR, op, field,
                                     "padding bytes of the pair4 layout must be zero");
        }
    }
    for (i = 0; i < total; ++i) {
        if (packed[i] == -128) {
            return mcubert_fail_text(message, MCUBERT_ERROR_TENSOR, op, field,
                                     "weights must be in [-127, 127] (symmetric int8)");
        }
    }
    return MCUBERT_OK;
}

/* n rows of `stride` words, each starting with a (multiplier, shift) pair. */
static mcubert_status check_multiplier_rows(const char *op, const char *field, const int32_t *pairs, int32_t n,
                                            int32_t stride, mcubert_message *message)
{
    int32_t c;
    for (c = 0; c < n; ++c) {
        if (multiplier_problem(pairs[stride * c], pairs[stride * c + 1], message, MCUBERT_ERROR_TENSOR, op, field)) {
            return MCUBERT_ERROR_TENSOR;
        }
    }
    return MCUBERT_OK;
}

mcubert_status mcubert_check_channels(const char *op, const char *field, const int32_t *channels, int32_t n,
                                      mcubert_message *message)
{
    int32_t c;
    if (channels == NULL) {
        return MCUBERT_OK;
    }
    for (c = 0; c < n; ++c) {
        if (channels[3 * c] > BIAS_LIMIT || channels[3 * c] < -BIAS_LIMIT) {
            return mcubert_fail_text(message, MCUBERT_ERROR_TENSOR, op, field,
                                     "bias exceeds +-2^30 (accumulator bound)");
        }
    }
    return check_multiplier_rows(op, field, channels + 1, n, 3, message);
}

mcubert_status mcubert_check_requant(const char *op, const char *field, const int32_t *table, int32_t n,
                                     mcubert_message *message)
{
    return table == NULL ? MCUBERT_OK : check_multiplier_rows(op, field, table, n, 2, message);
}

mcubert_status mcubert_check_count(const char *op, int32_t count, int32_t expected, mcubert_message *message)
{
    if (count != expected) {
        mcubert_status st = mcubert_fail(message, MCUBERT_ERROR_TENSOR, op, "tensors");
        mcubert_append(message, "expected ");
        mcubert_append_int(message, expected);
        mcubert_append(message, " (");
        mcubert_append_int(message, expected - 1);
        mcubert_append(message, " inputs, 1 output), got ");
        mcubert_append_int(message, count);
        return st;
    }
    return MCUBERT_OK;
}

/* Nibble k of a w4row channel row (low nibble first). */
static int32_t w4_nibble(const uint8_t *row, int32_t k)
{
    return (row[k >> 1] >> (4 * (k & 1))) & 0xF;
}

mcubert_status mcubert_check_w4row(const char *op, const char *field, const uint8_t *packed, int32_t out_features,
                                   int32_t in_features, mcubert_message *message)
{
    const int32_t row_bytes = ((in_features + 7) >> 3) * 4;
    int32_t c, k;
    if (packed == NULL) {
        return MCUBERT_OK;
    }
    /* Padding first, then -8, as the reference's unpack_weights_int4 (the same first offender). */
    for (c = 0; c < out_features; ++c) {
        for (k = in_features; k < 2 * row_bytes; ++k) {
            const int32_t nibble = w4_nibble(packed + c * row_bytes, k);
            if (nibble != 0) {
                mcubert_status st = mcubert_fail(message, MCUBERT_ERROR_TENSOR, op, field);
                mcubert_append(message, "padding nibble ");
                mcubert_append_int(message, k);
                mcubert_append(message, " of channel ");
                mcubert_append_int(message, c);
                mcubert_append(message, " is ");
                mcubert_append_int(message, nibble);
                mcubert_append(message, " (must be 0)");
                return st;
            }
        }
    }
    for (c = 0; c < out_features; ++c) {
        for (k = 0; k < in_features; ++k) {
            if (w4_nibble(packed + c * row_bytes, k) == 0) {
                mcubert_status st = mcubert_fail(message, MCUBERT_ERROR_TENSOR, op, field);
                mcubert_append(message, "weight [");
                mcubert_append_int(message, c);
                mcubert_append(message, ", ");
                mcubert_append_int(message, k);
                mcubert_append(message, "] is -8: int4 weights are in [-7, 7] (nibble 1..15)");
                return st;
            }
        }
    }
    return MCUBERT_OK;
}

/* A storage width option that version `since` added: 8, 4 from `since` on, or 0 (absent) before it. */
static mcubert_status check_width(const char *op, const char *field, int32_t bits, int32_t spec_version, int32_t since,
                                  const char *int4_is, const char *not_a, mcubert_message *message)
{
    mcubert_status st;
    if (bits == 8 || (bits == 0 && spec_version < since) || (bits == 4 && spec_version >= since)) {
        return MCUBERT_OK;
    }
    st = mcubert_fail(message, MCUBERT_ERROR_OPTION, op, field);
    mcubert_append_int(message, bits);
    if (bits == 4) {
        mcubert_append(message, int4_is);
        mcubert_append(message, " needs spec_version ");
        mcubert_append_int(message, since);
    } else {
        mcubert_append(message, not_a);
    }
    return st;
}

mcubert_status mcubert_check_weight_bits(const char *op, int32_t weight_bits, int32_t spec_version, int32_t since,
                                         mcubert_message *message)
{
    return check_width(op, "weight_bits", weight_bits, spec_version, since, " (int4 weights)",
                       " is not a weight width (4: packed int4, 8: int8)", message);
}

mcubert_status mcubert_check_word_bits(const char *op, int32_t word_bits, int32_t spec_version, int32_t since,
                                       mcubert_message *message)
{
    return check_width(op, "word_bits", word_bits, spec_version, since, " (int4 tables)",
                       " is not a storage width (4: packed int4, 8: int8)", message);
}

mcubert_status mcubert_check_int4_layers(const char *op, int32_t int4_layers, int32_t layers, int32_t weight_bits,
                                         int32_t spec_version, int32_t since, mcubert_message *message)
{
    mcubert_status st;
    if (spec_version < since) {
        return MCUBERT_OK; /* no mask: the parser refused the field before version 8 */
    }
    if ((st = mcubert_check_range(op, "int4_layers", int4_layers, 0, (1 << layers) - 1, message)) != MCUBERT_OK) {
        return st;
    }
    if (weight_bits != 8) {
        st = mcubert_fail(message, MCUBERT_ERROR_OPTION, op, "weight_bits");
        mcubert_append_int(message, weight_bits);
        mcubert_append(message, " with int4_layers (version 8: the mask gives the int4 layers, the rest are 8)");
        return st;
    }
    return MCUBERT_OK;
}

mcubert_status mcubert_check_linear(const char *op, const char *weights_field, const mcubert_tensor_view *weights,
                                    const char *channels_field, const mcubert_tensor_view *channels,
                                    int32_t out_features, int32_t in_features, mcubert_message *message)
{
    return mcubert_check_linear_bits(op, weights_field, weights, channels_field, channels, out_features, in_features, 8,
                                     message);
}

/* The weight tensor of a linear layer at its width: element count, then the layout's content rules. */
static mcubert_status check_linear_weights(const char *op, const char *field, const mcubert_tensor_view *weights,
                                           int32_t out_features, int32_t in_features, int32_t weight_bits,
                                           mcubert_message *message)
{
    const int64_t elements = weight_bits == 4 ? (int64_t)out_features * (((in_features + 7) >> 3) * 4)
                                              : mcubert_packed_size(out_features, in_features);
    mcubert_status st = mcubert_check_tensor(op, field, weights, MCUBERT_DTYPE_INT8, elements, message);
    if (st != MCUBERT_OK) {
        return st;
    }
    if (weight_bits == 4) {
        return mcubert_check_w4row(op, field, (const uint8_t *)weights->data, out_features, in_features, message);
    }
    return mcubert_check_pair4(op, field, (const int8_t *)weights->data, out_features, in_features, message);
}

mcubert_status mcubert_check_linear_bits(const char *op, const char *weights_field, const mcubert_tensor_view *weights,
                                         const char *channels_field, const mcubert_tensor_view *channels,
                                         int32_t out_features, int32_t in_features, int32_t weight_bits,
                                         mcubert_message *message)
{
    mcubert_status st;
    if ((st = check_linear_weights(op, weights_field, weights, out_features, in_features, weight_bits, message)) !=
            MCUBERT_OK ||
        (st = mcubert_check_tensor(op, channels_field, channels, MCUBERT_DTYPE_INT32, 3 * (int64_t)out_features,
                                   message)) != MCUBERT_OK) {
        return st;
    }
    return mcubert_check_channels(op, channels_field, (const int32_t *)channels->data, out_features, message);
}

mcubert_status mcubert_check_residual_tensor(const char *op, const char *field, const mcubert_tensor_view *view,
                                             int32_t n, mcubert_message *message)
{
    static const char *const names[2] = {"zero point", "shift"};
    static const int32_t lo[2] = {-128, 0}, hi[2] = {127, 7};
    const int32_t *rows = (const int32_t *)view->data;
    int32_t c, j;
    mcubert_status st = mcubert_check_tensor(op, field, view, MCUBERT_DTYPE_INT32, 2 * (int64_t)n, message);
    if (st != MCUBERT_OK || rows == NULL) {
        return st;
    }
    for (c = 0; c < n; ++c) {
        for (j = 0; j < 2; ++j) {
            const int32_t value = rows[2 * c + j];
            if (value < lo[j] || value > hi[j]) {
                st = mcubert_fail(message, MCUBERT_ERROR_TENSOR, op, field);
                mcubert_append(message, "channel ");
                mcubert_append_int(message, c);
                mcubert_append(message, ": ");
                mcubert_append(message, names[j]);
                mcubert_append(message, " ");
                mcubert_append_int(message, value);
                mcubert_append(message, j == 0 ? " is outside [-128, 127]" : " is outside [0, 7]");
                return st;
            }
        }
    }
    return MCUBERT_OK;
}

mcubert_status mcubert_check_requant_tensor(const char *op, const char *field, const mcubert_tensor_view *view,
                                            int32_t n, mcubert_message *message)
{
    mcubert_status st = mcubert_check_tensor(op, field, view, MCUBERT_DTYPE_INT32, 2 * (int64_t)n, message);
    return st != MCUBERT_OK ? st : mcubert_check_requant(op, field, (const int32_t *)view->data, n, message);
}

mcubert_status mcubert_check_context(const char *op, const mcubert_context *context, int32_t needed,
                                     mcubert_message *message)
{
    if (context == NULL || context->buf == NULL) {
        return mcubert_fail_text(message, MCUBERT_ERROR_ARGUMENT, op, "scratch", "no scratch buffer");
    }
    if (((uintptr_t)context->buf & 3u) != 0u) {
        return mcubert_fail_text(message, MCUBERT_ERROR_ARGUMENT, op, "scratch", "buffer is not 4-byte aligned");
    }
    if (context->size < needed) {
        mcubert_status st = mcubert_fail(message, MCUBERT_ERROR_ARGUMENT, op, "scratch");
        mcubert_append_int(message, context->size);
        mcubert_append(message, " bytes given, ");
        mcubert_append_int(message, needed);
        mcubert_append(message, " needed");
        return st;
    }
    return MCUBERT_OK;
}
