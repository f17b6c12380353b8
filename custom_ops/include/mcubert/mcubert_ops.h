/*
 * MCUBERT custom-op kernels: portable C99 with an Arm DSP (SMLAD) path.
 *
 * The numerics are defined by tflm_mcubert/ops/SPEC.md (version MCUBERT_SPEC_VERSION, hash
 * MCUBERT_SPEC_HASH); a kernel is correct when it produces the same bytes as the numpy
 * reference in tflm_mcubert/ops/ for every valid input. There is no TFLM dependency here: the
 * TFLM binding is a thin layer that decodes the options into the params structs below, fills
 * the weights struct from the constant input tensors and calls, in order,
 *
 *   Init:     mcubert_<op>_parse_options(custom options bytes, &params, &message)
 *   Prepare:  mcubert_<op>_validate(params, tensors, count, &message)   (options, dtypes, shapes,
 *                                                                         constant-tensor contents)
 *             mcubert_<op>_get_buffer_size(...)                          (scratch: the op's last output)
 *   Eval:     mcubert_<op>_s8(params, weights, ..., &context, &message)
 *
 * Memory: the caller owns everything (as in CMSIS-NN). No kernel allocates, recurses or uses
 * a variable-length array; stack use is bounded by MCUBERT_STACK_BOUND_BYTES. The scratch
 * buffer passed in `mcubert_context` must be at least get_buffer_size() bytes and 4-byte
 * aligned (TFLM's arena gives 16); its layout is the spec's, so the size is the same for the
 * plain and the DSP build and equals what the planner (tflm_mcubert/schedule) reserves.
 * Tensors may be at any address their element type allows (int8 data at any byte).
 *
 * Build variants (one source, selected at compile time):
 *   __ARM_FEATURE_DSP defined (Cortex-M4/M7/M33...): the DSP path (SXTB16/SMLAD micro-kernel,
 *                        from src/mcubert_gemm_dsp_s8.S with GCC-compatible toolchains).
 *   MCUBERT_DSP_NO_ASM:  the DSP path with the micro-kernel's C version instead of the assembly.
 *   otherwise: the plain C path (any core, host).
 *   MCUBERT_FORCE_PLAIN: the plain path even on a DSP core (for comparisons).
 *   MCUBERT_EMULATE_DSP: test only — the DSP path on any compiler, with portable C
 *                        emulations of the intrinsics (so host sanitizers cover that code).
 */
#ifndef MCUBERT_OPS_H
#define MCUBERT_OPS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The contract these kernels implement, generated from tflm_mcubert/ops/contract.py (not committed:
 * the CMake build, and every copy of these sources, writes it): each op's spec versions and hashes
 * (SPEC.md section 8), its option fields and its mcubert_<op>_params struct, and MCUBERT_OPS(X). */
#include "mcubert_contract.h"

#define MCUBERT_INT4_ROW_SCALE_BYTES 2 /* int4 cluster-0 rows: uint16 little-endian scale first */

/* Upper bound of the stack any mcubert_* entry point uses, helpers and libgcc included.
 * With arm-none-eabi-gcc 12.2 -O2 the deepest path is 488 bytes (embedding and attention,
 * Cortex-M4/M7 DSP path and plain path, from GCC's call graph plus the assembly micro-kernel's
 * 40-byte frame; the same under emulation); the bound leaves ~25% for other compilers and
 * flags. tests/kernels check it statically (call graph, no recursion) and dynamically (painted
 * stack under emulation, Cortex-M4 and M7, both paths). */
#define MCUBERT_STACK_BOUND_BYTES 640

typedef enum {
    MCUBERT_OK = 0,
    MCUBERT_ERROR_ARGUMENT = 1, /* NULL pointer, misaligned or too small buffer */
    MCUBERT_ERROR_SPEC = 2,     /* spec_version or spec_hash of another contract */
    MCUBERT_ERROR_OPTION = 3,   /* an option out of range, or options inconsistent */
    MCUBERT_ERROR_TENSOR = 4,   /* tensor count, dtype, element count or constant contents */
    MCUBERT_ERROR_INPUT = 5,    /* run-time input out of range: token id, type, mask length */
    MCUBERT_ERROR_MODEL = 6,    /* the model's bytes: malformed, or corrupted (integrity record) */
    MCUBERT_UNVERIFIED = 7      /* mcubert_verify_model: no integrity record, and none was expected */
} mcubert_status;

/* Error text "OP: field: problem", NUL-terminated, truncated to fit. */
#define MCUBERT_MESSAGE_CAPACITY 128
typedef struct {
    char text[MCUBERT_MESSAGE_CAPACITY];
} mcubert_message;

/* Caller-owned scratch (like cmsis_nn_context). */
typedef struct {
    void *buf;    /* 4-byte aligned */
    int32_t size; /* bytes available, >= mcubert_<op>_get_buffer_size(...) */
} mcubert_context;

/* Element types, numbered as TfLiteType so a binding can pass tensor->type through. */
typedef enum { MCUBERT_DTYPE_INT32 = 2, MCUBERT_DTYPE_INT16 = 7, MCUBERT_DTYPE_INT8 = 9 } mcubert_dtype;

/* What a binding knows about one tensor at Prepare. `data` is NULL for tensors without data
 * yet (activations); constant tensors pass their data and get their contents checked. */
typedef struct {
    const void *data;
    int32_t dtype;    /* mcubert_dtype */
    int32_t elements; /* product of the dims */
} mcubert_tensor_view;

/* Limits of the contract (SPEC.md section 7). */
#define MCUBERT_MAX_SEQ_LEN 1024
#define MCUBERT_MAX_HIDDEN 1024
#define MCUBERT_MAX_FFN 4096
#define MCUBERT_MAX_HEADS 64
#define MCUBERT_MAX_CLUSTERS 8
#define MCUBERT_MAX_TYPE_VOCAB 1024
#define MCUBERT_EXP_ONE 16384 /* exp_lut[0] */

/* ------------------------------------------------------------------------------------------
 * MCUBERT_EMBEDDING: clustered low-rank word lookup + position + token type, then LayerNorm.
 * ---------------------------------------------------------------------------------------- */

typedef struct {                       /* constant inputs 2..10, contract order */
    const int32_t *clusters;           /* [c][2]: end id (exclusive), rank (rank_0 = d) */
    const int8_t *word_rows;           /* U_0 | U_1 | ... row-major (int4: SPEC 4.1.1 rows) */
    const int8_t *word_projections;    /* V_i (d outputs x r_i inputs), pair4, concatenated */
    const int32_t *word_requant;       /* [c][d][2]: multiplier, shift */
    const int8_t *position_table;      /* [s][d] */
    const int32_t *position_requant;   /* [d][2] */
    const int8_t *token_type_table;    /* [T][d] */
    const int32_t *token_type_requant; /* [d][2] */
    const int32_t *layer_norm;         /* [d][2]: gamma_q, beta_q */
} mcubert_embedding_weights;

enum { /* tensor order of mcubert_embedding_validate: inputs then the output */
       MCUBERT_EMBEDDING_INPUT_IDS,
       MCUBERT_EMBEDDING_TOKEN_TYPE_IDS,
       MCUBERT_EMBEDDING_CLUSTERS,
       MCUBERT_EMBEDDING_WORD_ROWS,
       MCUBERT_EMBEDDING_WORD_PROJECTIONS,
       MCUBERT_EMBEDDING_WORD_REQUANT,
       MCUBERT_EMBEDDING_POSITION_TABLE,
       MCUBERT_EMBEDDING_POSITION_REQUANT,
       MCUBERT_EMBEDDING_TOKEN_TYPE_TABLE,
       MCUBERT_EMBEDDING_TOKEN_TYPE_REQUANT,
       MCUBERT_EMBEDDING_LAYER_NORM,
       MCUBERT_EMBEDDING_OUTPUT,
       MCUBERT_EMBEDDING_NUM_TENSORS
};

int32_t mcubert_embedding_get_buffer_size(int32_t seq_len, int32_t hidden);

mcubert_status mcubert_embedding_validate(const mcubert_embedding_params *params, const mcubert_tensor_view *tensors,
                                          int32_t count, mcubert_message *message);

/* hidden[s][d] = LayerNorm(word + position + token type). Errors: MCUBERT_ERROR_INPUT for an
 * id or type out of range (nothing is written then). */
mcubert_status mcubert_embedding_s8(const mcubert_embedding_params *params, const mcubert_embedding_weights *weights,
                                    const int32_t *input_ids, const int32_t *token_type_ids, int8_t *hidden,
                                    const mcubert_context *context, mcubert_message *message);

/* ------------------------------------------------------------------------------------------
 * MCUBERT_ATTENTION: the attention sub-layer, in place on the hidden state [s][d].
 * ---------------------------------------------------------------------------------------- */

typedef struct {                   /* constant inputs 2..12, contract order */
    const int8_t *query_weights;   /* pair4 packed(d, d); weight_bits 4: w4row, d * 4 ceil(d/8) */
    const int32_t *query_channels; /* [d][3]: bias, multiplier, shift */
    const int8_t *key_weights;
    const int32_t *key_channels;
    const int8_t *value_weights;
    const int32_t *value_channels;
    const int8_t *output_weights;
    const int32_t *output_channels;
    const int16_t *exp_lut;    /* [256], exp_lut[0] = MCUBERT_EXP_ONE */
    const int32_t *layer_norm; /* [d][2] */
    const int32_t *residual;   /* [d][2]: zero point [-128, 127], shift R_c [0, 7] per channel */
} mcubert_attention_weights;

enum {
    MCUBERT_ATTENTION_HIDDEN,
    MCUBERT_ATTENTION_MASK,
    MCUBERT_ATTENTION_QUERY_WEIGHTS,
    MCUBERT_ATTENTION_QUERY_CHANNELS,
    MCUBERT_ATTENTION_KEY_WEIGHTS,
    MCUBERT_ATTENTION_KEY_CHANNELS,
    MCUBERT_ATTENTION_VALUE_WEIGHTS,
    MCUBERT_ATTENTION_VALUE_CHANNELS,
    MCUBERT_ATTENTION_OUTPUT_WEIGHTS,
    MCUBERT_ATTENTION_OUTPUT_CHANNELS,
    MCUBERT_ATTENTION_EXP_LUT,
    MCUBERT_ATTENTION_LAYER_NORM,
    MCUBERT_ATTENTION_RESIDUAL,
    MCUBERT_ATTENTION_OUTPUT,
    MCUBERT_ATTENTION_NUM_TENSORS
};

int32_t mcubert_attention_get_buffer_size(int32_t seq_len, int32_t hidden, int32_t heads, int32_t tile);

mcubert_status mcubert_attention_validate(const mcubert_attention_params *params, const mcubert_tensor_view *tensors,
                                          int32_t count, mcubert_message *message);

/* In place on hidden[s][d]. `mask`: int8[s] (mask_mode 0) or int32[1] (mask_mode 1; a length
 * outside [0, s] is MCUBERT_ERROR_INPUT and nothing is written). */
mcubert_status mcubert_attention_s8(const mcubert_attention_params *params, const mcubert_attention_weights *weights,
                                    int8_t *hidden, const void *mask, const mcubert_context *context,
                                    mcubert_message *message);

/* ------------------------------------------------------------------------------------------
 * MCUBERT_MLP: FC1 + activation table + FC2 + residual + LayerNorm, in place, tiled.
 * ---------------------------------------------------------------------------------------- */

typedef struct {                  /* constant inputs 1..7, contract order */
    const int8_t *fc1_weights;    /* pair4 packed(f, d); weight_bits 4: w4row, f * 4 ceil(d/8) */
    const int32_t *fc1_channels;  /* [f][3] */
    const int8_t *activation_lut; /* [256]: entry q + 128 for input q */
    const int8_t *fc2_weights;    /* pair4 packed(d, f); weight_bits 4: w4row, d * 4 ceil(f/8) */
    const int32_t *fc2_channels;  /* [d][3] */
    const int32_t *layer_norm;    /* [d][2] */
    const int32_t *residual;      /* [d][2]: zero point [-128, 127], shift R_c [0, 7] per channel */
} mcubert_mlp_weights;

enum {
    MCUBERT_MLP_HIDDEN,
    MCUBERT_MLP_FC1_WEIGHTS,
    MCUBERT_MLP_FC1_CHANNELS,
    MCUBERT_MLP_ACTIVATION_LUT,
    MCUBERT_MLP_FC2_WEIGHTS,
    MCUBERT_MLP_FC2_CHANNELS,
    MCUBERT_MLP_LAYER_NORM,
    MCUBERT_MLP_RESIDUAL,
    MCUBERT_MLP_OUTPUT,
    MCUBERT_MLP_NUM_TENSORS
};

int32_t mcubert_mlp_get_buffer_size(int32_t seq_len, int32_t hidden, int32_t ffn, int32_t tile);

mcubert_status mcubert_mlp_validate(const mcubert_mlp_params *params, const mcubert_tensor_view *tensors, int32_t count,
                                    mcubert_message *message);

mcubert_status mcubert_mlp_s8(const mcubert_mlp_params *params, const mcubert_mlp_weights *weights, int8_t *hidden,
                              const mcubert_context *context, mcubert_message *message);

/* ------------------------------------------------------------------------------------------
 * MCUBERT_CLASSIFIER_HEAD (SPEC 4.4): BERT's pooler (dense + tanh table) and the sequence
 * classifier (dense) on the [CLS] row: hidden[0][d] -> int8 logits[labels]. Not in place.
 * ---------------------------------------------------------------------------------------- */

#define MCUBERT_MAX_LABELS 1024

typedef struct {                        /* constant inputs 1..5, contract order */
    const int8_t *pooler_weights;       /* pair4, packed(d, d) */
    const int32_t *pooler_channels;     /* [d][3]: bias, multiplier, shift */
    const int8_t *tanh_lut;             /* [256]: entry q + 128 for input q */
    const int8_t *classifier_weights;   /* pair4, packed(n, d) */
    const int32_t *classifier_channels; /* [n][3] */
} mcubert_classifier_head_weights;

enum {
    MCUBERT_CLASSIFIER_HEAD_HIDDEN,
    MCUBERT_CLASSIFIER_HEAD_POOLER_WEIGHTS,
    MCUBERT_CLASSIFIER_HEAD_POOLER_CHANNELS,
    MCUBERT_CLASSIFIER_HEAD_TANH_LUT,
    MCUBERT_CLASSIFIER_HEAD_CLASSIFIER_WEIGHTS,
    MCUBERT_CLASSIFIER_HEAD_CLASSIFIER_CHANNELS,
    MCUBERT_CLASSIFIER_HEAD_OUTPUT,
    MCUBERT_CLASSIFIER_HEAD_NUM_TENSORS
};

/* A(d) + A(2d) bytes (independent of seq_len and labels, which are range-checked); -1 for
 * dimensions outside the contract. */
int32_t mcubert_classifier_head_get_buffer_size(int32_t seq_len, int32_t hidden, int32_t labels);

mcubert_status mcubert_classifier_head_validate(const mcubert_classifier_head_params *params,
                                                const mcubert_tensor_view *tensors, int32_t count,
                                                mcubert_message *message);

/* logits[n] from hidden[0][0..d) (hidden is int8[s][d]; logits must not overlap it). */
mcubert_status mcubert_classifier_head_s8(const mcubert_classifier_head_params *params,
                                          const mcubert_classifier_head_weights *weights, const int8_t *hidden,
                                          int8_t *logits, const mcubert_context *context, mcubert_message *message);

/* ---- end of MCUBERT_CLASSIFIER_HEAD ------------------------------------------------------- */

/* ------------------------------------------------------------------------------------------
 * MCUBERT_LM_HEAD (SPEC 4.5): a decoder's tied LM head. One token's residual stream hidden[d],
 * normalized by LN_f, against every id of the clustered word table the embedding op reads (the same
 * constant tensors), cluster by cluster;
 * the k best ids and their int32 scores, best first (ties: the smaller id). No dense matrix and no
 * vocabulary-sized buffer: the scratch is two int16[d] vectors.
 * ---------------------------------------------------------------------------------------- */

#define MCUBERT_MAX_TOP_K 256

typedef struct {                    /* constant inputs 1..7, contract order */
    const int32_t *residual;        /* [d][2]: the residual stream's (zp, R) */
    const int32_t *layer_norm;      /* [d][2]: LN_f gamma_q, beta_q */
    const int32_t *clusters;        /* [c][2]: the embedding's (end id, rank) */
    const int8_t *word_rows;        /* the embedding's int8 rows U_0 | U_1 | ... */
    const int8_t *word_projections; /* the embedding's V_i, pair4 */
    const int32_t *channel_requant; /* [c][d][2]: h - zp -> g_i */
    const int32_t *cluster_requant; /* [c][4]: (Mp, shift), (Ms, shift) */
} mcubert_lm_head_weights;

enum {
    MCUBERT_LM_HEAD_HIDDEN,
    MCUBERT_LM_HEAD_RESIDUAL,
    MCUBERT_LM_HEAD_LAYER_NORM,
    MCUBERT_LM_HEAD_CLUSTERS,
    MCUBERT_LM_HEAD_WORD_ROWS,
    MCUBERT_LM_HEAD_WORD_PROJECTIONS,
    MCUBERT_LM_HEAD_CHANNEL_REQUANT,
    MCUBERT_LM_HEAD_CLUSTER_REQUANT,
    MCUBERT_LM_HEAD_OUTPUT,
    MCUBERT_LM_HEAD_NUM_TENSORS
};

/* A(2d) + A(d) + A(2d) + A(2d) bytes (top_k is range-checked); -1 for dimensions outside the contract. */
int32_t mcubert_lm_head_get_buffer_size(int32_t hidden, int32_t top_k);

mcubert_status mcubert_lm_head_validate(const mcubert_lm_head_params *params, const mcubert_tensor_view *tensors,
                                        int32_t count, mcubert_message *message);

/* top[0][0..k) = ids, top[1][0..k) = scores (int32[2][k]) from the residual stream hidden[0..d). */
mcubert_status mcubert_lm_head_s8(const mcubert_lm_head_params *params, const mcubert_lm_head_weights *weights,
                                  const int8_t *hidden, int32_t *top, const mcubert_context *context,
                                  mcubert_message *message);

/* ---- end of MCUBERT_LM_HEAD --------------------------------------------------------------- */

/* ------------------------------------------------------------------------------------------
 * MCUBERT_CAUSAL_ATTENTION (SPEC 4.6): a decoder's pre-LayerNorm self-attention for one token at
 * position p over an int8 KV cache (int8[2][n][d], the op's state between invokes: row p is
 * written, rows 0..p are read). In place on the token's residual stream hidden[d].
 * ---------------------------------------------------------------------------------------- */

typedef struct {                    /* constant inputs 3..14, contract order */
    const int32_t *layer_norm;      /* [d][2]: LN1 gamma_q, beta_q */
    const int8_t *query_weights;    /* pair4, packed(d, d) */
    const int32_t *query_channels;  /* [d][3] */
    const int8_t *key_weights;      /* pair4, packed(d, d) */
    const int32_t *key_channels;    /* [d][3] */
    const int8_t *value_weights;    /* pair4, packed(d, d) */
    const int32_t *value_channels;  /* [d][3] */
    const int8_t *output_weights;   /* pair4, packed(d, d) */
    const int32_t *output_channels; /* [d][3], to z units */
    const int16_t *exp_lut;         /* [256] */
    const int32_t *residual;        /* [d][2]: the input's (zp, R) */
    const int32_t *output_residual; /* [d][2]: the output's (zp', R') */
} mcubert_causal_attention_weights;

enum {
    MCUBERT_CAUSAL_ATTENTION_HIDDEN,
    MCUBERT_CAUSAL_ATTENTION_POSITION,
    MCUBERT_CAUSAL_ATTENTION_CACHE,
    MCUBERT_CAUSAL_ATTENTION_LAYER_NORM,
    MCUBERT_CAUSAL_ATTENTION_QUERY_WEIGHTS,
    MCUBERT_CAUSAL_ATTENTION_QUERY_CHANNELS,
    MCUBERT_CAUSAL_ATTENTION_KEY_WEIGHTS,
    MCUBERT_CAUSAL_ATTENTION_KEY_CHANNELS,
    MCUBERT_CAUSAL_ATTENTION_VALUE_WEIGHTS,
    MCUBERT_CAUSAL_ATTENTION_VALUE_CHANNELS,
    MCUBERT_CAUSAL_ATTENTION_OUTPUT_WEIGHTS,
    MCUBERT_CAUSAL_ATTENTION_OUTPUT_CHANNELS,
    MCUBERT_CAUSAL_ATTENTION_EXP_LUT,
    MCUBERT_CAUSAL_ATTENTION_RESIDUAL,
    MCUBERT_CAUSAL_ATTENTION_OUTPUT_RESIDUAL,
    MCUBERT_CAUSAL_ATTENTION_OUTPUT,
    MCUBERT_CAUSAL_ATTENTION_NUM_TENSORS
};

/* A(2d) + 3 A(d) + A(2n) + A(8d) bytes; -1 for dimensions outside the contract. */
int32_t mcubert_causal_attention_get_buffer_size(int32_t context, int32_t hidden, int32_t heads);

mcubert_status mcubert_causal_attention_validate(const mcubert_causal_attention_params *params,
                                                 const mcubert_tensor_view *tensors, int32_t count,
                                                 mcubert_message *message);

/* One token: hidden[d] in place, cache row `*position` written (MCUBERT_ERROR_INPUT for a position
 * outside [0, n)). */
mcubert_status mcubert_causal_attention_s8(const mcubert_causal_attention_params *params,
                                           const mcubert_causal_attention_weights *weights, int8_t *hidden,
                                           const int32_t *position, int8_t *cache, const mcubert_context *context,
                                           mcubert_message *message);

/* ---- end of MCUBERT_CAUSAL_ATTENTION ------------------------------------------------------ */

/* ------------------------------------------------------------------------------------------
 * MCUBERT_DECODER_MLP (SPEC 4.7): a decoder's pre-LayerNorm MLP for one token, in place on its
 * residual stream hidden[d]: x' = x + FC2(act(FC1(LN2(x)))).
 * ---------------------------------------------------------------------------------------- */

typedef struct {                    /* constant inputs 1..8, contract order */
    const int32_t *layer_norm;      /* [d][2]: LN2 gamma_q, beta_q */
    const int8_t *fc1_weights;      /* pair4, packed(ffn, d) */
    const int32_t *fc1_channels;    /* [ffn][3] */
    const int8_t *activation_lut;   /* [256] */
    const int8_t *fc2_weights;      /* pair4, packed(d, ffn) */
    const int32_t *fc2_channels;    /* [d][3], to z units */
    const int32_t *residual;        /* [d][2]: the input's (zp, R) */
    const int32_t *output_residual; /* [d][2]: the output's (zp', R') */
} mcubert_decoder_mlp_weights;

enum {
    MCUBERT_DECODER_MLP_HIDDEN,
    MCUBERT_DECODER_MLP_LAYER_NORM,
    MCUBERT_DECODER_MLP_FC1_WEIGHTS,
    MCUBERT_DECODER_MLP_FC1_CHANNELS,
    MCUBERT_DECODER_MLP_ACTIVATION_LUT,
    MCUBERT_DECODER_MLP_FC2_WEIGHTS,
    MCUBERT_DECODER_MLP_FC2_CHANNELS,
    MCUBERT_DECODER_MLP_RESIDUAL,
    MCUBERT_DECODER_MLP_OUTPUT_RESIDUAL,
    MCUBERT_DECODER_MLP_OUTPUT,
    MCUBERT_DECODER_MLP_NUM_TENSORS
};

/* A(2d) + A(d) + A(ffn) + A(8 max(d, ffn)) bytes; -1 for dimensions outside the contract. */
int32_t mcubert_decoder_mlp_get_buffer_size(int32_t hidden, int32_t ffn);

mcubert_status mcubert_decoder_mlp_validate(const mcubert_decoder_mlp_params *params,
                                            const mcubert_tensor_view *tensors, int32_t count,
                                            mcubert_message *message);

mcubert_status mcubert_decoder_mlp_s8(const mcubert_decoder_mlp_params *params,
                                      const mcubert_decoder_mlp_weights *weights, int8_t *hidden,
                                      const mcubert_context *context, mcubert_message *message);

/* ---- end of MCUBERT_DECODER_MLP ----------------------------------------------------------- */

/* ------------------------------------------------------------------------------------------
 * MCUBERT_DECODER_EMBEDDING (SPEC 4.8): a decoder's input for one token, the clustered word row
 * plus the position row, written as the residual stream (no LayerNorm).
 * ---------------------------------------------------------------------------------------- */

typedef struct {                     /* constant inputs 2..8, contract order */
    const int32_t *clusters;         /* [c][2]: (end id, rank) */
    const int8_t *word_rows;         /* int8 rows U_0 | U_1 | ... */
    const int8_t *word_projections;  /* V_i, pair4 */
    const int32_t *word_requant;     /* [c][d][2] into s_z units */
    const int8_t *position_table;    /* [n][d] */
    const int32_t *position_requant; /* [d][2] into s_z units */
    const int32_t *output_residual;  /* [d][2]: the stream's (zp, R) */
} mcubert_decoder_embedding_weights;

enum {
    MCUBERT_DECODER_EMBEDDING_INPUT_ID,
    MCUBERT_DECODER_EMBEDDING_POSITION,
    MCUBERT_DECODER_EMBEDDING_CLUSTERS,
    MCUBERT_DECODER_EMBEDDING_WORD_ROWS,
    MCUBERT_DECODER_EMBEDDING_WORD_PROJECTIONS,
    MCUBERT_DECODER_EMBEDDING_WORD_REQUANT,
    MCUBERT_DECODER_EMBEDDING_POSITION_TABLE,
    MCUBERT_DECODER_EMBEDDING_POSITION_REQUANT,
    MCUBERT_DECODER_EMBEDDING_OUTPUT_RESIDUAL,
    MCUBERT_DECODER_EMBEDDING_OUTPUT,
    MCUBERT_DECODER_EMBEDDING_NUM_TENSORS
};

/* A(2d) bytes; -1 for dimensions outside the contract. */
int32_t mcubert_decoder_embedding_get_buffer_size(int32_t context, int32_t hidden);

mcubert_status mcubert_decoder_embedding_validate(const mcubert_decoder_embedding_params *params,
                                                  const mcubert_tensor_view *tensors, int32_t count,
                                                  mcubert_message *message);

/* hidden[d] from *input_id and *position (MCUBERT_ERROR_INPUT outside [0, v) and [0, n)). */
mcubert_status mcubert_decoder_embedding_s8(const mcubert_decoder_embedding_params *params,
                                            const mcubert_decoder_embedding_weights *weights, const int32_t *input_id,
                                            const int32_t *position, int8_t *hidden, const mcubert_context *context,
                                            mcubert_message *message);

/* ---- end of MCUBERT_DECODER_EMBEDDING ----------------------------------------------------- */

/* ------------------------------------------------------------------------------------------
 * MCUBERT_SAMPLE (SPEC 4.9): a decoder's next token drawn from the LM head's k candidates at a
 * temperature, among the best `keep` (top-k) and the smallest prefix holding a share top_p of their
 * weight (top-p), by a seeded 32-bit generator whose state is an int32[1] variable tensor (Reset()
 * zeroes it). In place on top[2][k]: the drawn candidate moves to the front, so the next id is
 * top[0][0] as in greedy decoding. Integers only: every core draws the ids the reference draws.
 * ---------------------------------------------------------------------------------------- */

typedef struct {            /* constant input 2 */
    const int16_t *exp_lut; /* [256]: EXP_ONE * exp(-j * 16 / 255), [0] = EXP_ONE */
} mcubert_sample_weights;

enum {
    MCUBERT_SAMPLE_TOP,
    MCUBERT_SAMPLE_RNG_STATE,
    MCUBERT_SAMPLE_EXP_LUT,
    MCUBERT_SAMPLE_OUTPUT,
    MCUBERT_SAMPLE_NUM_TENSORS
};

/* A(4k) bytes (the running sums of the weights); -1 for top_k outside [1, MCUBERT_MAX_TOP_K]. */
int32_t mcubert_sample_get_buffer_size(int32_t top_k);

mcubert_status mcubert_sample_validate(const mcubert_sample_params *params, const mcubert_tensor_view *tensors,
                                       int32_t count, mcubert_message *message);

/* top[2][k] (ids best first, then scores) in place, *rng_state advanced. */
mcubert_status mcubert_sample_s8(const mcubert_sample_params *params, const mcubert_sample_weights *weights,
                                 int32_t *top, int32_t *rng_state, const mcubert_context *context,
                                 mcubert_message *message);

/* ---- end of MCUBERT_SAMPLE ---------------------------------------------------------------- */

/* ------------------------------------------------------------------------------------------
 * Custom options: each op's flexbuffer map of integers (SPEC.md section 5), as stored in the
 * .tflite, decoded into its params. The buffer is untrusted and every read is bounds-checked;
 * a malformed container, a missing, unknown or non-integer key is MCUBERT_ERROR_OPTION and a
 * spec_version / spec_hash of another contract MCUBERT_ERROR_SPEC, each naming the field. Value
 * ranges are left to *_validate. On error *params is zeroed.
 * ---------------------------------------------------------------------------------------- */

mcubert_status mcubert_embedding_parse_options(const uint8_t *buffer, int32_t length, mcubert_embedding_params *params,
                                               mcubert_message *message);
mcubert_status mcubert_attention_parse_options(const uint8_t *buffer, int32_t length, mcubert_attention_params *params,
                                               mcubert_message *message);
mcubert_status mcubert_mlp_parse_options(const uint8_t *buffer, int32_t length, mcubert_mlp_params *params,
                                         mcubert_message *message);
mcubert_status mcubert_classifier_head_parse_options(const uint8_t *buffer, int32_t length,
                                                     mcubert_classifier_head_params *params, mcubert_message *message);
mcubert_status mcubert_lm_head_parse_options(const uint8_t *buffer, int32_t length, mcubert_lm_head_params *params,
                                             mcubert_message *message);
mcubert_status mcubert_causal_attention_parse_options(const uint8_t *buffer, int32_t length,
                                                      mcubert_causal_attention_params *params,
                                                      mcubert_message *message);
mcubert_status mcubert_decoder_mlp_parse_options(const uint8_t *buffer, int32_t length,
                                                 mcubert_decoder_mlp_params *params, mcubert_message *message);
mcubert_status mcubert_decoder_embedding_parse_options(const uint8_t *buffer, int32_t length,
                                                       mcubert_decoder_embedding_params *params,
                                                       mcubert_message *message);
mcubert_status mcubert_sample_parse_options(const uint8_t *buffer, int32_t length, mcubert_sample_params *params,
                                            mcubert_message *message);

/* ------------------------------------------------------------------------------------------
 * Model integrity (SPEC.md section 9): the CRC-32 record `export` writes into the .tflite.
 * Call it on the model's bytes before handing them to the interpreter (e.g. at boot, before
 * AllocateTensors): a corrupted model (partial OTA update, worn Flash sector, bad copy) is then
 * reported instead of run. No heap; the bytes are untrusted and every read is bounds-checked;
 * the CRC streams once over the file (cost per KB: custom_ops/README.md).
 *
 * MCUBERT_OK (verified = 1): the record is present and every byte matches. MCUBERT_ERROR_MODEL:
 * malformed or corrupted; the message and the corrupt_* fields name the first constant tensor (its
 * buffer), or operator's options, that was hit, else the structure. A model that uses MCUBERT custom
 * ops (an operator code `MCUBERT_...`) must carry the record: without one (its name or an offset
 * corrupted) it is MCUBERT_ERROR_MODEL. A model without MCUBERT ops and without a record (another
 * tool's) is MCUBERT_UNVERIFIED: not OK, so `status != MCUBERT_OK` refuses it unless the caller
 * accepts unchecked bytes on purpose. `size` must be the model's exact length (model_data_len).
 *
 * mcubert_verify_model_expected additionally checks the model against what the firmware was built
 * for (model_settings.h: MCUBERT_MODEL_TFLITE_BYTES, MCUBERT_MODEL_TFLITE_CRC32): the size, and the
 * CRC-32 of the file with the record's own data read as zeros (the record's word 3; for a model
 * without a record, the CRC-32 of the whole file, so a stock model is verified too). Whatever
 * corruption hides the record, the CRC no longer matches: MCUBERT_OK means verified = 1.
 * ---------------------------------------------------------------------------------------- */

typedef struct {
    int32_t verified;         /* 1: every byte matches the record */
    int32_t corrupt_buffer;   /* first buffer whose data differs, else -1 */
    int32_t corrupt_tensor;   /* the first tensor using that buffer, else -1 */
    int32_t corrupt_operator; /* first operator whose custom options differ, else -1 */
} mcubert_model_integrity;

mcubert_status mcubert_verify_model(const uint8_t *model, uint32_t size, mcubert_model_integrity *result,
                                    mcubert_message *message);
mcubert_status mcubert_verify_model_expected(const uint8_t *model, uint32_t size, uint32_t expected_size,
                                             uint32_t expected_crc32, mcubert_model_integrity *result,
                                             mcubert_message *message);

/* ------------------------------------------------------------------------------------------
 * Build information.
 * ---------------------------------------------------------------------------------------- */

/* 1 when this build runs the DSP micro-kernel (native or emulated), 0 for the plain C path, 2 for
 * the DSP path with the linear layers' gemm on MVE (Helium). */
int32_t mcubert_uses_dsp_path(void);

/* "ok", "argument", "spec", "option", "tensor", "input", "model" or "unknown". */
const char *mcubert_status_name(mcubert_status status);

#ifdef __cplusplus
}
#endif

#endif /* MCUBERT_OPS_H */
