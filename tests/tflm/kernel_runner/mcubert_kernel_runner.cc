// One MCUBERT op through TFLM's own single-kernel harness (tflite::micro::KernelRunner, as TFLM's
// kernel tests use it): the op's registration with the tensors the caller gives and its flexbuffer
// options as init data, no interpreter and no model. tests/tflm/test_tflm_kernel_runner.py drives
// it from Python (tflm_child.py, mode "kernel") and compares the output with the numpy reference.
#include <stdint.h>

#include "mcubert_test_node.h"
#include "tensorflow/lite/c/common.h"
#include "tensorflow/lite/micro/kernels/kernel_runner.h"

namespace tflite {
namespace testing {
// MockMicroGraph's one use of TFLM's test_helpers.cc (which would bring the whole test library):
// the same layout cast as there.
TfLiteIntArray* IntArrayFromInts(const int* int_array) {
  return const_cast<TfLiteIntArray*>(reinterpret_cast<const TfLiteIntArray*>(int_array));
}
}  // namespace testing
}  // namespace tflite

// The node as mcubert_test::LayOut describes it. Returns a mcubert_test::RunStatus; TFLM's and the
// op's messages go to the log (stdout).
extern "C" int mcubert_kernel_runner_run(const char* op, const uint8_t* options, int32_t options_bytes,
                                         int32_t tensor_count, int32_t input_count, const int32_t* types,
                                         const int32_t* constant, const int32_t* ranks, const int32_t* dims,
                                         void* const* data, const int32_t* bytes) {
  static mcubert_test::Node node;
  const TFLMRegistration* registration = mcubert_test::RegistrationOf(op);
  if (registration == nullptr ||
      !mcubert_test::LayOut(&node, tensor_count, input_count, types, constant, ranks, dims, data, bytes)) {
    return mcubert_test::kRunBadArguments;
  }
  tflite::micro::KernelRunner runner(*registration, node.tensors, node.tensor_count, node.inputs, node.outputs,
                                     nullptr);
  if (runner.InitAndPrepare(reinterpret_cast<const char*>(options), static_cast<size_t>(options_bytes)) != kTfLiteOk) {
    return mcubert_test::kRunPrepareFailed;
  }
  return runner.Invoke() == kTfLiteOk ? mcubert_test::kRunOk : mcubert_test::kRunInvokeFailed;
}
