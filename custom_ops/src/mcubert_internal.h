/*
 * Declarations shared by the op files: linear-layer output stages, LayerNorm, softmax weights,
 * scratch layouts, and the validation / message helpers.
 */
#ifndef MCUBERT_INTERNAL_H
#define MCUBERT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "mcubert/mcubert_ops.h"
#include "mcubert_gemm_s8.h"

/* Stages of an op are kept out of line so that the deepest call chain, not the sum of every
 * stage's locals, bounds the stack (MCUBERT_STACK_BOUND_BYTES). */
#if defined(__GNUC__)
#define MCUBERT_NOINLINE __attribute__((noinline))
#else
#define MCUBERT_NOINLINE
#endif
/* A small step of an inner loop that more than one caller shares, inlined into each. */
#if defined(__GNUC__)
#define MCUBERT_ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define MCUBERT_ALWAYS_INLINE inline
#endif

#define MCUBERT_ALIGNMENT 16 /* scratch regions start on 16-byte offsets (contract: alignment) */

static inline int32_t mcubert_align_up(int32_t bytes)
{
    return (bytes + (MCUBERT_ALIGNMENT - 1)) & ~(int32_t)(MCUBERT_ALIGNMENT - 1);
}

/* Bytes of a pair4-packed [n out][k in] weight: ceil(n/2) * ceil(k/4) * 8 (int64: no wrap). */
static inline int64_t mcubert_packed_size(int64_t out_features, int64_t in_features)
{
    return ((out_features + 1) / 2) * ((in_features + 3) / 4) * 8;
}

/* ---- linear layers (mcubert_linear_s8.c) -------------------------------------------------- */

typedef struct {
    const int8_t *weights;   /* pair4 (weight_bits 8) or w4row bytes (weight_bits 4, SPEC 3.1.1) */
    const int32_t *channels; /* [out][3]: bias, multiplier, shift */
    int32_t in_features;
    int32_t out_features;
    int32_t weight_bits; /* 8 or 4 */
} mcubert_linear;

/* The layer of an op's tensors: weights at the op's width (0, as a version-1 params struct has it, is 8). */
static inline mcubert_linear mcubert_linear_of(const int8_t *weights, const int32_t *channels, int32_t in_features,
                                               int32_t out_features, int32_t weight_bits)
{
    mcubert_linear layer;
    layer.weights = weights;
    layer.channels = channels;
    layer.in_features = in_features;
    layer.out_features = out_features;
    layer.weight_bits = weight_bits == 4 ? 4 : 8;
    return layer;
}

/* The width of an op's linear layer `index` (SPEC 3.1.2): 4 where the version-8 mask `int4_layers`
 * has its bit, else the op's `weight_bits` (version 3), else 8 (0 is an absent field). */
static inline int32_t mcubert_layer_width(int32_t int4_layers, int32_t index, int32_t weight_bits)
{
    return ((int4_layers >> index) & 1) != 0 || weight_bits == 4 ? 4 : 8;
}

/* Prepares a block of int8 rows for the layers of `layer`'s width (once per row block, before
 * mcubert_linear_to_s8 / _residual_to_s16 on any layer of that width and K): 8 widens them for the
 * pair4 gemm (mcubert_rows_widen_pair4), 4 for the W4 gemm and sets rows->w4_start (mcubert_rows_widen_w4).
 * `widened`: the op's int16[4][K] scratch region (either width fits it). */
void mcubert_linear_widen(mcubert_rows *rows, const mcubert_linear *layer, uint32_t *widened);

/* For channels c in [c_begin, c_end) of `layer` (any parity) and each row r of the block:
 *   y = clamp8(requantize(bias + x_r . w_c) + offset);  out[r * row_stride + (c - c_begin) * col_stride]
 *     = lut ? lut[y + 128] : y.
 * col_stride = 1 writes rows, row_stride = 1 writes the transpose (attention's value_t). */
void mcubert_linear_to_s8(const mcubert_rows *rows, const mcubert_linear *layer, int32_t c_begin, int32_t c_end,
                          int32_t offset, const int8_t *lut, int8_t *out, int32_t row_stride, int32_t col_stride);

/* The pre-norm sum (SPEC 3.2) over all out_features channels, `channels` [out][2] = (zp, shift):
 *   z[r * out + c] = clamp16(requantize(bias + x_r . w_c) + (residual[r * out + c] - zp_c) * 2^shift_c) */
void mcubert_linear_residual_to_s16(const mcubert_rows *rows, const mcubert_linear *layer, const int8_t *residual,
                                    const int32_t *channels, int16_t *z);

/* ---- LayerNorm (mcubert_layernorm_s8.c) -------------------------------------------------- */

/* One row: out[c] = SPEC 3.3 of z[0..d). table: [d][2] (gamma_q, beta_q). */
void mcubert_layer_norm_s8(const int16_t *z, int32_t d, const int32_t *table, int64_t eps, int8_t *out);

/* ---- a decoder's residual stream (mcubert_residual_stream.c) ------------------------------ */

/* z[c] = (x[c] - zp[c]) << R[c], channels [d][2] = (zp, R) with R in [0, 7]: |z| < 2^15. */
void mcubert_stream_to_z(const int8_t *x, const int32_t *channels, int32_t d, int16_t *z);
/* x[c] = clamp8(rsh(z[c], R[c]) + zp[c]), rounding half up (R = 0: z itself). */
void mcubert_stream_from_z(const int16_t *z, const int32_t *channels, int32_t d, int8_t *x);

/* ---- softmax weights (mcubert_softmax_s16.c) ---------------------------------------------- */

typedef struct {
    const int8_t *mask; /* mask mode 0: key k valid iff mask[k] != 0; NULL in mode 1 */
    int32_t count;      /* keys to visit: s (mode 0) or the valid length L (mode 1) */
} mcubert_keys;

/* Replaces row[0..keys.count) (int16 scores) by the exp weights e[k] of SPEC 3.4 (0 for masked
 * keys) and returns recip = floor(2^44 / sum e), or 0 when no key is valid. */
int32_t mcubert_softmax_weights_s16(int16_t *row, const mcubert_keys *keys, const int16_t *exp_lut);

#define MCUBERT_MEAN_SHIFT 28 /* recip has 44 fractional bits, the weighted mean keeps 16 */

/* Q16 weighted mean rsh(acc * recip, 28) of SPEC 3.4 (acc = sum_k e[k] v[k][c]): |mean| <= 2^23,
 * so the 64-bit sum shifted by 28 is (low word >> 28) | (high word << 4) — no 64-bit shift. */
static inline int32_t mcubert_weighted_mean(int32_t acc, int32_t recip)
{
    const uint64_t t = (uint64_t)((int64_t)acc * recip + ((int64_t)1 << (MCUBERT_MEAN_SHIFT - 1)));
    return (int32_t)(((uint32_t)t >> MCUBERT_MEAN_SHIFT) | ((uint32_t)(t >> 32) << (32 - MCUBERT_MEAN_SHIFT)));
}

/* ---- scratch layouts ---------------------------------------------------------------------- */

typedef struct {
    int32_t key, value_t, context, context_tile, query, scores, row_max, row_recip, residual, widened, total;
} mcubert_attention_layout;

typedef struct {
    int32_t intermediate, residual, widened, total;
} mcubert_mlp_layout;

typedef struct {
    int32_t z, widened, total;
} mcubert_embedding_layout;

void mcubert_attention_layout_of(int32_t s, int32_t d, int32_t h, int32_t t, mcubert_attention_layout *layout);
void mcubert_mlp_layout_of(int32_t s, int32_t d, int32_t f, int32_t t, mcubert_mlp_layout *layout);
void mcubert_embedding_layout_of(int32_t s, int32_t d, mcubert_embedding_layout *layout);

/* ---- CRC-32 (mcubert_crc32.c) ------------------------------------------------------------- */

/* zlib's CRC-32 register after `data` (start with 0xFFFFFFFF; the CRC is its complement). A NULL
 * `data` stands for `length` zero bytes. */
uint32_t mcubert_crc32_update(uint32_t state, const uint8_t *data, uint32_t length);

/* ---- messages and checks (mcubert_validate.c) -------------------------------------------- */

/* Starts "OP: field: " in message (NULL: no message wanted) and returns status, so a check
 * reads `return mcubert_fail(m, st, OP, "tile", ...)`-style through the helpers below. */
mcubert_status mcubert_fail(mcubert_message *message, mcubert_status status, const char *op, const char *field);
/* mcubert_fail, then `text` as the whole problem: "OP: field: text". */
mcubert_status mcubert_fail_text(mcubert_message *message, mcubert_status status, const char *op, const char *field,
                                 const char *text);
void mcubert_append(mcubert_message *message, const char *text);
void mcubert_append_int(mcubert_message *message, int64_t value);
void mcubert_append_hex(mcubert_message *message, uint32_t value);

/* Option checks; each returns MCUBERT_OK or fails with the Python reference's wording. */
mcubert_status mcubert_check_spec(const char *op, int32_t version, uint32_t hash, mcubert_message *message);
mcubert_status mcubert_check_range(const char *op, const char *field, int64_t value, int64_t lo, int64_t hi,
                                   mcubert_message *message);
mcubert_status mcubert_check_multiplier(const char *op, const char *field, int32_t multiplier, int32_t shift,
                                        mcubert_message *message);
/* The preamble of every op's options: params not NULL ("params: NULL"), then spec_version,
 * spec_hash, seq_len in [1, MAX_SEQ_LEN], hidden in [1, MAX_HIDDEN], in that order. */
mcubert_status mcubert_check_params(const char *op, const void *params, mcubert_message *message);
mcubert_status mcubert_check_common_options(const char *op, int32_t spec_version, uint32_t spec_hash, int32_t seq_len,
                                            int32_t hidden, mcubert_message *message);
/* field in [-128, 127]; ln_eps in [0, 2^50]; tile <= seq_len (the ranges checked before). */
mcubert_status mcubert_check_zero_point(const char *op, const char *field, int32_t zero_point,
                                        mcubert_message *message);
mcubert_status mcubert_check_ln_eps(const char *op, int64_t ln_eps, mcubert_message *message);
mcubert_status mcubert_check_tile(const char *op, int32_t tile, int32_t seq_len, mcubert_message *message);

/* Tensor checks (validate with tensor views). */
mcubert_status mcubert_check_tensor(const char *op, const char *field, const mcubert_tensor_view *view, int32_t dtype,
                                    int64_t elements, mcubert_message *message);
/* w4row weights (SPEC 3.1.1): zero padding nibbles, then no weight nibble 0 (-8), with the reference's
 * messages. Data may be NULL (then nothing to check). */
mcubert_status mcubert_check_w4row(const char *op, const char *field, const uint8_t *packed, int32_t out_features,
                                   int32_t in_features, mcubert_message *message);
/* An op's weight_bits option: 8, 4 from version `since` on, or 0 (absent) before it. */
mcubert_status mcubert_check_weight_bits(const char *op, int32_t weight_bits, int32_t spec_version, int32_t since,
                                         mcubert_message *message);
/* The version-8 mask int4_layers of an op with `layers` linear layers (SPEC 3.1.2): in [0, 2^layers - 1],
 * and weight_bits 8 when present; 0 (absent) before version 8. */
mcubert_status mcubert_check_int4_layers(const char *op, int32_t int4_layers, int32_t layers, int32_t weight_bits,
                                         int32_t spec_version, int32_t since, mcubert_message *message);
/* Pair4 weights: no -128, zero padding. Data may be NULL (then nothing to check). */
/* The clustered word table (SPEC 4.1; mcubert_word_table.c), as the embedding and the LM head read it. */
typedef struct {
    const int32_t *clusters; /* [c][2]: end id (exclusive), rank */
    int32_t cluster_count, vocab_size, hidden, bits;
} mcubert_word_table;

/* Cluster i of a checked table: ids [start, end), rank, bytes per stored row, where its rows and V_i start. */
typedef struct {
    int32_t start, end, rank, row_bytes;
    int64_t row_offset, projection_offset;
} mcubert_word_cluster;

static inline mcubert_word_table mcubert_word_table_of(const int32_t *clusters, int32_t cluster_count,
                                                       int32_t vocab_size, int32_t hidden, int32_t bits)
{
    mcubert_word_table table;
    table.clusters = clusters;
    table.cluster_count = cluster_count;
    table.vocab_size = vocab_size;
    table.hidden = hidden;
    table.bits = bits;
    return table;
}

/* The options' cross-field rule of the word table: at most one cluster per id ("cluster_count"). */
mcubert_status mcubert_check_cluster_count(const char *op, int32_t cluster_count, int32_t vocab_size,
                                           mcubert_message *message);
int32_t mcubert_word_row_bytes(int32_t i, int32_t rank, int32_t bits);
/* Ends strictly increasing up to vocab_size, rank_0 = d, other ranks in [1, d]; the tables' element counts. */
mcubert_status mcubert_check_word_clusters(const char *op, const mcubert_word_table *table, int64_t *rows_total,
                                           int64_t *projections_total, mcubert_message *message);
void mcubert_word_cluster_at(const mcubert_word_table *table, int32_t i, mcubert_word_cluster *info);
/* word_bits of an op that added it in version `since`: 8, 4 from `since` on, or 0 (absent) before it. */
mcubert_status mcubert_check_word_bits(const char *op, int32_t word_bits, int32_t spec_version, int32_t since,
                                       mcubert_message *message);
/* Every odd-length int4 row's padding nibble is 0 (SPEC 4.1.1), in the reference's wording. */
mcubert_status mcubert_check_int4_word_padding(const char *op, const mcubert_word_table *table, const uint8_t *rows,
                                               mcubert_message *message);
/* The storage width of valid options' word_bits (0, absent in an earlier version, is int8). */
static inline int32_t mcubert_word_bits(int32_t word_bits)
{
    return word_bits == 4 ? 4 : 8;
}
/* Value k of a packed int4 row (SPEC 4.1.1): the low nibble of byte k/2 for even k, else its high nibble. */
static inline int32_t mcubert_nibble(const uint8_t *row, int32_t k)
{
    const int32_t byte = row[k >> 1];
    return ((((k & 1) ? byte >> 4 : byte) & 0xF) ^ 8) - 8;
}
/* The cluster table, then word_rows' and word_projections' sizes, then (int4) the rows' padding nibbles, then
 * each V_i's pair4 padding. */
mcubert_status mcubert_check_word_tensors(const char *op, const mcubert_word_table *table,
                                          const mcubert_tensor_view *rows, const mcubert_tensor_view *projections,
                                          mcubert_message *message);

mcubert_status mcubert_check_pair4(const char *op, const char *field, const int8_t *packed, int32_t out_features,
                                   int32_t in_features, mcubert_message *message);
/* [n][3] channel rows: |bias| <= 2^30, valid (multiplier, shift). */
mcubert_status mcubert_check_channels(const char *op, const char *field, const int32_t *channels, int32_t n,
                                      mcubert_message *message);
/* [n][2] (multiplier, shift) rows. */
mcubert_status mcubert_check_requant(const char *op, const char *field, const int32_t *table, int32_t n,
                                     mcubert_message *message);

/* "tensors": count == expected (expected - 1 inputs, 1 output). */
mcubert_status mcubert_check_count(const char *op, int32_t count, int32_t expected, mcubert_message *message);
/* One linear layer: pair4 int8 weights [out][in] (check_tensor, check_pair4), then int32
 * channels [out][3] (check_tensor, check_channels). */
mcubert_status mcubert_check_linear(const char *op, const char *weights_field, const mcubert_tensor_view *weights,
                                    const char *channels_field, const mcubert_tensor_view *channels,
                                    int32_t out_features, int32_t in_features, mcubert_message *message);
/* The same at a width: 8 as above, 4 = int8[out * 4 ceil(in/8)] w4row weights (mcubert_check_w4row). */
mcubert_status mcubert_check_linear_bits(const char *op, const char *weights_field, const mcubert_tensor_view *weights,
                                         const char *channels_field, const mcubert_tensor_view *channels,
                                         int32_t out_features, int32_t in_features, int32_t weight_bits,
                                         mcubert_message *message);
/* An int32 [n][2] (multiplier, shift) tensor: check_tensor, then check_requant. */
mcubert_status mcubert_check_requant_tensor(const char *op, const char *field, const mcubert_tensor_view *view,
                                            int32_t n, mcubert_message *message);

/* An int32 [n][2] residual tensor: check_tensor, then zero points in [-128, 127], shifts in [0, 7]. */
mcubert_status mcubert_check_residual_tensor(const char *op, const char *field, const mcubert_tensor_view *view,
                                             int32_t n, mcubert_message *message);

/* Kernel entry: NULL checks on the context, its alignment and size. */
mcubert_status mcubert_check_context(const char *op, const mcubert_context *context, int32_t needed,
                                     mcubert_message *message);

#endif /* MCUBERT_INTERNAL_H */
