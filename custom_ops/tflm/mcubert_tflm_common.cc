#include "mcubert_tflm_common.h"

#include <string.h>

#include "tensorflow/lite/micro/kernels/kernel_util.h"
#include "tensorflow/lite/micro/micro_context.h"
#include "tensorflow/lite/micro/micro_log.h"
#include "tensorflow/lite/micro/micro_utils.h"

namespace mcubert {
namespace tflm {
namespace {

// Output 1 of every op: its scratch (SPEC.md section 4).
constexpr int kScratchOutput = 1;

// The tensor's view for validate; `data` only for constants (their contents get checked).
mcubert_tensor_view ViewOf(const TfLiteTensor& tensor) {
  mcubert_tensor_view view;
  view.data = tensor.allocation_type == kTfLiteMmapRo ? tensor.data.data : nullptr;
  view.dtype = static_cast<int32_t>(tensor.type);
  const int elements = tflite::ElementCount(*tensor.dims);
  view.elements = elements;
  return view;
}

}  // namespace

TfLiteStatus Report(mcubert_status status, const mcubert_message& message) {
  if (status == MCUBERT_OK) {
    return kTfLiteOk;
  }
  MicroPrintf("%s", message.text);
  return kTfLiteError;
}

TfLiteStatus Fail(const char* op, const char* what) {
  MicroPrintf("%s: %s", op, what);
  return kTfLiteError;
}

TfLiteStatus CheckOutputs(TfLiteNode* node, const char* op) {
  if (node->outputs->size != 1 && node->outputs->size != 2) {
    MicroPrintf("%s: expected 1 or 2 outputs (result, then scratch), the model has %d", op, node->outputs->size);
    return kTfLiteError;
  }
  return kTfLiteOk;
}

TfLiteStatus PrepareScratch(TfLiteContext* context, TfLiteNode* node, const char* op, int32_t scratch_bytes,
                            Scratch* scratch) {
  if (scratch_bytes < 0) {
    return Fail(op, "no scratch size for these dimensions");
  }
  scratch->bytes = scratch_bytes;
  scratch->request_index = -1;
  if (node->outputs->size < 2) {
    if (context->RequestScratchBufferInArena(context, static_cast<size_t>(scratch_bytes), &scratch->request_index) !=
        kTfLiteOk) {
      MicroPrintf("%s: scratch: TFLM refused %ld bytes", op, static_cast<long>(scratch_bytes));
      return kTfLiteError;
    }
    return kTfLiteOk;
  }
  tflite::MicroContext* micro_context = tflite::GetMicroContext(context);
  TfLiteTensor* output = micro_context->AllocateTempOutputTensor(node, kScratchOutput);
  if (output == nullptr) {
    return Fail(op, "scratch: missing output tensor");
  }
  const bool is_int8 = output->type == kTfLiteInt8;
  const size_t bytes = output->bytes;
  micro_context->DeallocateTempTfLiteTensor(output);
  if (!is_int8) {
    return Fail(op, "scratch: expected an int8 tensor");
  }
  if (bytes < static_cast<size_t>(scratch_bytes)) {
    MicroPrintf("%s: scratch: %u bytes, the op needs %ld (re-export the model)", op, static_cast<unsigned>(bytes),
                static_cast<long>(scratch_bytes));
    return kTfLiteError;
  }
  return kTfLiteOk;
}

TfLiteStatus ViewTensors(TfLiteContext* context, TfLiteNode* node, const char* op, int runtime_inputs,
                         mcubert_tensor_view* views, int* count) {
  tflite::MicroContext* micro_context = tflite::GetMicroContext(context);
  const int inputs = node->inputs->size;
  if (inputs + 1 > kMaxValidatedTensors) {
    return Fail(op, "too many inputs");
  }
  for (int i = 0; i < inputs; ++i) {
#ifdef USE_TFLM_COMPRESSION
    if (micro_context->GetTensorCompressionData(node, i) != nullptr) {
      MicroPrintf("%s: input %d is compressed (TFLM compression), which the op cannot read", op, i);
      return kTfLiteError;
    }
#endif
    TfLiteTensor* tensor = micro_context->AllocateTempInputTensor(node, i);
    if (tensor == nullptr) {
      MicroPrintf("%s: input %d is missing", op, i);
      return kTfLiteError;
    }
    // A zero-byte table (an embedding with no low-rank cluster) has no contents to check or compute;
    // TFLM gives a flatbuffer buffer of no data an arena allocation type, not kTfLiteMmapRo.
    const bool constant = tensor->allocation_type == kTfLiteMmapRo || tensor->bytes == 0;
    views[i] = ViewOf(*tensor);
    micro_context->DeallocateTempTfLiteTensor(tensor);
    if (i >= runtime_inputs && !constant) {
      MicroPrintf(
          "%s: input %d must be a constant of the model (its contents are checked at Prepare), "
          "and this model computes it at run time",
          op, i);
      return kTfLiteError;
    }
  }
  TfLiteTensor* output = micro_context->AllocateTempOutputTensor(node, 0);
  if (output == nullptr) {
    return Fail(op, "output 0 is missing");
  }
  views[inputs] = ViewOf(*output);
  micro_context->DeallocateTempTfLiteTensor(output);
  *count = inputs + 1;
  return kTfLiteOk;
}

const void* InputData(TfLiteContext* context, TfLiteNode* node, int index) {
  return tflite::micro::GetEvalInput(context, node, index)->data.data;
}

void* InPlaceOutput(TfLiteContext* context, TfLiteNode* node) {
  const TfLiteEvalTensor* input = tflite::micro::GetEvalInput(context, node, 0);
  TfLiteEvalTensor* output = tflite::micro::GetEvalOutput(context, node, 0);
  if (output->data.data != input->data.data) {
    memmove(output->data.data, input->data.data, tflite::EvalTensorBytes(output));
  }
  return output->data.data;
}

int8_t* InPlaceHidden(TfLiteContext* context, TfLiteNode* node) {
  return static_cast<int8_t*>(InPlaceOutput(context, node));
}

mcubert_context ScratchOf(TfLiteContext* context, TfLiteNode* node, const Scratch& scratch) {
  mcubert_context scratch_context;
  if (scratch.request_index >= 0) {
    scratch_context.buf = context->GetScratchBuffer(context, scratch.request_index);
    scratch_context.size = scratch.bytes;
    return scratch_context;
  }
  TfLiteEvalTensor* output = tflite::micro::GetEvalOutput(context, node, kScratchOutput);
  scratch_context.buf = output->data.data;
  scratch_context.size = static_cast<int32_t>(tflite::EvalTensorBytes(output));
  return scratch_context;
}

}  // namespace tflm
}  // namespace mcubert
