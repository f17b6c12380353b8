/*
 * The BPE tokenizer under ASan/UBSan (tests/tokenizer/test_bpe_c.py builds it with the library's
 * sources): bpe_driver BLOB INPUTS. Init failure: prints "init <status> <message>" and exits 2.
 * Otherwise, for each input (u32 length, bytes) writes to stdout: u32 status, u32 count, i32 ids[count],
 * then the ids decoded at once and one at a time (each u32 length, bytes), the second through the
 * smallest output buffer each step needs.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mcubert/mcubert_bpe_tokenizer.h"

static unsigned char *read_file(const char *path, long *size)
{
    FILE *f = fopen(path, "rb");
    unsigned char *data;
    if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (*size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        exit(3);
    }
    data = malloc((size_t)*size + 1u);
    if (data == NULL || fread(data, 1, (size_t)*size, f) != (size_t)*size) {
        exit(3);
    }
    fclose(f);
    return data;
}

static void put_bytes(const void *data, uint32_t n)
{
    fwrite(&n, 4, 1, stdout);
    fwrite(data, 1, n, stdout);
}

static void decode_both(const mcubert_bpe_tokenizer *t, const int32_t *ids, uint32_t count)
{
    uint32_t bound = mcubert_bpe_decode_bound(t, count), written = 0, i, total = 0;
    uint8_t *out = malloc(bound + 3u), *step = malloc(mcubert_bpe_decode_bound(t, 1) + 3u);
    uint8_t *streamed = malloc(bound + 3u);
    mcubert_utf8_stream stream = {{0}, 0, 0};
    mcubert_message message;
    if (mcubert_bpe_decode(t, ids, count, &stream, out, bound, &written, &message) != MCUBERT_OK) {
        exit(4);
    }
    written += mcubert_utf8_finish(&stream, out + written);
    put_bytes(out, written);
    for (i = 0; i < count; ++i) {
        uint32_t n = 0;
        if (mcubert_bpe_decode(t, ids + i, 1, &stream, step, mcubert_bpe_decode_bound(t, 1), &n, &message) != 0) {
            exit(5);
        }
        memcpy(streamed + total, step, n);
        total += n;
    }
    total += mcubert_utf8_finish(&stream, streamed + total);
    put_bytes(streamed, total);
    free(out);
    free(step);
    free(streamed);
}

int main(int argc, char **argv)
{
    long blob_size, inputs_size, at = 0;
    unsigned char *blob, *inputs;
    mcubert_bpe_tokenizer t;
    mcubert_message message;
    mcubert_status status;
    void *buffer;
    if (argc != 3) {
        return 1;
    }
    blob = read_file(argv[1], &blob_size);
    inputs = read_file(argv[2], &inputs_size);
    status = mcubert_bpe_init(&t, blob, (uint32_t)blob_size, &message);
    if (status != MCUBERT_OK) {
        printf("init %d %s\n", (int)status, message.text);
        free(blob);
        free(inputs);
        return 2;
    }
    buffer = malloc(mcubert_bpe_get_buffer_size(&t));
    while (at + 4 <= inputs_size) {
        uint32_t length, count = 0, capacity;
        int32_t *ids;
        memcpy(&length, inputs + at, 4);
        capacity = 3u * length + 1u;
        ids = malloc(4u * capacity);
        status = mcubert_bpe_encode(&t, inputs + at + 4, length, ids, capacity, &count, buffer,
                                    mcubert_bpe_get_buffer_size(&t), &message);
        fwrite(&status, 4, 1, stdout);
        put_bytes(ids, 4u * count);
        decode_both(&t, ids, count);
        free(ids);
        at += 4 + (long)length;
    }
    free(buffer);
    free(blob);
    free(inputs);
    return 0;
}
