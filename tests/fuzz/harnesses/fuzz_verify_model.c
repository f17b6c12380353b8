/*
 * libFuzzer harness: mcubert_verify_model and mcubert_verify_model_expected on arbitrary bytes. The
 * verifiers must never read outside [model, model + size) (ASan), never hit undefined behaviour
 * (UBSan), and only ever answer OK (verified = 1), MCUBERT_ERROR_MODEL or (without expected values)
 * MCUBERT_UNVERIFIED, with a NUL-terminated message. OK must mean the model is all there: TFLM's
 * reads of it (tflm_reads.h, unchecked) must then stay inside it.
 *
 * Built with MCUBERT_FUZZ_RESEAL (fuzz_verify_model_resealed), the input's integrity record, when it
 * has one, is first rewritten to agree with the mutated bytes (size and CRC), as a crafted file would
 * be: the CRC no longer refuses the mutation, so the structure walk behind it is what is fuzzed.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mcubert/mcubert_ops.h"
#include "mcubert_internal.h"
#include "tflm_reads.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#ifdef MCUBERT_FUZZ_RESEAL
static void put_u32(uint8_t *at, uint32_t value)
{
    at[0] = (uint8_t)value;
    at[1] = (uint8_t)(value >> 8);
    at[2] = (uint8_t)(value >> 16);
    at[3] = (uint8_t)(value >> 24);
}

static uint32_t get_u32(const uint8_t *at)
{
    return (uint32_t)at[0] | ((uint32_t)at[1] << 8) | ((uint32_t)at[2] << 16) | ((uint32_t)at[3] << 24);
}

/* The first 4-aligned "MCIN", version 1, whose record (5 + B + 1 + O words) fits: size and CRC set. */
static void reseal(uint8_t *model, uint32_t size)
{
    uint32_t at, state;
    uint64_t words, end;
    for (at = 8; at + 24u <= size; at += 4u) {
        if (get_u32(model + at) != 0x4E49434Du || get_u32(model + at + 4u) != 1u) {
            continue;
        }
        words = 5u + (uint64_t)get_u32(model + at + 16u);
        if (at + 4u * words + 4u > size) {
            return;
        }
        words += 1u + (uint64_t)get_u32(model + at + 4u * words);
        end = at + 4u * words;
        if (end > size) {
            return;
        }
        put_u32(model + at + 8u, size);
        state = mcubert_crc32_update(0xFFFFFFFFu, model, at);
        state = mcubert_crc32_update(state, NULL, (uint32_t)(end - at)); /* the record read as zeros */
        put_u32(model + at + 12u, ~mcubert_crc32_update(state, model + end, size - (uint32_t)end));
        return;
    }
}
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mcubert_model_integrity integrity;
    mcubert_message message;
    mcubert_status status;
    /* An exact-size heap copy, so that ASan sees the first byte past the model. */
    uint8_t *model = (uint8_t *)malloc(size ? size : 1);
    if (model == NULL) {
        return 0;
    }
    if (size) {
        memcpy(model, data, size);
    }
#ifdef MCUBERT_FUZZ_RESEAL
    reseal(model, (uint32_t)size);
#endif
    status = mcubert_verify_model(model, (uint32_t)size, &integrity, &message);
#ifdef MCUBERT_FUZZ_PRINT_STATUS /* test_fuzz_c.py: the seed must verify */
    fprintf(stderr, "mcubert status %d verified %d: %s\n", (int)status, (int)integrity.verified, message.text);
#endif
    if (status != MCUBERT_OK && status != MCUBERT_ERROR_MODEL && status != MCUBERT_UNVERIFIED) {
        abort();
    }
    if (memchr(message.text, '\0', sizeof message.text) == NULL ||
        (status == MCUBERT_OK) != (integrity.verified == 1)) {
        abort();
    }
    if (status == MCUBERT_OK) {
        tflm_reads(model); /* past the model: ASan aborts */
    }
    /* Expected values the input cannot match on purpose: a wrong model must never be OK. */
    status = mcubert_verify_model_expected(model, (uint32_t)size, (uint32_t)size, 0x5A5A5A5Au, &integrity, &message);
    if (status != MCUBERT_ERROR_MODEL && !(status == MCUBERT_OK && integrity.verified == 1)) {
        abort();
    }
    if (memchr(message.text, '\0', sizeof message.text) == NULL) {
        abort();
    }
    free(model);
    return 0;
}
