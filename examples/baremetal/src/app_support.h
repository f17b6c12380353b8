/*
 * What the bare-metal example apps (mcubert_layer_check, mcubert_text_check, mcubert_generate) share: a
 * model run from its node table, a kernel's refusal on the console, values from the command line, the
 * kernels' path, the closing "done" line.
 */
#ifndef MCUBERT_APP_SUPPORT_H
#define MCUBERT_APP_SUPPORT_H

#include <stdint.h>

#include "mcubert/mcubert_ops.h"

/* Op ids in the order of MCUBERT_OPS (the registry's, mcubert_contract.h): a node table names its ops by them. */
#define MCUBERT_APP_OP_ID(lower, upper, code) MCUBERT_APP_OP_##upper,
enum { MCUBERT_OPS(MCUBERT_APP_OP_ID) MCUBERT_APP_OP_COUNT };
#undef MCUBERT_APP_OP_ID

/* One op of a whole model, as the generated data holds it (tflm_mcubert/firmware/c_data.py). An app runs a
 * model by walking its nodes in order through one table-driven call, so no app names an op: a model of any
 * topology, and a new op, need no change here. */
typedef struct {
    int32_t op;                         /* MCUBERT_APP_OP_<OP> */
    const char *name;                   /* the node's name, for messages: "layer0.attention" */
    const void *params;                 /* its mcubert_<op>_params */
    const mcubert_tensor_view *tensors; /* contract order, output last: constants' data, run-time ones NULL */
    const int8_t *values;               /* per tensor: the app's value it reads or writes; -1: a constant */
    int32_t dims[4];                    /* its mcubert_<op>_get_buffer_size arguments */
} mcubert_app_node;

/* What a TFLM op's Prepare does, for every node: options, tensor shapes, constant contents; and each node's
 * scratch must fit `scratch_bytes`. MCUBERT_OK or the first refusal, its node named in *what. */
mcubert_status mcubert_app_validate(const mcubert_app_node *nodes, int32_t count, int32_t scratch_bytes,
                                    const char **what, mcubert_message *message);

/* Every node in order, run-time tensors taken from values[node->values[k]] (the app's buffers, by the value
 * ids its generated header enumerates). MCUBERT_OK or the first refusal, its node named in *what. */
mcubert_status mcubert_app_run(const mcubert_app_node *nodes, int32_t count, void *const *values,
                               mcubert_context *context, const char **what, mcubert_message *message);

/* "FAIL: <what>: <status name>: <message>" on the console; returns 2, the apps' exit status for a refusal. */
int32_t mcubert_report_refusal(const char *what, mcubert_status status, const mcubert_message *message);

/* The text after `key` (e.g. "prompts=") on the command line, up to a space, copied into out[capacity] and
 * NUL-terminated (cut at capacity - 1 bytes); "" when the key is absent. Returns out. */
const char *mcubert_command_line_value(const char *command_line, const char *key, char *out, uint32_t capacity);

/* The kernels' path as the banner names it: "plain C path", "DSP path" or "MVE path" (mcubert_uses_dsp_path). */
const char *mcubert_kernel_path_name(void);

/* "done: <count> <items>; stack used <n> of <size> B" and a newline. */
void mcubert_write_done(uint32_t count, const char *items);

#endif
