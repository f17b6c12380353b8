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
/* Op ids in registry order (= mcubert_op_id), and every per-op switch below, come from MCUBERT_OPS. */
#define OP_ID(lower, upper, code) OP_##upper,
enum { MCUBERT_OPS(OP_ID) OP_COUNT };
#undef OP_ID
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
#define PARAMS_SIZE(lower, upper, code)                                                                                \
    case OP_##upper: return sizeof(mcubert_##lower##_params);
    switch (op) {
        MCUBERT_OPS(PARAMS_SIZE)
    default: break;
    }
#undef PARAMS_SIZE
    return 0;
}

static void handle_call(uint32_t command, uint32_t op)
{
#define PARAMS_MEMBER(lower, upper, code) mcubert_##lower##_params lower;
    union {
        MCUBERT_OPS(PARAMS_MEMBER)
    } params;
#undef PARAMS_MEMBER
    tensor tensors[MAX_TENSORS];
    mcubert_tensor_view views[MAX_TENSORS];
    mcubert_message message;
    mcubert_status status = MCUBERT_OK;
    uint32_t count, i;
    const uint32_t size = read_u32();
    if (op >= OP_COUNT) {
        die("unknown op");
    }
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
#define VALIDATE(lower, upper, code)                                                                                   \
    case OP_##upper: status = mcubert_##lower##_validate(&params.lower, list, (int32_t)count, &message); break;
        switch (op) {
            MCUBERT_OPS(VALIDATE)
        default: die("unknown op");
        }
#undef VALIDATE
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
        void *data[MAX_TENSORS];
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
        for (i = 0; i < MAX_TENSORS; ++i) {
            data[i] = i < count ? tensors[i].data : NULL;
        }
        /* The op's weights struct, its kernel's tensor arguments and its result, from the contract. */
#define RUN(lower, upper, code)                                                                                        \
    case OP_##upper: {                                                                                                 \
        const mcubert_##lower##_weights w = MCUBERT_##upper##_WEIGHT_TENSORS(data);                                    \
        if (count != MCUBERT_##upper##_NUM_TENSORS) {                                                                  \
            die(code ": wrong tensor count");                                                                          \
        }                                                                                                              \
        status = mcubert_##lower##_s8(&params.lower, &w, MCUBERT_##upper##_CALL_TENSORS(data), &context, &message);    \
        output = &tensors[MCUBERT_##upper##_RESULT_TENSOR];                                                            \
        break;                                                                                                         \
    }
        switch (op) {
            MCUBERT_OPS(RUN)
        default: die("unknown op");
        }
#undef RUN
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
#define BUFFER_SIZE(lower, upper, code)                                                                                \
    case OP_##upper: value = mcubert_##lower##_get_buffer_size(MCUBERT_##upper##_BUFFER_SIZE_ARGS(dims)); break;
            switch (op) {
                MCUBERT_OPS(BUFFER_SIZE)
            default: die("unknown op");
            }
#undef BUFFER_SIZE
            respond(0, "", NULL, 0, value);
            break;
        }
        case CMD_INFO: respond(0, "", NULL, 0, mcubert_uses_dsp_path()); break;
        default: die("unknown command");
        }
    }
}
