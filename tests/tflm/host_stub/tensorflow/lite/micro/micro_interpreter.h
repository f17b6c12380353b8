// Stand-in for TFLM's MicroInterpreter: only what mcubert::TextInput uses (input(i)). The harness
// hands it the input tensors.
#ifndef TENSORFLOW_LITE_MICRO_MICRO_INTERPRETER_H_
#define TENSORFLOW_LITE_MICRO_MICRO_INTERPRETER_H_

#include <stddef.h>

#include "tensorflow/lite/c/common.h"

namespace tflite
{

class MicroInterpreter
{
  public:
    MicroInterpreter(TfLiteTensor *inputs, size_t count) : inputs_(inputs), count_(count)
    {
    }
    TfLiteTensor *input(size_t index)
    {
        return index < count_ ? &inputs_[index] : nullptr;
    }

  private:
    TfLiteTensor *inputs_;
    size_t count_;
};

} // namespace tflite

#endif // TENSORFLOW_LITE_MICRO_MICRO_INTERPRETER_H_
