/*
 * Interface between firmware_main.c and the golden cases generated at test time by
 * tests/kernels/kernel_golden.py (inputs and expected outputs from the numpy reference).
 */
#ifndef MCUBERT_GOLDEN_H
#define MCUBERT_GOLDEN_H

#include <stdint.h>

#include "mcubert/mcubert_ops.h"

typedef struct {
    const char *name;
    /* 0 on success; otherwise 1000 + validate status, 2000 + kernel status, or 3000 + the first
     * mismatching output byte (capped). `message` receives the kernel's error text. */
    int32_t (*run)(const mcubert_context *context, mcubert_message *message);
} golden_case;

extern const golden_case golden_cases[];
extern const int32_t golden_case_count;
extern uint32_t golden_scratch[]; /* 16-byte aligned, golden_scratch_bytes long */
extern const int32_t golden_scratch_bytes;

#endif
