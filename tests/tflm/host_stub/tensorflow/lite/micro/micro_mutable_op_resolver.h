// Stand-in for TFLM's op resolver (see tensorflow/lite/c/common.h here): records the names.
#ifndef MCUBERT_HOST_STUB_MICRO_MUTABLE_OP_RESOLVER_H_
#define MCUBERT_HOST_STUB_MICRO_MUTABLE_OP_RESOLVER_H_

#include "tensorflow/lite/c/common.h"
#include "tensorflow/lite/micro/micro_common.h"

namespace tflite
{

template <unsigned int tOpCount> class MicroMutableOpResolver
{
  public:
    TfLiteStatus AddCustom(const char *name, TFLMRegistration *registration)
    {
        if (count_ >= tOpCount || registration == nullptr)
            return kTfLiteError;
        names_[count_++] = name;
        return kTfLiteOk;
    }
    unsigned int count() const
    {
        return count_;
    }

  private:
    const char *names_[tOpCount] = {};
    unsigned int count_ = 0;
};

} // namespace tflite

#endif // MCUBERT_HOST_STUB_MICRO_MUTABLE_OP_RESOLVER_H_
