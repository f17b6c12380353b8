// Stand-in for TFLM's registration struct (see tensorflow/lite/c/common.h here).
#ifndef MCUBERT_HOST_STUB_MICRO_COMMON_H_
#define MCUBERT_HOST_STUB_MICRO_COMMON_H_

#include "tensorflow/lite/c/common.h"

struct TFLMRegistration {
    void *(*init)(TfLiteContext *context, const char *buffer, size_t length);
    void (*free)(TfLiteContext *context, void *buffer);
    TfLiteStatus (*prepare)(TfLiteContext *context, TfLiteNode *node);
    TfLiteStatus (*invoke)(TfLiteContext *context, TfLiteNode *node);
    void (*reset)(TfLiteContext *context, void *buffer);
};

#endif // MCUBERT_HOST_STUB_MICRO_COMMON_H_
