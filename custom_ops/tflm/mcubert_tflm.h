// TFLM binding of the MCUBERT custom ops: one TFLMRegistration per op, and AddMcubertOps() to put
// all four into an op resolver.
//
//   #include "mcubert_tflm.h"
//   static tflite::MicroMutableOpResolver<mcubert::kOpCount> resolver;
//   if (mcubert::AddMcubertOps(resolver) != kTfLiteOk) { /* resolver too small */ }
//
// The binding only maps TFLM tensors, quantization and custom options onto the portable C kernel
// API in ../include/mcubert/mcubert_ops.h; validation and numerics live there. Written against
// TFLM commit 90b983c (TFLMRegistration at global scope, tflite::micro::RegisterOp); it also builds
// against TFLM from before 8db6012 (2023-05-18), such as the last Arduino_TensorFlowLite snapshot,
// where the same struct is called TfLiteRegistration.
#ifndef MCUBERT_TFLM_H_
#define MCUBERT_TFLM_H_

#include "mcubert/mcubert_contract.h"
#include "tensorflow/lite/c/common.h"
#include "tensorflow/lite/micro/micro_mutable_op_resolver.h"

#if defined(__has_include)
#if __has_include("tensorflow/lite/micro/micro_common.h")
#include "tensorflow/lite/micro/micro_common.h"
#else
typedef TfLiteRegistration TFLMRegistration;  // TFLM before 8db6012
#endif
#else
#include "tensorflow/lite/micro/micro_common.h"
#endif

namespace mcubert {

// Custom codes, as written by `tflm-mcubert export` (tflm_mcubert/ops/registry.py).
constexpr char kEmbeddingOpName[] = "MCUBERT_EMBEDDING";
constexpr char kAttentionOpName[] = "MCUBERT_ATTENTION";
constexpr char kMlpOpName[] = "MCUBERT_MLP";
constexpr char kClassifierHeadOpName[] = "MCUBERT_CLASSIFIER_HEAD";

// Resolver slots AddMcubertOps() takes: every op of the generated list (mcubert_contract.h).
constexpr unsigned int kOpCount = MCUBERT_OP_COUNT;

// Register_MCUBERT_<OP>(), one per op (defined in mcubert_<op>_tflm.cc).
#define MCUBERT_DECLARE_REGISTRATION(lower, upper, code) TFLMRegistration* Register_MCUBERT_##upper();
MCUBERT_OPS(MCUBERT_DECLARE_REGISTRATION)
#undef MCUBERT_DECLARE_REGISTRATION

// Adds every op; kTfLiteError (with a MicroPrintf naming the op) when the resolver is full or
// already holds one of them.
template <unsigned int tOpCount>
TfLiteStatus AddMcubertOps(tflite::MicroMutableOpResolver<tOpCount>& resolver) {
#define MCUBERT_ADD_REGISTRATION(lower, upper, code)                       \
  if (resolver.AddCustom(code, Register_MCUBERT_##upper()) != kTfLiteOk) { \
    return kTfLiteError;                                                   \
  }
  MCUBERT_OPS(MCUBERT_ADD_REGISTRATION)
#undef MCUBERT_ADD_REGISTRATION
  return kTfLiteOk;
}

}  // namespace mcubert

#endif  // MCUBERT_TFLM_H_
