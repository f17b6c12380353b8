/* GENERATED FILE - do not edit. Generated from custom_ops/tflm/mcubert_tflm.h by arduino_lib/extras/sync_from_custom_ops.py;
 * edit the source, not this copy, and re-run the script. */
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

// Resolver slots AddMcubertOps() takes.
constexpr unsigned int kOpCount = 4;

TFLMRegistration* Register_MCUBERT_EMBEDDING();
TFLMRegistration* Register_MCUBERT_ATTENTION();
TFLMRegistration* Register_MCUBERT_MLP();
TFLMRegistration* Register_MCUBERT_CLASSIFIER_HEAD();

// Adds the four ops; kTfLiteError (with a MicroPrintf naming the op) when the resolver is full or
// already holds one of them.
template <unsigned int tOpCount>
TfLiteStatus AddMcubertOps(tflite::MicroMutableOpResolver<tOpCount>& resolver) {
  if (resolver.AddCustom(kEmbeddingOpName, Register_MCUBERT_EMBEDDING()) != kTfLiteOk ||
      resolver.AddCustom(kAttentionOpName, Register_MCUBERT_ATTENTION()) != kTfLiteOk ||
      resolver.AddCustom(kMlpOpName, Register_MCUBERT_MLP()) != kTfLiteOk ||
      resolver.AddCustom(kClassifierHeadOpName, Register_MCUBERT_CLASSIFIER_HEAD()) != kTfLiteOk) {
    return kTfLiteError;
  }
  return kTfLiteOk;
}

}  // namespace mcubert

#endif  // MCUBERT_TFLM_H_
