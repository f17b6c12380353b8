/*
 * Host test driver: runs kernel calls described on stdin and answers on stdout, so pytest can
 * drive a sanitizer-instrumented build (ASan/UBSan live in this process, not in Python).
 *
 * Every tensor gets its own malloc of exactly its size (plus an optional misalignment), so an
 * out-of-bounds access hits an ASan redzone. The scratch buffer is exactly as large as the
 * caller says and is filled with a pattern first, so no kernel can rely on zeroed scratch.
 *
 * Protocol (little-endian; see tests/kernels/host.py):
 *   request:  u32 magic, u32 command, u32 op, then
 *     RUN / RUN_UNCHECKED / VALIDATE:
 *       u32 params_size, params bytes (the op's params struct)
 *       u32 count, count x { i32 dtype, i32 elements, u32 flags, u32 misalign, u32 size, bytes }
 *       RUN*: u32 scratch_fill, i32 scratch_size, u32 scratch_misalign
 *     BUFFER_SIZE: i32 dims[4]
 *     INFO: nothing
 *   response: i32 status, u32 message_size, message, u32 output_size, output, i32 value
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mcubert/mcubert_ops.h"

#define MAGIC 0x5242434du /* "MCBR" */
enum { CMD_QUIT = 0, CMD_RUN = 1, CMD_VALIDATE = 2, CMD_BUFFER_SIZE = 3, CMD_INFO = 4, CMD_RUN_UNCHECKED = 5 };
enum {
    OP_EMBEDDING = 0,
    OP_ATTENTION = 1,
    OP_MLP = 2,
    OP_CLASSIFIER_HEAD = 3,
    OP_LM_HEAD = 4,
    OP_CAUSAL_ATTENTION = 5,
    OP_DECODER_MLP = 6,
    OP_DECODER_EMBEDDING = 7
};
enum { FLAG_DATA = 1, FLAG_NULL_VIEW = 2, FLAG_NULL_DATA = 4 };
#define SCRATCH_NULL 0xFFFFFFFFu /* scratch_misalign value: pass a NULL buffer */
#define MAX_TENSORS 16

typedef struct {
    unsigned char *allocation;
    void *data;
    uint32_t size;
    mcubert_tensor_view view;
} tensor;

static void die(const char *what)
{
    fprintf(stderr, "host_runner: %s\n", what);
    exit(2);
}

static void read_exact(void *dst, size_t size)
{
    if (size != 0 && fread(dst, 1, size, stdin) != size) {
        die("short read");
    }
}

static uint32_t read_u32(void)
{
    uint32_t v;
    read_exact(&v, sizeof v);
    return v;
}

static void write_exact(const void *src, size_t size)
{
    if (size != 0 && fwrite(src, 1, size, stdout) != size) {
        die("short write");
    }
}

static void respond(int32_t status, const char *message, const void *output, uint32_t output_size, int32_t value)
{
    const uint32_t message_size = (uint32_t)strlen(message);
    write_exact(&status, 4);
    write_exact(&message_size, 4);
    write_exact(message, message_size);
    write_exact(&output_size, 4);
    write_exact(output, output_size);
    write_exact(&value, 4);
    fflush(stdout);
}

static size_t params_size(uint32_t op)
{
    switch (op) {
    case OP_EMBEDDING: return sizeof(mcubert_embedding_params);
    case OP_ATTENTION: return sizeof(mcubert_attention_params);
    case OP_MLP: return sizeof(mcubert_mlp_params);
    case OP_CLASSIFIER_HEAD: return sizeof(mcubert_classifier_head_params);
    case OP_LM_HEAD: return sizeof(mcubert_lm_head_params);
    case OP_CAUSAL_ATTENTION: return sizeof(mcubert_causal_attention_params);
    case OP_DECODER_MLP: return sizeof(mcubert_decoder_mlp_params);
    case OP_DECODER_EMBEDDING: return sizeof(mcubert_decoder_embedding_params);
    default: die("unknown op");
    }
    return 0;
}

static void handle_call(uint32_t command, uint32_t op)
{
    union {
        mcubert_embedding_params embedding;
        mcubert_attention_params attention;
        mcubert_mlp_params mlp;
        mcubert_classifier_head_params classifier_head;
        mcubert_lm_head_params lm_head;
        mcubert_causal_attention_params causal_attention;
        mcubert_decoder_mlp_params decoder_mlp;
        mcubert_decoder_embedding_params decoder_embedding;
    } params;
    tensor tensors[MAX_TENSORS];
    mcubert_tensor_view views[MAX_TENSORS];
    mcubert_message message;
    mcubert_status status = MCUBERT_OK;
    uint32_t count, i;
    const uint32_t size = read_u32();
    if (size != params_size(op)) {
        die("params size does not match this build's struct");
    }
    read_exact(&params, size);
    count = read_u32();
    if (count > MAX_TENSORS) {
        die("too many tensors");
    }
    for (i = 0; i < count; ++i) {
        tensor *t = &tensors[i];
        uint32_t flags, misalign;
        read_exact(&t->view.dtype, 4);
        read_exact(&t->view.elements, 4);
        flags = read_u32();
        misalign = read_u32();
        t->size = read_u32();
        t->allocation = malloc((size_t)t->size + misalign + 1u);
        if (t->allocation == NULL) {
            die("out of memory");
        }
        t->data = t->allocation + misalign;
        read_exact(t->data, t->size);
        t->view.data = (flags & FLAG_NULL_VIEW) ? NULL : t->data;
        if (flags & FLAG_NULL_DATA) {
            t->data = NULL; /* the kernel sees a NULL tensor */
        }
        (void)FLAG_DATA;
        views[i] = t->view;
    }
    message.text[0] = '\0';
    if (command == CMD_RUN || command == CMD_VALIDATE) {
        /* No tensors: validate the options only (tensors == NULL). */
        const mcubert_tensor_view *list = count != 0 ? views : NULL;
        switch (op) {
        case OP_EMBEDDING:
            status = mcubert_embedding_validate(&params.embedding, list, (int32_t)count, &message);
            break;
        case OP_ATTENTION:
            status = mcubert_attention_validate(&params.attention, list, (int32_t)count, &message);
            break;
        case OP_CLASSIFIER_HEAD:
            status = mcubert_classifier_head_validate(&params.classifier_head, list, (int32_t)count, &message);
            break;
        case OP_LM_HEAD: status = mcubert_lm_head_validate(&params.lm_head, list, (int32_t)count, &message); break;
        case OP_CAUSAL_ATTENTION:
            status = mcubert_causal_attention_validate(&params.causal_attention, list, (int32_t)count, &message);
            break;
        case OP_DECODER_MLP:
            status = mcubert_decoder_mlp_validate(&params.decoder_mlp, list, (int32_t)count, &message);
            break;
        case OP_DECODER_EMBEDDING:
            status = mcubert_decoder_embedding_validate(&params.decoder_embedding, list, (int32_t)count, &message);
            break;
        default: status = mcubert_mlp_validate(&params.mlp, list, (int32_t)count, &message); break;
        }
    }
    if (command == CMD_VALIDATE || status != MCUBERT_OK) {
        if (command != CMD_VALIDATE) {
            (void)read_u32();
            (void)read_u32();
            (void)read_u32();
        }
        respond(status, message.text, NULL, 0, 0);
    } else {
        const uint32_t fill = read_u32();
        const int32_t scratch_size = (int32_t)read_u32();
        const uint32_t scratch_misalign_raw = read_u32();
        const uint32_t scratch_misalign = scratch_misalign_raw == SCRATCH_NULL ? 0u : scratch_misalign_raw;
        unsigned char *scratch_allocation =
            malloc((size_t)(scratch_size > 0 ? scratch_size : 0) + scratch_misalign + 1u);
        mcubert_context context;
        const tensor *output = NULL;
        if (scratch_allocation == NULL) {
            die("out of memory");
        }
        memset(scratch_allocation, (int)fill, (size_t)(scratch_size > 0 ? scratch_size : 0) + scratch_misalign + 1u);
        context.buf = scratch_misalign_raw == SCRATCH_NULL ? NULL : scratch_allocation + scratch_misalign;
        context.size = scratch_size;
        if (count == 0) {
            die("RUN needs tensors");
        }
#define T(i) (count > (i) ? tensors[i].data : NULL)
        switch (op) {
        case OP_EMBEDDING: {
            const mcubert_embedding_weights w = {(const int32_t *)T(2), (const int8_t *)T(3),  (const int8_t *)T(4),
                                                 (const int32_t *)T(5), (const int8_t *)T(6),  (const int32_t *)T(7),
                                                 (const int8_t *)T(8),  (const int32_t *)T(9), (const int32_t *)T(10)};
            if (count != MCUBERT_EMBEDDING_NUM_TENSORS)
                die("embedding needs 12 tensors");
            status = mcubert_embedding_s8(&params.embedding, &w, (const int32_t *)T(0), (const int32_t *)T(1),
                                          (int8_t *)T(11), &context, &message);
            output = &tensors[MCUBERT_EMBEDDING_OUTPUT];
            break;
        }
        case OP_ATTENTION: {
            const mcubert_attention_weights w = {(const int8_t *)T(2),   (const int32_t *)T(3), (const int8_t *)T(4),
                                                 (const int32_t *)T(5),  (const int8_t *)T(6),  (const int32_t *)T(7),
                                                 (const int8_t *)T(8),   (const int32_t *)T(9), (const int16_t *)T(10),
                                                 (const int32_t *)T(11), (const int32_t *)T(12)};
            status = mcubert_attention_s8(&params.attention, &w, (int8_t *)T(0), T(1), &context, &message);
            output = &tensors[0];
            break;
        }
        case OP_CLASSIFIER_HEAD: {
            const mcubert_classifier_head_weights w = {(const int8_t *)T(1), (const int32_t *)T(2),
                                                       (const int8_t *)T(3), (const int8_t *)T(4),
                                                       (const int32_t *)T(5)};
            if (count != MCUBERT_CLASSIFIER_HEAD_NUM_TENSORS)
                die("classifier head needs 7 tensors");
            status = mcubert_classifier_head_s8(&params.classifier_head, &w, (const int8_t *)T(0), (int8_t *)T(6),
                                                &context, &message);
            output = &tensors[MCUBERT_CLASSIFIER_HEAD_OUTPUT];
            break;
        }
        case OP_LM_HEAD: {
            const mcubert_lm_head_weights w = {(const int32_t *)T(1), (const int32_t *)T(2), (const int32_t *)T(3),
                                               (const int8_t *)T(4),  (const int8_t *)T(5),  (const int32_t *)T(6),
                                               (const int32_t *)T(7)};
            if (count != MCUBERT_LM_HEAD_NUM_TENSORS)
                die("LM head needs 9 tensors");
            status = mcubert_lm_head_s8(&params.lm_head, &w, (const int8_t *)T(0), (int32_t *)T(8), &context, &message);
            output = &tensors[MCUBERT_LM_HEAD_OUTPUT];
            break;
        }
        case OP_CAUSAL_ATTENTION: {
            const mcubert_causal_attention_weights w = {
                (const int32_t *)T(3),  (const int8_t *)T(4),   (const int32_t *)T(5),  (const int8_t *)T(6),
                (const int32_t *)T(7),  (const int8_t *)T(8),   (const int32_t *)T(9),  (const int8_t *)T(10),
                (const int32_t *)T(11), (const int16_t *)T(12), (const int32_t *)T(13), (const int32_t *)T(14)};
            if (count != MCUBERT_CAUSAL_ATTENTION_NUM_TENSORS)
                die("causal attention needs 16 tensors");
            status = mcubert_causal_attention_s8(&params.causal_attention, &w, (int8_t *)T(0), (const int32_t *)T(1),
                                                 (int8_t *)T(2), &context, &message);
            output = &tensors[0];
            break;
        }
        case OP_DECODER_MLP: {
            const mcubert_decoder_mlp_weights w = {(const int32_t *)T(1), (const int8_t *)T(2), (const int32_t *)T(3),
                                                   (const int8_t *)T(4),  (const int8_t *)T(5), (const int32_t *)T(6),
                                                   (const int32_t *)T(7), (const int32_t *)T(8)};
            if (count != MCUBERT_DECODER_MLP_NUM_TENSORS)
                die("decoder MLP needs 10 tensors");
            status = mcubert_decoder_mlp_s8(&params.decoder_mlp, &w, (int8_t *)T(0), &context, &message);
            output = &tensors[0];
            break;
        }
        case OP_DECODER_EMBEDDING: {
            const mcubert_decoder_embedding_weights w = {
                (const int32_t *)T(2), (const int8_t *)T(3),  (const int8_t *)T(4), (const int32_t *)T(5),
                (const int8_t *)T(6),  (const int32_t *)T(7), (const int32_t *)T(8)};
            if (count != MCUBERT_DECODER_EMBEDDING_NUM_TENSORS)
                die("decoder embedding needs 10 tensors");
            status = mcubert_decoder_embedding_s8(&params.decoder_embedding, &w, (const int32_t *)T(0),
                                                  (const int32_t *)T(1), (int8_t *)T(9), &context, &message);
            output = &tensors[MCUBERT_DECODER_EMBEDDING_OUTPUT];
            break;
        }
        default: {
            const mcubert_mlp_weights w = {(const int8_t *)T(1), (const int32_t *)T(2), (const int8_t *)T(3),
                                           (const int8_t *)T(4), (const int32_t *)T(5), (const int32_t *)T(6),
                                           (const int32_t *)T(7)};
            status = mcubert_mlp_s8(&params.mlp, &w, (int8_t *)T(0), &context, &message);
            output = &tensors[0];
            break;
        }
        }
#undef T
        respond(status, message.text,
                output->allocation +
                    (output->data != NULL ? (size_t)((unsigned char *)output->data - output->allocation) : 0u),
                output->size, 0);
        free(scratch_allocation);
    }
    for (i = 0; i < count; ++i) {
        free(tensors[i].allocation);
    }
}

int main(void)
{
    for (;;) {
        uint32_t magic, command, op;
        if (fread(&magic, 1, 4, stdin) != 4) {
            return 0; /* EOF: the test session is over */
        }
        if (magic != MAGIC) {
            die("bad magic");
        }
        command = read_u32();
        op = read_u32();
        switch (command) {
        case CMD_QUIT: return 0;
        case CMD_RUN:
        case CMD_RUN_UNCHECKED:
        case CMD_VALIDATE: handle_call(command, op); break;
        case CMD_BUFFER_SIZE: {
            int32_t dims[4];
            int32_t value;
            read_exact(dims, sizeof dims);
            value = op == OP_EMBEDDING           ? mcubert_embedding_get_buffer_size(dims[0], dims[1])
                    : op == OP_ATTENTION         ? mcubert_attention_get_buffer_size(dims[0], dims[1], dims[2], dims[3])
                    : op == OP_CLASSIFIER_HEAD   ? mcubert_classifier_head_get_buffer_size(dims[0], dims[1], dims[2])
                    : op == OP_LM_HEAD           ? mcubert_lm_head_get_buffer_size(dims[0], dims[1])
                    : op == OP_CAUSAL_ATTENTION  ? mcubert_causal_attention_get_buffer_size(dims[0], dims[1], dims[2])
                    : op == OP_DECODER_MLP       ? mcubert_decoder_mlp_get_buffer_size(dims[0], dims[1])
                    : op == OP_DECODER_EMBEDDING ? mcubert_decoder_embedding_get_buffer_size(dims[0], dims[1])
                                                 : mcubert_mlp_get_buffer_size(dims[0], dims[1], dims[2], dims[3]);
            respond(0, "", NULL, 0, value);
            break;
        }
        case CMD_INFO: respond(0, "", NULL, 0, mcubert_uses_dsp_path()); break;
        default: die("unknown command");
        }
    }
}
