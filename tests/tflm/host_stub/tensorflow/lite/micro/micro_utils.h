// Stand-in for TFLM's tensor-size helpers (see tensorflow/lite/c/common.h here).
#ifndef MCUBERT_HOST_STUB_MICRO_UTILS_H_
#define MCUBERT_HOST_STUB_MICRO_UTILS_H_

#include "tensorflow/lite/c/common.h"

namespace tflite
{
int ElementCount(const TfLiteIntArray &dims);
size_t EvalTensorBytes(const TfLiteEvalTensor *tensor);
} // namespace tflite

#endif // MCUBERT_HOST_STUB_MICRO_UTILS_H_
