// What the four op bindings share: reporting kernel errors through MicroPrintf, the tensor list
// each *_validate takes, and the node layout every MCUBERT op has (SPEC.md section 4: run-time
// outputs first, the op's scratch as its last output, planned offline like any other tensor).
#ifndef MCUBERT_TFLM_COMMON_H_
#define MCUBERT_TFLM_COMMON_H_

#include <stddef.h>
#include <stdint.h>

#include "mcubert/mcubert_ops.h"
#include "mcubert_tflm.h"
#include "tensorflow/lite/c/common.h"

namespace mcubert {
namespace tflm {

// Tensors of validate's list: the most any op has, inputs and result (generated from the registry).
constexpr int kMaxValidatedTensors = MCUBERT_MAX_OP_TENSORS;

// kTfLiteOk for MCUBERT_OK, else prints "<message>" (the kernel names op and field) and fails.
TfLiteStatus Report(mcubert_status status, const mcubert_message& message);

// Prints "<op>: <what>" and fails: for layout problems found before a kernel can be asked.
TfLiteStatus Fail(const char* op, const char* what);

// Where an op's scratch is. Exported models carry it as the op's last output, placed by the
// export's offline plan (SPEC.md section 4), which overlaps it with what the op does not need; a
// model without that output gets it from RequestScratchBufferInArena, which TFLM plans online
// around the offline buffers (more arena, same results).
struct Scratch {
  int request_index;  // -1: the scratch output tensor (int: RequestScratchBufferInArena's type)
  int32_t bytes;
};

// An op's persistent state: its decoded options, whether decoding succeeded, its scratch.
template <typename Params>
struct OpData {
  Params params;
  Scratch scratch;
  bool options_ok;
};

// Allocates the op's OpData and decodes the custom options into it with `parse`. A rejected
// buffer is reported here (MicroPrintf) and Prepare then fails, so a bad model stops at
// AllocateTensors with the reason printed.
template <typename Params>
void* InitOpData(TfLiteContext* context, const char* buffer, size_t length,
                 mcubert_status (*parse)(const uint8_t*, int32_t, Params*, mcubert_message*)) {
  void* memory = context->AllocatePersistentBuffer(context, sizeof(OpData<Params>));
  if (memory == nullptr) {
    return nullptr;
  }
  OpData<Params>* data = static_cast<OpData<Params>*>(memory);
  mcubert_message message;
  const int32_t bytes = length > INT32_MAX ? -1 : static_cast<int32_t>(length);
  data->options_ok =
      Report(parse(reinterpret_cast<const uint8_t*>(buffer), bytes, &data->params, &message), message) == kTfLiteOk;
  return memory;
}

// The node's OpData once Init succeeded, else nullptr (after saying why).
template <typename Params>
const Params* ParamsOf(TfLiteNode* node, const char* op) {
  const OpData<Params>* data = static_cast<const OpData<Params>*>(node->user_data);
  if (data == nullptr) {
    Fail(op, "no memory for the op's parameters (arena too small)");
    return nullptr;
  }
  if (!data->options_ok) {
    Fail(op, "custom options rejected (reason above)");
    return nullptr;
  }
  return &data->params;
}

// Checks the node has one or two outputs: its result, then (exported models) its scratch.
TfLiteStatus CheckOutputs(TfLiteNode* node, const char* op);

// Sets up `scratch` for `scratch_bytes` (the kernel's get_buffer_size): checks the scratch output
// (int8, large enough) or, when the node has none, requests the buffer from TFLM.
TfLiteStatus PrepareScratch(TfLiteContext* context, TfLiteNode* node, const char* op, int32_t scratch_bytes,
                            Scratch* scratch);

// The validate() list: inputs 0..n-1 then output 0. Constant tensors pass their data (validate
// checks their contents); run-time tensors pass NULL. Fails on a compressed constant (TFLM
// compression), which the kernels cannot read in place, and on an input past the first
// `runtime_inputs` that is not a constant of the model: its contents would reach the kernel unchecked.
TfLiteStatus ViewTensors(TfLiteContext* context, TfLiteNode* node, const char* op, int runtime_inputs,
                         mcubert_tensor_view* views, int* count);

// Prepare of every op: decoded options, its outputs, validate() on the tensor list (options
// ranges, dtypes, element counts, constant contents), then its scratch.
template <typename Params>
TfLiteStatus PrepareOp(TfLiteContext* context, TfLiteNode* node, const char* op, int runtime_inputs,
                       mcubert_status (*validate)(const Params*, const mcubert_tensor_view*, int32_t, mcubert_message*),
                       int32_t (*scratch_bytes)(const Params&)) {
  const Params* params = ParamsOf<Params>(node, op);
  if (params == nullptr) {
    return kTfLiteError;
  }
  TF_LITE_ENSURE_OK(context, CheckOutputs(node, op));
  mcubert_tensor_view views[kMaxValidatedTensors];
  int count = 0;
  TF_LITE_ENSURE_OK(context, ViewTensors(context, node, op, runtime_inputs, views, &count));
  mcubert_message message;
  TF_LITE_ENSURE_OK(context, Report(validate(params, views, count, &message), message));
  return PrepareScratch(context, node, op, scratch_bytes(*params),
                        &static_cast<OpData<Params>*>(node->user_data)->scratch);
}

// What Init and Prepare set up (Prepare has succeeded before any Eval).
template <typename Params>
const OpData<Params>& Prepared(const TfLiteNode* node) {
  return *static_cast<const OpData<Params>*>(node->user_data);
}

// Input `index`'s data (constant weights or a run-time tensor) at Eval.
const void* InputData(TfLiteContext* context, TfLiteNode* node, int index);

template <typename T>
const T* Input(TfLiteContext* context, TfLiteNode* node, int index) {
  return static_cast<const T*>(InputData(context, node, index));
}

// What an in-place op works on: output 0, first copied from input 0 if TFLM placed them apart (the
// export's plan gives both one offset, so normally no copy happens). InPlaceHidden: the int8 hidden state.
void* InPlaceOutput(TfLiteContext* context, TfLiteNode* node);
int8_t* InPlaceHidden(TfLiteContext* context, TfLiteNode* node);

// The op's scratch as the kernels' context.
mcubert_context ScratchOf(TfLiteContext* context, TfLiteNode* node, const Scratch& scratch);

}  // namespace tflm
}  // namespace mcubert

#endif  // MCUBERT_TFLM_COMMON_H_
