/* GENERATED FILE - do not edit. Generated from custom_ops/src/mcubert_gemm_dsp_s8.S by arduino_lib/extras/sync_from_custom_ops.py;
 * edit the source, not this copy, and re-run the script. */
/*
 * The DSP path's 4 x 2 x 4 micro-kernel in Thumb-2 (Armv7E-M: Cortex-M4, M7, and later cores
 * with the DSP extension). The C in mcubert_gemm_s8.c (dsp_sweep) computes the same thing and
 * is the readable version; this file exists because GCC cannot be made to keep the loop below
 * free of spills and to load the activations with LDM.
 *
 *   void mcubert_dsp_4x2_step8(const uint32_t *x, int32_t groups, const int8_t *w0,
 *                              const int8_t *w1, int32_t acc[2][4]);      pair4 weights
 *   void mcubert_dsp_4x2_step4(same);                                     two int8 rows
 *
 *   acc[c][r] = sum over g < groups of the 4 products of row r's group g and channel c's
 *               weight word g (at w_c + step * g; any alignment: plain LDR)
 *
 * x: the block's widened activations, [groups][4 rows][2 words], each word an int16 pair —
 * (x0, x2) then (x1, x3), the order SXTB16 / SXTB16 ROR 8 give a weight word. All four rows
 * are computed (rows past the block's count hold stale data; the caller ignores them). x must
 * be 4-byte aligned (LDM): it is the op's `widened` scratch region.
 *
 * Why two sweeps: the whole 4 x 2 block in one pass would hold 8 accumulators, 4 sign-extended
 * weight halves, an activation word and 2 pointers — 15 registers, one more than Thumb-2 has.
 * Instead each sweep keeps one channel: 4 accumulators (r4-r7), the weight word's two halves
 * (lr, r8), 4 activation words (r9-r12) and the pointers (r0-r3), and loads the group's 8
 * activation words with two LDMs. Per group and channel: 1 LDR + 2 LDM + 2 SXTB16 + 8 SMLAD =
 * 13 instructions for 16 MACs; the one-pass alternative reloading activations with LDRD needs
 * 15. The loop is unrolled by four groups (entered part way for other counts), so the loop
 * control adds half an instruction per group.
 * SMLAD wraps modulo 2^32, and the accumulator bounds of SPEC 3.1 / 3.4 keep the sums exact.
 *
 * Stack: 40 bytes (ten registers pushed), no calls.
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

/* r4-r7 = one channel (weights from r2) against the 4 rows of [r0, r1). The loop body is four
 * groups; a count that is not a multiple of four enters it part way (TBB on groups % 4). */
.macro MCUBERT_SWEEP step
    movs    r4, #0
    movs    r5, #0
    movs    r6, #0
    movs    r7, #0
    subs    r8, r1, r0              @ 32 * groups
    beq     9f
    ubfx    r8, r8, #5, #2          @ groups % 4
    tbb     [pc, r8]
4:
    .byte   (5f - 4b) / 2           @ 0: the whole body
    .byte   (8f - 4b) / 2           @ 1: its last group
    .byte   (7f - 4b) / 2           @ 2
    .byte   (6f - 4b) / 2           @ 3
    .p2align 1
5:
    MCUBERT_GROUP \step
6:
    MCUBERT_GROUP \step
7:
    MCUBERT_GROUP \step
8:
    MCUBERT_GROUP \step
    cmp     r0, r1
    bne     5b
9:
.endm

.macro MCUBERT_KERNEL name, step
    .global \name
    .type   \name, %function
    .thumb_func
    .p2align 2
\name:
    push    {r0, r4-r11, lr}        @ r0 (x) is reloaded for the second sweep
    add     r1, r0, r1, lsl #5      @ end of x
    MCUBERT_SWEEP \step
    ldr     r8, [sp, #40]           @ acc (fifth argument, above the ten saved registers)
    stmia   r8, {r4-r7}
    ldr     r0, [sp]
    mov     r2, r3
    MCUBERT_SWEEP \step
    ldr     r8, [sp, #40]
    add     r8, r8, #16
    stmia   r8, {r4-r7}
    pop     {r0, r4-r11, pc}
    .size   \name, . - \name
.endm

    MCUBERT_KERNEL mcubert_dsp_4x2_step8, 8
    MCUBERT_KERNEL mcubert_dsp_4x2_step4, 4

#endif /* MCUBERT_DSP_ASM */
