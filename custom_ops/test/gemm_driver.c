/* See gemm_driver.h. */
#include "gemm_driver.h"

#include "mcubert_gemm_s4.h"
#include "mcubert_gemm_s8.h"

/* The chunk's accumulators into rows [0, count) of acc, columns [c, c + channels). */
static void store_chunk(int32_t chunk[][MCUBERT_BLOCK_ROWS], int32_t count, int32_t channels, int32_t *acc,
                        int32_t out_features)
{
    int32_t j, r;
    for (j = 0; j < channels; ++j) {
        for (r = 0; r < count; ++r) {
            acc[r * out_features + j] = chunk[j][r];
        }
    }
}

int32_t mcubert_gemm_driver(int32_t kind, const int8_t *first, const int8_t *second, int32_t split, int32_t tokens,
                            int32_t in_features, int32_t out_features, const void *weights, int32_t *acc,
                            uint32_t *scratch)
{
    const int32_t rest = in_features - split;
    const int32_t pair_stride = ((in_features + 3) >> 2) * 8;
    const int32_t row_bytes = mcubert_w4_row_bytes(in_features);
    int32_t t0, c;
    if (kind != MCUBERT_GEMM_DRIVER_PAIR4 && kind != MCUBERT_GEMM_DRIVER_W4) {
        return -1;
    }
    for (t0 = 0; t0 < tokens; t0 += MCUBERT_BLOCK_ROWS) {
        const int32_t count = tokens - t0 < MCUBERT_BLOCK_ROWS ? tokens - t0 : MCUBERT_BLOCK_ROWS;
        int32_t start[MCUBERT_BLOCK_ROWS];
        mcubert_rows rows;
        mcubert_rows_init_split_s8(&rows, first + t0 * split, split, split, second + t0 * rest, rest, count,
                                   in_features);
        if (kind == MCUBERT_GEMM_DRIVER_W4) {
            mcubert_rows_widen_w4(&rows, scratch, start);
        } else {
            mcubert_rows_widen(&rows, scratch);
        }
        for (c = 0; c < out_features; c += MCUBERT_CHUNK_CHANNELS) {
            int32_t chunk[MCUBERT_CHUNK_CHANNELS][MCUBERT_BLOCK_ROWS];
            const int32_t channels =
                out_features - c < MCUBERT_CHUNK_CHANNELS ? out_features - c : MCUBERT_CHUNK_CHANNELS;
            if (kind == MCUBERT_GEMM_DRIVER_W4) {
                mcubert_gemm_4xn_w4(&rows, start, (const uint8_t *)weights + c * row_bytes, row_bytes, channels, chunk);
            } else {
                mcubert_gemm_4xn_pair4(&rows, (const int8_t *)weights + (c >> 1) * pair_stride, pair_stride, channels,
                                       chunk);
            }
            store_chunk(chunk, count, channels, acc + t0 * out_features + c, out_features);
        }
    }
    return 0;
}
