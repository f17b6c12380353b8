/*
 * The activation rows' accessors that every path of the 4-row gemms reads (mcubert_gemm_s8.c,
 * mcubert_gemm_s8_dsp.c, mcubert_gemm_s8_mve.c): a row by its storage kind, the second segment of a
 * split int8 row, one value of a packed int4 row, one activation whatever its storage.
 */
#ifndef MCUBERT_GEMM_S8_ROWS_H
#define MCUBERT_GEMM_S8_ROWS_H

#include <stdint.h>

#include "mcubert_gemm_s8.h"

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

#endif /* MCUBERT_GEMM_S8_ROWS_H */
