/*
 * The DSP path's micro-kernel in Thumb-2 (Armv7E-M: Cortex-M4, M7, and later cores with the
 * DSP extension): 4 activation rows against `channels` output channels, K in steps of 4. The C
 * in mcubert_gemm_s8_dsp.c (dsp_sweep) computes the same thing and is the readable version; this
 * file exists because GCC cannot be made to keep the loop below free of spills and to load the
 * activations with LDM.
 *
 *   void mcubert_dsp_4xn_step8(const uint32_t *x, int32_t groups, const mcubert_channel_walk *walk,
 *                              int32_t channels, int32_t acc[][4]);        pair4 weights
 *   void mcubert_dsp_4xn_step4(same);                                      plain int8 rows
 *
 *   acc[c][r] = sum over g < groups of the 4 products of row r's group g and channel c's weight
 *               word g, at base_c + step * g (any alignment: plain LDR), where
 *               base_c = walk->base + (c >> 1) * walk->pair_stride + (c & 1) * walk->lane_offset
 *
 * x: the block's widened activations, [groups][4 rows][2 words], each word an int16 pair —
 * (x0, x2) then (x1, x3), the order SXTB16 / SXTB16 ROR 8 give a weight word. All four rows
 * are computed (rows past the block's count hold stale data; the caller ignores them). x must
 * be 4-byte aligned (LDM): it is the op's `widened` scratch region.
 *
 * One sweep of K per channel: 4 accumulators (r4-r7), the weight word's two halves (lr, r8),
 * 4 activation words (r9-r12) and the pointers (r0-r2), the group's 8 activation words loaded
 * with two LDMs. Per group and channel: 1 LDR + 2 LDM + 2 SXTB16 + 8 SMLAD = 13 instructions
 * for 16 MACs (holding two channels at once would need 15 registers, one more than Thumb-2
 * has). The loop is unrolled by eight groups (entered part way for other counts), so the loop
 * control adds a quarter of an instruction per group. Looping over the channels here rather than in
 * the caller keeps the per-channel cost to a few loads and one STM; the chunk of accumulators
 * then goes through the caller's output stage at once.
 * SMLAD wraps modulo 2^32, and the accumulator bounds of SPEC 3.1 / 3.4 keep the sums exact.
 *
 * Stack: 56 bytes (nine registers pushed, five words of locals), no calls.
 */
#include "mcubert_dsp.h"

#if MCUBERT_DSP_ASM

    .syntax unified
    .thumb
    .text

/* One group of one channel: weight word at r2 (post-incremented by `step`), 8 activation
 * words at r0 (post-incremented by 32). */
.macro MCUBERT_GROUP step
    ldr     r8, [r2], #\step
    ldmia   r0!, {r9, r10, r11, r12}
    sxtb16  lr, r8                  @ (w0, w2)
    sxtb16  r8, r8, ror #8          @ (w1, w3)
    smlad   r4, lr, r9, r4          @ row 0
    smlad   r4, r8, r10, r4
    smlad   r5, lr, r11, r5         @ row 1
    smlad   r5, r8, r12, r5
    ldmia   r0!, {r9, r10, r11, r12}
    smlad   r6, lr, r9, r6          @ row 2
    smlad   r6, r8, r10, r6
    smlad   r7, lr, r11, r7         @ row 3
    smlad   r7, r8, r12, r7
.endm

/* r4-r7 = one channel (weights from r2) against the 4 rows of [r0, r1). The loop body is eight
 * groups (a quarter of an instruction of loop control per group); a count that is not a
 * multiple of eight enters it part way (TBB on groups % 8). */
.macro MCUBERT_SWEEP step
    movs    r4, #0
    movs    r5, #0
    movs    r6, #0
    movs    r7, #0
    subs    r8, r1, r0              @ 32 * groups
    beq     29f
    ubfx    r8, r8, #5, #3          @ groups % 8
    tbb     [pc, r8]
20:
    .byte   (21f - 20b) / 2         @ 0: the whole body
    .byte   (28f - 20b) / 2         @ 1: its last group
    .byte   (27f - 20b) / 2         @ 2
    .byte   (26f - 20b) / 2
    .byte   (25f - 20b) / 2
    .byte   (24f - 20b) / 2
    .byte   (23f - 20b) / 2
    .byte   (22f - 20b) / 2         @ 7
    .p2align 1
21:
    MCUBERT_GROUP \step
22:
    MCUBERT_GROUP \step
23:
    MCUBERT_GROUP \step
24:
    MCUBERT_GROUP \step
25:
    MCUBERT_GROUP \step
26:
    MCUBERT_GROUP \step
27:
    MCUBERT_GROUP \step
28:
    MCUBERT_GROUP \step
    cmp     r0, r1
    bne     21b
29:
.endm

/* Locals (above sp): x, the current pair's weights, pair stride, lane offset, channels left. */
#define X_AT 0
#define PAIR_AT 4
#define PAIR_STRIDE_AT 8
#define LANE_AT 12
#define LEFT_AT 16
#define ACC_ARG_AT 56 /* the fifth argument: above the locals (20) and the nine saved registers */

.macro MCUBERT_KERNEL name, step
    .global \name
    .type   \name, %function
    .thumb_func
    .p2align 2
\name:
    push    {r4-r11, lr}
    sub     sp, sp, #20
    ldr     r8, [r2, #4]            @ walk->pair_stride
    ldr     r9, [r2, #8]            @ walk->lane_offset
    ldr     r2, [r2]                @ walk->base
    add     r1, r0, r1, lsl #5      @ end of x
    str     r0, [sp, #X_AT]
    str     r2, [sp, #PAIR_AT]
    str     r8, [sp, #PAIR_STRIDE_AT]
    str     r9, [sp, #LANE_AT]
    str     r3, [sp, #LEFT_AT]
    ldr     r3, [sp, #ACC_ARG_AT]   @ acc, advanced by one channel (16 bytes) per sweep
1:
    ldr     r0, [sp, #X_AT]         @ even channel of the pair
    ldr     r2, [sp, #PAIR_AT]
    MCUBERT_SWEEP \step
    stmia   r3!, {r4-r7}
    ldr     r8, [sp, #LEFT_AT]
    subs    r8, r8, #1
    beq     2f
    str     r8, [sp, #LEFT_AT]
    ldr     r0, [sp, #X_AT]         @ odd channel
    ldr     r2, [sp, #PAIR_AT]
    ldr     r8, [sp, #LANE_AT]
    add     r2, r2, r8
    MCUBERT_SWEEP \step
    stmia   r3!, {r4-r7}
    ldr     r2, [sp, #PAIR_AT]      @ next pair
    ldr     r8, [sp, #PAIR_STRIDE_AT]
    add     r2, r2, r8
    str     r2, [sp, #PAIR_AT]
    ldr     r8, [sp, #LEFT_AT]
    subs    r8, r8, #1
    str     r8, [sp, #LEFT_AT]
    bne     1b
2:
    add     sp, sp, #20
    pop     {r4-r11, pc}
    .size   \name, . - \name
.endm

    MCUBERT_KERNEL mcubert_dsp_4xn_step8, 8
    MCUBERT_KERNEL mcubert_dsp_4xn_step4, 4

#endif /* MCUBERT_DSP_ASM */
