/*
 * The W4 micro-kernel in Thumb-2 (Armv7E-M: Cortex-M4, M7, and later cores with the DSP
 * extension): 4 activation rows against `channels` output channels of w4row int4 weights, K in
 * steps of 8 (one packed word). dsp_sweep_w4 in mcubert_gemm_s4.c computes the same thing and is
 * the readable version; this file exists because GCC loads the 16 activation words of a step one
 * by one instead of with four LDMs (1.3 instructions per MAC instead of 0.8).
 *
 *   void mcubert_dsp_4xn_w4(const uint32_t *x, int32_t words, const mcubert_w4_walk *walk,
 *                           int32_t channels, int32_t acc[][4]);
 *
 *   acc[c][r] = (start[r] + sum over j < words of the 16 SMLAD products of channel c's word j,
 *               at base + c * row_bytes + 4 j (any alignment: plain LDR), and the 16 widened
 *               activation words of step j) >> 4
 *
 * x: [words][2 halves][4 rows][2 words] (mcubert_rows_widen_w4), 4-byte aligned (LDM). A weight
 * word w gives the int16 pairs w & 0x000F000F and w & 0x00F000F0 for the first half and, after
 * LSR 8, the same two for the second (mcubert_gemm_s4.h).
 *
 * Registers in the loop: accumulators r4-r7, the weight word r3, its two pairs r8 and lr, four
 * activation words r9-r12, and x, x's end and the weight pointer r0-r2; the accumulators' output
 * pointer lives on the stack. Per word and channel: 1 LDR + 4 LDM + 5 ALU + 16 SMLAD = 26
 * instructions for 32 MACs — what the W8 kernel spends on two 4-groups (2 x 13). Unrolled by four
 * words (entered part way by TBB for other counts); per channel a dozen instructions more: start
 * values, the four ASRs that undo the factor 16 (exact), one STM.
 *
 * Stack: 64 bytes (nine registers pushed, seven words of locals), no calls.
 */
#include "mcubert_dsp.h"

#if MCUBERT_DSP_ASM

    .syntax unified
    .thumb
    .text

/* One packed word of one channel: weight word at r2 (post-incremented by 4), 16 activation
 * words at r0 (post-incremented by 64). */
.macro MCUBERT_W4_WORD
    ldr     r3, [r2], #4
    ldmia   r0!, {r9, r10, r11, r12}   @ first half, rows 0 and 1
    and     r8, r3, #0x000F000F        @ (u0, u4)
    and     lr, r3, #0x00F000F0        @ (16 u1, 16 u5)
    smlad   r4, r8, r9, r4             @ x (16 x0, 16 x4)
    smlad   r4, lr, r10, r4            @ x (x1, x5)
    smlad   r5, r8, r11, r5
    smlad   r5, lr, r12, r5
    ldmia   r0!, {r9, r10, r11, r12}   @ rows 2 and 3
    smlad   r6, r8, r9, r6
    smlad   r6, lr, r10, r6
    smlad   r7, r8, r11, r7
    smlad   r7, lr, r12, r7
    lsrs    r3, r3, #8
    ldmia   r0!, {r9, r10, r11, r12}   @ second half, rows 0 and 1
    and     r8, r3, #0x000F000F        @ (u2, u6)
    and     lr, r3, #0x00F000F0        @ (16 u3, 16 u7)
    smlad   r4, r8, r9, r4             @ x (16 x2, 16 x6)
    smlad   r4, lr, r10, r4            @ x (x3, x7)
    smlad   r5, r8, r11, r5
    smlad   r5, lr, r12, r5
    ldmia   r0!, {r9, r10, r11, r12}   @ rows 2 and 3
    smlad   r6, r8, r9, r6
    smlad   r6, lr, r10, r6
    smlad   r7, r8, r11, r7
    smlad   r7, lr, r12, r7
.endm

/* Locals (above sp): x, the current channel's row, row bytes, start, channels left, acc. */
#define X_AT 0
#define ROW_AT 4
#define ROW_BYTES_AT 8
#define START_AT 12
#define LEFT_AT 16
#define ACC_AT 20
#define LOCALS 28          /* one spare word: sp stays 8-byte aligned */
#define ACC_ARG_AT 64      /* the fifth argument: above the locals and the nine saved registers */

    .global mcubert_dsp_4xn_w4
    .type   mcubert_dsp_4xn_w4, %function
    .thumb_func
    .p2align 2
mcubert_dsp_4xn_w4:
    push    {r4-r11, lr}
    sub     sp, sp, #LOCALS
    ldr     r8, [r2, #4]            @ walk->row_bytes
    ldr     r9, [r2, #8]            @ walk->start
    ldr     r2, [r2]                @ walk->base
    add     r1, r0, r1, lsl #6      @ end of x: 64 bytes per word
    str     r0, [sp, #X_AT]
    str     r2, [sp, #ROW_AT]
    str     r8, [sp, #ROW_BYTES_AT]
    str     r9, [sp, #START_AT]
    str     r3, [sp, #LEFT_AT]
    ldr     r3, [sp, #ACC_ARG_AT]
    str     r3, [sp, #ACC_AT]
1:                                  @ one sweep of K per channel
    ldr     r8, [sp, #START_AT]
    ldmia   r8, {r4, r5, r6, r7}
    ldr     r0, [sp, #X_AT]
    ldr     r2, [sp, #ROW_AT]
    ldr     r8, [sp, #ROW_BYTES_AT]
    add     r8, r2, r8
    str     r8, [sp, #ROW_AT]       @ the next channel's row
    subs    r8, r1, r0              @ 64 * words
    beq     29f
    ubfx    r8, r8, #6, #2          @ words % 4
    tbb     [pc, r8]
20:
    .byte   (21f - 20b) / 2         @ 0: the whole body
    .byte   (24f - 20b) / 2         @ 1: its last word
    .byte   (23f - 20b) / 2         @ 2
    .byte   (22f - 20b) / 2         @ 3
    .p2align 1
21:
    MCUBERT_W4_WORD
22:
    MCUBERT_W4_WORD
23:
    MCUBERT_W4_WORD
24:
    MCUBERT_W4_WORD
    cmp     r0, r1
    bne     21b
29:
    asrs    r4, r4, #4              @ exact: the sums are 16 times the accumulators
    asrs    r5, r5, #4
    asrs    r6, r6, #4
    asrs    r7, r7, #4
    ldr     r3, [sp, #ACC_AT]
    stmia   r3!, {r4, r5, r6, r7}
    str     r3, [sp, #ACC_AT]
    ldr     r8, [sp, #LEFT_AT]
    subs    r8, r8, #1
    str     r8, [sp, #LEFT_AT]
    bne     1b
    add     sp, sp, #LOCALS
    pop     {r4-r11, pc}
    .size   mcubert_dsp_4xn_w4, . - mcubert_dsp_4xn_w4

#endif /* MCUBERT_DSP_ASM */
