/*
 * The structure walk behind mcubert_verify_model's MCUBERT_OK (SPEC.md section 9): a record that
 * agrees vouches for the bytes the verifier was given, not for those an offset points to. So, before
 * OK, every table (vtable and inline fields), vector, string (with its NUL), buffer and operator-code
 * index, tensor index, out-of-file range and the offline plan that TFLM follows must lie inside
 * `size`: a model cut short and re-signed is refused. Iterative over the schema's fixed depth (model,
 * subgraph, tensor, quantization): no recursion, bounded stack.
 */
#include <stddef.h>
#include <stdint.h>

#include "mcubert_flatbuffer.h"

#define OFFLINE_PLAN_NAME "OfflineMemoryAllocation"
#define OFFLINE_PLAN_HEADER_WORDS 3u /* version, subgraphs, offset count */

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
        mcubert_fail(message, MCUBERT_ERROR_MODEL, MCUBERT_FB_OP_NAME, OFFLINE_PLAN_NAME);
        mcubert_append_int(message, data->count);
        mcubert_append(message, " bytes is not a [version, subgraphs, n, ...] int32 list");
        return MCUBERT_ERROR_MODEL;
    }
    (void)read_u32(fb, data->start + 8u, &count);
    if (count != tensors || words - OFFLINE_PLAN_HEADER_WORDS != tensors) {
        mcubert_fail(message, MCUBERT_ERROR_MODEL, MCUBERT_FB_OP_NAME, OFFLINE_PLAN_NAME);
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

mcubert_status mcubert_verify_structure(const flatbuffer *fb, uint32_t root, mcubert_message *message)
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
