/*
 * Custom options (SPEC section 5): a flexbuffer map of integers, decoded into an op's params.
 *
 * The options come from a .tflite the firmware did not write, so nothing in them is trusted: the
 * walk mirrors tflm_mcubert/ops/options.py check for check (offsets compared before they are
 * subtracted, counts compared against bytes left / bytes per element), so both reject the same
 * buffers. Only the container and the key set are checked here; value ranges and cross-field
 * rules are *_validate's, as for params filled in by hand. Keeping this in C (rather than using
 * flexbuffers.h in the TFLM binding) lets every firmware, TFLM or not, read exported options.
 */
#include <stddef.h>

#include "mcubert_internal.h"

#define TYPE_INT 1
#define TYPE_UINT 2
#define TYPE_MAP 9
#define MAX_OPTIONS_BYTES 4096 /* ours are ~200 bytes; refuse absurd buffers up front */
#define MAX_FIELDS 32          /* the bits of the `seen` mask */

typedef enum { MCUBERT_FIELD_INT32, MCUBERT_FIELD_UINT32, MCUBERT_FIELD_INT64 } field_kind;

typedef struct {
    const char *name;
    size_t offset; /* within the params struct */
    field_kind kind;
    int32_t since; /* the spec version that added the field: unknown to earlier versions */
} option_field;

typedef struct {
    const uint8_t *data;
    uint32_t size;
    const char *op;
    mcubert_message *message;
} options_reader;

/* No C library here (the kernels link only libgcc's division; tests/kernels check), hence the
 * hand-written byte loops, each shaped so the compiler does not turn it back into a libc call. */

/* <0, 0, >0 as memcmp. */
static int compare_bytes(const uint8_t *a, const uint8_t *b, uint32_t n)
{
    uint32_t i;
    for (i = 0; i < n; ++i) {
        if (a[i] != b[i]) {
            return a[i] < b[i] ? -1 : 1;
        }
    }
    return 0;
}

static mcubert_status malformed(const options_reader *r, const char *problem)
{
    return mcubert_fail_text(r->message, MCUBERT_ERROR_OPTION, r->op, "options", problem);
}

static int valid_width(uint32_t width)
{
    return width == 1 || width == 2 || width == 4 || width == 8;
}

/* Little-endian unsigned read of `width` bytes at `pos`; 0 when out of bounds (callers check first). */
static int read_uint(const options_reader *r, uint32_t pos, uint32_t width, uint64_t *value)
{
    uint64_t v = 0;
    uint32_t i;
    if (!valid_width(width) || pos > r->size || width > r->size - pos) {
        return 0;
    }
    for (i = 0; i < width; ++i) {
        v |= (uint64_t)r->data[pos + i] << (8 * i);
    }
    *value = v;
    return 1;
}

static int64_t sign_extend(uint64_t value, uint32_t width)
{
    if (width < 8 && (value >> (8 * width - 1)) != 0) {
        return (int64_t)(value | (~(uint64_t)0 << (8 * width)));
    }
    return (int64_t)value;
}

/* pos - offset, refusing offsets that point before the buffer (or nowhere). */
static int back(uint32_t pos, uint64_t offset, uint32_t *target)
{
    if (offset == 0 || offset > pos) {
        return 0;
    }
    *target = pos - (uint32_t)offset;
    return 1;
}

/* Key i of the keys vector: its start and length, checked printable ASCII and NUL-terminated. */
static mcubert_status read_key(const options_reader *r, uint32_t keys, uint32_t key_width, uint32_t i, uint32_t *key_at,
                               uint32_t *key_len)
{
    uint32_t slot = keys + i * key_width, at, end;
    uint64_t offset;
    if (!read_uint(r, slot, key_width, &offset) || !back(slot, offset, &at)) {
        return malformed(r, "key offset points outside the buffer");
    }
    for (end = at; end < r->size && r->data[end] != '\0'; ++end) {
        if (r->data[end] < 0x21 || r->data[end] > 0x7E) {
            return malformed(r, "a key is not a printable ASCII name");
        }
    }
    if (end >= r->size) {
        return malformed(r, "a key is not NUL-terminated");
    }
    if (end == at) {
        return malformed(r, "a key is empty");
    }
    *key_at = at;
    *key_len = end - at;
    return MCUBERT_OK;
}

static int key_is(const options_reader *r, uint32_t at, uint32_t len, const char *name)
{
    uint32_t i;
    for (i = 0; i < len && name[i] != '\0'; ++i) {
        if ((char)r->data[at + i] != name[i]) {
            return 0;
        }
    }
    return i == len && name[i] == '\0';
}

/* Strict byte order (flexbuffers' binary-search order): rules out duplicates and disorder. */
static int key_after(const options_reader *r, uint32_t at, uint32_t len, uint32_t prev_at, uint32_t prev_len)
{
    uint32_t n = len < prev_len ? len : prev_len;
    int c = compare_bytes(r->data + at, r->data + prev_at, n);
    return c > 0 || (c == 0 && len > prev_len);
}

static mcubert_status store(const options_reader *r, const option_field *field, int is_signed, uint64_t raw,
                            uint32_t width, void *params)
{
    int64_t value = is_signed ? sign_extend(raw, width) : (int64_t)raw;
    int64_t lo = field->kind == MCUBERT_FIELD_UINT32 ? 0 : field->kind == MCUBERT_FIELD_INT32 ? INT32_MIN : INT64_MIN;
    int64_t hi = field->kind == MCUBERT_FIELD_UINT32  ? (int64_t)UINT32_MAX
                 : field->kind == MCUBERT_FIELD_INT32 ? INT32_MAX
                                                      : INT64_MAX;
    uint8_t *dst = (uint8_t *)params + field->offset;
    if (!is_signed && raw > (uint64_t)INT64_MAX) {
        return mcubert_fail_text(r->message, MCUBERT_ERROR_OPTION, r->op, field->name, "value too large");
    }
    if (value < lo || value > hi) {
        /* The reference reports the field's contract range; validate() does for in-type values. */
        mcubert_status st = mcubert_fail(r->message, MCUBERT_ERROR_OPTION, r->op, field->name);
        mcubert_append_int(r->message, value);
        mcubert_append(r->message, " does not fit the field");
        return st;
    }
    /* dst is the field itself (offsetof), so it has the field's type and alignment. */
    if (field->kind == MCUBERT_FIELD_INT64) {
        *(int64_t *)(void *)dst = value;
    } else if (field->kind == MCUBERT_FIELD_UINT32) {
        *(uint32_t *)(void *)dst = (uint32_t)value;
    } else {
        *(int32_t *)(void *)dst = (int32_t)value;
    }
    return MCUBERT_OK;
}

/* The root map's header: where its values start, its width and entry count, and its keys vector. */
typedef struct {
    uint32_t values, width, count, keys, key_width;
} map_header;

static mcubert_status read_map_header(const options_reader *r, map_header *map)
{
    const uint32_t n = r->size;
    uint32_t root_width, packed, root_pos, keys_field;
    uint64_t v;
    if (n < 3) {
        return malformed(r, "truncated");
    }
    if (n > MAX_OPTIONS_BYTES) {
        return malformed(r, "larger than any valid options buffer");
    }
    root_width = r->data[n - 1];
    if (!valid_width(root_width)) {
        return malformed(r, "invalid root byte width");
    }
    if (n < 2 + root_width) {
        return malformed(r, "truncated root");
    }
    packed = r->data[n - 2];
    if (packed >> 2 != TYPE_MAP) {
        return malformed(r, "root is not a map");
    }
    map->width = 1u << (packed & 3);
    root_pos = n - 2 - root_width;
    if (!read_uint(r, root_pos, root_width, &v) || !back(root_pos, v, &map->values)) {
        return malformed(r, "map offset points outside the buffer");
    }
    if (map->values < 3 * map->width) {
        return malformed(r, "map header lies before the start of the buffer");
    }
    if (!read_uint(r, map->values - map->width, map->width, &v) ||
        v > (n - map->values) / (map->width + 1)) { /* values (width each) + one type byte each */
        return malformed(r, "map entries overrun the buffer");
    }
    map->count = (uint32_t)v;
    keys_field = map->values - 3 * map->width;
    if (!read_uint(r, keys_field, map->width, &v) || !back(keys_field, v, &map->keys)) {
        return malformed(r, "keys vector offset points outside the buffer");
    }
    if (!read_uint(r, map->values - 2 * map->width, map->width, &v) || !valid_width((uint32_t)v) || v > 8 ||
        map->keys < v) {
        return malformed(r, "invalid keys vector");
    }
    map->key_width = (uint32_t)v;
    if (!read_uint(r, map->keys - map->key_width, map->key_width, &v) || v != map->count) {
        return malformed(r, "keys vector and values disagree on the entry count");
    }
    if (map->count > (n - map->keys) / map->key_width) {
        return malformed(r, "keys vector overruns the buffer");
    }
    return MCUBERT_OK;
}

/* The first unknown key, kept for reporting after the spec check (see parse()). */
typedef struct {
    uint32_t at, len;
    int found;
} unknown_key;

static mcubert_status report_unknown(const options_reader *r, const unknown_key *unknown)
{
    char name[40];
    uint32_t i;
    for (i = 0; i < unknown->len && i < sizeof name - 1 && r->data[unknown->at + i] != '\0'; ++i) {
        name[i] = (char)r->data[unknown->at + i];
    }
    name[i] = '\0';
    return mcubert_fail_text(r->message, MCUBERT_ERROR_OPTION, r->op, name, "unknown option");
}

/* Walks the map, storing known fields. Reports in the reference's order: the container, then
 * spec_version (so a newer model reads "unsupported version", not "unknown option"), spec_hash,
 * unknown keys, missing fields. fields[0] and [1] are spec_version and spec_hash. */
static mcubert_status parse(const char *op, const uint8_t *buffer, int32_t length, const option_field *fields,
                            uint32_t field_count, void *params, mcubert_message *message)
{
    options_reader r;
    map_header map = {0, 0, 0, 0, 0};
    unknown_key unknown = {0, 0, 0};
    uint32_t seen = 0, i, f, prev_at = 0, prev_len = 0;
    int32_t version;
    uint32_t hash;
    mcubert_status st;
    r.data = buffer;
    r.size = length < 0 ? 0 : (uint32_t)length;
    r.op = op;
    r.message = message;
    if (buffer == NULL || length <= 0) {
        return malformed(&r, "missing (the op has no custom options)");
    }
    if ((st = read_map_header(&r, &map)) != MCUBERT_OK) {
        return st;
    }
    for (i = 0; i < map.count; ++i) {
        uint32_t at = 0, len = 0, type_byte, value_width;
        uint64_t raw;
        if ((st = read_key(&r, map.keys, map.key_width, i, &at, &len)) != MCUBERT_OK) {
            return st;
        }
        if (i > 0 && !key_after(&r, at, len, prev_at, prev_len)) {
            return malformed(&r, "keys are not strictly sorted (duplicate or disorder)");
        }
        prev_at = at;
        prev_len = len;
        for (f = 0; f < field_count && !key_is(&r, at, len, fields[f].name); ++f) {
        }
        type_byte = r.data[map.values + map.count * map.width + i];
        value_width = 1u << (type_byte & 3);
        if ((type_byte >> 2 != TYPE_INT && type_byte >> 2 != TYPE_UINT) || value_width > map.width) {
            if (f == field_count) {
                unknown.at = at;
                unknown.len = len;
                return report_unknown(&r, &unknown);
            }
            return mcubert_fail_text(message, MCUBERT_ERROR_OPTION, op, fields[f].name, "expected an inline integer");
        }
        if (f == field_count) {
            if (!unknown.found) {
                unknown.at = at;
                unknown.len = len;
                unknown.found = 1;
            }
            continue;
        }
        if (!read_uint(&r, map.values + i * map.width, map.width, &raw)) {
            return malformed(&r, "value outside the buffer");
        }
        if ((st = store(&r, &fields[f], type_byte >> 2 == TYPE_INT, raw, map.width, params)) != MCUBERT_OK) {
            return st;
        }
        seen |= 1u << f;
    }
    for (f = 0; f < 2; ++f) {
        if ((seen & (1u << f)) == 0) {
            return mcubert_fail_text(message, MCUBERT_ERROR_SPEC, op, fields[f].name, "missing");
        }
    }
    version = *(const int32_t *)(const void *)((const uint8_t *)params + fields[0].offset);
    hash = *(const uint32_t *)(const void *)((const uint8_t *)params + fields[1].offset);
    if ((st = mcubert_check_spec(op, version, hash, message)) != MCUBERT_OK) {
        return st;
    }
    if (unknown.found) {
        return report_unknown(&r, &unknown);
    }
    for (f = 2; f < field_count; ++f) {
        if ((seen & (1u << f)) != 0 && fields[f].since > version) {
            return mcubert_fail_text(message, MCUBERT_ERROR_OPTION, op, fields[f].name, "unknown option");
        }
    }
    for (f = 2; f < field_count; ++f) {
        if ((seen & (1u << f)) == 0 && fields[f].since <= version) {
            return mcubert_fail_text(message, MCUBERT_ERROR_OPTION, op, fields[f].name, "missing");
        }
    }
    return MCUBERT_OK;
}

/* The option tables, from the generated contract: X(params type, field, kind, version that added it). */
#define OPTION_FIELD(type, name, kind, since) {#name, offsetof(type, name), kind, since},
#define OPTION_TABLE(lower, upper, code)                                                                               \
    static const option_field lower##_fields[] = {MCUBERT_##upper##_OPTION_FIELDS(OPTION_FIELD)};
MCUBERT_OPS(OPTION_TABLE)

#define COUNT(array) ((uint32_t)(sizeof(array) / sizeof((array)[0])))
#define FITS_THE_SEEN_MASK(lower, upper, code)                                                                         \
    typedef char lower##_fields_fit_the_seen_mask[MAX_FIELDS >= COUNT(lower##_fields) ? 1 : -1];
MCUBERT_OPS(FITS_THE_SEEN_MASK)

/* Zeroes params first, so reserved words are 0 and a failed parse leaves nothing half-set. */
#define DEFINE_PARSER(op_lower, op_name, fields)                                                                       \
    mcubert_status mcubert_##op_lower##_parse_options(const uint8_t *buffer, int32_t length,                           \
                                                      mcubert_##op_lower##_params *params, mcubert_message *message)   \
    {                                                                                                                  \
        static const mcubert_##op_lower##_params zero;                                                                 \
        mcubert_status st;                                                                                             \
        if (params == NULL) {                                                                                          \
            return mcubert_fail_text(message, MCUBERT_ERROR_ARGUMENT, op_name, "params", "NULL");                      \
        }                                                                                                              \
        *params = zero;                                                                                                \
        st = parse(op_name, buffer, length, fields, COUNT(fields), params, message);                                   \
        if (st != MCUBERT_OK) {                                                                                        \
            *params = zero;                                                                                            \
        }                                                                                                              \
        return st;                                                                                                     \
    }

#define OP_PARSER(lower, upper, code) DEFINE_PARSER(lower, code, lower##_fields)
MCUBERT_OPS(OP_PARSER)
