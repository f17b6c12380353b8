/*
 * The DSP path (MCUBERT_DSP without MCUBERT_MVE) of the 4-row gemms: the rows widened to int16 pairs for
 * SMLAD, the channel sweeps (mcubert_gemm_dsp_s8.S is their assembly) and the pair4 and rows gemms.
 * See mcubert_gemm_s8.h for the layouts and mcubert_gemm_s8.c for the bounds.
 */
#include "mcubert_gemm_s8.h"

#include <stddef.h>

#include "mcubert/mcubert_ops.h"
#include "mcubert_dsp.h"
#include "mcubert_fixed_point.h"
#include "mcubert_gemm_s8_rows.h"

#if MCUBERT_DSP

#if !MCUBERT_MVE /* MVE: the rows stay int8 or int16 (mcubert_gemm_s8_mve.c) */

/* Widens `groups` 4-groups of an int8 segment into row r's slots of the widened block (every
 * 8th word pair). Two groups per iteration: the loop is a tenth of a linear layer's work at
 * most, but it runs once per row block and K. */
static void widen_s8(const int8_t *src, uint32_t *dst, int32_t groups)
{
    for (; groups >= 2; groups -= 2, src += 8, dst += 16) {
        const uint32_t x = mcubert_read_u32(src), y = mcubert_read_u32(src + 4);
        dst[0] = mcubert_sxtb16(x);      /* (x0, x2) */
        dst[1] = mcubert_sxtb16_ror8(x); /* (x1, x3) */
        dst[8] = mcubert_sxtb16(y);
        dst[9] = mcubert_sxtb16_ror8(y);
    }
    if (groups != 0) {
        const uint32_t x = mcubert_read_u32(src);
        dst[0] = mcubert_sxtb16(x);
        dst[1] = mcubert_sxtb16_ror8(x);
    }
}

/* Sign-extends the 4-bit values in bits 0-3 and 16-19 of x (other bits 0) to two int16 halves:
 * bit 3 of each half, times 0xFFF0, fills its bits 4-15 (the halves cannot carry into each other). */
static inline uint32_t sign_extend_nibble_pair(uint32_t x)
{
    return x | (((x >> 3) & 0x00010001u) * 0xFFF0u);
}

/* Widens `groups` 4-groups of a packed int4 row (two bytes each) into row r's slots: nibbles
 * x0..x3 of bytes (x0 | x1 << 4, x2 | x3 << 4) become the words (x0, x2) and (x1, x3). */
static void widen_s4(const uint8_t *src, uint32_t *dst, int32_t groups)
{
    for (; groups > 0; --groups, src += 2, dst += 8) {
        const uint32_t x = (uint32_t)src[0] | ((uint32_t)src[1] << 16); /* x0 x1 in bits 0-7, x2 x3 in 16-23 */
        dst[0] = sign_extend_nibble_pair(x & 0x000F000Fu);
        dst[1] = sign_extend_nibble_pair((x >> 4) & 0x000F000Fu);
    }
}

void mcubert_rows_widen(mcubert_rows *rows, uint32_t *widened)
{
    const int32_t groups = rows->length >> 2;
    int32_t r;
    for (r = 0; r < rows->count; ++r) {
        uint32_t *dst = widened + 2 * r; /* row r's words inside each 8-word group */
        int32_t g = 0;
        if (rows->kind == MCUBERT_ROWS_S4) {
            widen_s4((const uint8_t *)rows->row[r], dst, groups);
            continue;
        }
        if (rows->kind == MCUBERT_ROWS_S16) {
            const int16_t *src = row_s16(rows, r);
            for (; g < groups; ++g, src += 4, dst += 8) {
                const uint32_t lo = mcubert_read_u32(src);     /* (x0, x1) */
                const uint32_t hi = mcubert_read_u32(src + 2); /* (x2, x3) */
                dst[0] = mcubert_pack_low_halves(lo, hi);      /* (x0, x2) */
                dst[1] = mcubert_pack_high_halves(lo, hi);     /* (x1, x3) */
            }
            continue;
        }
        g = mcubert_min_i32(rows->split >> 2, groups);
        widen_s8(row_s8(rows, r), dst, g);
        dst += 8 * g;
        if (g == groups) {
            continue; /* single segment, or the second one is shorter than a group */
        }
        if ((rows->split & 3) == 0) {
            widen_s8(second_s8(rows, r), dst, groups - g);
        } else {
            /* A group straddles the two segments (only when a head size is not a multiple of
             * 4): assemble the remaining groups byte by byte. */
            for (; g < groups; ++g, dst += 8) {
                uint32_t x = 0;
                int32_t i;
                for (i = 0; i < 4; ++i) {
                    x |= (uint32_t)(uint8_t)activation_at(rows, r, 4 * g + i) << (8 * i);
                }
                dst[0] = mcubert_sxtb16(x);
                dst[1] = mcubert_sxtb16_ror8(x);
            }
        }
    }
    rows->widened = widened;
}

/* Activation k of each of the block's rows, x[r] for r < count (the K % 4 tails). */
static void activations_at(const mcubert_rows *rows, int32_t k, int32_t x[MCUBERT_BLOCK_ROWS])
{
    int32_t r;
    for (r = 0; r < rows->count; ++r) {
        x[r] = activation_at(rows, r, k);
    }
}
#endif /* !MCUBERT_MVE */

static inline const int8_t *channel_base(const mcubert_channel_walk *walk, int32_t c)
{
    return walk->base + (c >> 1) * walk->pair_stride + (c & 1) * walk->lane_offset;
}

#if !MCUBERT_DSP_ASM
/* One sweep of the micro-kernel: acc[r] = row r (of 4) against one channel, whose weight word
 * g is at w + step * g. The weight word is sign-extended once (SXTB16, SXTB16 ROR 8) and used
 * for all four rows: 2 SMLADs per row consume the group. The assembly version
 * (mcubert_gemm_dsp_s8.S) is this loop with the rows' 8 words loaded by two LDMs. */
static void dsp_sweep(const uint32_t *x, int32_t groups, const int8_t *w, int32_t step, int32_t acc[4])
{
    int32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    for (; groups > 0; --groups, x += 8, w += step) {
        const uint32_t word = mcubert_read_u32(w);
        const uint32_t even = mcubert_sxtb16(word), odd = mcubert_sxtb16_ror8(word);
        a0 = mcubert_smlad(even, x[0], a0);
        a0 = mcubert_smlad(odd, x[1], a0);
        a1 = mcubert_smlad(even, x[2], a1);
        a1 = mcubert_smlad(odd, x[3], a1);
        a2 = mcubert_smlad(even, x[4], a2);
        a2 = mcubert_smlad(odd, x[5], a2);
        a3 = mcubert_smlad(even, x[6], a3);
        a3 = mcubert_smlad(odd, x[7], a3);
    }
    acc[0] = a0;
    acc[1] = a1;
    acc[2] = a2;
    acc[3] = a3;
}

/* One sweep per channel (see the .S file for why not two channels per pass). */
void mcubert_dsp_4xn_step8(const uint32_t *x, int32_t groups, const mcubert_channel_walk *walk, int32_t channels,
                           int32_t acc[][MCUBERT_BLOCK_ROWS])
{
    int32_t c;
    for (c = 0; c < channels; ++c) {
        dsp_sweep(x, groups, channel_base(walk, c), 8, acc[c]);
    }
}

void mcubert_dsp_4xn_step4(const uint32_t *x, int32_t groups, const mcubert_channel_walk *walk, int32_t channels,
                           int32_t acc[][MCUBERT_BLOCK_ROWS])
{
    int32_t c;
    for (c = 0; c < channels; ++c) {
        dsp_sweep(x, groups, channel_base(walk, c), 4, acc[c]);
    }
}
#endif /* !MCUBERT_DSP_ASM */

#if !MCUBERT_MVE

void mcubert_gemm_4xn_pair4(const mcubert_rows *rows, const int8_t *pairs, int32_t pair_stride, int32_t channels,
                            int32_t acc[][MCUBERT_BLOCK_ROWS])
{
    const int32_t full = rows->length & ~3;
    mcubert_channel_walk walk;
    int32_t c, r, k;
    walk.base = pairs;
    walk.pair_stride = pair_stride;
    walk.lane_offset = 4;
    if (rows->length >= 4) {
        mcubert_dsp_4xn_step8(rows->widened, rows->length >> 2, &walk, channels, acc);
    } else { /* a rank-1..3 embedding cluster: the tail below is the whole product */
        for (c = 0; c < channels; ++c) {
            acc[c][0] = acc[c][1] = acc[c][2] = acc[c][3] = 0;
        }
    }
    /* K % 4 tail: the last group's lanes, read in place (its padding lanes are never used). */
    for (k = full; k < rows->length; ++k) {
        const int8_t *w = pairs + 2 * k - (k & 3);
        int32_t x[MCUBERT_BLOCK_ROWS];
        activations_at(rows, k, x);
        for (c = 0; c < channels; ++c) {
            const int32_t weight = w[(c >> 1) * pair_stride + (c & 1) * 4];
            for (r = 0; r < rows->count; ++r) {
                acc[c][r] += x[r] * weight;
            }
        }
    }
}

void mcubert_gemm_4xn_rows(const mcubert_rows *rows, const int8_t *first, int32_t row_stride, int32_t channels,
                           int32_t acc[][MCUBERT_BLOCK_ROWS])
{
    const int32_t full = rows->length & ~3;
    mcubert_channel_walk walk;
    int32_t c, r, k;
    walk.base = first;
    walk.pair_stride = 2 * row_stride;
    walk.lane_offset = row_stride;
    mcubert_dsp_4xn_step4(rows->widened, rows->length >> 2, &walk, channels, acc);
    for (k = full; k < rows->length; ++k) {
        int32_t x[MCUBERT_BLOCK_ROWS];
        activations_at(rows, k, x);
        for (c = 0; c < channels; ++c) {
            const int32_t weight = first[c * row_stride + k];
            for (r = 0; r < rows->count; ++r) {
                acc[c][r] += x[r] * weight;
            }
        }
    }
}
#endif /* !MCUBERT_MVE */

#endif /* MCUBERT_DSP */
