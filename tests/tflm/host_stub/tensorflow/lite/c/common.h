// A stand-in for TFLM's C API, just what custom_ops/tflm/ uses, so that the binding's glue
// (options, validation, scratch, in-place hidden state) builds and runs on any host without a
// TFLM checkout (tests/tflm/test_tflm_binding_glue.py). Field names follow TFLM; the layout is
// ours, so a library built against it runs only in this harness.
#ifndef MCUBERT_HOST_STUB_COMMON_H_
#define MCUBERT_HOST_STUB_COMMON_H_

#include <stddef.h>
#include <stdint.h>

typedef enum { kTfLiteOk = 0, kTfLiteError = 1 } TfLiteStatus;

typedef enum {
    kTfLiteNoType = 0,
    kTfLiteFloat32 = 1,
    kTfLiteInt32 = 2,
    kTfLiteUInt8 = 3,
    kTfLiteInt64 = 4,
    kTfLiteInt16 = 7,
    kTfLiteInt8 = 9,
} TfLiteType;

typedef enum { kTfLiteArenaRw = 2, kTfLiteMmapRo = 3 } TfLiteAllocationType;

static inline const char *TfLiteTypeGetName(TfLiteType type)
{
    return type == kTfLiteInt32 ? "INT32" : type == kTfLiteInt8 ? "INT8" : "OTHER";
}

typedef struct {
    int size;
    int data[];
} TfLiteIntArray;

typedef union {
    void *data;
    char *raw;
    int8_t *int8;
    int32_t *i32;
} TfLitePtrUnion;

typedef struct {
    TfLiteType type;
    TfLitePtrUnion data;
    TfLiteIntArray *dims;
    size_t bytes;
    TfLiteAllocationType allocation_type;
} TfLiteTensor;

typedef struct {
    TfLitePtrUnion data;
    TfLiteIntArray *dims;
    TfLiteType type;
} TfLiteEvalTensor;

typedef struct {
    TfLiteIntArray *inputs;
    TfLiteIntArray *outputs;
    void *user_data;
} TfLiteNode;

typedef struct TfLiteContext {
    void *(*AllocatePersistentBuffer)(struct TfLiteContext *context, size_t bytes);
    TfLiteStatus (*RequestScratchBufferInArena)(struct TfLiteContext *context, size_t bytes, int *buffer_idx);
    void *(*GetScratchBuffer)(struct TfLiteContext *context, int buffer_idx);
    void *impl_;
} TfLiteContext;

#define TF_LITE_ENSURE_OK(context, status)                                                                             \
    do {                                                                                                               \
        const TfLiteStatus s_ = (status);                                                                              \
        if (s_ != kTfLiteOk)                                                                                           \
            return s_;                                                                                                 \
    } while (0)

#endif // MCUBERT_HOST_STUB_COMMON_H_
