// One MCUBERT op through TFLM's own single-kernel harness (tflite::micro::KernelRunner, as TFLM's
// kernel tests use it): the op's registration with the tensors the caller gives and its flexbuffer
// options as init data, no interpreter and no model. tests/tflm/test_tflm_kernel_runner.py drives
// it from Python (tflm_child.py, mode "kernel") and compares the output with the numpy reference.
#include <stdint.h>
#include <string.h>

#include "mcubert_tflm.h"
#include "tensorflow/lite/c/common.h"
#include "tensorflow/lite/micro/kernels/kernel_runner.h"

namespace {

constexpr int kMaxTensors = 24;
constexpr int kMaxDims = kMaxTensors * 8;

enum RunStatus { kRunOk = 0, kRunPrepareFailed = 1, kRunInvokeFailed = 2, kRunBadArguments = 3 };

const TFLMRegistration* RegistrationOf(const char* op) {
  if (strcmp(op, "MCUBERT_EMBEDDING") == 0) return mcubert::Register_MCUBERT_EMBEDDING();
  if (strcmp(op, "MCUBERT_ATTENTION") == 0) return mcubert::Register_MCUBERT_ATTENTION();
  if (strcmp(op, "MCUBERT_MLP") == 0) return mcubert::Register_MCUBERT_MLP();
  if (strcmp(op, "MCUBERT_CLASSIFIER_HEAD") == 0) return mcubert::Register_MCUBERT_CLASSIFIER_HEAD();
  return nullptr;
}

// TfLiteIntArray is {int size; int data[]}: TFLM's tests lay it out over an int buffer the same way.
TfLiteIntArray* IntArray(int* storage, int size, const int32_t* values) {
  storage[0] = size;
  for (int i = 0; i < size; ++i) storage[1 + i] = values[i];
  return reinterpret_cast<TfLiteIntArray*>(storage);
}

}  // namespace

namespace tflite {
namespace testing {
// MockMicroGraph's one use of TFLM's test_helpers.cc (which would bring the whole test library):
// the same layout cast as there.
TfLiteIntArray* IntArrayFromInts(const int* int_array) {
  return const_cast<TfLiteIntArray*>(reinterpret_cast<const TfLiteIntArray*>(int_array));
}
}  // namespace testing
}  // namespace tflite

// Tensors 0..input_count-1 are the node's inputs, the rest its outputs; `constant[i]` marks the
// inputs TFLM would read from the flatbuffer (kTfLiteMmapRo: the op validates their contents).
// Returns a RunStatus; TFLM's and the op's messages go to the log (stdout).
extern "C" int mcubert_kernel_runner_run(const char* op, const uint8_t* options, int32_t options_bytes,
                                         int32_t tensor_count, int32_t input_count, const int32_t* types,
                                         const int32_t* constant, const int32_t* ranks, const int32_t* dims,
                                         void* const* data, const int32_t* bytes) {
  const TFLMRegistration* registration = RegistrationOf(op);
  if (registration == nullptr || tensor_count > kMaxTensors || input_count < 1 || input_count >= tensor_count) {
    return kRunBadArguments;
  }
  static int dim_storage[kMaxDims + kMaxTensors];
  static TfLiteTensor tensors[kMaxTensors];
  int used = 0;
  const int32_t* shape = dims;
  for (int i = 0; i < tensor_count; ++i) {
    if (ranks[i] < 0 || used + 1 + ranks[i] > kMaxDims + kMaxTensors) return kRunBadArguments;
    tensors[i] = TfLiteTensor{};
    tensors[i].type = static_cast<TfLiteType>(types[i]);
    tensors[i].data.data = data[i];
    tensors[i].dims = IntArray(&dim_storage[used], ranks[i], shape);
    tensors[i].bytes = static_cast<size_t>(bytes[i]);
    tensors[i].allocation_type = i < input_count && constant[i] ? kTfLiteMmapRo : kTfLiteArenaRw;
    used += 1 + ranks[i];
    shape += ranks[i];
  }
  int input_storage[kMaxTensors + 1];
  int output_storage[kMaxTensors + 1];
  int32_t indices[kMaxTensors];
  for (int i = 0; i < tensor_count; ++i) indices[i] = i;
  TfLiteIntArray* inputs = IntArray(input_storage, input_count, indices);
  TfLiteIntArray* outputs = IntArray(output_storage, tensor_count - input_count, indices + input_count);
  tflite::micro::KernelRunner runner(*registration, tensors, tensor_count, inputs, outputs, nullptr);
  if (runner.InitAndPrepare(reinterpret_cast<const char*>(options), static_cast<size_t>(options_bytes)) != kTfLiteOk) {
    return kRunPrepareFailed;
  }
  return runner.Invoke() == kTfLiteOk ? kRunOk : kRunInvokeFailed;
}
