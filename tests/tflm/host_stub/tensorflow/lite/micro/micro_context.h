// Stand-in for TFLM's MicroContext (see tensorflow/lite/c/common.h here).
#ifndef MCUBERT_HOST_STUB_MICRO_CONTEXT_H_
#define MCUBERT_HOST_STUB_MICRO_CONTEXT_H_

#include "tensorflow/lite/c/common.h"

namespace tflite
{

class MicroContext
{
  public:
    virtual ~MicroContext() = default;
    virtual TfLiteTensor *AllocateTempInputTensor(const TfLiteNode *node, int index) = 0;
    virtual TfLiteTensor *AllocateTempOutputTensor(const TfLiteNode *node, int index) = 0;
    virtual void DeallocateTempTfLiteTensor(TfLiteTensor *tensor) = 0;
};

MicroContext *GetMicroContext(const TfLiteContext *context);

} // namespace tflite

#endif // MCUBERT_HOST_STUB_MICRO_CONTEXT_H_
