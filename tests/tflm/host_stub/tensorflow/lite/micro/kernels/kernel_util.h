// Stand-in for TFLM's kernel helpers (see tensorflow/lite/c/common.h here).
#ifndef MCUBERT_HOST_STUB_KERNEL_UTIL_H_
#define MCUBERT_HOST_STUB_KERNEL_UTIL_H_

#include "tensorflow/lite/c/common.h"
#include "tensorflow/lite/micro/micro_common.h"

namespace tflite
{
namespace micro
{

const TfLiteEvalTensor *GetEvalInput(const TfLiteContext *context, const TfLiteNode *node, int index);
TfLiteEvalTensor *GetMutableEvalInput(const TfLiteContext *context, const TfLiteNode *node, int index);
TfLiteEvalTensor *GetEvalOutput(const TfLiteContext *context, const TfLiteNode *node, int index);

template <typename T> T *GetTensorData(TfLiteEvalTensor *tensor)
{
    return reinterpret_cast<T *>(tensor->data.raw);
}

template <typename T> const T *GetTensorData(const TfLiteEvalTensor *tensor)
{
    return reinterpret_cast<const T *>(tensor->data.raw);
}

TFLMRegistration RegisterOp(void *(*init)(TfLiteContext *context, const char *buffer, size_t length),
                            TfLiteStatus (*prepare)(TfLiteContext *context, TfLiteNode *node),
                            TfLiteStatus (*invoke)(TfLiteContext *context, TfLiteNode *node),
                            void (*free)(TfLiteContext *context, void *buffer) = nullptr,
                            void (*reset)(TfLiteContext *context, void *buffer) = nullptr);

} // namespace micro
} // namespace tflite

#endif // MCUBERT_HOST_STUB_KERNEL_UTIL_H_
