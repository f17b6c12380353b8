/*
 * The library's linear layer on its own (mcubert_baselines.h, mcubert_bench_linear_s8): rows in
 * blocks of four, widened once per block, then the 4 x 2 x 4 micro-kernel over every channel pair
 * with the fused output stage — exactly what the ops run for their projections, minus the op
 * around it, so it can be measured against the 1x2x4 per-token baseline on the same layer.
 */
#include "mcubert_baselines.h"
#include "mcubert_fixed_point.h"
#include "mcubert_internal.h"

#include <stddef.h>

int32_t mcubert_bench_linear_s8(const int8_t *x, int32_t tokens, int32_t in_features, int32_t out_features,
                                const int8_t *weights, const int32_t *channels, int8_t *y, void *scratch)
{
    const mcubert_linear layer = mcubert_linear_of(weights, channels, in_features, out_features, 8); /* pair4 */
    int32_t r0;
    for (r0 = 0; r0 < tokens; r0 += MCUBERT_BLOCK_ROWS) {
        mcubert_rows rows;
        mcubert_rows_init_s8(&rows, x + r0 * in_features, in_features, mcubert_min_i32(MCUBERT_BLOCK_ROWS, tokens - r0),
                             in_features);
        mcubert_rows_widen(&rows, (uint32_t *)scratch);
        mcubert_linear_to_s8(&rows, &layer, 0, out_features, 0, NULL, y + r0 * out_features, out_features, 1);
    }
    return MCUBERT_OK;
}
