/*
 * libFuzzer harness: mcubert_verify_model on arbitrary bytes. The verifier must never read
 * outside [model, model + size) (ASan), never hit undefined behaviour (UBSan), and only ever
 * answer OK or MCUBERT_ERROR_MODEL with a NUL-terminated message.
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
    if (status != MCUBERT_OK && status != MCUBERT_ERROR_MODEL) {
        abort();
    }
    if (memchr(message.text, '\0', sizeof message.text) == NULL) {
        abort();
    }
    if (status == MCUBERT_OK && integrity.verified != 0 && integrity.verified != 1) {
        abort();
    }
    free(model);
    return 0;
}
