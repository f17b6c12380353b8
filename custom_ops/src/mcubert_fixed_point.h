/*
 * Integer arithmetic of SPEC.md section 1, shared by every op (reference: ops/fixed_point.py).
 *
 * Right shifts of negative values are arithmetic on every compiler we target (the spec says so
 * and the assertion below checks it); left shifts of possibly negative values are written as
 * multiplications, which C99 defines.
 */
#ifndef MCUBERT_FIXED_POINT_H
#define MCUBERT_FIXED_POINT_H

#include <stdint.h>
#include <string.h>

typedef char mcubert_assert_arithmetic_shift[((-1 >> 1) == -1 && ((int64_t)-1 >> 1) == -1) ? 1 : -1];

#define MCUBERT_INT8_MIN (-128)
#define MCUBERT_INT8_MAX 127
#define MCUBERT_INT16_MIN (-32768)
#define MCUBERT_INT16_MAX 32767

static inline int32_t mcubert_min_i32(int32_t a, int32_t b)
{
    return a < b ? a : b;
}
static inline int32_t mcubert_max_i32(int32_t a, int32_t b)
{
    return a > b ? a : b;
}

static inline int32_t mcubert_clamp_i32(int32_t x, int32_t lo, int32_t hi)
{
    x = x < lo ? lo : x;
    return x > hi ? hi : x;
}

/* Saturation to int8 / int16 of an int32: one SSAT on Arm (GCC does not always find it from
 * the compares once the surrounding code is register-bound). */
#if defined(__ARM_FEATURE_SAT) && defined(__GNUC__) && !defined(MCUBERT_FORCE_PLAIN)
static inline int32_t mcubert_sat8(int32_t x)
{
    int32_t result;
    __asm__("ssat %0, #8, %1" : "=r"(result) : "r"(x));
    return result;
}

static inline int32_t mcubert_sat16(int32_t x)
{
    int32_t result;
    __asm__("ssat %0, #16, %1" : "=r"(result) : "r"(x));
    return result;
}
#else
static inline int32_t mcubert_sat8(int32_t x)
{
    return mcubert_clamp_i32(x, MCUBERT_INT8_MIN, MCUBERT_INT8_MAX);
}
static inline int32_t mcubert_sat16(int32_t x)
{
    return mcubert_clamp_i32(x, MCUBERT_INT16_MIN, MCUBERT_INT16_MAX);
}
#endif

/* min(x, 255) for x >= 0 (USAT #8 clamps to [0, 255]). */
#if defined(__ARM_FEATURE_SAT) && defined(__GNUC__) && !defined(MCUBERT_FORCE_PLAIN)
static inline int32_t mcubert_min255_nonnegative(int32_t x)
{
    int32_t result;
    __asm__("usat %0, #8, %1" : "=r"(result) : "r"(x));
    return result;
}
#else
static inline int32_t mcubert_min255_nonnegative(int32_t x)
{
    return mcubert_min_i32(x, 255);
}
#endif

static inline int8_t mcubert_clamp8(int32_t x)
{
    return (int8_t)mcubert_sat8(x);
}
static inline int16_t mcubert_clamp16_i32(int32_t x)
{
    return (int16_t)mcubert_sat16(x);
}

static inline int16_t mcubert_clamp16(int64_t x)
{
    return (int16_t)(x < MCUBERT_INT16_MIN ? MCUBERT_INT16_MIN : x > MCUBERT_INT16_MAX ? MCUBERT_INT16_MAX : x);
}

static inline int32_t mcubert_clamp32(int64_t x)
{
    return (int32_t)(x < INT32_MIN ? INT32_MIN : x > INT32_MAX ? INT32_MAX : x);
}

/* rsh(x, n) = floor(x / 2^n + 1/2), 1 <= n <= 62: round half up, one add. */
static inline int64_t mcubert_rsh64(int64_t x, int n)
{
    return (x + ((int64_t)1 << (n - 1))) >> n;
}

/* requantize(acc, M, shift) = (acc * M + 2^(30 - shift)) >> (31 - shift), saturated to int32.
 * |acc| <= 2^31 and M < 2^31 keep the int64 sum below 2^62 + 2^61 (SPEC 1). Every caller
 * clamps to a range inside int32, so saturating here first changes no result. */
static inline int32_t mcubert_requantize(int32_t acc, int32_t multiplier, int32_t shift)
{
    return mcubert_clamp32(mcubert_rsh64((int64_t)acc * multiplier, 31 - shift));
}

/* requantize_wide(x, M, shift) = (x * m16 + 2^(14 - shift)) >> (15 - shift), m16 = (M + 2^15) >> 16, saturated
 * to int32: a 48-bit accumulator against the multiplier's top 16 bits (SPEC 4.5). |x| < 2^47 and shift <= 14
 * keep the int64 sum below 2^62 + 2^45. */
static inline int32_t mcubert_requantize_wide(int64_t x, int32_t multiplier, int32_t shift)
{
    const int64_t m16 = ((int64_t)multiplier + (1 << 15)) >> 16;
    return mcubert_clamp32(mcubert_rsh64(x * m16, 15 - shift));
}

/* c + floor(a * b / 2^32), for callers that know the sum fits: SMMLA (one instruction) on
 * Armv7E-M with GCC-compatible compilers, which do not derive it from the C expression. */
static inline int32_t mcubert_mul_high_add(int32_t a, int32_t b, int32_t c)
{
#if defined(__ARM_FEATURE_DSP) && defined(__GNUC__) && !defined(MCUBERT_FORCE_PLAIN)
    int32_t result;
    __asm__("smmla %0, %1, %2, %3" : "=r"(result) : "r"(a), "r"(b), "r"(c));
    return result;
#else
    return c + (int32_t)(((int64_t)a * b) >> 32);
#endif
}

/* bias + requantize() with its per-channel work hoisted out of the loop over rows (or a tile).
 * Fast form, exact for shift <= -2 (total shift n = 31 - shift >= 33: a scale below 1/4, which
 * realistic linear layers, scores and contexts have): the rounding term 2^(n-1) is a multiple of
 * 2^32 and flooring shifts compose, so
 *     (acc M + 2^(n-1)) >> n  =  (floor(acc M / 2^32) + 2^(n-33)) >> (n - 32)
 * — one SMMLA and one ASR — and |result| < 2^62 / 2^33 needs no int32 saturation. Shift -1
 * (common in output projections, whose target is the finer pre-norm scale) is brought to -2
 * by doubling the accumulator, exact because (2a M + 2^32) >> 33 = (a M + 2^31) >> 32; the
 * doubled bias + accumulator must fit int32, so that needs |bias| <= 2^29 (the accumulator
 * sums themselves stay below 2^26, SPEC 2). Everything else takes requantize() itself. */
typedef struct {
    int32_t bias;  /* added to the accumulator (fast: already times `scale`) */
    int32_t scale; /* fast: 1, or 2 for shift -1 */
    int32_t multiplier;
    int32_t round; /* fast: 2^(n-33) of the effective shift */
    int32_t shift; /* fast: n - 32 of the effective shift; otherwise the spec's shift */
    int32_t fast;
} mcubert_requant;

#define MCUBERT_DOUBLED_BIAS_LIMIT ((int32_t)1 << 29)

static inline int mcubert_requant_fast_ok(int32_t bias, int32_t shift)
{
    return shift <= -2 || (shift == -1 && bias >= -MCUBERT_DOUBLED_BIAS_LIMIT && bias <= MCUBERT_DOUBLED_BIAS_LIMIT);
}

static inline mcubert_requant mcubert_requant_of(int32_t bias, int32_t multiplier, int32_t shift)
{
    mcubert_requant q;
    q.multiplier = multiplier;
    q.fast = mcubert_requant_fast_ok(bias, shift);
    q.scale = q.fast && shift == -1 ? 2 : 1;
    if (q.scale == 2) {
        shift = -2;
    }
    q.bias = bias * q.scale;
    q.round = q.fast ? (int32_t)1 << (-shift - 2) : 0; /* 2^(n-33), n = 31 - shift */
    q.shift = q.fast ? -1 - shift : shift;             /* n - 32 */
    return q;
}

/* The fast form for shifts >= -1 too, when every accumulator of the channel is known to be small:
 * with |acc| <= limit and k = shift + 2 >= 1, multiplying acc + bias by 2^k brings the shift to -2,
 * exactly — (x 2^k M + 2^32) >> 33 = (x M + 2^(30 - shift)) >> (31 - shift), as for shift -1 above —
 * provided (|bias| + limit) 2^k fits int32. Int4-weight layers (|acc| < 2^22) whose target scale is
 * finer than their accumulators' (shift 0..3: the output projection and FC2) meet it. */
static inline int mcubert_requant_fast_ok_within(int32_t bias, int32_t shift, int32_t limit)
{
    /* 32-bit only (no int64 on the deepest stack frame of ARMv6-M); limit >= 0 */
    const uint32_t magnitude = bias < 0 ? 0u - (uint32_t)bias : (uint32_t)bias;
    const int32_t room = shift >= -1 && shift <= 28 ? INT32_MAX >> (shift + 2) : 0; /* shift counts 1..30 */
    return shift <= -2 || (shift <= 28 && limit <= room && magnitude <= (uint32_t)(room - limit));
}

/* mcubert_requant_of(), with the scaled fast form of mcubert_requant_fast_ok_within where it applies. */
static inline mcubert_requant mcubert_requant_of_within(int32_t bias, int32_t multiplier, int32_t shift, int32_t limit)
{
    mcubert_requant q;
    if (shift <= -2 || !mcubert_requant_fast_ok_within(bias, shift, limit)) {
        return mcubert_requant_of(bias, multiplier, shift);
    }
    q.scale = (int32_t)1 << (shift + 2);
    q.bias = bias * q.scale;
    q.multiplier = multiplier;
    q.round = 1; /* 2^(n-33), n = 33 */
    q.shift = 1; /* n - 32 */
    q.fast = 1;
    return q;
}

/* mcubert_requant_of() for a shift known to be <= -2 (no doubling: fewer setup instructions,
 * for the per-channel stages where shift -1 is rare). */
static inline mcubert_requant mcubert_requant_of_shift2(int32_t bias, int32_t multiplier, int32_t shift)
{
    mcubert_requant q;
    q.bias = bias;
    q.scale = 1;
    q.multiplier = multiplier;
    q.round = (int32_t)1 << (-shift - 2);
    q.shift = -1 - shift;
    q.fast = 1;
    return q;
}

/* Fast case only (q->fast): requantize(acc + bias, M, shift). acc * scale + bias is one MLA. */
static inline int32_t mcubert_requant_fast(int32_t acc, const mcubert_requant *q)
{
    return mcubert_mul_high_add(acc * q->scale + q->bias, q->multiplier, q->round) >> q->shift;
}

/* The fast form without the multiply-add, for q->scale == 1 and zero bias (per-tensor scales). */
static inline int32_t mcubert_requant_fast_unbiased(int32_t acc, const mcubert_requant *q)
{
    return mcubert_mul_high_add(acc, q->multiplier, q->round) >> q->shift;
}

static inline int32_t mcubert_requant_apply(int32_t acc, const mcubert_requant *q)
{
    return q->fast ? mcubert_requant_fast(acc, q) : mcubert_requantize(acc + q->bias, q->multiplier, q->shift);
}

/* Unaligned-safe 32-bit load (a single LDR on Armv7-M; never LDRD/LDM, which fault when
 * unaligned). Little-endian: byte 0 is the lowest lane. */
static inline uint32_t mcubert_read_u32(const void *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* Number of significant bits of x (0 for 0), without a 64-bit clz helper. */
static inline int mcubert_bit_length64(uint64_t x)
{
    const uint32_t hi = (uint32_t)(x >> 32);
    const uint32_t lo = (uint32_t)x;
    if (hi != 0u) {
        return 64 - __builtin_clz(hi);
    }
    return lo != 0u ? 32 - __builtin_clz(lo) : 0;
}

/* floor(sqrt(x)) for x < 2^62: digit by digit, 31 fixed iterations of shift/compare/subtract
 * (exact, so it equals the reference's isqrt for every input). */
static inline uint32_t mcubert_isqrt64(uint64_t x)
{
    uint64_t remainder = x;
    uint64_t root = 0;
    uint64_t bit = (uint64_t)1 << 60; /* highest power of 4 below 2^62 */
    while (bit != 0u) {
        if (remainder >= root + bit) {
            remainder -= root + bit;
            root = (root >> 1) + bit;
        } else {
            root >>= 1;
        }
        bit >>= 2;
    }
    return (uint32_t)root;
}

#endif /* MCUBERT_FIXED_POINT_H */
