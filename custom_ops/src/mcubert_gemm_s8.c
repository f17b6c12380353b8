/*
 * 4 x 2 x 4 micro-kernels (4 activation rows x 2 output channels x K in steps of 4) and the
 * row widening they consume. See mcubert_gemm_s8.h for the layouts.
 *
 * Bounds: int8 x int8 products are <= 2^14 and K <= 4096, int16 softmax weights (<= 2^14) x
 * int8 values over s <= 1024 keys stay within [-2^31, 2^31) (SPEC 3.4), so int32 accumulators
 * never overflow. SMLAD wraps modulo 2^32 anyway, so its partial sums need no bound at all.
 */
#include "mcubert_gemm_s8.h"

#include <stddef.h>

#include "mcubert/mcubert_ops.h"
#include "mcubert_dsp.h"
#include "mcubert_fixed_point.h"

#if MCUBERT_MVE
#include <arm_mve.h>
#endif

static void rows_clear(mcubert_rows *rows, mcubert_rows_kind kind, int32_t count, int32_t length)
{
    rows->kind = kind;
    rows->count = count;
    rows->length = length;
    rows->split = length;
    rows->second = NULL;
    rows->second_stride = 0;
    rows->widened = NULL;
}

void mcubert_rows_init_s8(mcubert_rows *rows, const int8_t *base, int32_t stride, int32_t count, int32_t length)
{
    int32_t r;
    rows_clear(rows, MCUBERT_ROWS_S8, count, length);
    for (r = 0; r < count; ++r) {
        rows->row[r] = base + r * stride;
    }
}

void mcubert_rows_init_split_s8(mcubert_rows *rows, const int8_t *first_base, int32_t first_stride, int32_t split,
                                const int8_t *second_base, int32_t second_stride, int32_t count, int32_t length)
{
    mcubert_rows_init_s8(rows, first_base, first_stride, count, length);
    rows->split = split;
    rows->second = second_base;
    rows->second_stride = second_stride;
}

void mcubert_rows_init_gather_s8(mcubert_rows *rows, const int8_t *const *row_pointers, int32_t count, int32_t length)
{
    int32_t r;
    rows_clear(rows, MCUBERT_ROWS_S8, count, length);
    for (r = 0; r < count; ++r) {
        rows->row[r] = row_pointers[r];
    }
}

void mcubert_rows_init_gather_s4(mcubert_rows *rows, const uint8_t *const *row_pointers, int32_t count, int32_t length)
{
    int32_t r;
    rows_clear(rows, MCUBERT_ROWS_S4, count, length);
    for (r = 0; r < count; ++r) {
        rows->row[r] = row_pointers[r];
    }
}

void mcubert_rows_init_s16(mcubert_rows *rows, const int16_t *base, int32_t stride, int32_t count, int32_t length)
{
    int32_t r;
    rows_clear(rows, MCUBERT_ROWS_S16, count, length);
    for (r = 0; r < count; ++r) {
        rows->row[r] = base + r * stride;
    }
}

static inline const int8_t *row_s8(const mcubert_rows *rows, int32_t r)
{
    return (const int8_t *)rows->row[r];
}

static inline const int16_t *row_s16(const mcubert_rows *rows, int32_t r)
{
    return (const int16_t *)rows->row[r];
}

/* int8 row r's second segment (K values [split, K)). */
static inline const int8_t *second_s8(const mcubert_rows *rows, int32_t r)
{
    return rows->second + r * rows->second_stride;
}

/* Value k of a packed int4 row: the two's complement nibble, sign-extended. */
static inline int32_t nibble_at(const uint8_t *row, int32_t k)
{
    const int32_t byte = row[k >> 1];
    return ((((k & 1) ? byte >> 4 : byte) & 0xF) ^ 8) - 8;
}

/* Activation k of row r, whatever its storage (scalar paths: tails, odd splits). */
static inline int32_t activation_at(const mcubert_rows *rows, int32_t r, int32_t k)
{
    if (rows->kind == MCUBERT_ROWS_S16) {
        return row_s16(rows, r)[k];
    }
    if (rows->kind == MCUBERT_ROWS_S4) {
        return nibble_at((const uint8_t *)rows->row[r], k);
    }
    return k < rows->split ? row_s8(rows, r)[k] : second_s8(rows, r)[k - rows->split];
}

int32_t mcubert_uses_dsp_path(void)
{
    return MCUBERT_DSP + MCUBERT_MVE;
}

#if MCUBERT_DSP

/* ---- DSP path -------------------------------------------------------------------------- */

#if !MCUBERT_MVE /* MVE: the rows stay int8 or int16 (mcubert_rows_widen below, with the MVE gemms) */

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

#if MCUBERT_MVE

/* ---- MVE path (pair4) ------------------------------------------------------------------ */

/* One int8 segment is read in place (widened stays NULL). Two segments and int4 rows become
 * contiguous int8 rows, row r at byte r K of `widened`: 4K bytes of the int16[4][K] region. */
void mcubert_rows_widen_pair4(mcubert_rows *rows, uint32_t *widened)
{
    const int32_t length = rows->length, split = rows->split;
    int8_t *copy = (int8_t *)(void *)widened;
    int32_t r, k;
    rows->widened = NULL;
    if (rows->kind == MCUBERT_ROWS_S8 && split == length) {
        return;
    }
    for (r = 0; r < rows->count; ++r, copy += length) {
        if (rows->kind == MCUBERT_ROWS_S8) {
            memcpy(copy, row_s8(rows, r), (size_t)split);
            memcpy(copy + split, second_s8(rows, r), (size_t)(length - split));
        } else {
            for (k = 0; k < length; ++k) {
                copy[k] = (int8_t)activation_at(rows, r, k);
            }
        }
    }
    rows->widened = widened;
}

/* Byte offsets of channel 2p's 16 K values in a 32-byte pair4 block (channel 2p + 1's: + 4). */
static const uint8_t even_lanes[16] = {0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27};

/* A pair's next 16 K values, channel 2p in val[0] and 2p + 1 in val[1], so that each VMLADAV
 * uses all 16 lanes on a raw int8 row. pair4 interleaves the channels word by word, which
 * VLD20/VLD21.32 undo; they need word-aligned weights, so other addresses take two byte gathers
 * (the same instruction count, more beats). `aligned` is a constant in each caller. */
static inline int8x16x2_t pair_load(const int8_t *w, int aligned, uint8x16_t even, uint8x16_t odd)
{
    int8x16x2_t pair;
    if (aligned) {
        const int32x4x2_t words = vld2q_s32((const int32_t *)(const void *)w);
        pair.val[0] = vreinterpretq_s8_s32(words.val[0]);
        pair.val[1] = vreinterpretq_s8_s32(words.val[1]);
    } else {
        pair.val[0] = vldrbq_gather_offset_s8(w, even);
        pair.val[1] = vldrbq_gather_offset_s8(w, odd);
    }
    return pair;
}

/* What a sweep of two rows covers: `pairs` channel pairs from w on, pair_stride bytes apart,
 * `groups` 16-groups of K each. */
typedef struct {
    const int8_t *w;
    int32_t pair_stride;
    int32_t pairs;
    int32_t groups;
} pair_sweep;

/* Groups [1, 1 + n) of an aligned pair: the loop of pair_rows, software-pipelined. In-order issue
 * overlaps a vector instruction's second beat with the next one's first only when they use different
 * pipes (load/store against multiply), so the loads of the next group (q4-q7, then q0-q3) are
 * interleaved with this group's VMLADAVA: 16 instructions for two groups (128 MACs), every beat
 * overlapped, where the loads-then-multiplies order a compiler picks overlaps one. The loads stop at
 * the last group: nothing past the rows or the pair is read. */
static inline void pair_groups_interleaved(const int8_t *v, const int8_t *y0, const int8_t *y1, int32_t n,
                                           int32_t sums[4])
{
    int32_t a0 = sums[0], b0 = sums[1], a1 = sums[2], b1 = sums[3];
    const int32_t twice = (n - 1) >> 1; /* loop trips: two groups added, two loaded */
    if (n <= 0) {
        return;
    }
    __asm__ volatile(
        "vldrb.u8 q0, [%[y0]], #16\n\t"
        "vld20.32 {q2, q3}, [%[v]]\n\t"
        "vld21.32 {q2, q3}, [%[v]]!\n\t"
        "vldrb.u8 q1, [%[y1]], #16\n\t"
        "wls lr, %[twice], 2f\n"
        "1:\n\t"
        "vmladava.s8 %[a0], q0, q2\n\t"
        "vldrb.u8 q4, [%[y0]], #16\n\t"
        "vmladava.s8 %[b0], q0, q3\n\t"
        "vld20.32 {q6, q7}, [%[v]]\n\t"
        "vmladava.s8 %[a1], q1, q2\n\t"
        "vld21.32 {q6, q7}, [%[v]]!\n\t"
        "vmladava.s8 %[b1], q1, q3\n\t"
        "vldrb.u8 q5, [%[y1]], #16\n\t"
        "vmladava.s8 %[a0], q4, q6\n\t"
        "vldrb.u8 q0, [%[y0]], #16\n\t"
        "vmladava.s8 %[b0], q4, q7\n\t"
        "vld20.32 {q2, q3}, [%[v]]\n\t"
        "vmladava.s8 %[a1], q5, q6\n\t"
        "vld21.32 {q2, q3}, [%[v]]!\n\t"
        "vmladava.s8 %[b1], q5, q7\n\t"
        "vldrb.u8 q1, [%[y1]], #16\n\t"
        "le lr, 1b\n"
        "2:\n\t"
        /* q0-q3 hold a loaded group not yet added; an even n leaves one more group after it. */
        "tst %[n], #1\n\t"
        "bne 3f\n\t"
        "vmladava.s8 %[a0], q0, q2\n\t"
        "vldrb.u8 q4, [%[y0]]\n\t"
        "vmladava.s8 %[b0], q0, q3\n\t"
        "vld20.32 {q6, q7}, [%[v]]\n\t"
        "vmladava.s8 %[a1], q1, q2\n\t"
        "vld21.32 {q6, q7}, [%[v]]\n\t"
        "vmladava.s8 %[b1], q1, q3\n\t"
        "vldrb.u8 q5, [%[y1]]\n\t"
        "vmladava.s8 %[a0], q4, q6\n\t"
        "vmladava.s8 %[b0], q4, q7\n\t"
        "vmladava.s8 %[a1], q5, q6\n\t"
        "vmladava.s8 %[b1], q5, q7\n\t"
        "b 4f\n"
        "3:\n\t"
        "vmladava.s8 %[a0], q0, q2\n\t"
        "vmladava.s8 %[b0], q0, q3\n\t"
        "vmladava.s8 %[a1], q1, q2\n\t"
        "vmladava.s8 %[b1], q1, q3\n"
        "4:\n"
        : [a0] "+Te"(a0), [b0] "+Te"(b0), [a1] "+Te"(a1), [b1] "+Te"(b1), [v] "+r"(v), [y0] "+r"(y0), [y1] "+r"(y1)
        : [twice] "r"(twice), [n] "r"(n)
        : "lr", "cc", "memory", "d0", "d1", "d2", "d3", "d4", "d5", "d6", "d7", "d8", "d9", "d10", "d11", "d12", "d13",
          "d14", "d15");
    sums[0] = a0;
    sums[1] = b0;
    sums[2] = a1;
    sums[3] = b1;
}

/* Rows x0, x1 against each channel pair of the sweep: out[4 j + i] = row i against the pair's
 * channel j (out advances 8 ints a pair: acc[c][r0..] and acc[c + 1][r0..]). Per group 2 weight
 * loads, 2 row loads and 4 VMLADAVA.S8 (8 instructions for 64 MACs; aligned weights: an LE per two
 * groups, pair_groups_interleaved). Two rows, not four:
 * VMLADAVA accumulates in even registers, and with LR taken by the low-overhead loop 7 are left
 * (four rows are 8 sums, and a spill). VMLADAVA wraps modulo 2^32 like SMLAD; SPEC 3.1's bounds
 * keep the sums exact. */
static inline void pair_rows(const int8_t *x0, const int8_t *x1, const pair_sweep *s, int32_t *out, int aligned)
{
    const uint8x16_t even = vldrbq_u8(even_lanes), odd = vaddq_n_u8(even, 4);
    const int32_t groups = s->groups, pairs = s->pairs, pair_stride = s->pair_stride; /* out could alias *s */
    const int8_t *w = s->w;
    int32_t p;
    for (p = 0; p < pairs; ++p, w += pair_stride, out += 2 * MCUBERT_BLOCK_ROWS) {
        int32_t sums[4] = {0, 0, 0, 0}; /* row 0 x channel 2p, row 0 x 2p + 1, row 1 x 2p, row 1 x 2p + 1 */
        int32_t g;
        if (aligned) {
            pair_groups_interleaved(w, x0, x1, groups, sums);
        } else {
            for (g = 0; g < groups; ++g) {
                const int8x16x2_t pair = pair_load(w + 32 * g, aligned, even, odd);
                const int8x16_t row0 = vldrbq_s8(x0 + 16 * g), row1 = vldrbq_s8(x1 + 16 * g);
                sums[0] = vmladavaq_s8(sums[0], row0, pair.val[0]);
                sums[1] = vmladavaq_s8(sums[1], row0, pair.val[1]);
                sums[2] = vmladavaq_s8(sums[2], row1, pair.val[0]);
                sums[3] = vmladavaq_s8(sums[3], row1, pair.val[1]);
            }
        }
        out[0] = sums[0];
        out[1] = sums[2];
        out[MCUBERT_BLOCK_ROWS] = sums[1];
        out[MCUBERT_BLOCK_ROWS + 1] = sums[3];
    }
}

/* Out of line, one per weight alignment, so that the loop keeps its pointers in registers. */
__attribute__((noinline)) static void pair_rows_aligned(const int8_t *x0, const int8_t *x1, const pair_sweep *s,
                                                        int32_t *out)
{
    pair_rows(x0, x1, s, out, 1);
}

__attribute__((noinline)) static void pair_rows_gathered(const int8_t *x0, const int8_t *x1, const pair_sweep *s,
                                                         int32_t *out)
{
    pair_rows(x0, x1, s, out, 0);
}

/* The K % 16 tail of rows [0, count) (`rest` values from x[r] + from; the pair's last groups
 * at w), added to out[j][r].
 * Per 8 values, 16 weight bytes (c0 k0..3, c1 k0..3, c0 k4..7, c1 k4..7) meet the row gathered
 * as (x0..3, x0..3, x4..7, x4..7); predicated VMLADAVs take lanes 0-3 and 8-11 for channel 2p,
 * the others for 2p + 1. Lanes at or past K read nothing and are 0, which kills the K % 4
 * padding; the weight load stops at the pair's last group (no byte past the tensor is read). */
static void pair_tail(const int8_t *const x[MCUBERT_BLOCK_ROWS], int32_t count, int32_t from, int32_t rest,
                      const int8_t *w, int32_t *out[2])
{
    static const uint8_t twice[16] = {0, 1, 2, 3, 0, 1, 2, 3, 4, 5, 6, 7, 4, 5, 6, 7};
    const uint8x16_t lanes = vldrbq_u8(twice);
    const mve_pred16_t even = 0x0F0F, odd = vpnot(even); /* (0xF0F0 does not assemble as a constant) */
    int32_t h, r;
    for (h = 0; h < rest; h += 8, w += 16) {
        const int32_t left = rest - h;
        const mve_pred16_t live = vcmphiq_u8(vdupq_n_u8((uint8_t)mcubert_min_i32(left, 8)), lanes);
        const int8x16_t weights = vldrbq_z_s8(w, vctp8q(left > 4 ? 16 : 8));
        for (r = 0; r < count; ++r) {
            const int8x16_t row = vldrbq_gather_offset_z_s8(x[r] + from + h, lanes, live);
            out[0][r] = vmladavaq_p_s8(out[0][r], row, weights, even);
            out[1][r] = vmladavaq_p_s8(out[1][r], row, weights, odd);
        }
    }
}

/* The block's row addresses: in place or the widened copies; rows >= count repeat the last. */
static void block_rows(const mcubert_rows *rows, const int8_t *x[MCUBERT_BLOCK_ROWS])
{
    const int8_t *copies = (const int8_t *)(const void *)rows->widened;
    int32_t r;
    for (r = 0; r < MCUBERT_BLOCK_ROWS; ++r) {
        x[r] = r >= rows->count ? x[r - 1] : copies != NULL ? copies + r * rows->length : row_s8(rows, r);
    }
}

/* Rows (0, 1) then (2, 3) over the whole pairs, then an odd last channel's pair (its second
 * channel is the tensor's padding) into `spare`, then the K % 16 tails pair by pair. */
void mcubert_gemm_4xn_pair4(const mcubert_rows *rows, const int8_t *pairs, int32_t pair_stride, int32_t channels,
                            int32_t acc[][MCUBERT_BLOCK_ROWS])
{
    void (*const sweep)(const int8_t *, const int8_t *, const pair_sweep *, int32_t *) =
        ((uintptr_t)pairs & 3) == 0 ? pair_rows_aligned : pair_rows_gathered; /* pair_stride is a multiple of 8 */
    const int32_t swept = rows->count > 2 ? 4 : 2;                            /* rows computed: whole row pairs */
    const int32_t rest = rows->length & 15, whole = channels >> 1;
    const int8_t *x[MCUBERT_BLOCK_ROWS];
    int32_t spare[2][MCUBERT_BLOCK_ROWS];
    int32_t c, r;
    pair_sweep s;
    block_rows(rows, x);
    s.w = pairs;
    s.pair_stride = pair_stride;
    s.pairs = whole;
    s.groups = rows->length >> 4;
    if (s.groups == 0) { /* K < 16 (the sweeps need a group): the tails below are the whole product */
        memset(acc, 0, (size_t)channels * sizeof acc[0]);
        memset(spare, 0, sizeof spare);
        s.pairs = 0;
    }
    for (r = 0; r < swept && s.pairs != 0; r += 2) {
        sweep(x[r], x[r + 1], &s, acc[0] + r);
    }
    if ((channels & 1) != 0 && s.groups != 0) {
        s.w = pairs + whole * pair_stride;
        s.pairs = 1;
        for (r = 0; r < swept; r += 2) {
            sweep(x[r], x[r + 1], &s, spare[0] + r);
        }
    }
    for (c = 0; c < channels && rest != 0; c += 2) {
        int32_t *out[2];
        out[0] = c + 1 < channels ? acc[c] : spare[0];
        out[1] = c + 1 < channels ? acc[c + 1] : spare[1];
        pair_tail(x, swept, 16 * s.groups, rest, pairs + (c >> 1) * pair_stride + 32 * s.groups, out);
    }
    if ((channels & 1) != 0) {
        memcpy(acc[channels - 1], spare[0], sizeof spare[0]);
    }
}

#else  /* !MCUBERT_MVE */

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
#endif /* MCUBERT_MVE */

#if MCUBERT_MVE

/* ---- MVE path (rows) ------------------------------------------------------------------- */

/* int16 rows (softmax weights) and one int8 segment are read in place; two segments and int4 rows
 * become contiguous int8 rows, as for the pair4 gemm. */
void mcubert_rows_widen(mcubert_rows *rows, uint32_t *widened)
{
    if (rows->kind == MCUBERT_ROWS_S16) {
        rows->widened = NULL;
        return;
    }
    mcubert_rows_widen_pair4(rows, widened);
}

/* What a sweep of two rows covers: `channels` weight rows from w on, `stride` bytes apart, K each. */
typedef struct {
    const int8_t *w;
    int32_t stride;
    int32_t channels;
    int32_t length;
} rows_sweep;

/* Stores a channel pair's sums (row 0 x c, row 0 x c + 1, row 1 x c, row 1 x c + 1) into out[4 j + i]
 * (acc[c][r0..] and acc[c + 1][r0..]); `both` is 0 for an odd last channel. */
static inline void store_pair(const int32_t sums[4], int32_t both, int32_t *out)
{
    out[0] = sums[0];
    out[1] = sums[2];
    if (both) {
        out[MCUBERT_BLOCK_ROWS] = sums[1];
        out[MCUBERT_BLOCK_ROWS + 1] = sums[3];
    }
}

/* The software-pipelined loop of pair_groups_interleaved for two separate weight rows: groups [0, n)
 * (n >= 1) of rows y0, y1 against weight rows v0, v1, the next group's loads alternating with this
 * group's VMLADAVA. LOAD_X / LOAD_W load a group of activations / weights (with writeback), MAC is the
 * VMLADAVA of the element size. The loads stop at the last group. */
#define MCUBERT_ROWS_GROUPS_ASM(LOAD_X, LOAD_W, MAC)                                                                   \
    LOAD_X " q0, [%[y0]], %[xstep]\n\t" LOAD_W " q2, [%[v0]], %[wstep]\n\t" LOAD_W " q3, [%[v1]], %[wstep]\n\t" LOAD_X \
           " q1, [%[y1]], %[xstep]\n\t"                                                                                \
           "sub lr, %[n], #1\n\t"                                                                                      \
           "asr lr, lr, #1\n\t" /* loop trips: two groups added, two loaded */                                         \
           "wls lr, lr, 2f\n"                                                                                          \
           "1:\n\t" MAC " %[a0], q0, q2\n\t" LOAD_X " q4, [%[y0]], %[xstep]\n\t" MAC " %[b0], q0, q3\n\t" LOAD_W       \
           " q6, [%[v0]], %[wstep]\n\t" MAC " %[a1], q1, q2\n\t" LOAD_W " q7, [%[v1]], %[wstep]\n\t" MAC               \
           " %[b1], q1, q3\n\t" LOAD_X " q5, [%[y1]], %[xstep]\n\t" MAC " %[a0], q4, q6\n\t" LOAD_X                    \
           " q0, [%[y0]], %[xstep]\n\t" MAC " %[b0], q4, q7\n\t" LOAD_W " q2, [%[v0]], %[wstep]\n\t" MAC               \
           " %[a1], q5, q6\n\t" LOAD_W " q3, [%[v1]], %[wstep]\n\t" MAC " %[b1], q5, q7\n\t" LOAD_X                    \
           " q1, [%[y1]], %[xstep]\n\t"                                                                                \
           "le lr, 1b\n"                                                                                               \
           "2:\n\t"                                                                                                    \
           "tst %[n], #1\n\t"                                                                                          \
           "bne 3f\n\t" MAC " %[a0], q0, q2\n\t" LOAD_X " q4, [%[y0]], %[xstep]\n\t" MAC " %[b0], q0, q3\n\t" LOAD_W   \
           " q6, [%[v0]], %[wstep]\n\t" MAC " %[a1], q1, q2\n\t" LOAD_W " q7, [%[v1]], %[wstep]\n\t" MAC               \
           " %[b1], q1, q3\n\t" LOAD_X " q5, [%[y1]], %[xstep]\n\t" MAC " %[a0], q4, q6\n\t" MAC                       \
           " %[b0], q4, q7\n\t" MAC " %[a1], q5, q6\n\t" MAC " %[b1], q5, q7\n\t"                                      \
           "b 4f\n"                                                                                                    \
           "3:\n\t" MAC " %[a0], q0, q2\n\t" MAC " %[b0], q0, q3\n\t" MAC " %[a1], q1, q2\n\t" MAC " %[b1], q1, q3\n"  \
           "4:\n"

/* WREG: the weight pointers' constraint (widening loads take r0-r7 only: "l"). */
#define MCUBERT_ROWS_GROUPS_OPERANDS(WREG)                                                                             \
    : [a0] "+Te"(a0), [b0] "+Te"(b0), [a1] "+Te"(a1), [b1] "+Te"(b1), [v0] WREG(v0), [v1] WREG(v1), [y0] "+r"(y0),    \
      [y1] "+r"(y1)                                                                                                    \
    : [n] "r"(n), [xstep] "i"(16), [wstep] "i"(16 / (16 / MCUBERT_LANES))                                             \
    : "lr", "cc", "memory", "d0", "d1", "d2", "d3", "d4", "d5", "d6", "d7", "d8", "d9", "d10", "d11", "d12", "d13",   \
      "d14", "d15"

/* sums[] += rows y0, y1 against weight rows v0, v1 over n >= 1 groups of 16 int8 values. (The last
 * group's writeback goes one group past the rows: only the address, nothing is read there.) */
static inline void rows_groups_s8(const int8_t *y0, const int8_t *y1, const int8_t *v0, const int8_t *v1, int32_t n,
                                  int32_t sums[4])
{
#define MCUBERT_LANES 16
    int32_t a0 = sums[0], b0 = sums[1], a1 = sums[2], b1 = sums[3];
    __asm__ volatile(MCUBERT_ROWS_GROUPS_ASM("vldrb.u8", "vldrb.u8", "vmladava.s8") MCUBERT_ROWS_GROUPS_OPERANDS("+r"));
#undef MCUBERT_LANES
    sums[0] = a0;
    sums[1] = b0;
    sums[2] = a1;
    sums[3] = b1;
}

/* The same over n >= 1 groups of 8: int16 activations (softmax weights), int8 weights sign-extended
 * by VLDRB.S16 (8 bytes a group). */
static inline void rows_groups_s16(const int16_t *y0, const int16_t *y1, const int8_t *v0, const int8_t *v1, int32_t n,
                                   int32_t sums[4])
{
#define MCUBERT_LANES 8
    int32_t a0 = sums[0], b0 = sums[1], a1 = sums[2], b1 = sums[3];
    __asm__ volatile(MCUBERT_ROWS_GROUPS_ASM("vldrh.u16", "vldrb.s16", "vmladava.s16")
                         MCUBERT_ROWS_GROUPS_OPERANDS("+l"));
#undef MCUBERT_LANES
    sums[0] = a0;
    sums[1] = b0;
    sums[2] = a1;
    sums[3] = b1;
}

/* Rows x0, x1 against weight rows v0, v1 (the pair's sums as in rows_groups_s8), then stored: int8 rows
 * (QK^T: query rows against key rows). Per 16 K: 4 VLDRB and 4 VMLADAVA.S8 for 64 MACs
 * (rows_groups_s8); the K % 16 tail with zeroing predicated loads (nothing read past K). */
static inline void rows_pair_s8(const int8_t *x0, const int8_t *x1, const int8_t *v0, const int8_t *v1, int32_t length,
                                int32_t sums[4])
{
    const int32_t full = length & ~15;
    sums[0] = sums[1] = sums[2] = sums[3] = 0;
    if (full != 0) {
        rows_groups_s8(x0, x1, v0, v1, full >> 4, sums);
    }
    if (full < length) {
        const mve_pred16_t live = vctp8q((uint32_t)(length - full));
        const int8x16_t y0 = vldrbq_z_s8(x0 + full, live), y1 = vldrbq_z_s8(x1 + full, live);
        const int8x16_t w0 = vldrbq_z_s8(v0 + full, live), w1 = vldrbq_z_s8(v1 + full, live);
        sums[0] = vmladavaq_s8(sums[0], y0, w0);
        sums[1] = vmladavaq_s8(sums[1], y0, w1);
        sums[2] = vmladavaq_s8(sums[2], y1, w0);
        sums[3] = vmladavaq_s8(sums[3], y1, w1);
    }
}

/* The same for int16 rows (P.V: softmax weights against value_t rows): per 8 K, 4 loads and 4
 * VMLADAVA.S16 for 32 MACs (rows_groups_s16), the K % 8 tail predicated. */
static inline void rows_pair_s16(const int16_t *x0, const int16_t *x1, const int8_t *v0, const int8_t *v1,
                                 int32_t length, int32_t sums[4])
{
    const int32_t full = length & ~7;
    sums[0] = sums[1] = sums[2] = sums[3] = 0;
    if (full != 0) {
        rows_groups_s16(x0, x1, v0, v1, full >> 3, sums);
    }
    if (full < length) {
        const mve_pred16_t live = vctp16q((uint32_t)(length - full));
        const int16x8_t y0 = vldrhq_z_s16(x0 + full, live), y1 = vldrhq_z_s16(x1 + full, live);
        const int16x8_t w0 = vldrbq_z_s16(v0 + full, live), w1 = vldrbq_z_s16(v1 + full, live);
        sums[0] = vmladavaq_s16(sums[0], y0, w0);
        sums[1] = vmladavaq_s16(sums[1], y0, w1);
        sums[2] = vmladavaq_s16(sums[2], y1, w0);
        sums[3] = vmladavaq_s16(sums[3], y1, w1);
    }
}

/* Rows x0, x1 against every channel pair of the sweep, then an odd last channel against itself. The
 * rows are int8 or int16 by `wide` (a constant in each caller). */
static inline void rows_sweep_pairs(const void *x0, const void *x1, const rows_sweep *s, int32_t *out, int wide)
{
    const int32_t length = s->length, stride = s->stride;
    const int8_t *w = s->w, *const last = s->w + (s->channels & ~1) * stride;
    int32_t sums[4];
    for (; w != last; w += 2 * stride, out += 2 * MCUBERT_BLOCK_ROWS) {
        if (wide) {
            rows_pair_s16((const int16_t *)x0, (const int16_t *)x1, w, w + stride, length, sums);
        } else {
            rows_pair_s8((const int8_t *)x0, (const int8_t *)x1, w, w + stride, length, sums);
        }
        store_pair(sums, 1, out);
    }
    if ((s->channels & 1) != 0) {
        if (wide) {
            rows_pair_s16((const int16_t *)x0, (const int16_t *)x1, w, w, length, sums);
        } else {
            rows_pair_s8((const int8_t *)x0, (const int8_t *)x1, w, w, length, sums);
        }
        store_pair(sums, 0, out);
    }
}

/* Out of line, one per row kind, so that the loops keep their pointers in registers. */
__attribute__((noinline)) static void rows_sweep_s8(const int8_t *x0, const int8_t *x1, const rows_sweep *s,
                                                    int32_t *out)
{
    rows_sweep_pairs(x0, x1, s, out, 0);
}

__attribute__((noinline)) static void rows_sweep_s16(const int16_t *x0, const int16_t *x1, const rows_sweep *s,
                                                     int32_t *out)
{
    rows_sweep_pairs(x0, x1, s, out, 1);
}

/* Rows (0, 1), then (2, 3) when the block has them, over every channel; rows >= count repeat the last. */
void mcubert_gemm_4xn_rows(const mcubert_rows *rows, const int8_t *first, int32_t row_stride, int32_t channels,
                           int32_t acc[][MCUBERT_BLOCK_ROWS])
{
    const int32_t swept = rows->count > 2 ? 4 : 2;
    rows_sweep s;
    int32_t r;
    s.w = first;
    s.stride = row_stride;
    s.channels = channels;
    s.length = rows->length;
    if (rows->kind == MCUBERT_ROWS_S16) {
        const int16_t *x[MCUBERT_BLOCK_ROWS];
        for (r = 0; r < MCUBERT_BLOCK_ROWS; ++r) {
            x[r] = r < rows->count ? row_s16(rows, r) : x[r - 1];
        }
        for (r = 0; r < swept; r += 2) {
            rows_sweep_s16(x[r], x[r + 1], &s, acc[0] + r);
        }
    } else {
        const int8_t *x[MCUBERT_BLOCK_ROWS];
        block_rows(rows, x);
        for (r = 0; r < swept; r += 2) {
            rows_sweep_s8(x[r], x[r + 1], &s, acc[0] + r);
        }
    }
}

#else  /* !MCUBERT_MVE */

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
#endif /* MCUBERT_MVE */

#else /* !MCUBERT_DSP */

/* ---- plain C path ---------------------------------------------------------------------- */

/* int4 rows become int8 rows r * length bytes into `widened` (int16[4][K] holds 4 int8 rows of
 * K), so the plain loops below only ever see int8 or int16 rows. */
void mcubert_rows_widen(mcubert_rows *rows, uint32_t *widened)
{
    int32_t r, k;
    if (rows->kind != MCUBERT_ROWS_S4) {
        return;
    }
    for (r = 0; r < rows->count; ++r) {
        int8_t *unpacked = (int8_t *)(void *)widened + r * rows->length;
        for (k = 0; k < rows->length; ++k) {
            unpacked[k] = (int8_t)activation_at(rows, r, k);
        }
        rows->row[r] = unpacked;
    }
    rows->kind = MCUBERT_ROWS_S8;
}

/* Two channels of a pair4 group over K values [k_begin, k_end) of one segment (x points at
 * the value for k_begin). Value k of channel c is at group[8 (k / 4) + 4 c + k % 4], i.e.
 * group + 2k - k % 4. */
static inline void pair4_segment(const int8_t *x, int32_t k_begin, int32_t k_end, const int8_t *group, int32_t *acc0,
                                 int32_t *acc1)
{
    int32_t s0 = *acc0, s1 = *acc1;
    int32_t k = k_begin;
    for (; k < k_end && (k & 3) != 0; ++k, ++x) {
        const int8_t *w = group + 2 * k - (k & 3);
        s0 += *x * w[0];
        s1 += *x * w[4];
    }
    for (; k + 4 <= k_end; k += 4, x += 4) {
        const int8_t *w = group + 2 * k;
        s0 += x[0] * w[0] + x[1] * w[1] + x[2] * w[2] + x[3] * w[3];
        s1 += x[0] * w[4] + x[1] * w[5] + x[2] * w[6] + x[3] * w[7];
    }
    for (; k < k_end; ++k, ++x) {
        const int8_t *w = group + 2 * k - (k & 3);
        s0 += *x * w[0];
        s1 += *x * w[4];
    }
    *acc0 = s0;
    *acc1 = s1;
}

void mcubert_gemm_4xn_pair4(const mcubert_rows *rows, const int8_t *pairs, int32_t pair_stride, int32_t channels,
                            int32_t acc[][MCUBERT_BLOCK_ROWS])
{
    int32_t r, c;
    for (c = 0; c < channels; c += 2) {
        const int8_t *group = pairs + (c >> 1) * pair_stride;
        for (r = 0; r < rows->count; ++r) {
            int32_t a0 = 0, a1 = 0;
            pair4_segment(row_s8(rows, r), 0, rows->split, group, &a0, &a1);
            if (rows->split < rows->length) {
                pair4_segment(second_s8(rows, r), rows->split, rows->length, group, &a0, &a1);
            }
            acc[c][r] = a0;
            if (c + 1 < channels) {
                acc[c + 1][r] = a1;
            }
        }
    }
}

/* Two int8 weight rows against activation row r, whatever the row's storage (w1 may equal w0):
 * each activation is loaded once for both. */
static void row_dot2(const mcubert_rows *rows, int32_t r, const int8_t *w0, const int8_t *w1, int32_t *out)
{
    int32_t a0 = 0, a1 = 0, k;
    if (rows->kind == MCUBERT_ROWS_S16) {
        const int16_t *x = row_s16(rows, r);
        for (k = 0; k < rows->length; ++k) {
            a0 += x[k] * w0[k];
            a1 += x[k] * w1[k];
        }
    } else if (rows->split == rows->length) {
        const int8_t *x = row_s8(rows, r);
        for (k = 0; k < rows->length; ++k) {
            a0 += x[k] * w0[k];
            a1 += x[k] * w1[k];
        }
    } else {
        for (k = 0; k < rows->length; ++k) {
            const int32_t x = activation_at(rows, r, k);
            a0 += x * w0[k];
            a1 += x * w1[k];
        }
    }
    out[0] = a0;
    out[1] = a1;
}

void mcubert_gemm_4xn_rows(const mcubert_rows *rows, const int8_t *first, int32_t row_stride, int32_t channels,
                           int32_t acc[][MCUBERT_BLOCK_ROWS])
{
    int32_t c, r;
    for (c = 0; c < channels; c += 2) {
        const int8_t *w0 = first + c * row_stride;
        const int8_t *w1 = c + 1 < channels ? w0 + row_stride : w0;
        for (r = 0; r < rows->count; ++r) {
            int32_t pair[2];
            row_dot2(rows, r, w0, w1, pair);
            acc[c][r] = pair[0];
            if (c + 1 < channels) {
                acc[c + 1][r] = pair[1];
            }
        }
    }
}

#endif /* MCUBERT_DSP */
