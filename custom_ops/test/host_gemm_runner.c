/*
 * Host driver of the gemm tests (tests/kernels/kernel_gemm.py): one matrix product per request
 * through gemm_driver.c, under ASan/UBSan. Every buffer is its own malloc of exactly its size
 * (the scratch filled with a pattern first), so an out-of-bounds access hits a redzone.
 *
 * Request (little-endian): i32 kind, split, tokens, in_features, out_features, weight_bytes, then
 * the first segment's bytes (tokens * split), the second's (tokens * (in - split)), the weights.
 * Response: i32 status, then tokens * out_features int32 accumulators.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gemm_driver.h"

static void die(const char *what)
{
    fprintf(stderr, "host_gemm_runner: %s\n", what);
    exit(2);
}

/* `size` bytes from stdin into a fresh buffer of exactly that size (1 byte when empty). */
static void *read_buffer(size_t size)
{
    void *buffer = malloc(size != 0 ? size : 1);
    if (buffer == NULL) {
        die("out of memory");
    }
    if (size != 0 && fread(buffer, 1, size, stdin) != size) {
        die("short read");
    }
    return buffer;
}

int main(void)
{
    int32_t head[6];
    while (fread(head, sizeof head, 1, stdin) == 1) {
        const int32_t kind = head[0], split = head[1], tokens = head[2], in = head[3], out = head[4];
        const size_t acc_size = (size_t)tokens * (size_t)out * sizeof(int32_t);
        int8_t *first = read_buffer((size_t)tokens * (size_t)split);
        int8_t *second = read_buffer((size_t)tokens * (size_t)(in - split));
        void *weights = read_buffer((size_t)head[5]);
        uint32_t *scratch = malloc((size_t)in * 8u);
        int32_t *acc = malloc(acc_size != 0 ? acc_size : 1);
        int32_t status;
        if (scratch == NULL || acc == NULL) {
            die("out of memory");
        }
        memset(scratch, 0xA5, (size_t)in * 8u);
        status = mcubert_gemm_driver(kind, first, second, split, tokens, in, out, weights, acc, scratch);
        if (fwrite(&status, 4, 1, stdout) != 1 || (acc_size != 0 && fwrite(acc, 1, acc_size, stdout) != acc_size)) {
            die("short write");
        }
        fflush(stdout);
        free(first);
        free(second);
        free(weights);
        free(scratch);
        free(acc);
    }
    return 0;
}
