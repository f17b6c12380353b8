/*
 * A whole matrix product through the chunked micro-kernels, for the tests and the W4/W8 bench
 * (tests/kernels/test_kernels_gemm.py, bench/w4_gemm.py): the ops' loop nest (row blocks of 4,
 * widened once, then channel chunks) with the raw int32 accumulators as output.
 */
#ifndef MCUBERT_GEMM_DRIVER_H
#define MCUBERT_GEMM_DRIVER_H

#include <stdint.h>

enum { MCUBERT_GEMM_DRIVER_PAIR4 = 8, MCUBERT_GEMM_DRIVER_W4 = 4 };

/* acc[t * out_features + c] = sum_k x_t[k] * W[c][k] for int8 rows x_t made of first[t * split ..]
 * (K values [0, split)) and second[t * (in_features - split) ..] (the rest; unused when split ==
 * in_features). weights: pair4 int8 (kind 8) or w4row int4 (kind 4). scratch: int16[4][K],
 * 4-byte aligned. Returns 0, or -1 for an unknown kind. */
int32_t mcubert_gemm_driver(int32_t kind, const int8_t *first, const int8_t *second, int32_t split, int32_t tokens,
                            int32_t in_features, int32_t out_features, const void *weights, int32_t *acc,
                            uint32_t *scratch);

#endif /* MCUBERT_GEMM_DRIVER_H */
