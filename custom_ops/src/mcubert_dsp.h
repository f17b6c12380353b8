/*
 * The few Armv7E-M DSP operations the micro-kernel uses, as static inline functions.
 *
 * MCUBERT_DSP is 1 when the DSP path is compiled: natively through the toolchain's
 * <arm_acle.h> on cores with __ARM_FEATURE_DSP, or (test builds only, MCUBERT_EMULATE_DSP)
 * through portable C that computes the same 32-bit results, so the DSP code path runs under
 * host sanitizers. Values are handled as uint32_t words of two int16 halves (low half first).
 *
 * MCUBERT_DSP_ASM is 1 when the 4 x 2 micro-kernel comes from the Thumb-2 assembly file
 * (mcubert_gemm_dsp_s8.S; GNU assembler syntax: GCC, Clang, Arm Compiler 6). Otherwise — host
 * emulation, other toolchains, or -DMCUBERT_DSP_NO_ASM — the same sweeps are C with the
 * intrinsics below (mcubert_gemm_s8_dsp.c), which is also the readable statement of what the
 * assembly computes. This part of the header is plain preprocessor so the .S file can include it.
 *
 * MCUBERT_MVE is 1 on cores with integer MVE (Helium: Cortex-M55, M85) when the build lets the
 * compiler use the vector registers (no -mgeneral-regs-only): the pair4 gemm of the linear
 * layers and the attention's rows gemm then run on MVE (mcubert_gemm_s8_mve.c), the rest stays on the
 * DSP path. MVE requires the
 * DSP extension, so it is a refinement of MCUBERT_DSP_NATIVE.
 */
#ifndef MCUBERT_DSP_H
#define MCUBERT_DSP_H

#if defined(MCUBERT_FORCE_PLAIN)
#define MCUBERT_DSP 0
#define MCUBERT_DSP_NATIVE 0
#elif defined(__ARM_FEATURE_DSP)
#define MCUBERT_DSP 1
#define MCUBERT_DSP_NATIVE 1
#elif defined(MCUBERT_EMULATE_DSP)
#define MCUBERT_DSP 1
#define MCUBERT_DSP_NATIVE 0
#else
#define MCUBERT_DSP 0
#define MCUBERT_DSP_NATIVE 0
#endif

#if MCUBERT_DSP_NATIVE && defined(__ARM_FEATURE_MVE) && (__ARM_FEATURE_MVE & 1)
#define MCUBERT_MVE 1
#else
#define MCUBERT_MVE 0
#endif

#if MCUBERT_DSP && MCUBERT_DSP_NATIVE && defined(__GNUC__) && !defined(MCUBERT_DSP_NO_ASM)
#define MCUBERT_DSP_ASM 1
#else
#define MCUBERT_DSP_ASM 0
#endif

#ifndef __ASSEMBLER__

#include <stdint.h>

#if MCUBERT_DSP_NATIVE
#include <arm_acle.h>
#endif

#if MCUBERT_DSP

#if MCUBERT_DSP_NATIVE

/* SXTB16: bytes 0 and 2, sign-extended into the two halves. */
static inline uint32_t mcubert_sxtb16(uint32_t x)
{
    return (uint32_t)__sxtb16((int32_t)x);
}

/* SXTB16 with ROR #8: bytes 1 and 3. One instruction; written as asm because GCC 12 does not
 * fold a C rotate into SXTB16's operand (the ACLE has no __ror form of it). */
static inline uint32_t mcubert_sxtb16_ror8(uint32_t x)
{
    uint32_t result;
    __asm__("sxtb16 %0, %1, ror #8" : "=r"(result) : "r"(x));
    return result;
}

/* SMLAD: acc + lo(a) * lo(b) + hi(a) * hi(b), modulo 2^32. */
static inline int32_t mcubert_smlad(uint32_t a, uint32_t b, int32_t acc)
{
    return __smlad((int32_t)a, (int32_t)b, acc);
}

/* SMLALD: acc + lo(a) * lo(b) + hi(a) * hi(b) in 64 bits. */
static inline int64_t mcubert_smlald(uint32_t a, uint32_t b, int64_t acc)
{
    return __smlald((int32_t)a, (int32_t)b, acc);
}

/* Per-half signed maximum: SSUB16 sets the GE flags where a >= b, SEL picks. One asm statement,
 * so nothing can come between the flags and their use. */
static inline uint32_t mcubert_max16x2(uint32_t a, uint32_t b)
{
    uint32_t result;
    __asm__("ssub16 %0, %1, %2\n\tsel %0, %1, %2" : "=&r"(result) : "r"(a), "r"(b) : "cc");
    return result;
}

#else /* portable emulation (MCUBERT_EMULATE_DSP) */

static inline uint32_t mcubert_half_of_byte(uint32_t x, int byte)
{
    return (uint32_t)(uint16_t)(int16_t)(int8_t)(uint8_t)(x >> (8 * byte));
}

static inline uint32_t mcubert_sxtb16(uint32_t x)
{
    return mcubert_half_of_byte(x, 0) | (mcubert_half_of_byte(x, 2) << 16);
}

static inline uint32_t mcubert_sxtb16_ror8(uint32_t x)
{
    return mcubert_half_of_byte(x, 1) | (mcubert_half_of_byte(x, 3) << 16);
}

static inline int32_t mcubert_smlad(uint32_t a, uint32_t b, int32_t acc)
{
    const int32_t lo = (int32_t)(int16_t)(uint16_t)a * (int32_t)(int16_t)(uint16_t)b;
    const int32_t hi = (int32_t)(int16_t)(uint16_t)(a >> 16) * (int32_t)(int16_t)(uint16_t)(b >> 16);
    /* The instruction wraps modulo 2^32 (and sets Q); so does this, without signed overflow. */
    return (int32_t)((uint32_t)acc + (uint32_t)lo + (uint32_t)hi);
}

static inline uint32_t mcubert_max16x2(uint32_t a, uint32_t b)
{
    const int16_t a_lo = (int16_t)(uint16_t)a, b_lo = (int16_t)(uint16_t)b;
    const int16_t a_hi = (int16_t)(uint16_t)(a >> 16), b_hi = (int16_t)(uint16_t)(b >> 16);
    return (uint32_t)(uint16_t)(a_lo >= b_lo ? a_lo : b_lo) | ((uint32_t)(uint16_t)(a_hi >= b_hi ? a_hi : b_hi) << 16);
}

static inline int64_t mcubert_smlald(uint32_t a, uint32_t b, int64_t acc)
{
    return acc + (int64_t)(int16_t)(uint16_t)a * (int16_t)(uint16_t)b +
           (int64_t)(int16_t)(uint16_t)(a >> 16) * (int16_t)(uint16_t)(b >> 16);
}

#endif /* MCUBERT_DSP_NATIVE */

/* (lo(a), lo(b)) and (hi(a), hi(b)): PKHBT / PKHTB, which GCC emits for these expressions. */
static inline uint32_t mcubert_pack_low_halves(uint32_t a, uint32_t b)
{
    return (a & 0xFFFFu) | (b << 16);
}

static inline uint32_t mcubert_pack_high_halves(uint32_t a, uint32_t b)
{
    return (a >> 16) | (b & 0xFFFF0000u);
}

#endif /* MCUBERT_DSP */

#endif /* !__ASSEMBLER__ */

#endif /* MCUBERT_DSP_H */
