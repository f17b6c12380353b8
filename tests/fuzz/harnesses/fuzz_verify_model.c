/*
 * libFuzzer harness: mcubert_verify_model and mcubert_verify_model_expected on arbitrary bytes. The
 * verifiers must never read outside [model, model + size) (ASan), never hit undefined behaviour
 * (UBSan), and only ever answer OK (verified = 1), MCUBERT_ERROR_MODEL or (without expected values)
 * MCUBERT_UNVERIFIED, with a NUL-terminated message.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mcubert/mcubert_ops.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

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
