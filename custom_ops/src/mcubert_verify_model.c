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
 * ones offsets point to; mcubert_verify_structure.c then checks the model is all there.
 *
 * The record cannot be switched off by the corruption it is there to catch: a model that uses MCUBERT
 * ops must have it (a record hidden by a corrupted name or offset is an error, not "unverified"), and
 * mcubert_verify_model_expected checks the file against the size and CRC the firmware was built with.
 */
#include <stddef.h>
#include <stdint.h>

#include "mcubert_flatbuffer.h"

#define OP_NAME MCUBERT_FB_OP_NAME
#define RECORD_NAME "MCUBERT_INTEGRITY"
#define MCUBERT_OP_PREFIX "MCUBERT_" /* a model with an operator code of this prefix must carry the record */
#define RECORD_MAGIC 0x4E49434Du
#define RECORD_VERSION 1u
#define HEADER_WORDS 5u

static uint32_t crc32_of(const uint8_t *data, uint32_t length)
{
    return ~mcubert_crc32_update(0xFFFFFFFFu, data, length);
}

/* ---- the record ------------------------------------------------------------------------------ */

typedef struct {
    fb_vector buffers; /* of Buffer tables */
    uint32_t record_buffer;
    int found;        /* a metadata entry has the record's name */
    fb_vector record; /* its data bytes */
} record_location;

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
    status = mcubert_verify_structure(&fb, root, message);
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
