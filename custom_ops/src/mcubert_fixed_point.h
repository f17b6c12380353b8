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

static inline int32_t mcubert_min_i32(int32_t a, int32_t b) { return a < b ? a : b; }
static inline int32_t mcubert_max_i32(int32_t a, int32_t b) { return a > b ? a : b; }

static inline int8_t mcubert_clamp8(int32_t x)
{
    return (int8_t)(x < MCUBERT_INT8_MIN ? MCUBERT_INT8_MIN : x > MCUBERT_INT8_MAX ? MCUBERT_INT8_MAX : x);
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
