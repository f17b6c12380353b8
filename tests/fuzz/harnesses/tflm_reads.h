/*
 * The oracle of the verifier harnesses: what TFLM reads of a model it was told is sound, read the way
 * TFLM's flatbuffers accessors read it, with no bounds check at all. Called only on a model that
 * mcubert_verify_model answered MCUBERT_OK for, from an exact-size heap copy: any offset or length
 * that points past the model makes one of these reads overflow, which ASan reports (an OK for a
 * model that is not all there). Test code, kept apart from the verifier's own bounds-checked walk.
 */
#ifndef MCUBERT_FUZZ_TFLM_READS_H
#define MCUBERT_FUZZ_TFLM_READS_H

#include <stdint.h>
#include <string.h>

static volatile uint32_t tflm_reads_sink; /* keeps the reads */

static uint32_t tr_u16(const uint8_t *m, uint32_t at)
{
    return (uint32_t)m[at] | ((uint32_t)m[at + 1u] << 8);
}

static uint32_t tr_u32(const uint8_t *m, uint32_t at)
{
    return tr_u16(m, at) | (tr_u16(m, at + 2u) << 16);
}

/* Position of field `index` of the table at `table` (0: absent), touching its vtable and fields. */
static uint32_t tr_field(const uint8_t *m, uint32_t table, uint32_t index)
{
    uint32_t vtable = table - (uint32_t)(int32_t)tr_u32(m, table);
    uint32_t vtable_size = tr_u16(m, vtable), table_size = tr_u16(m, vtable + 2u), field = 0;
    tflm_reads_sink += m[vtable + vtable_size - 1u] + m[table + table_size - 1u];
    if (4u + 2u * index + 2u <= vtable_size) {
        field = tr_u16(m, vtable + 4u + 2u * index);
    }
    return field == 0u ? 0u : table + field;
}

static uint32_t tr_deref(const uint8_t *m, uint32_t position)
{
    return position + tr_u32(m, position);
}

/* The vector (a string: with its NUL) in field `index`: its element count, *start its first byte. */
static uint32_t tr_vector(const uint8_t *m, uint32_t table, uint32_t index, uint32_t element, int string,
                          uint32_t *start)
{
    uint32_t position = tr_field(m, table, index), at, count, bytes;
    *start = 0;
    if (position == 0u) {
        return 0;
    }
    at = tr_deref(m, position);
    count = tr_u32(m, at);
    *start = at + 4u;
    bytes = count * element + (uint32_t)string;
    if (bytes > 0u) {
        tflm_reads_sink += m[*start] + m[*start + bytes - 1u];
    }
    return count;
}

static uint32_t tr_u32_field(const uint8_t *m, uint32_t table, uint32_t index)
{
    uint32_t position = tr_field(m, table, index);
    return position == 0u ? 0u : tr_u32(m, position);
}

/* Element `i` of a vector of tables. */
static uint32_t tr_table(const uint8_t *m, uint32_t start, uint32_t i)
{
    return tr_deref(m, start + 4u * i);
}

/* Each index of the vector in field `index` reaches its element of `vector` (-1: none). */
static void tr_indices(const uint8_t *m, uint32_t table, uint32_t index, uint32_t vector)
{
    uint32_t start, i, n = tr_vector(m, table, index, 4u, 0, &start);
    for (i = 0; i < n; ++i) {
        if (tr_u32(m, start + 4u * i) != 0xFFFFFFFFu) {
            tflm_reads_sink += tr_table(m, vector, tr_u32(m, start + 4u * i));
        }
    }
}

static void tr_subgraph(const uint8_t *m, uint32_t subgraph, uint32_t buffers, uint32_t codes)
{
    uint32_t tensors, operators, start, i, t, q, n = tr_vector(m, subgraph, 0, 4u, 0, &tensors);
    for (i = 0; i < n; ++i) {
        t = tr_table(m, tensors, i);
        tflm_reads_sink += tr_vector(m, t, 0, 4u, 0, &start) + tr_vector(m, t, 3, 1u, 1, &start);
        tflm_reads_sink += tr_table(m, buffers, tr_u32_field(m, t, 2));
        if (tr_field(m, t, 4) != 0u) {
            q = tr_deref(m, tr_field(m, t, 4));
            tflm_reads_sink += tr_vector(m, q, 2, 4u, 0, &start) + tr_vector(m, q, 3, 8u, 0, &start);
        }
    }
    tr_indices(m, subgraph, 1, tensors);
    tr_indices(m, subgraph, 2, tensors);
    n = tr_vector(m, subgraph, 3, 4u, 0, &operators);
    for (i = 0; i < n; ++i) {
        t = tr_table(m, operators, i);
        tflm_reads_sink += tr_table(m, codes, tr_u32_field(m, t, 0)) + tr_vector(m, t, 5, 1u, 0, &start);
        tr_indices(m, t, 1, tensors);
        tr_indices(m, t, 2, tensors);
        tr_indices(m, t, 8, tensors);
    }
}

/* The offline plan: TFLM reads its count, then one offset per tensor of subgraph 0. */
static void tr_plan(const uint8_t *m, uint32_t root, uint32_t buffers)
{
    uint32_t metadata, name, data, i, t, n = tr_vector(m, root, 6, 4u, 0, &metadata);
    for (i = 0; i < n; ++i) {
        t = tr_table(m, metadata, i);
        if (tr_vector(m, t, 0, 1u, 1, &name) == 23u && memcmp(m + name, "OfflineMemoryAllocation", 23) == 0) {
            (void)tr_vector(m, tr_table(m, buffers, tr_u32_field(m, t, 1)), 0, 1u, 0, &data);
            tflm_reads_sink += m[data + 4u * (3u + tr_u32(m, data + 8u)) - 1u];
        }
    }
}

static void tflm_reads(const uint8_t *m)
{
    uint32_t root = tr_u32(m, 0), codes, buffers, subgraphs, start, i, t;
    uint32_t n = tr_vector(m, root, 1, 4u, 0, &codes);
    for (i = 0; i < n; ++i) {
        tflm_reads_sink += tr_vector(m, tr_table(m, codes, i), 1, 1u, 1, &start);
    }
    n = tr_vector(m, root, 4, 4u, 0, &buffers);
    for (i = 0; i < n; ++i) {
        t = tr_table(m, buffers, i);
        tflm_reads_sink += tr_vector(m, t, 0, 1u, 0, &start);
        if (tr_u32_field(m, t, 1) > 1u) { /* data after the flatbuffer: offset, size */
            tflm_reads_sink += m[tr_u32_field(m, t, 1) + tr_u32_field(m, t, 2) - 1u];
        }
    }
    n = tr_vector(m, root, 2, 4u, 0, &subgraphs);
    for (i = 0; i < n; ++i) {
        tr_subgraph(m, tr_table(m, subgraphs, i), buffers, codes);
    }
    tr_plan(m, root, buffers);
}

#endif
