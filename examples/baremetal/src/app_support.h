/*
 * What the bare-metal example apps (mcubert_layer_check, mcubert_text_check, mcubert_generate) share: a
 * kernel's refusal on the console, values from the command line, the kernels' path, the closing "done" line.
 */
#ifndef MCUBERT_APP_SUPPORT_H
#define MCUBERT_APP_SUPPORT_H

#include <stdint.h>

#include "mcubert/mcubert_ops.h"

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
