/*
 * Per op of fuzz_op_run.c (included there, after its helpers): derive validated options and
 * constant tensors from the fuzzer's bytes, validate them with exact tensor views, then run the
 * kernel on hostile run-time inputs. Dimensions are kept small (s <= 16, d <= 64) so that one
 * input runs in well under a millisecond under ASan.
 */

typedef struct {
    int32_t version;
    uint32_t hash;
} version_entry;

#define VERSION_ENTRY(version, hash) {version, hash},
static const version_entry embedding_versions[] = {MCUBERT_EMBEDDING_SPEC_VERSIONS(VERSION_ENTRY)};
static const version_entry attention_versions[] = {MCUBERT_ATTENTION_SPEC_VERSIONS(VERSION_ENTRY)};
static const version_entry mlp_versions[] = {MCUBERT_MLP_SPEC_VERSIONS(VERSION_ENTRY)};
static const version_entry head_versions[] = {MCUBERT_CLASSIFIER_HEAD_SPEC_VERSIONS(VERSION_ENTRY)};
#define COUNT_OF(array) ((int32_t)(sizeof(array) / sizeof((array)[0])))

/* A spec version the op reads that allows `bits`: int4 takes version `since` (one width for the op),
 * any other a random version; the weight_bits field is 0 (version before `since`), 8 or 4. */
static void pick_version(reader *r, const version_entry *versions, int32_t count, int32_t bits, int32_t since,
                         int32_t *version, uint32_t *hash, int32_t *weight_bits)
{
    int32_t i = 0;
    if (bits != 4) {
        i = (int32_t)(take(r, 1) % (uint32_t)count);
    }
    while (bits == 4 && i < count - 1 && versions[i].version != since) {
        ++i;
    }
    *version = versions[i].version;
    *hash = versions[i].hash;
    *weight_bits = bits == 4 ? 4 : (versions[i].version < since && (take(r, 1) & 1u)) ? 0 : 8;
}

static int32_t weight_elements(int32_t out, int32_t in, int32_t bits)
{
    return bits == 4 ? out * (((in + 7) >> 3) * 4) : ((out + 1) / 2) * ((in + 3) / 4) * 8;
}

/* Version 8's int4_layers (SPEC 3.1.2): a random mask over `layers` linear layers from version `since`. */
static int32_t pick_int4_layers(reader *r, int32_t version, int32_t since, int32_t layers)
{
    return version >= since ? (int32_t)(take(r, 1) % (1u << layers)) : 0;
}

/* The width of linear layer `index` as the kernels read it (mcubert_layer_width). */
static int32_t layer_bits(int32_t int4_layers, int32_t index, int32_t weight_bits)
{
    return ((int4_layers >> index) & 1) != 0 || weight_bits == 4 ? 4 : 8;
}

static int64_t eps_of(reader *r)
{
    return (int64_t)take(r, 4) << (take(r, 1) % 19u); /* < 2^51, clamped below */
}

static int64_t clamp_eps(int64_t eps)
{
    return eps > ((int64_t)1 << 50) ? (int64_t)1 << 50 : eps;
}

static void must_validate(mcubert_status st, const mcubert_message *message)
{
    if (st != MCUBERT_OK) {
        fail("validate refused options and tensors derived to be valid (harness or validate bug)", message);
    }
}

/* ---- MCUBERT_EMBEDDING ---------------------------------------------------------------------- */

typedef struct {
    mcubert_embedding_params p;
    mcubert_embedding_weights w;
    const int32_t *ids, *types;
} embedding_op;

static mcubert_status call_embedding(const void *op, const mcubert_context *context, int8_t *out, mcubert_message *m)
{
    const embedding_op *e = (const embedding_op *)op;
    return mcubert_embedding_s8(&e->p, &e->w, e->ids, e->types, out, context, m);
}

/* Cluster ends strictly increasing to vocab_size, rank_0 = d, others in [1, d]; the word tables'
 * sizes (SPEC 4.1.1) and their contents (int4 rows: odd-rank padding nibble zero). */
static void embedding_clusters(arena *a, reader *r, embedding_op *e, mcubert_tensor_view *t)
{
    const mcubert_embedding_params *p = &e->p;
    const int32_t c = p->cluster_count, d = p->hidden, bits = p->word_bits == 4 ? 4 : 8;
    int32_t *clusters = (int32_t *)block(a, sizeof(int32_t) * 2u * (size_t)c);
    int64_t rows = 0, projections = 0, row_at = 0, projection_at = 0;
    int32_t i, start = 0, row;
    int8_t *row_bytes, *projection_bytes;
    for (i = 0; i < c; ++i) {
        const int32_t room = p->vocab_size - (c - 1 - i) - start; /* ids left for this cluster */
        clusters[2 * i] = i == c - 1 ? p->vocab_size : start + 1 + (int32_t)(take(r, 2) % (uint32_t)room);
        clusters[2 * i + 1] = i == 0 ? d : in_range(r, 1, d);
        rows += (int64_t)(clusters[2 * i] - start) *
                (bits == 8 ? clusters[2 * i + 1] : (clusters[2 * i + 1] + 1) / 2 + (i == 0 ? 2 : 0));
        projections += i == 0 ? 0 : (int64_t)((d + 1) / 2) * ((clusters[2 * i + 1] + 3) / 4) * 8;
        start = clusters[2 * i];
    }
    row_bytes = bytes_of(a, r, (int32_t)rows);
    projection_bytes = (int8_t *)block(a, (size_t)projections);
    for (i = 0, start = 0; i < c; start = clusters[2 * i], ++i) {
        const int32_t rank = clusters[2 * i + 1];
        const int32_t stride = bits == 8 ? rank : (rank + 1) / 2 + (i == 0 ? 2 : 0);
        for (row = 0; bits == 4 && (rank & 1) && row < clusters[2 * i] - start; ++row) {
            row_bytes[row_at + (int64_t)(row + 1) * stride - 1] &= 0x0F;
        }
        row_at += (int64_t)(clusters[2 * i] - start) * stride;
        if (i > 0) {
            fill_pair4(r, projection_bytes + projection_at, d, rank);
            projection_at += (int64_t)((d + 1) / 2) * ((rank + 3) / 4) * 8;
        }
    }
    e->w.clusters = clusters;
    e->w.word_rows = row_bytes;
    e->w.word_projections = projection_bytes;
    t[MCUBERT_EMBEDDING_CLUSTERS] = (mcubert_tensor_view){clusters, MCUBERT_DTYPE_INT32, 2 * c};
    t[MCUBERT_EMBEDDING_WORD_ROWS] = (mcubert_tensor_view){row_bytes, MCUBERT_DTYPE_INT8, (int32_t)rows};
    t[MCUBERT_EMBEDDING_WORD_PROJECTIONS] =
        (mcubert_tensor_view){projection_bytes, MCUBERT_DTYPE_INT8, (int32_t)projections};
}

static void embedding_tables(arena *a, reader *r, embedding_op *e, mcubert_tensor_view *t)
{
    const int32_t s = e->p.seq_len, d = e->p.hidden, c = e->p.cluster_count, types = e->p.type_vocab_size;
    e->w.word_requant = requant_table(a, r, c * d);
    e->w.position_table = bytes_of(a, r, s * d);
    e->w.position_requant = requant_table(a, r, d);
    e->w.token_type_table = bytes_of(a, r, types * d);
    e->w.token_type_requant = requant_table(a, r, d);
    e->w.layer_norm = layer_norm_table(a, r, d);
    t[MCUBERT_EMBEDDING_WORD_REQUANT] = (mcubert_tensor_view){e->w.word_requant, MCUBERT_DTYPE_INT32, 2 * c * d};
    t[MCUBERT_EMBEDDING_POSITION_TABLE] = (mcubert_tensor_view){e->w.position_table, MCUBERT_DTYPE_INT8, s * d};
    t[MCUBERT_EMBEDDING_POSITION_REQUANT] = (mcubert_tensor_view){e->w.position_requant, MCUBERT_DTYPE_INT32, 2 * d};
    t[MCUBERT_EMBEDDING_TOKEN_TYPE_TABLE] = (mcubert_tensor_view){e->w.token_type_table, MCUBERT_DTYPE_INT8, types * d};
    t[MCUBERT_EMBEDDING_TOKEN_TYPE_REQUANT] =
        (mcubert_tensor_view){e->w.token_type_requant, MCUBERT_DTYPE_INT32, 2 * d};
    t[MCUBERT_EMBEDDING_LAYER_NORM] = (mcubert_tensor_view){e->w.layer_norm, MCUBERT_DTYPE_INT32, 2 * d};
}

static void fuzz_embedding(arena *a, reader *r, int32_t bits)
{
    embedding_op e;
    mcubert_tensor_view t[MCUBERT_EMBEDDING_NUM_TENSORS];
    mcubert_message m;
    int32_t *ids, *types, i, s, d;
    int bad = 0;
    memset(&e, 0, sizeof e);
    pick_version(r, embedding_versions, COUNT_OF(embedding_versions), bits, MCUBERT_SPEC_VERSION_INT4,
                 &e.p.spec_version, &e.p.spec_hash, &e.p.word_bits);
    e.p.seq_len = s = in_range(r, 1, 16);
    e.p.hidden = d = in_range(r, 1, 48);
    e.p.vocab_size = in_range(r, 1, 400);
    e.p.cluster_count = in_range(r, 1, e.p.vocab_size < 8 ? e.p.vocab_size : 8);
    e.p.type_vocab_size = in_range(r, 1, 4);
    e.p.ln_eps = clamp_eps(eps_of(r));
    embedding_clusters(a, r, &e, t);
    embedding_tables(a, r, &e, t);
    e.ids = ids = (int32_t *)block(a, sizeof(int32_t) * (size_t)s);
    e.types = types = (int32_t *)block(a, sizeof(int32_t) * (size_t)s);
    for (i = 0; i < s; ++i) {
        ids[i] = run_time_id(r, e.p.vocab_size, &bad);
        types[i] = run_time_id(r, e.p.type_vocab_size, &bad);
    }
    t[MCUBERT_EMBEDDING_INPUT_IDS] = (mcubert_tensor_view){NULL, MCUBERT_DTYPE_INT32, s};
    t[MCUBERT_EMBEDDING_TOKEN_TYPE_IDS] = (mcubert_tensor_view){NULL, MCUBERT_DTYPE_INT32, s};
    t[MCUBERT_EMBEDDING_OUTPUT] = (mcubert_tensor_view){NULL, MCUBERT_DTYPE_INT8, s * d};
    m.text[0] = '\0';
    must_validate(mcubert_embedding_validate(&e.p, t, MCUBERT_EMBEDDING_NUM_TENSORS, &m), &m);
    run_twice(call_embedding, &e, mcubert_embedding_get_buffer_size(s, d), bytes_of(a, r, s * d), s * d, bad);
}

/* ---- MCUBERT_ATTENTION ---------------------------------------------------------------------- */

typedef struct {
    mcubert_attention_params p;
    mcubert_attention_weights w;
    const void *mask;
} attention_op;

static mcubert_status call_attention(const void *op, const mcubert_context *context, int8_t *out, mcubert_message *m)
{
    const attention_op *e = (const attention_op *)op;
    return mcubert_attention_s8(&e->p, &e->w, out, e->mask, context, m);
}

static void attention_tensors(arena *a, reader *r, attention_op *e, mcubert_tensor_view *t)
{
    const int32_t d = e->p.hidden;
    const int8_t **weights[4] = {&e->w.query_weights, &e->w.key_weights, &e->w.value_weights, &e->w.output_weights};
    const int32_t **channels[4] = {&e->w.query_channels, &e->w.key_channels, &e->w.value_channels,
                                   &e->w.output_channels};
    int16_t *lut = (int16_t *)block(a, sizeof(int16_t) * 256u);
    int32_t i;
    for (i = 0; i < 4; ++i) {
        const int32_t bits = layer_bits(e->p.int4_layers, i, e->p.weight_bits);
        *weights[i] = linear_weights(a, r, d, d, bits);
        *channels[i] = channels_table(a, r, d);
        t[MCUBERT_ATTENTION_QUERY_WEIGHTS + 2 * i] =
            (mcubert_tensor_view){*weights[i], MCUBERT_DTYPE_INT8, weight_elements(d, d, bits)};
        t[MCUBERT_ATTENTION_QUERY_CHANNELS + 2 * i] = (mcubert_tensor_view){*channels[i], MCUBERT_DTYPE_INT32, 3 * d};
    }
    for (i = 0; i < 256; ++i) {
        lut[i] = i == 0 ? MCUBERT_EXP_ONE : (int16_t)(take(r, 2) % (MCUBERT_EXP_ONE + 1u));
    }
    e->w.exp_lut = lut;
    e->w.layer_norm = layer_norm_table(a, r, d);
    e->w.residual = residual_table(a, r, d);
    t[MCUBERT_ATTENTION_EXP_LUT] = (mcubert_tensor_view){lut, MCUBERT_DTYPE_INT16, 256};
    t[MCUBERT_ATTENTION_LAYER_NORM] = (mcubert_tensor_view){e->w.layer_norm, MCUBERT_DTYPE_INT32, 2 * d};
    t[MCUBERT_ATTENTION_RESIDUAL] = (mcubert_tensor_view){e->w.residual, MCUBERT_DTYPE_INT32, 2 * d};
}

/* mask_mode 0: any int8 per key; mode 1: a valid length, or (hostile) one outside [0, s]. */
static const void *attention_mask(arena *a, reader *r, int32_t s, int32_t mode, int *bad)
{
    static const int32_t outside[4] = {-1, INT32_MIN, INT32_MAX, 0};
    int32_t *length;
    uint32_t pick;
    if (mode == 0) {
        return bytes_of(a, r, s);
    }
    length = (int32_t *)block(a, sizeof(int32_t));
    pick = take(r, 1);
    if (r->hostile && (pick & 3u) == 0u) {
        *length = (pick >> 2) % 5u == 4u ? s + 1 + (int32_t)take(r, 1) : outside[(pick >> 2) % 4u];
    } else {
        *length = in_range(r, 0, s);
    }
    *bad |= *length < 0 || *length > s;
    return length;
}

static void fuzz_attention(arena *a, reader *r, int32_t bits, int saturated)
{
    attention_op e;
    mcubert_tensor_view t[MCUBERT_ATTENTION_NUM_TENSORS];
    mcubert_message m;
    int32_t s, d, multipliers[2];
    int bad = 0;
    memset(&e, 0, sizeof e);
    pick_version(r, attention_versions, COUNT_OF(attention_versions), bits, MCUBERT_ATTENTION_WEIGHT_BITS_SINCE,
                 &e.p.spec_version, &e.p.spec_hash, &e.p.weight_bits);
    e.p.int4_layers = pick_int4_layers(r, e.p.spec_version, MCUBERT_ATTENTION_INT4_LAYERS_SINCE, 4);
    e.p.seq_len = s = in_range(r, 1, 16);
    e.p.heads = in_range(r, 1, 8);
    e.p.hidden = d = e.p.heads * in_range(r, 1, 64 / e.p.heads);
    e.p.tile = in_range(r, 1, s);
    e.p.mask_mode = (int32_t)(take(r, 1) & 1u);
    multiplier(r, multipliers);
    e.p.score_multiplier = multipliers[0];
    e.p.score_shift = multipliers[1];
    multiplier(r, multipliers);
    e.p.context_multiplier = multipliers[0];
    e.p.context_shift = multipliers[1];
    e.p.ln_eps = clamp_eps(eps_of(r));
    attention_tensors(a, r, &e, t);
    e.mask = attention_mask(a, r, s, e.p.mask_mode, &bad);
    t[MCUBERT_ATTENTION_HIDDEN] = (mcubert_tensor_view){NULL, MCUBERT_DTYPE_INT8, s * d};
    t[MCUBERT_ATTENTION_MASK] =
        (mcubert_tensor_view){NULL, e.p.mask_mode ? MCUBERT_DTYPE_INT32 : MCUBERT_DTYPE_INT8, e.p.mask_mode ? 1 : s};
    t[MCUBERT_ATTENTION_OUTPUT] = (mcubert_tensor_view){NULL, MCUBERT_DTYPE_INT8, s * d};
    m.text[0] = '\0';
    must_validate(mcubert_attention_validate(&e.p, t, MCUBERT_ATTENTION_NUM_TENSORS, &m), &m);
    run_twice(call_attention, &e, mcubert_attention_get_buffer_size(s, d, e.p.heads, e.p.tile),
              activations(a, r, s * d, saturated), s * d, bad);
}

/* ---- MCUBERT_MLP ---------------------------------------------------------------------------- */

typedef struct {
    mcubert_mlp_params p;
    mcubert_mlp_weights w;
} mlp_op;

static mcubert_status call_mlp(const void *op, const mcubert_context *context, int8_t *out, mcubert_message *m)
{
    const mlp_op *e = (const mlp_op *)op;
    return mcubert_mlp_s8(&e->p, &e->w, out, context, m);
}

static void fuzz_mlp(arena *a, reader *r, int32_t bits, int saturated)
{
    mlp_op e;
    mcubert_tensor_view t[MCUBERT_MLP_NUM_TENSORS];
    mcubert_message m;
    int32_t s, d, f, bits1, bits2;
    memset(&e, 0, sizeof e);
    pick_version(r, mlp_versions, COUNT_OF(mlp_versions), bits, MCUBERT_MLP_WEIGHT_BITS_SINCE, &e.p.spec_version,
                 &e.p.spec_hash, &e.p.weight_bits);
    e.p.int4_layers = pick_int4_layers(r, e.p.spec_version, MCUBERT_MLP_INT4_LAYERS_SINCE, 2);
    e.p.seq_len = s = in_range(r, 1, 16);
    e.p.hidden = d = in_range(r, 1, 48);
    e.p.ffn = f = in_range(r, 1, 96);
    e.p.tile = in_range(r, 1, s);
    e.p.fc1_output_zero_point = in_range(r, -128, 127);
    e.p.ln_eps = clamp_eps(eps_of(r));
    bits1 = layer_bits(e.p.int4_layers, 0, e.p.weight_bits);
    bits2 = layer_bits(e.p.int4_layers, 1, e.p.weight_bits);
    e.w.fc1_weights = linear_weights(a, r, f, d, bits1);
    e.w.fc1_channels = channels_table(a, r, f);
    e.w.activation_lut = bytes_of(a, r, 256);
    e.w.fc2_weights = linear_weights(a, r, d, f, bits2);
    e.w.fc2_channels = channels_table(a, r, d);
    e.w.layer_norm = layer_norm_table(a, r, d);
    e.w.residual = residual_table(a, r, d);
    t[MCUBERT_MLP_HIDDEN] = (mcubert_tensor_view){NULL, MCUBERT_DTYPE_INT8, s * d};
    t[MCUBERT_MLP_FC1_WEIGHTS] =
        (mcubert_tensor_view){e.w.fc1_weights, MCUBERT_DTYPE_INT8, weight_elements(f, d, bits1)};
    t[MCUBERT_MLP_FC1_CHANNELS] = (mcubert_tensor_view){e.w.fc1_channels, MCUBERT_DTYPE_INT32, 3 * f};
    t[MCUBERT_MLP_ACTIVATION_LUT] = (mcubert_tensor_view){e.w.activation_lut, MCUBERT_DTYPE_INT8, 256};
    t[MCUBERT_MLP_FC2_WEIGHTS] =
        (mcubert_tensor_view){e.w.fc2_weights, MCUBERT_DTYPE_INT8, weight_elements(d, f, bits2)};
    t[MCUBERT_MLP_FC2_CHANNELS] = (mcubert_tensor_view){e.w.fc2_channels, MCUBERT_DTYPE_INT32, 3 * d};
    t[MCUBERT_MLP_LAYER_NORM] = (mcubert_tensor_view){e.w.layer_norm, MCUBERT_DTYPE_INT32, 2 * d};
    t[MCUBERT_MLP_RESIDUAL] = (mcubert_tensor_view){e.w.residual, MCUBERT_DTYPE_INT32, 2 * d};
    t[MCUBERT_MLP_OUTPUT] = (mcubert_tensor_view){NULL, MCUBERT_DTYPE_INT8, s * d};
    m.text[0] = '\0';
    must_validate(mcubert_mlp_validate(&e.p, t, MCUBERT_MLP_NUM_TENSORS, &m), &m);
    run_twice(call_mlp, &e, mcubert_mlp_get_buffer_size(s, d, f, e.p.tile), activations(a, r, s * d, saturated), s * d,
              0);
}

/* ---- MCUBERT_CLASSIFIER_HEAD (int8 weights only) -------------------------------------------- */

typedef struct {
    mcubert_classifier_head_params p;
    mcubert_classifier_head_weights w;
    const int8_t *hidden;
} head_op;

static mcubert_status call_head(const void *op, const mcubert_context *context, int8_t *out, mcubert_message *m)
{
    const head_op *e = (const head_op *)op;
    return mcubert_classifier_head_s8(&e->p, &e->w, e->hidden, out, context, m);
}

static void fuzz_classifier_head(arena *a, reader *r, int saturated)
{
    head_op e;
    mcubert_tensor_view t[MCUBERT_CLASSIFIER_HEAD_NUM_TENSORS];
    mcubert_message m;
    int32_t s, d, n, unused_bits;
    memset(&e, 0, sizeof e);
    pick_version(r, head_versions, COUNT_OF(head_versions), 8, 0, &e.p.spec_version, &e.p.spec_hash, &unused_bits);
    e.p.seq_len = s = in_range(r, 1, 16);
    e.p.hidden = d = in_range(r, 1, 64);
    e.p.labels = n = in_range(r, 1, 16);
    e.p.pooler_zero_point = in_range(r, -128, 127);
    e.p.logits_zero_point = in_range(r, -128, 127);
    e.w.pooler_weights = linear_weights(a, r, d, d, 8);
    e.w.pooler_channels = channels_table(a, r, d);
    e.w.tanh_lut = bytes_of(a, r, 256);
    e.w.classifier_weights = linear_weights(a, r, n, d, 8);
    e.w.classifier_channels = channels_table(a, r, n);
    e.hidden = activations(a, r, s * d, saturated);
    t[MCUBERT_CLASSIFIER_HEAD_HIDDEN] = (mcubert_tensor_view){NULL, MCUBERT_DTYPE_INT8, s * d};
    t[MCUBERT_CLASSIFIER_HEAD_POOLER_WEIGHTS] =
        (mcubert_tensor_view){e.w.pooler_weights, MCUBERT_DTYPE_INT8, weight_elements(d, d, 8)};
    t[MCUBERT_CLASSIFIER_HEAD_POOLER_CHANNELS] = (mcubert_tensor_view){e.w.pooler_channels, MCUBERT_DTYPE_INT32, 3 * d};
    t[MCUBERT_CLASSIFIER_HEAD_TANH_LUT] = (mcubert_tensor_view){e.w.tanh_lut, MCUBERT_DTYPE_INT8, 256};
    t[MCUBERT_CLASSIFIER_HEAD_CLASSIFIER_WEIGHTS] =
        (mcubert_tensor_view){e.w.classifier_weights, MCUBERT_DTYPE_INT8, weight_elements(n, d, 8)};
    t[MCUBERT_CLASSIFIER_HEAD_CLASSIFIER_CHANNELS] =
        (mcubert_tensor_view){e.w.classifier_channels, MCUBERT_DTYPE_INT32, 3 * n};
    t[MCUBERT_CLASSIFIER_HEAD_OUTPUT] = (mcubert_tensor_view){NULL, MCUBERT_DTYPE_INT8, n};
    m.text[0] = '\0';
    must_validate(mcubert_classifier_head_validate(&e.p, t, MCUBERT_CLASSIFIER_HEAD_NUM_TENSORS, &m), &m);
    run_twice(call_head, &e, mcubert_classifier_head_get_buffer_size(s, d, n), bytes_of(a, r, n), n, 0);
}
