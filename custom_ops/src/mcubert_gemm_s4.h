/*
 * The int4-weight (W4) micro-kernel: one call multiplies a block of up to 4 int8 activation rows
 * with a run of up to MCUBERT_CHUNK_CHANNELS output channels whose weights are packed int4, and
 * returns the int32 accumulators sum_k x_r[k] * W[c][k] — exactly what mcubert_gemm_4xn_pair4
 * returns for the same weights as int8, so the ops' output stages apply unchanged.
 *
 * Weights: the "w4row" layout (docs/w4-gemm.md; tflm_mcubert/ops/linear_int4.py is the
 * reference). Channel c is a row of row_bytes = 4 * ceil(K/8) bytes (one 32-bit little-endian
 * word per 8 K values) at first + c * row_bytes; K value k is nibble k % 2 (low first) of byte
 * k / 2, stored in offset binary (weight + 8: weights [-7, 7] are nibbles 1..15). Nibbles past K
 * are padding (0; never read as weights). Words are read with plain LDR (any alignment).
 *
 * DSP path: one weight word gives four int16 pairs in four ALU instructions, no sign extension:
 *   word & 0x000F000F = (u0, u4)            word & 0x00F000F0 = (16 u1, 16 u5)
 *   (word >> 8) & 0x000F000F = (u2, u6)     (word >> 8) & 0x00F000F0 = (16 u3, 16 u7)
 * (u = w + 8). mcubert_rows_widen_w4() lays the activations out to match, per full 8-group and
 * row: (16 x0, 16 x4), (x1, x5) in the group's first half, (16 x2, 16 x6), (x3, x7) in its
 * second, so every product is 16 u x and SMLAD sums them. The offset and the factor 16 come out
 * per channel sweep: accumulators start at start[r] = -128 * sum of row r's widened values
 * (-16 * 8 * sum x) and end shifted right by 4 (exact: the sum is 16 times an integer). The K % 8
 * tail (at most 7 values) is scalar, so the widened block fits the int16[4][K] the W8 path uses.
 *
 * Plain path: no widening; a loop over the stored nibbles u = w + 8 of the same operands, from
 * start[r] = -8 * (sum of row r's K values), which mcubert_rows_widen_w4 computes.
 *
 * Activations: int8 rows only (one or two segments, as mcubert_rows_init_s8 / _split_s8 / _gather_s8
 * make them); the W4 kernel serves linear layers, whose inputs are int8.
 */
#ifndef MCUBERT_GEMM_S4_H
#define MCUBERT_GEMM_S4_H

#include <stdint.h>

#include "mcubert_gemm_s8.h"

#define MCUBERT_W4_WORD_DEPTH 8 /* K values per packed 32-bit word */

/* Bytes of one channel's packed int4 row of `length` K values: 4 * ceil(length / 8). */
static inline int32_t mcubert_w4_row_bytes(int32_t length)
{
    return ((length + 7) >> 3) * 4;
}

/* DSP path: widen the int8 rows' full 8-groups into `widened` (int16[4][K] of scratch, 4-byte
 * aligned) in the W4 order and set start[r] (see above; 0 for rows >= count). Plain path: only
 * sets start[r] = -8 * (sum of row r's values). Call once per row block, before the gemm calls. */
void mcubert_rows_widen_w4(mcubert_rows *rows, uint32_t *widened, int32_t start[MCUBERT_BLOCK_ROWS]);

/* acc[j][r] = sum_k x_r[k] * W[c][k] for the `channels` (1..MCUBERT_CHUNK_CHANNELS) channels
 * whose packed rows are first + j * row_bytes (row_bytes = mcubert_w4_row_bytes(K)). `start`:
 * from mcubert_rows_widen_w4 for the same rows. Entries of rows >= count are unspecified. */
void mcubert_gemm_4xn_w4(const mcubert_rows *rows, const int32_t start[MCUBERT_BLOCK_ROWS], const uint8_t *first,
                         int32_t row_bytes, int32_t channels, int32_t acc[][MCUBERT_BLOCK_ROWS]);

/* The channel run of the DSP micro-kernel: channel c's words at base + c * row_bytes; every
 * sweep starts its four accumulators at start[0..3]. The assembly reads the fields by offset:
 * keep their order. */
typedef struct {
    const uint8_t *base;
    int32_t row_bytes;
    const int32_t *start;
} mcubert_w4_walk;

/* The micro-kernel proper (DSP path): acc[c][r] = (start[r] + the SMLAD sums of channel c's
 * first `words` packed words against the widened block x) >> 4, for all four rows and channels
 * c < `channels` (>= 1); words may be 0. Thumb-2 assembly (mcubert_gemm_dsp_s4.S) or the
 * equivalent C (mcubert_gemm_s4.c). */
void mcubert_dsp_4xn_w4(const uint32_t *x, int32_t words, const mcubert_w4_walk *walk, int32_t channels,
                        int32_t acc[][MCUBERT_BLOCK_ROWS]);

#endif /* MCUBERT_GEMM_S4_H */
