/*
 * Bounds-checked reads of an untrusted .tflite flatbuffer, shared by the integrity record's walk
 * (mcubert_verify_model.c) and the structure walk (mcubert_verify_structure.c): each read returns 0
 * when the bytes are not inside [0, size). No flatbuffers library, no heap.
 */
#ifndef MCUBERT_FLATBUFFER_H
#define MCUBERT_FLATBUFFER_H

#include <stdint.h>

#include "mcubert_internal.h"

#define MCUBERT_FB_OP_NAME "model"

/* Field indices of the TFLite schema tables the walks read. */
enum { MODEL_OPERATOR_CODES = 1, MODEL_SUBGRAPHS = 2, MODEL_BUFFERS = 4, MODEL_METADATA = 6 };
enum { OPERATOR_CODE_CUSTOM_CODE = 1 };
enum { MODEL_SIGNATURE_DEFS = 7 };
enum { METADATA_NAME = 0, METADATA_BUFFER = 1 };
enum { BUFFER_DATA = 0 };
enum { SUBGRAPH_TENSORS = 0, SUBGRAPH_OPERATORS = 3 };
enum { TENSOR_BUFFER = 2, TENSOR_NAME = 3, TENSOR_QUANTIZATION = 4 };
enum { OPERATOR_CUSTOM_OPTIONS = 5 };
enum { SIGNATURE_INPUTS = 0, SIGNATURE_OUTPUTS = 1 };
#define OFFLINE_PLAN_NAME "OfflineMemoryAllocation"
#define OFFLINE_PLAN_HEADER_WORDS 3u /* version, subgraphs, offset count */

typedef struct {
    const uint8_t *bytes;
    uint32_t size;
} flatbuffer;

typedef struct { /* a vector's elements: bytes [start, start + count * element size) */
    uint32_t start;
    uint32_t count;
} fb_vector;

/* ---- bounds-checked flatbuffer reads: each returns 0 when the bytes are not there ---------- */

static inline int read_u16(const flatbuffer *fb, uint32_t at, uint32_t *out)
{
    if (at > fb->size || fb->size - at < 2u) {
        return 0;
    }
    *out = (uint32_t)fb->bytes[at] | ((uint32_t)fb->bytes[at + 1u] << 8);
    return 1;
}

/* One bounds check for the four bytes (the structure walk reads thousands of words). */
static inline int read_u32(const flatbuffer *fb, uint32_t at, uint32_t *out)
{
    const uint8_t *p;
    if (at > fb->size || fb->size - at < 4u) {
        return 0;
    }
    p = fb->bytes + at;
    *out = (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
    return 1;
}

/* Follows the uoffset stored at `at` to the table, vector or string it points to. */
static inline int follow(const flatbuffer *fb, uint32_t at, uint32_t *target)
{
    uint32_t offset;
    if (!read_u32(fb, at, &offset) || offset > fb->size - at) {
        return 0;
    }
    *target = at + offset;
    return 1;
}

/* Position of field `index` of the table at `table`; *position = 0 when the field is absent. */
static inline int field_at(const flatbuffer *fb, uint32_t table, uint32_t index, uint32_t *position)
{
    uint32_t soffset, vtable, vtable_size, table_size, field;
    int64_t vt;
    if (!read_u32(fb, table, &soffset)) {
        return 0;
    }
    vt = (int64_t)table - (int64_t)(int32_t)soffset;
    if (vt < 0 || vt > (int64_t)fb->size) {
        return 0;
    }
    vtable = (uint32_t)vt;
    if (!read_u16(fb, vtable, &vtable_size) || !read_u16(fb, vtable + 2u, &table_size)) {
        return 0;
    }
    *position = 0;
    if (4u + 2u * index + 2u > vtable_size) {
        return 1;
    }
    if (!read_u16(fb, vtable + 4u + 2u * index, &field)) {
        return 0;
    }
    if (field != 0u) {
        if (field >= table_size || table > fb->size - field) {
            return 0;
        }
        *position = table + field;
    }
    return 1;
}

/* The vector (or string) whose uoffset is at `position`, of `element` bytes each. On failure the vector is
   left empty, so a caller that names what it can (and ignores the failure) never reads past the buffer. */
static inline int vector_at(const flatbuffer *fb, uint32_t position, uint32_t element, fb_vector *vector)
{
    uint32_t at, count;
    vector->start = 0;
    vector->count = 0;
    if (!follow(fb, position, &at) || !read_u32(fb, at, &count) || count > (fb->size - (at + 4u)) / element) {
        return 0;
    }
    vector->start = at + 4u;
    vector->count = count;
    return 1;
}

/* The vector (or string) in field `index`, of `element` bytes each; absent: count 0. */
static inline int vector_field(const flatbuffer *fb, uint32_t table, uint32_t index, uint32_t element,
                               fb_vector *vector)
{
    uint32_t position;
    vector->start = 0;
    vector->count = 0;
    if (!field_at(fb, table, index, &position)) {
        return 0;
    }
    return position == 0u || vector_at(fb, position, element, vector);
}

/* The table that element `i` of a vector of tables points to. */
static inline int table_at(const flatbuffer *fb, const fb_vector *tables, uint32_t i, uint32_t *table)
{
    return i < tables->count && follow(fb, tables->start + 4u * i, table);
}

static inline int u32_field(const flatbuffer *fb, uint32_t table, uint32_t index, uint32_t *value)
{
    uint32_t position;
    *value = 0;
    return field_at(fb, table, index, &position) && (position == 0u || read_u32(fb, position, value));
}

static inline mcubert_status malformed(mcubert_message *message, const char *where)
{
    return mcubert_fail_text(message, MCUBERT_ERROR_MODEL, MCUBERT_FB_OP_NAME, where,
                             "malformed flatbuffer (an offset or length points outside the model)");
}

/* 1 when the string `name` begins with `expected` (whole: equals it). */
static inline int name_matches(const flatbuffer *fb, const fb_vector *name, const char *expected, int whole)
{
    uint32_t i;
    for (i = 0; i < name->count; ++i) {
        if (expected[i] == '\0') {
            return !whole;
        }
        if (fb->bytes[name->start + i] != (uint8_t)expected[i]) {
            return 0;
        }
    }
    return expected[i] == '\0';
}

/* Every table, vector, string, index and out-of-file range TFLM follows lies inside `fb` (SPEC.md
 * section 9); else MCUBERT_ERROR_MODEL naming the structure. */
mcubert_status mcubert_verify_structure(const flatbuffer *fb, uint32_t root, mcubert_message *message);

#endif
