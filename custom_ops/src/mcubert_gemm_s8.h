/*
 * Matrix micro-kernels shared by the ops: one call multiplies a block of up to 4 activation
 * rows with a run of output channels (up to MCUBERT_CHUNK_CHANNELS) and returns the int32
 * accumulators; the op applies its own output stage (requantize, clamp, residual...) to the
 * whole chunk. Two weight layouts:
 *
 *   pair4 (linear layers, SPEC 3.1): one 8-byte group per 4 K values holds channel 2p's four
 *          weights then channel 2p+1's, so both channels advance through one pointer;
 *   rows   (attention's key[s][dh] and value_t[dh][s]): two int8 rows of length K.
 *
 * Activations are int8 rows (one or two segments: the attention output projection reads a
 * context row as earlier heads' part + the last head's tile) or int16 rows (softmax weights).
 *
 * DSP path (MCUBERT_DSP): mcubert_rows_widen() converts the block's full 4-element groups once
 * per row block into `widened`, laid out [K/4][4 rows][2 words] with each word an int16 pair
 * (x0,x2) then (x1,x3) — the order SXTB16 produces from a weight word (bytes 0,2 and, after
 * ROR 8, bytes 1,3), so two SMLADs per row and channel consume 4 K, and one group of all four
 * rows is 8 consecutive words (two LDMs). The micro-kernel (mcubert_dsp_4xn_*) sweeps K once
 * per output channel with the four rows in registers. The K % 4 tail (at most 3 values) is
 * done in scalar code, so widening never needs more than the spec's int16[4][K] region.
 *
 * MVE path (MCUBERT_MVE, pair4 only): the rows stay int8. mcubert_rows_widen_pair4() leaves one
 * int8 segment in place and copies two segments or int4 rows to contiguous int8 rows (4K bytes of
 * the int16[4][K] region). VLD20/VLD21.32 de-interleave a pair's 32 bytes per 16 K values (pair4
 * alternates the two channels' words) into channel 2p's 16 weights and channel 2p+1's, so each
 * VMLADAVA.S8 uses all 16 lanes; unaligned weights take byte gathers instead. The K % 16 tail uses
 * predicated loads that read nothing past K or past the pair. The rows gemm (attention) reads int8
 * and int16 rows in place too (mcubert_rows_widen copies only two segments or int4 rows): two rows
 * against two weight rows per pass, VLDRB + VMLADAVA.S8 per 16 K, or VLDRH + VLDRB.S16 (the weights
 * sign-extended by the load) + VMLADAVA.S16 per 8 K; tails predicated likewise.
 *
 * Plain path: no widening; straightforward loops over the same operands.
 */
#ifndef MCUBERT_GEMM_S8_H
#define MCUBERT_GEMM_S8_H

#include <stdint.h>

#include "mcubert_dsp.h"

#define MCUBERT_BLOCK_ROWS 4     /* the micro-kernel's M (contract dsp_rows) */
#define MCUBERT_CHUNK_CHANNELS 8 /* channels per call of the chunked kernels: 128 B of accumulators */

/* S4: packed int4 rows (the embedding's int4 U rows, SPEC 4.1.1): value k in the low (k even) or
 * high nibble of byte k / 2. mcubert_rows_widen unpacks them: into the widened block on the DSP
 * path, into int8 rows (then S8) on the plain path. */
typedef enum { MCUBERT_ROWS_S8 = 0, MCUBERT_ROWS_S16 = 1, MCUBERT_ROWS_S4 = 2 } mcubert_rows_kind;

typedef struct {
    mcubert_rows_kind kind;
    int32_t count;  /* rows in the block, 1..4 */
    int32_t length; /* reduction length K */
    int32_t split;  /* int8 rows: K values [0, split) come from row[r], [split, K) from second + r * second_stride */
    const void *row[MCUBERT_BLOCK_ROWS]; /* int8_t or int16_t rows by kind; entries [0, count) are set */
    const int8_t *second;
    int32_t second_stride;
    const uint32_t *widened;              /* set by the widening (MVE pair4: the int8 copies, or NULL) */
    int32_t w4_start[MCUBERT_BLOCK_ROWS]; /* int4-weight gemm: its start sums (mcubert_linear_widen sets them) */
} mcubert_rows;

/* `count` int8 rows base + r * stride, K = length. */
void mcubert_rows_init_s8(mcubert_rows *rows, const int8_t *base, int32_t stride, int32_t count, int32_t length);

/* int8 rows in two segments: first_base + r * first_stride (split values), then
 * second_base + r * second_stride (length - split values). */
void mcubert_rows_init_split_s8(mcubert_rows *rows, const int8_t *first_base, int32_t first_stride, int32_t split,
                                const int8_t *second_base, int32_t second_stride, int32_t count, int32_t length);

/* `count` int8 rows at arbitrary addresses (the embedding's gathered U rows). */
void mcubert_rows_init_gather_s8(mcubert_rows *rows, const int8_t *const *row_pointers, int32_t count, int32_t length);

/* `count` packed int4 rows at arbitrary addresses, K = length values each. */
void mcubert_rows_init_gather_s4(mcubert_rows *rows, const uint8_t *const *row_pointers, int32_t count, int32_t length);

/* `count` int16 rows base + r * stride. */
void mcubert_rows_init_s16(mcubert_rows *rows, const int16_t *base, int32_t stride, int32_t count, int32_t length);

/* DSP path: widen the rows' full 4-groups into `widened` (int16[4][K] of scratch, 4-byte
 * aligned). Plain path: nothing to do, except for int4 rows, which become int8 rows in
 * `widened`. MVE path: as mcubert_rows_widen_pair4, int16 rows in place. Call once per row
 * block, before the gemm calls. */
void mcubert_rows_widen(mcubert_rows *rows, uint32_t *widened);

/* The widening mcubert_gemm_4xn_pair4 wants: mcubert_rows_widen's, except on the MVE path (int8
 * rows read in place or copied contiguous). */
#if MCUBERT_MVE
void mcubert_rows_widen_pair4(mcubert_rows *rows, uint32_t *widened);
#else
static inline void mcubert_rows_widen_pair4(mcubert_rows *rows, uint32_t *widened)
{
    mcubert_rows_widen(rows, widened);
}
#endif

/* acc[j][r] = sum_k x_r[k] * W[2p + j][k] for the `channels` (1..MCUBERT_CHUNK_CHANNELS; any
 * count >= 1 on the MVE path) channels from 2p on: `pairs` is pair p's first 8-byte group in the pair4 tensor (packed +
 * p * pair_stride, pair_stride = ceil(K/4) * 8). int8 (or int4) rows widened by
 * mcubert_rows_widen_pair4. Entries of rows >= count are unspecified (the DSP and MVE
 * micro-kernels always compute four rows). */
void mcubert_gemm_4xn_pair4(const mcubert_rows *rows, const int8_t *pairs, int32_t pair_stride, int32_t channels,
                            int32_t acc[][MCUBERT_BLOCK_ROWS]);

/* acc[j][r] = sum_k x_r[k] * w_j[k] for `channels` (1..MCUBERT_CHUNK_CHANNELS) int8 weight
 * rows w_j = first + j * row_stride (attention's key rows and value_t rows). int8 or int16
 * activation rows. Rows >= count: as above. */
void mcubert_gemm_4xn_rows(const mcubert_rows *rows, const int8_t *first, int32_t row_stride, int32_t channels,
                           int32_t acc[][MCUBERT_BLOCK_ROWS]);

/* Where a run of channels' weights start: channel c at base + (c >> 1) * pair_stride +
 * (c & 1) * lane_offset (pair4: lane_offset 4; two plain rows: pair_stride 0, lane_offset
 * w1 - w0). The assembly reads the fields by offset: keep their order. */
typedef struct {
    const int8_t *base;
    int32_t pair_stride;
    int32_t lane_offset;
} mcubert_channel_walk;

/* The micro-kernel proper (DSP path): acc[c][r] for channels c < `channels` (>= 1) over the
 * `groups` full 4-groups of the widened block x; channel c's weight word g is `step` bytes
 * after word g - 1 (8: pair4, 4: plain rows). Thumb-2 assembly (mcubert_gemm_dsp_s8.S) or the
 * equivalent C (mcubert_gemm_s8_dsp.c). */
void mcubert_dsp_4xn_step8(const uint32_t *x, int32_t groups, const mcubert_channel_walk *walk, int32_t channels,
                           int32_t acc[][MCUBERT_BLOCK_ROWS]);
void mcubert_dsp_4xn_step4(const uint32_t *x, int32_t groups, const mcubert_channel_walk *walk, int32_t channels,
                           int32_t acc[][MCUBERT_BLOCK_ROWS]);

#endif /* MCUBERT_GEMM_S8_H */
