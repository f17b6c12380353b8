/*
 * A decoder's residual stream (SPEC 4.6): int8 values whose channel c has scale s_z * 2^R[c], one s_z for
 * every op of the decoder, so moving between the int8 stream and the int16 sum in s_z units is a shift.
 * Shared by MCUBERT_CAUSAL_ATTENTION and MCUBERT_DECODER_MLP.
 */
#include "mcubert_fixed_point.h"
#include "mcubert_internal.h"

void mcubert_stream_to_z(const int8_t *x, const int32_t *channels, int32_t d, int16_t *z)
{
    int32_t c;
    for (c = 0; c < d; ++c) {
        z[c] = (int16_t)((x[c] - channels[2 * c]) * (1 << channels[2 * c + 1]));
    }
}

void mcubert_stream_from_z(const int16_t *z, const int32_t *channels, int32_t d, int8_t *x)
{
    int32_t c;
    for (c = 0; c < d; ++c) {
        const int32_t shift = channels[2 * c + 1];
        const int32_t shifted = shift > 0 ? (z[c] + (1 << (shift - 1))) >> shift : z[c];
        x[c] = mcubert_clamp8(shifted + channels[2 * c]);
    }
}
