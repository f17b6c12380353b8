/*
 * mcubert_verify_model: the integrity record of an exported model (SPEC.md section 9), checked
 * on the device before the interpreter trusts the bytes (e.g. at boot, before AllocateTensors).
 *
 * The .tflite is untrusted: it is walked as a flatbuffer with every offset, length and count
 * checked against `size` before use (no flatbuffers library, no heap, bounded stack). The CRC is
 * streamed over the file once; only when it differs are the per-buffer and per-operator CRCs
 * recomputed, to name what was hit.
 *
 * A matching record is not enough for MCUBERT_OK: the CRC covers the bytes that are there, not the
 * ones offsets point to. Before OK, every table, vector, string, index and out-of-file range that
 * TFLM follows is checked to lie inside `size` (a model that is not all there is refused).
 *
 * The record cannot be switched off by the corruption it is there to catch: a model that uses MCUBERT
 * ops must have it (a record hidden by a corrupted name or offset is an error, not "unverified"), and
 * mcubert_verify_model_expected checks the file against the size and CRC the firmware was built with.
 */
#include <stddef.h>
#include <stdint.h>

#include "mcubert_internal.h"

#define OP_NAME "model"
#define RECORD_NAME "MCUBERT_INTEGRITY"
#define MCUBERT_OP_PREFIX "MCUBERT_" /* a model with an operator code of this prefix must carry the record */
#define RECORD_MAGIC 0x4E49434Du
#define RECORD_VERSION 1u
#define HEADER_WORDS 5u

/* Field indices of the TFLite schema tables this walk reads. */
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

static uint32_t crc32_of(const uint8_t *data, uint32_t length)
{
    return ~mcubert_crc32_update(0xFFFFFFFFu, data, length);
}

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
static int follow(const flatbuffer *fb, uint32_t at, uint32_t *target)
{
    uint32_t offset;
    if (!read_u32(fb, at, &offset) || offset > fb->size - at) {
        return 0;
    }
    *target = at + offset;
    return 1;
}

/* Position of field `index` of the table at `table`; *position = 0 when the field is absent. */
static int field_at(const flatbuffer *fb, uint32_t table, uint32_t index, uint32_t *position)
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

/* The vector (or string) whose uoffset is at `position`, of `element` bytes each. */
static int vector_at(const flatbuffer *fb, uint32_t position, uint32_t element, fb_vector *vector)
{
    uint32_t at;
    if (!follow(fb, position, &at) || !read_u32(fb, at, &vector->count)) {
        return 0;
    }
    vector->start = at + 4u;
    return vector->count <= (fb->size - vector->start) / element;
}

/* The vector (or string) in field `index`, of `element` bytes each; absent: count 0. */
static int vector_field(const flatbuffer *fb, uint32_t table, uint32_t index, uint32_t element, fb_vector *vector)
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
static int table_at(const flatbuffer *fb, const fb_vector *tables, uint32_t i, uint32_t *table)
{
    return i < tables->count && follow(fb, tables->start + 4u * i, table);
}

static int u32_field(const flatbuffer *fb, uint32_t table, uint32_t index, uint32_t *value)
{
    uint32_t position;
    *value = 0;
    return field_at(fb, table, index, &position) && (position == 0u || read_u32(fb, position, value));
}

/* ---- the record ------------------------------------------------------------------------------ */

typedef struct {
    fb_vector buffers; /* of Buffer tables */
    uint32_t record_buffer;
    int found;        /* a metadata entry has the record's name */
    fb_vector record; /* its data bytes */
} record_location;

static mcubert_status malformed(mcubert_message *message, const char *where)
{
    return mcubert_fail_text(message, MCUBERT_ERROR_MODEL, OP_NAME, where,
                             "malformed flatbuffer (an offset or length points outside the model)");
}

/* 1 when the string `name` begins with `expected` (whole: equals it). */
static int name_matches(const flatbuffer *fb, const fb_vector *name, const char *expected, int whole)
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

/* *uses = 1 when an operator code's custom_code begins with MCUBERT_OP_PREFIX; 0 when unreadable. */
static int uses_mcubert_ops(const flatbuffer *fb, uint32_t root, int *uses)
{
    fb_vector codes, name;
    uint32_t i, table;
    *uses = 0;
    if (!vector_field(fb, root, MODEL_OPERATOR_CODES, 4u, &codes)) {
        return 0;
    }
    for (i = 0; i < codes.count; ++i) {
        if (!table_at(fb, &codes, i, &table) || !vector_field(fb, table, OPERATOR_CODE_CUSTOM_CODE, 1u, &name)) {
            return 0;
        }
        *uses |= name_matches(fb, &name, MCUBERT_OP_PREFIX, 0);
    }
    return 1;
}

static uint32_t record_word(const flatbuffer *fb, const record_location *at, uint32_t word)
{
    uint32_t value = 0;
    (void)read_u32(fb, at->record.start + 4u * word, &value);
    return value;
}

/* Finds the record by its name: MCUBERT_OK with found = 0 when no metadata entry has it. */
static mcubert_status locate_record(const flatbuffer *fb, uint32_t root, record_location *at, mcubert_message *message)
{
    fb_vector metadata, name;
    uint32_t i, table, buffer_table;
    at->record.count = 0;
    at->found = 0;
    if (!vector_field(fb, root, MODEL_METADATA, 4u, &metadata) ||
        !vector_field(fb, root, MODEL_BUFFERS, 4u, &at->buffers)) {
        return malformed(message, "metadata");
    }
    for (i = 0; i < metadata.count; ++i) {
        if (!table_at(fb, &metadata, i, &table) || !vector_field(fb, table, METADATA_NAME, 1u, &name) ||
            !u32_field(fb, table, METADATA_BUFFER, &at->record_buffer)) {
            return malformed(message, "metadata");
        }
        if (!name_matches(fb, &name, RECORD_NAME, 1)) {
            continue;
        }
        at->found = 1;
        if (!table_at(fb, &at->buffers, at->record_buffer, &buffer_table) ||
            !vector_field(fb, buffer_table, BUFFER_DATA, 1u, &at->record)) {
            return malformed(message, RECORD_NAME);
        }
        return MCUBERT_OK;
    }
    return MCUBERT_OK;
}

MCUBERT_NOINLINE static mcubert_status check_header(const flatbuffer *fb, const record_location *at, uint32_t operators,
                                                    mcubert_message *message)
{
    uint32_t words = at->record.count / 4u;
    if (at->record.count % 4u != 0u || words < HEADER_WORDS || record_word(fb, at, 0) != RECORD_MAGIC) {
        return mcubert_fail_text(message, MCUBERT_ERROR_MODEL, OP_NAME, RECORD_NAME,
                                 "not an integrity record (corrupted)");
    }
    if (record_word(fb, at, 1) != RECORD_VERSION) {
        mcubert_fail(message, MCUBERT_ERROR_MODEL, OP_NAME, RECORD_NAME);
        mcubert_append(message, "record version ");
        mcubert_append_int(message, record_word(fb, at, 1));
        mcubert_append(message, " (this library knows 1)");
        return MCUBERT_ERROR_MODEL;
    }
    if (record_word(fb, at, 4) != at->buffers.count || words != HEADER_WORDS + at->buffers.count + 1u + operators) {
        return mcubert_fail_text(message, MCUBERT_ERROR_MODEL, OP_NAME, RECORD_NAME,
                                 "counts do not match the model (corrupted)");
    }
    if (record_word(fb, at, 2) != fb->size) {
        mcubert_fail(message, MCUBERT_ERROR_MODEL, OP_NAME, "size");
        mcubert_append(message, "the model is ");
        mcubert_append_int(message, fb->size);
        mcubert_append(message, " bytes but was exported as ");
        mcubert_append_int(message, record_word(fb, at, 2));
        return MCUBERT_ERROR_MODEL;
    }
    return MCUBERT_OK;
}

static uint32_t file_crc(const flatbuffer *fb, const record_location *at)
{
    uint32_t state = mcubert_crc32_update(0xFFFFFFFFu, fb->bytes, at->record.start);
    uint32_t end = at->record.start + at->record.count;
    state = mcubert_crc32_update(state, NULL, at->record.count);
    return ~mcubert_crc32_update(state, fb->bytes + end, fb->size - end);
}

/* ---- naming what was hit --------------------------------------------------------------------- */

static void append_bytes(mcubert_message *message, const flatbuffer *fb, const fb_vector *text)
{
    char chunk[2] = {0, 0};
    uint32_t i;
    for (i = 0; i < text->count && i < MCUBERT_MESSAGE_CAPACITY; ++i) {
        chunk[0] = (char)fb->bytes[text->start + i];
        mcubert_append(message, chunk);
    }
}

/* "tensor NAME: constant data corrupted (buffer B)" for the first tensor that uses buffer b. */
static mcubert_status name_buffer(const flatbuffer *fb, const fb_vector *tensors, uint32_t b,
                                  mcubert_model_integrity *result, mcubert_message *message)
{
    uint32_t t, table, buffer;
    fb_vector name = {0, 0};
    result->corrupt_buffer = (int32_t)b;
    for (t = 0; t < tensors->count; ++t) {
        if (table_at(fb, tensors, t, &table) && u32_field(fb, table, TENSOR_BUFFER, &buffer) && buffer == b) {
            result->corrupt_tensor = (int32_t)t;
            (void)vector_field(fb, table, TENSOR_NAME, 1u, &name);
            break;
        }
    }
    mcubert_fail(message, MCUBERT_ERROR_MODEL, OP_NAME, "tensor");
    append_bytes(message, fb, &name);
    mcubert_append(message, ": constant data corrupted (buffer ");
    mcubert_append_int(message, b);
    mcubert_append(message, ")");
    return MCUBERT_ERROR_MODEL;
}

MCUBERT_NOINLINE static mcubert_status name_damage(const flatbuffer *fb, uint32_t root, const record_location *at,
                                                   mcubert_model_integrity *result, mcubert_message *message)
{
    fb_vector subgraphs, tensors = {0, 0}, operators = {0, 0}, data;
    uint32_t i, table, subgraph;
    if (!vector_field(fb, root, MODEL_SUBGRAPHS, 4u, &subgraphs)) {
        return malformed(message, "subgraphs");
    }
    if (subgraphs.count > 0u &&
        (!table_at(fb, &subgraphs, 0, &subgraph) || !vector_field(fb, subgraph, SUBGRAPH_TENSORS, 4u, &tensors) ||
         !vector_field(fb, subgraph, SUBGRAPH_OPERATORS, 4u, &operators))) {
        return malformed(message, "subgraph 0");
    }
    for (i = 0; i < at->buffers.count; ++i) {
        if (i == at->record_buffer) {
            continue;
        }
        if (!table_at(fb, &at->buffers, i, &table) || !vector_field(fb, table, BUFFER_DATA, 1u, &data)) {
            return malformed(message, "buffers");
        }
        if (crc32_of(fb->bytes + data.start, data.count) != record_word(fb, at, HEADER_WORDS + i)) {
            return name_buffer(fb, &tensors, i, result, message);
        }
    }
    for (i = 0; i < operators.count; ++i) {
        if (!table_at(fb, &operators, i, &table) || !vector_field(fb, table, OPERATOR_CUSTOM_OPTIONS, 1u, &data)) {
            return malformed(message, "operators");
        }
        if (crc32_of(fb->bytes + data.start, data.count) !=
            record_word(fb, at, HEADER_WORDS + at->buffers.count + 1u + i)) {
            result->corrupt_operator = (int32_t)i;
            mcubert_fail_text(message, MCUBERT_ERROR_MODEL, OP_NAME, "operator", "");
            mcubert_append_int(message, i);
            mcubert_append(message, ": custom options corrupted");
            return MCUBERT_ERROR_MODEL;
        }
    }
    return mcubert_fail_text(message, MCUBERT_ERROR_MODEL, OP_NAME, "structure",
                             "corrupted (tensor table, shapes, quantization or offsets): the file's "
                             "CRC-32 differs, no constant's or options' did");
}

MCUBERT_NOINLINE static uint32_t operator_count(const flatbuffer *fb, uint32_t root)
{
    fb_vector subgraphs, operators;
    uint32_t subgraph;
    if (!vector_field(fb, root, MODEL_SUBGRAPHS, 4u, &subgraphs) || subgraphs.count == 0u ||
        !table_at(fb, &subgraphs, 0, &subgraph) || !vector_field(fb, subgraph, SUBGRAPH_OPERATORS, 4u, &operators)) {
        return 0;
    }
    return operators.count;
}

/* The root table: 4-aligned past the file identifier, with at least one subgraph and one buffer (a
 * corrupted root offset points at bytes that are not the model's root: refused, not walked). */
static int root_table(const flatbuffer *fb, uint32_t *root)
{
    fb_vector subgraphs, buffers;
    return follow(fb, 0, root) && *root % 4u == 0u && *root >= 8u &&
           vector_field(fb, *root, MODEL_SUBGRAPHS, 4u, &subgraphs) && subgraphs.count > 0u &&
           vector_field(fb, *root, MODEL_BUFFERS, 4u, &buffers) && buffers.count > 0u;
}

/* No record: an error for a model with MCUBERT ops (the record was hidden), else MCUBERT_UNVERIFIED. */
MCUBERT_NOINLINE static mcubert_status no_record(const flatbuffer *fb, uint32_t root, mcubert_message *message)
{
    int uses;
    if (!uses_mcubert_ops(fb, root, &uses)) {
        return malformed(message, "operator_codes");
    }
    if (uses) {
        return mcubert_fail_text(message, MCUBERT_ERROR_MODEL, OP_NAME, RECORD_NAME,
                                 "missing, but the model uses MCUBERT ops: corrupted (or exported "
                                 "before the record existed)");
    }
    return mcubert_fail_text(message, MCUBERT_UNVERIFIED, OP_NAME, RECORD_NAME,
                             "absent: the model cannot be checked (not an MCUBERT export)");
}

/* ---- the whole structure inside the file (checked before MCUBERT_OK) -------------------------- */

/* How a field is checked. A string with its NUL (TFLM compares names with strcmp); a vector of
 * scalars; a table whose fields this walk does not read (options, sparsity, quantization details)
 * by its vtable and inline fields; a vector of such tables; a range outside the flatbuffer (u64
 * offset, then u64 size); an index into the buffers or the operator codes, or a vector of indices
 * into the subgraph's tensors (-1: an optional input left out). */
enum { FIELD_STRING, FIELD_SCALARS, FIELD_TABLE, FIELD_TABLES, FIELD_OUTSIDE, FIELD_BUFFER, FIELD_CODE, FIELD_TENSORS };

typedef struct {
    uint8_t index;
    uint8_t kind;
    uint8_t bytes; /* FIELD_SCALARS: of one element */
} schema_field;

typedef struct {
    const schema_field *fields;
    uint32_t count;
} schema_table;

typedef struct { /* what an index may reach */
    uint32_t buffers;
    uint32_t codes;
    uint32_t tensors;
} schema_limits;

#define SCHEMA_TABLE(fields)                                                                                           \
    {                                                                                                                  \
        fields, (uint32_t)(sizeof fields / sizeof fields[0])                                                           \
    }

/* The fields of the TFLite schema that hold offsets or indices; the tables of tables (the model's
 * vectors, a subgraph's tensors and operators, a tensor's quantization) are walked by the code. */
static const schema_field model_fields[] = {{3, FIELD_STRING, 0}, {5, FIELD_SCALARS, 4}};
static const schema_field code_fields[] = {{OPERATOR_CODE_CUSTOM_CODE, FIELD_STRING, 0}};
static const schema_field buffer_fields[] = {{BUFFER_DATA, FIELD_SCALARS, 1}, {1, FIELD_OUTSIDE, 0}};
static const schema_field metadata_fields[] = {{METADATA_NAME, FIELD_STRING, 0}, {METADATA_BUFFER, FIELD_BUFFER, 0}};
static const schema_field signature_fields[] = {{2, FIELD_STRING, 0}, {3, FIELD_STRING, 0}};
static const schema_field tensor_map_fields[] = {{0, FIELD_STRING, 0}};
static const schema_field subgraph_fields[] = {{1, FIELD_TENSORS, 0}, {2, FIELD_TENSORS, 0}, {4, FIELD_STRING, 0}};
static const schema_field tensor_fields[] = {{0, FIELD_SCALARS, 4},          {TENSOR_BUFFER, FIELD_BUFFER, 0},
                                             {TENSOR_NAME, FIELD_STRING, 0}, {6, FIELD_TABLE, 0},
                                             {7, FIELD_SCALARS, 4},          {9, FIELD_TABLES, 0}};
static const schema_field quantization_fields[] = {
    {0, FIELD_SCALARS, 4}, {1, FIELD_SCALARS, 4}, {2, FIELD_SCALARS, 4}, {3, FIELD_SCALARS, 8}, {5, FIELD_TABLE, 0}};
static const schema_field operator_fields[] = {{0, FIELD_CODE, 0},
                                               {1, FIELD_TENSORS, 0},
                                               {2, FIELD_TENSORS, 0},
                                               {4, FIELD_TABLE, 0},
                                               {OPERATOR_CUSTOM_OPTIONS, FIELD_SCALARS, 1},
                                               {7, FIELD_SCALARS, 1},
                                               {8, FIELD_TENSORS, 0},
                                               {9, FIELD_OUTSIDE, 0},
                                               {12, FIELD_TABLE, 0}};

typedef struct { /* a table whose vtable and inline fields were checked to be in the file */
    uint32_t at;
    uint32_t vtable;
    uint16_t fields;     /* entries in the vtable */
    uint16_t table_size; /* bytes of inline fields */
} fb_table;

/* Opens the table at `at`: its soffset, its whole vtable and its inline fields inside the file. */
static int open_table(const flatbuffer *fb, uint32_t at, fb_table *table)
{
    uint32_t soffset, vtable_size, table_size;
    int64_t vt;
    if (!read_u32(fb, at, &soffset)) {
        return 0;
    }
    vt = (int64_t)at - (int64_t)(int32_t)soffset;
    if (vt < 0 || vt > (int64_t)fb->size || !read_u16(fb, (uint32_t)vt, &vtable_size) ||
        !read_u16(fb, (uint32_t)vt + 2u, &table_size)) {
        return 0;
    }
    table->at = at;
    table->vtable = (uint32_t)vt;
    table->fields = (uint16_t)((vtable_size - 4u) / 2u);
    table->table_size = (uint16_t)table_size;
    return vtable_size >= 4u && vtable_size % 2u == 0u && vtable_size <= fb->size - table->vtable && table_size >= 4u &&
           table_size <= fb->size - at;
}

/* *position of field `index` of an opened table (0: absent); 0 when it lies outside the table. */
static int position_of(const flatbuffer *fb, const fb_table *table, uint32_t index, uint32_t *position)
{
    uint32_t field = 0;
    if (index < table->fields) {
        (void)read_u16(fb, table->vtable + 4u + 2u * index, &field);
    }
    *position = field == 0u ? 0u : table->at + field;
    return field < table->table_size;
}

/* The table whose uoffset is at `position`, opened. */
static int table_from(const flatbuffer *fb, uint32_t position, fb_table *table)
{
    uint32_t at;
    return follow(fb, position, &at) && open_table(fb, at, table);
}

/* A u64 at `position` (0: absent) that fits in 32 bits, as every offset and size in a model does. */
static int u64_at(const flatbuffer *fb, uint32_t position, uint32_t *value)
{
    uint32_t high = 0;
    *value = 0;
    return position == 0u || (read_u32(fb, position, value) && read_u32(fb, position + 4u, &high) && high == 0u);
}

/* Data stored after the flatbuffer (offset > 1: TFLite's large-model layout) must be in the file. */
static int outside_fits(const flatbuffer *fb, const fb_table *table, uint32_t index, uint32_t position)
{
    uint32_t offset, length, size_position;
    if (!u64_at(fb, position, &offset)) {
        return 0;
    }
    return offset <= 1u || (offset <= fb->size && position_of(fb, table, index + 1u, &size_position) &&
                            u64_at(fb, size_position, &length) && length <= fb->size - offset);
}

static int indices_fit(const flatbuffer *fb, const fb_vector *indices, uint32_t count)
{
    uint32_t i, index = 0;
    for (i = 0; i < indices->count; ++i) {
        (void)read_u32(fb, indices->start + 4u * i, &index);
        if (index >= count && index != 0xFFFFFFFFu) {
            return 0;
        }
    }
    return 1;
}

static int field_fits(const flatbuffer *fb, const fb_table *table, const schema_field *field,
                      const schema_limits *limits)
{
    fb_vector vector;
    fb_table inner;
    uint32_t position, i, value = 0;
    if (!position_of(fb, table, field->index, &position)) {
        return 0;
    }
    if (field->kind == FIELD_BUFFER || field->kind == FIELD_CODE) { /* absent: index 0 */
        return (position == 0u || read_u32(fb, position, &value)) &&
               value < (field->kind == FIELD_BUFFER ? limits->buffers : limits->codes);
    }
    if (position == 0u) {
        return 1;
    }
    switch (field->kind) {
    case FIELD_STRING:
        return vector_at(fb, position, 1u, &vector) && vector.count < fb->size - vector.start &&
               fb->bytes[vector.start + vector.count] == 0u;
    case FIELD_SCALARS: return vector_at(fb, position, field->bytes, &vector);
    case FIELD_TABLE: return table_from(fb, position, &inner);
    case FIELD_TABLES:
        if (!vector_at(fb, position, 4u, &vector)) {
            return 0;
        }
        for (i = 0; i < vector.count; ++i) {
            if (!table_from(fb, vector.start + 4u * i, &inner)) {
                return 0;
            }
        }
        return 1;
    case FIELD_OUTSIDE: return outside_fits(fb, table, field->index, position);
    default: return vector_at(fb, position, 4u, &vector) && indices_fit(fb, &vector, limits->tensors);
    }
}

static int table_checks(const flatbuffer *fb, const fb_table *table, const schema_table *schema,
                        const schema_limits *limits)
{
    uint32_t i;
    for (i = 0; i < schema->count; ++i) {
        if (!field_fits(fb, table, &schema->fields[i], limits)) {
            return 0;
        }
    }
    return 1;
}

/* The vector of tables in field `index` of `parent` (absent: none), each checked against `schema`. */
static int tables_check(const flatbuffer *fb, const fb_table *parent, uint32_t index, const schema_table *schema,
                        const schema_limits *limits, fb_vector *tables)
{
    fb_table table;
    uint32_t i, position;
    tables->start = 0;
    tables->count = 0;
    if (!position_of(fb, parent, index, &position) || (position != 0u && !vector_at(fb, position, 4u, tables))) {
        return 0;
    }
    for (i = 0; i < tables->count; ++i) {
        if (!table_from(fb, tables->start + 4u * i, &table) || !table_checks(fb, &table, schema, limits)) {
            return 0;
        }
    }
    return 1;
}

/* The tensor whose uoffset is at `position`, with its quantization. */
MCUBERT_NOINLINE static int tensor_fits(const flatbuffer *fb, uint32_t position, const schema_limits *limits)
{
    static const schema_table tensor = SCHEMA_TABLE(tensor_fields), quantization = SCHEMA_TABLE(quantization_fields);
    fb_table table;
    uint32_t at;
    if (!table_from(fb, position, &table) || !table_checks(fb, &table, &tensor, limits) ||
        !position_of(fb, &table, TENSOR_QUANTIZATION, &at)) {
        return 0;
    }
    return at == 0u || (table_from(fb, at, &table) && table_checks(fb, &table, &quantization, limits));
}

/* The subgraph whose uoffset is at `position`: its tensors, then what indexes them. */
MCUBERT_NOINLINE static int subgraph_fits(const flatbuffer *fb, uint32_t position, schema_limits limits)
{
    static const schema_table fields = SCHEMA_TABLE(subgraph_fields), operators = SCHEMA_TABLE(operator_fields);
    fb_table subgraph;
    fb_vector tensors = {0, 0}, vector;
    uint32_t i, at;
    if (!table_from(fb, position, &subgraph) || !position_of(fb, &subgraph, SUBGRAPH_TENSORS, &at) ||
        (at != 0u && !vector_at(fb, at, 4u, &tensors))) {
        return 0;
    }
    for (i = 0; i < tensors.count; ++i) {
        if (!tensor_fits(fb, tensors.start + 4u * i, &limits)) {
            return 0;
        }
    }
    limits.tensors = tensors.count;
    return table_checks(fb, &subgraph, &fields, &limits) &&
           tables_check(fb, &subgraph, SUBGRAPH_OPERATORS, &operators, &limits, &vector);
}

MCUBERT_NOINLINE static int signatures_fit(const flatbuffer *fb, const fb_table *model, const schema_limits *limits)
{
    static const schema_table signature = SCHEMA_TABLE(signature_fields), map = SCHEMA_TABLE(tensor_map_fields);
    fb_table table;
    fb_vector signatures, maps;
    uint32_t i;
    if (!tables_check(fb, model, MODEL_SIGNATURE_DEFS, &signature, limits, &signatures)) {
        return 0;
    }
    for (i = 0; i < signatures.count; ++i) {
        if (!table_from(fb, signatures.start + 4u * i, &table) ||
            !tables_check(fb, &table, SIGNATURE_INPUTS, &map, limits, &maps) ||
            !tables_check(fb, &table, SIGNATURE_OUTPUTS, &map, limits, &maps)) {
            return 0;
        }
    }
    return 1;
}

/* "OfflineMemoryAllocation: N offsets in W words for T tensors" (the Python reader's words): TFLM
 * reads 3 + T words of the plan, so they must be its buffer's, one offset per tensor of subgraph 0. */
static mcubert_status plan_fits(const flatbuffer *fb, const fb_vector *data, uint32_t tensors, mcubert_message *message)
{
    uint32_t words = data->count / 4u, count = 0;
    if (data->count % 4u != 0u || words < OFFLINE_PLAN_HEADER_WORDS) {
        mcubert_fail(message, MCUBERT_ERROR_MODEL, OP_NAME, OFFLINE_PLAN_NAME);
        mcubert_append_int(message, data->count);
        mcubert_append(message, " bytes is not a [version, subgraphs, n, ...] int32 list");
        return MCUBERT_ERROR_MODEL;
    }
    (void)read_u32(fb, data->start + 8u, &count);
    if (count != tensors || words - OFFLINE_PLAN_HEADER_WORDS != tensors) {
        mcubert_fail(message, MCUBERT_ERROR_MODEL, OP_NAME, OFFLINE_PLAN_NAME);
        mcubert_append_int(message, (int32_t)count);
        mcubert_append(message, " offsets in ");
        mcubert_append_int(message, words - OFFLINE_PLAN_HEADER_WORDS);
        mcubert_append(message, " words for ");
        mcubert_append_int(message, tensors);
        mcubert_append(message, " tensors");
        return MCUBERT_ERROR_MODEL;
    }
    return MCUBERT_OK;
}

/* Each offline plan (found by name; the metadata, buffers and subgraphs were checked) against the
 * tensors of subgraph 0. */
MCUBERT_NOINLINE static mcubert_status plans_fit(const flatbuffer *fb, uint32_t root, mcubert_message *message)
{
    fb_vector metadata, buffers, subgraphs, tensors = {0, 0}, name = {0, 0}, data = {0, 0};
    uint32_t i, table = 0, buffer = 0, subgraph = 0;
    mcubert_status status;
    (void)vector_field(fb, root, MODEL_METADATA, 4u, &metadata);
    (void)vector_field(fb, root, MODEL_BUFFERS, 4u, &buffers);
    (void)vector_field(fb, root, MODEL_SUBGRAPHS, 4u, &subgraphs);
    (void)(table_at(fb, &subgraphs, 0, &subgraph) && vector_field(fb, subgraph, SUBGRAPH_TENSORS, 4u, &tensors));
    for (i = 0; i < metadata.count; ++i) {
        (void)(table_at(fb, &metadata, i, &table) && vector_field(fb, table, METADATA_NAME, 1u, &name) &&
               u32_field(fb, table, METADATA_BUFFER, &buffer));
        if (!name_matches(fb, &name, OFFLINE_PLAN_NAME, 1)) {
            continue;
        }
        (void)(table_at(fb, &buffers, buffer, &table) && vector_field(fb, table, BUFFER_DATA, 1u, &data));
        status = plan_fits(fb, &data, tensors.count, message);
        if (status != MCUBERT_OK) {
            return status;
        }
    }
    return MCUBERT_OK;
}

/* Every table, vector, string, index and out-of-file range TFLM follows is inside the model. */
MCUBERT_NOINLINE static mcubert_status structure_fits(const flatbuffer *fb, uint32_t root, mcubert_message *message)
{
    static const schema_table fields = SCHEMA_TABLE(model_fields), codes = SCHEMA_TABLE(code_fields);
    static const schema_table buffers = SCHEMA_TABLE(buffer_fields), metadata = SCHEMA_TABLE(metadata_fields);
    schema_limits limits = {0, 0, 0};
    fb_table model;
    fb_vector vector, subgraphs;
    uint32_t i;
    /* root_table read the subgraph and buffer vectors; the operator codes' is read here */
    if (!open_table(fb, root, &model) || !vector_field(fb, root, MODEL_BUFFERS, 4u, &vector) ||
        !vector_field(fb, root, MODEL_OPERATOR_CODES, 4u, &subgraphs)) {
        return malformed(message, "root");
    }
    limits.buffers = vector.count;
    limits.codes = subgraphs.count;
    if (!table_checks(fb, &model, &fields, &limits)) {
        return malformed(message, "root");
    }
    if (!tables_check(fb, &model, MODEL_OPERATOR_CODES, &codes, &limits, &vector)) {
        return malformed(message, "operator_codes");
    }
    if (!tables_check(fb, &model, MODEL_BUFFERS, &buffers, &limits, &vector)) {
        return malformed(message, "buffers");
    }
    if (!tables_check(fb, &model, MODEL_METADATA, &metadata, &limits, &vector)) {
        return malformed(message, "metadata");
    }
    if (!signatures_fit(fb, &model, &limits)) {
        return malformed(message, "signature_defs");
    }
    (void)vector_field(fb, root, MODEL_SUBGRAPHS, 4u, &subgraphs);
    for (i = 0; i < subgraphs.count; ++i) {
        if (!subgraph_fits(fb, subgraphs.start + 4u * i, limits)) {
            return malformed(message, "subgraphs");
        }
    }
    return plans_fit(fb, root, message);
}

/* The record found, its header and the file's CRC checked (the record's frame is gone before the
 * structure walk, which keeps the deepest path short). */
MCUBERT_NOINLINE static mcubert_status check_record(const flatbuffer *fb, uint32_t root,
                                                    mcubert_model_integrity *result, mcubert_message *message)
{
    record_location at;
    mcubert_status status = locate_record(fb, root, &at, message);
    if (status != MCUBERT_OK) {
        return status;
    }
    if (!at.found) {
        return no_record(fb, root, message);
    }
    status = check_header(fb, &at, operator_count(fb, root), message);
    if (status != MCUBERT_OK) {
        return status;
    }
    if (file_crc(fb, &at) != record_word(fb, &at, 3)) {
        return name_damage(fb, root, &at, result, message);
    }
    return MCUBERT_OK;
}

mcubert_status mcubert_verify_model(const uint8_t *model, uint32_t size, mcubert_model_integrity *result,
                                    mcubert_message *message)
{
    flatbuffer fb;
    uint32_t root;
    mcubert_status status;
    if (message != NULL) {
        message->text[0] = '\0';
    }
    if (model == NULL || result == NULL) {
        return mcubert_fail_text(message, MCUBERT_ERROR_ARGUMENT, OP_NAME, "arguments", "NULL pointer");
    }
    result->verified = 0;
    result->corrupt_buffer = result->corrupt_tensor = result->corrupt_operator = -1;
    fb.bytes = model;
    fb.size = size;
    if (size < 8u || model[4] != 'T' || model[5] != 'F' || model[6] != 'L' || model[7] != '3') {
        return mcubert_fail_text(message, MCUBERT_ERROR_MODEL, OP_NAME, "identifier",
                                 "not a .tflite flatbuffer (expected TFL3)");
    }
    if (!root_table(&fb, &root)) {
        return malformed(message, "root");
    }
    status = check_record(&fb, root, result, message);
    if (status != MCUBERT_OK) {
        return status;
    }
    /* The record vouches for the bytes that are here; the offsets must not point past them. */
    status = structure_fits(&fb, root, message);
    if (status != MCUBERT_OK) {
        return status;
    }
    result->verified = 1;
    return MCUBERT_OK;
}

/* Word 3 of the record of a model mcubert_verify_model has verified (found again: no CRC pass). */
static uint32_t verified_file_crc(const uint8_t *model, uint32_t size)
{
    flatbuffer fb;
    record_location at;
    uint32_t root = 0;
    fb.bytes = model;
    fb.size = size;
    (void)root_table(&fb, &root);
    (void)locate_record(&fb, root, &at, NULL);
    return record_word(&fb, &at, 3);
}

/* "model: size: the model is N bytes, the firmware was built for M: ..." (or its CRC-32) */
static mcubert_status not_expected(mcubert_model_integrity *result, mcubert_message *message, int is_crc,
                                   uint32_t found, uint32_t expected)
{
    result->verified = 0;
    mcubert_fail(message, MCUBERT_ERROR_MODEL, OP_NAME, is_crc ? "crc32" : "size");
    if (is_crc) {
        mcubert_append(message, "the model's CRC-32 is ");
        mcubert_append_hex(message, found);
        mcubert_append(message, ", the firmware was built for ");
        mcubert_append_hex(message, expected);
    } else {
        mcubert_append(message, "the model is ");
        mcubert_append_int(message, found);
        mcubert_append(message, " bytes, the firmware was built for ");
        mcubert_append_int(message, expected);
    }
    mcubert_append(message, ": another model, or corrupted");
    return MCUBERT_ERROR_MODEL;
}

mcubert_status mcubert_verify_model_expected(const uint8_t *model, uint32_t size, uint32_t expected_size,
                                             uint32_t expected_crc32, mcubert_model_integrity *result,
                                             mcubert_message *message)
{
    uint32_t crc;
    mcubert_status status = mcubert_verify_model(model, size, result, message);
    if (status != MCUBERT_OK && status != MCUBERT_UNVERIFIED) {
        return status;
    }
    if (size != expected_size) {
        return not_expected(result, message, 0, size, expected_size);
    }
    /* Verified: word 3 equals the file's CRC (record zeroed). Unverified: the whole file's. */
    crc = status == MCUBERT_OK ? verified_file_crc(model, size) : crc32_of(model, size);
    if (crc != expected_crc32) {
        return not_expected(result, message, 1, crc, expected_crc32);
    }
    if (message != NULL) {
        message->text[0] = '\0';
    }
    result->verified = 1;
    return MCUBERT_OK;
}
