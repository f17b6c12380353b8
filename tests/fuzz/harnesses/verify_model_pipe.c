/*
 * mcubert_verify_model and mcubert_verify_model_expected for a Python mutation campaign
 * (tests/fuzz/verify_pipe.py), built with ASan + UBSan: reads frames from stdin, answers each.
 *
 * Frame in: uint32 size, expected size, expected CRC-32 (little-endian), then the model's bytes.
 * Answer out: int32 status of mcubert_verify_model, its `verified`, status of _expected.
 * Each model is an exact-size heap copy (ASan sees the first byte past it); an OK is followed by
 * TFLM's unchecked reads of the model (tflm_reads.h). A finding aborts the process.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mcubert/mcubert_ops.h"
#include "tflm_reads.h"

static int read_exact(void *out, size_t size)
{
    return size == 0u || fread(out, 1, size, stdin) == size;
}

static void answer(const uint8_t *model, uint32_t size, uint32_t expected_size, uint32_t expected_crc)
{
    mcubert_model_integrity integrity;
    mcubert_message message;
    int32_t out[3];
    out[0] = (int32_t)mcubert_verify_model(model, size, &integrity, &message);
    out[1] = integrity.verified;
    if (out[0] == MCUBERT_OK) {
        tflm_reads(model);
    }
    out[2] = (int32_t)mcubert_verify_model_expected(model, size, expected_size, expected_crc, &integrity, &message);
    if (memchr(message.text, '\0', sizeof message.text) == NULL) {
        abort();
    }
    fwrite(out, sizeof out, 1, stdout);
    fflush(stdout);
}

int main(void)
{
    uint32_t header[3];
    uint8_t *model;
    while (read_exact(header, sizeof header)) {
        model = (uint8_t *)malloc(header[0] ? header[0] : 1u);
        if (model == NULL || !read_exact(model, header[0])) {
            return 1;
        }
        answer(model, header[0], header[1], header[2]);
        free(model);
    }
    return 0;
}
