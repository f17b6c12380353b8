/*
 * The MVE path (MCUBERT_MVE: Cortex-M55/M85 Helium) of the 4-row gemms: int8 rows read in place or
 * copied contiguous, the pair4 gemm by VLD2 de-interleave and VMLADAVA, the rows gemm for the attention.
 * See mcubert_gemm_s8.h for the layouts and mcubert_gemm_s8.c for the bounds.
 */
#include "mcubert_gemm_s8.h"

#include <stddef.h>

#include "mcubert/mcubert_ops.h"
#include "mcubert_dsp.h"
#include "mcubert_fixed_point.h"
#include "mcubert_gemm_s8_rows.h"

#if MCUBERT_MVE
#include <arm_mve.h>

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

#endif /* MCUBERT_MVE */
