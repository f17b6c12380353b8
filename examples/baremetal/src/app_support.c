#include "app_support.h"

#include <stdint.h>
#include <string.h>

#include "platform.h"

int32_t mcubert_report_refusal(const char *what, mcubert_status status, const mcubert_message *message)
{
    mcubert_platform_write("FAIL: ");
    mcubert_platform_write(what);
    mcubert_platform_write(": ");
    mcubert_platform_write(mcubert_status_name(status));
    mcubert_platform_write(": ");
    mcubert_platform_write(message->text);
    mcubert_platform_write("\n");
    return 2;
}

const char *mcubert_command_line_value(const char *command_line, const char *key, char *out, uint32_t capacity)
{
    const char *at = strstr(command_line, key);
    uint32_t n = 0u;
    if (at != NULL) {
        for (at += strlen(key); at[n] != '\0' && at[n] != ' ' && n + 1u < capacity; ++n) {
            out[n] = at[n];
        }
    }
    out[n] = '\0';
    return out;
}

void mcubert_write_done(uint32_t count, const char *items)
{
    mcubert_platform_write("done: ");
    mcubert_platform_write_uint(count);
    mcubert_platform_write(" ");
    mcubert_platform_write(items);
    mcubert_platform_write("; stack used ");
    mcubert_platform_write_uint(mcubert_stack_used_bytes());
    mcubert_platform_write(" of ");
    mcubert_platform_write_uint(mcubert_stack_size_bytes());
    mcubert_platform_write(" B\n");
}

const char *mcubert_kernel_path_name(void)
{
    static const char *const names[] = {"plain C path", "DSP path", "MVE path"};
    return names[mcubert_uses_dsp_path()];
}

mcubert_status mcubert_app_validate(const mcubert_app_node *nodes, int32_t count, int32_t scratch_bytes,
                                    const char **what, mcubert_message *message)
{
    int32_t i;
    for (i = 0; i < count; ++i) {
        const mcubert_app_node *node = &nodes[i];
        const int32_t *d = node->dims;
        mcubert_status status = MCUBERT_ERROR_ARGUMENT;
        int32_t scratch = 0;
        *what = node->name;
        message->text[0] = '\0';
#define VALIDATE(lower, upper, code)                                                                                   \
    case MCUBERT_APP_OP_##upper:                                                                                       \
        status = mcubert_##lower##_validate((const mcubert_##lower##_params *)node->params, node->tensors,             \
                                            MCUBERT_##upper##_NUM_TENSORS, message);                                   \
        scratch = mcubert_##lower##_get_buffer_size(MCUBERT_##upper##_BUFFER_SIZE_ARGS(d));                            \
        break;
        switch (node->op) {
            MCUBERT_OPS(VALIDATE)
        default: (void)strcpy(message->text, "not an op id of this build's MCUBERT_OPS"); break;
        }
#undef VALIDATE
        if (status == MCUBERT_OK && scratch > scratch_bytes) {
            (void)strcpy(message->text, "get_buffer_size exceeds the generated scratch size");
            status = MCUBERT_ERROR_ARGUMENT;
        }
        if (status != MCUBERT_OK) {
            return status;
        }
    }
    return MCUBERT_OK;
}

/* The node's tensors as its kernel takes them: run-time ones from `values`, constants from its views (the
 * kernels never write a constant; the cast only drops the view's const). */
static void node_tensors(const mcubert_app_node *node, int32_t count, void *const *values, void **tensors)
{
    int32_t k;
    for (k = 0; k < count; ++k) {
        const int32_t value = node->values[k];
        tensors[k] = value < 0 ? (void *)(uintptr_t)node->tensors[k].data : values[value];
    }
}

mcubert_status mcubert_app_run(const mcubert_app_node *nodes, int32_t count, void *const *values,
                               mcubert_context *context, const char **what, mcubert_message *message)
{
    int32_t i;
    for (i = 0; i < count; ++i) {
        const mcubert_app_node *node = &nodes[i];
        void *t[MCUBERT_MAX_OP_TENSORS];
        mcubert_status status = MCUBERT_ERROR_ARGUMENT;
        *what = node->name;
        message->text[0] = '\0';
#define RUN(lower, upper, code)                                                                                        \
    case MCUBERT_APP_OP_##upper: {                                                                                     \
        node_tensors(node, MCUBERT_##upper##_NUM_TENSORS, values, t);                                                  \
        {                                                                                                              \
            const mcubert_##lower##_weights w = MCUBERT_##upper##_WEIGHT_TENSORS(t);                                   \
            status = mcubert_##lower##_s8((const mcubert_##lower##_params *)node->params, &w,                          \
                                          MCUBERT_##upper##_CALL_TENSORS(t), context, message);                        \
        }                                                                                                              \
        break;                                                                                                         \
    }
        switch (node->op) {
            MCUBERT_OPS(RUN)
        default: (void)strcpy(message->text, "not an op id of this build's MCUBERT_OPS"); break;
        }
#undef RUN
        if (status != MCUBERT_OK) {
            return status;
        }
    }
    return MCUBERT_OK;
}
