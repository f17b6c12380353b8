/*
 * Self-checking firmware for QEMU: the pair4 gemm (mcubert_rows_widen_pair4 +
 * mcubert_gemm_4xn_pair4) of whichever path the library was built with, against plain sums, over
 * K = 1..40, 64 and 100, 1..4 rows, 1..8 channels (1..16 on the MVE path), and the row kinds the
 * ops hand it: one int8 segment, two segments split at every point (the attention's output
 * projection), packed int4 rows (the embedding's int4 U rows). Every check runs twice, the weights
 * at a word-aligned and at an odd address (the MVE path loads aligned pairs with VLD2, others with
 * byte gathers); their K % 4 padding is garbage, and the widened region is followed by a guard
 * that must stay intact (the MVE copies must fit int16[4][K]). Prints the numbers of products
 * checked and failed; exits with 1 on any.
 */
#include <stdint.h>

#include "mcubert/mcubert_ops.h"
#include "mcubert_gemm_s4.h"
#include "mcubert_gemm_s8.h"
#include "semihost.h"

#define MAX_K 100
/* Channels per call: the contract's chunk, 16 on the MVE path (mcubert_linear_to_s8's chunks there). */
#define MAX_CHANNELS (MCUBERT_MVE ? 2 * MCUBERT_CHUNK_CHANNELS : MCUBERT_CHUNK_CHANNELS)
#define GUARD_WORDS 8
#define GUARD 0x5EA5A5EAu

static int8_t x[MCUBERT_BLOCK_ROWS][MAX_K];
static uint8_t packed_s4[MCUBERT_BLOCK_ROWS][MAX_K / 2];
static int8_t weight[MAX_CHANNELS][MAX_K];
static int8_t pair4[(MAX_CHANNELS / 2) * ((MAX_K + 3) / 4) * 8 + 1] __attribute__((aligned(16)));
static uint32_t widened[MAX_K * 2 + GUARD_WORDS] __attribute__((aligned(16)));
static int16_t x16[MCUBERT_BLOCK_ROWS][MAX_K];
static int8_t weight_rows[MCUBERT_CHUNK_CHANNELS * MAX_K + 1];
static uint8_t w4_rows[MCUBERT_CHUNK_CHANNELS * ((MAX_K + 7) / 8) * 4 + 1];
static uint32_t state = 1u;
static int32_t checked;
static int32_t weight_offset; /* the weights at pair4 + weight_offset: 0 or 1 */

static int8_t next_byte(void)
{
    state = state * 1664525u + 1013904223u;
    return (int8_t)(state >> 24);
}

/* Random rows and weights; int4 rows hold the same values as x, clipped to [-8, 7]. */
static void fill(void)
{
    int32_t r, c, k;
    for (r = 0; r < MCUBERT_BLOCK_ROWS; ++r) {
        for (k = 0; k < MAX_K; ++k) {
            x[r][k] = next_byte();
        }
    }
    for (c = 0; c < MAX_CHANNELS; ++c) {
        for (k = 0; k < MAX_K; ++k) {
            weight[c][k] = next_byte();
        }
    }
}

/* pair4 packing of weight[][0..K) (SPEC 3.1) at pair4 + weight_offset, padding lanes random. */
static const int8_t *pack(int32_t length, int32_t stride)
{
    int8_t *base = pair4 + weight_offset;
    int32_t c, k;
    for (k = 0; k < MAX_CHANNELS / 2 * stride; ++k) {
        base[k] = next_byte();
    }
    for (c = 0; c < MAX_CHANNELS; ++c) {
        for (k = 0; k < length; ++k) {
            base[(c >> 1) * stride + 8 * (k >> 2) + 4 * (c & 1) + (k & 3)] = weight[c][k];
        }
    }
    return base;
}

static int32_t value(int32_t kind, int32_t r, int32_t k)
{
    const int32_t v = x[r][k];
    return kind == 2 ? (v < -8 ? -8 : v > 7 ? 7 : v) : v;
}

/* One gemm call on prepared rows against the plain sums; returns the failures. */
static int32_t check(mcubert_rows *rows, int32_t kind, const int8_t *packed, int32_t stride)
{
    int32_t acc[MAX_CHANNELS][MCUBERT_BLOCK_ROWS];
    int32_t channels, c, r, k, failures = 0;
    for (k = 0; k < GUARD_WORDS; ++k) {
        widened[2 * rows->length + k] = GUARD;
    }
    mcubert_rows_widen_pair4(rows, widened);
    for (k = 0; k < GUARD_WORDS; ++k) {
        failures += widened[2 * rows->length + k] != GUARD;
    }
    for (channels = 1; channels <= MAX_CHANNELS; ++channels) {
        mcubert_gemm_4xn_pair4(rows, packed, stride, channels, acc);
        for (c = 0; c < channels; ++c) {
            for (r = 0; r < rows->count; ++r) {
                int32_t sum = 0;
                for (k = 0; k < rows->length; ++k) {
                    sum += value(kind, r, k) * weight[c][k];
                }
                failures += acc[c][r] != sum;
                ++checked;
            }
        }
    }
    return failures;
}

static void pack_s4(int32_t length)
{
    int32_t r, k;
    for (r = 0; r < MCUBERT_BLOCK_ROWS; ++r) {
        for (k = 0; k < length; k += 2) {
            const int32_t hi = k + 1 < length ? value(2, r, k + 1) & 0xF : 0;
            packed_s4[r][k >> 1] = (uint8_t)((value(2, r, k) & 0xF) | (hi << 4));
        }
    }
}

/* Every row count and kind (0: one segment, 1: every split, 2: int4) at one K. */
static int32_t check_length(int32_t length)
{
    const int32_t stride = (length + 3) / 4 * 8;
    const int8_t *packed = pack(length, stride);
    const uint8_t *s4_rows[MCUBERT_BLOCK_ROWS] = {packed_s4[0], packed_s4[1], packed_s4[2], packed_s4[3]};
    int32_t count, split, failures = 0;
    mcubert_rows rows;
    pack_s4(length);
    for (count = 1; count <= MCUBERT_BLOCK_ROWS; ++count) {
        mcubert_rows_init_s8(&rows, x[0], MAX_K, count, length);
        failures += check(&rows, 0, packed, stride);
        for (split = 1; split < length; ++split) {
            mcubert_rows_init_split_s8(&rows, x[0], MAX_K, split, x[0] + split, MAX_K, count, length);
            failures += check(&rows, 1, packed, stride);
        }
        mcubert_rows_init_gather_s4(&rows, s4_rows, count, length);
        failures += check(&rows, 2, packed, stride);
    }
    return failures;
}

/* The rows gemm at one K: int8 rows (kind 0) and int16 rows (kind 1), every row and channel count. */
static int32_t check_rows_length(int32_t length, int32_t offset, int32_t *products)
{
    const int8_t *w = weight_rows + offset;
    int32_t acc[MCUBERT_CHUNK_CHANNELS][MCUBERT_BLOCK_ROWS];
    int32_t kind, count, channels, c, r, k, failures = 0;
    for (kind = 0; kind < 2; ++kind) {
        for (count = 1; count <= MCUBERT_BLOCK_ROWS; ++count) {
            mcubert_rows rows;
            if (kind == 0) {
                mcubert_rows_init_s8(&rows, x[0], MAX_K, count, length);
            } else {
                mcubert_rows_init_s16(&rows, x16[0], MAX_K, count, length);
            }
            mcubert_rows_widen(&rows, widened);
            for (channels = 1; channels <= MCUBERT_CHUNK_CHANNELS; ++channels) {
                mcubert_gemm_4xn_rows(&rows, w, MAX_K, channels, acc);
                for (c = 0; c < channels; ++c) {
                    for (r = 0; r < count; ++r) {
                        int32_t sum = 0;
                        for (k = 0; k < length; ++k) {
                            sum += (kind == 0 ? x[r][k] : x16[r][k]) * w[c * MAX_K + k];
                        }
                        failures += acc[c][r] != sum;
                        ++*products;
                    }
                }
            }
        }
    }
    return failures;
}

/* Random int16 rows and weight rows, then every K and both weight alignments. */
static int32_t check_rows(int32_t *products)
{
    static const int32_t extra[] = {64, 100};
    int32_t offset, length, i, r, failures = 0;
    for (r = 0; r < MCUBERT_BLOCK_ROWS; ++r) {
        for (i = 0; i < MAX_K; ++i) {
            x16[r][i] = (int16_t)(((uint16_t)(uint8_t)next_byte() << 8) | (uint8_t)next_byte());
        }
    }
    for (i = 0; i < (int32_t)sizeof weight_rows; ++i) {
        weight_rows[i] = next_byte();
    }
    for (offset = 0; offset < 2; ++offset) {
        for (length = 1; length <= 40; ++length) {
            failures += check_rows_length(length, offset, products);
        }
        for (i = 0; i < 2; ++i) {
            failures += check_rows_length(extra[i], offset, products);
        }
    }
    return failures;
}

/* w4row packing of weight[][0..K) clipped to [-7, 7] (offset binary, padding nibbles 0) at w4_rows + offset. */
static const uint8_t *pack_w4(int32_t length, int32_t offset)
{
    const int32_t row_bytes = mcubert_w4_row_bytes(length);
    uint8_t *base = w4_rows + offset;
    int32_t c, k;
    for (k = 0; k < MCUBERT_CHUNK_CHANNELS * row_bytes; ++k) {
        base[k] = 0;
    }
    for (c = 0; c < MCUBERT_CHUNK_CHANNELS; ++c) {
        for (k = 0; k < length; ++k) {
            const int32_t v = weight[c][k] < -7 ? -7 : weight[c][k] > 7 ? 7 : weight[c][k];
            base[c * row_bytes + (k >> 1)] |= (uint8_t)((v + 8) << (4 * (k & 1)));
        }
    }
    return base;
}

/* One int4-weight gemm over prepared rows against the plain sums; returns the failures. */
static int32_t check_w4_rows(mcubert_rows *rows, const uint8_t *packed, int32_t *products)
{
    const int32_t row_bytes = mcubert_w4_row_bytes(rows->length);
    int32_t acc[MCUBERT_CHUNK_CHANNELS][MCUBERT_BLOCK_ROWS], start[MCUBERT_BLOCK_ROWS];
    int32_t channels, c, r, k, failures = 0;
    for (k = 0; k < GUARD_WORDS; ++k) {
        widened[2 * rows->length + k] = GUARD;
    }
    mcubert_rows_widen_w4(rows, widened, start);
    for (k = 0; k < GUARD_WORDS; ++k) {
        failures += widened[2 * rows->length + k] != GUARD;
    }
    for (channels = 1; channels <= MCUBERT_CHUNK_CHANNELS; ++channels) {
        mcubert_gemm_4xn_w4(rows, start, packed, row_bytes, channels, acc);
        for (c = 0; c < channels; ++c) {
            for (r = 0; r < rows->count; ++r) {
                int32_t sum = 0;
                for (k = 0; k < rows->length; ++k) {
                    const int32_t v = weight[c][k] < -7 ? -7 : weight[c][k] > 7 ? 7 : weight[c][k];
                    sum += x[r][k] * v;
                }
                failures += acc[c][r] != sum;
                ++*products;
            }
        }
    }
    return failures;
}

/* The int4-weight gemm at every K, row count, split and weight alignment. */
static int32_t check_w4(int32_t *products)
{
    static const int32_t extra[] = {64, 100};
    int32_t offset, length, i, count, split, failures = 0;
    for (offset = 0; offset < 2; ++offset) {
        for (i = -40; i < 2; ++i) {
            const uint8_t *packed;
            length = i < 0 ? i + 41 : extra[i];
            packed = pack_w4(length, offset);
            for (count = 1; count <= MCUBERT_BLOCK_ROWS; ++count) {
                mcubert_rows rows;
                mcubert_rows_init_s8(&rows, x[0], MAX_K, count, length);
                failures += check_w4_rows(&rows, packed, products);
                for (split = 1; split < length; split += 3) {
                    mcubert_rows_init_split_s8(&rows, x[0], MAX_K, split, x[0] + split, MAX_K, count, length);
                    failures += check_w4_rows(&rows, packed, products);
                }
            }
        }
    }
    return failures;
}

int main(void)
{
    int32_t w4_products = 0, w4_failures;
    int32_t rows_products = 0, rows_failures;
    static const int32_t extra[] = {64, 100};
    int32_t length, i, failures = 0;
    fill();
    for (weight_offset = 0; weight_offset < 2; ++weight_offset) {
        for (length = 1; length <= 40; ++length) {
            failures += check_length(length);
        }
        for (i = 0; i < 2; ++i) {
            failures += check_length(extra[i]);
        }
    }
    semihost_write("gemm check: path ");
    semihost_write_int(mcubert_uses_dsp_path());
    semihost_write(", products ");
    semihost_write_int(checked);
    semihost_write(", failures ");
    semihost_write_int(failures);
    semihost_write("\n");
    rows_failures = check_rows(&rows_products);
    semihost_write("rows check: products ");
    semihost_write_int(rows_products);
    semihost_write(", failures ");
    semihost_write_int(rows_failures);
    semihost_write("\n");
    w4_failures = check_w4(&w4_products);
    semihost_write("w4 check: products ");
    semihost_write_int(w4_products);
    semihost_write(", failures ");
    semihost_write_int(w4_failures);
    semihost_write("\n");
    return failures + rows_failures + w4_failures != 0; /* not the count: an exit status keeps 8 bits */
}
