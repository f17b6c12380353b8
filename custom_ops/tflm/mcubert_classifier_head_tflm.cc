// MCUBERT_CLASSIFIER_HEAD (SPEC 4.4): BERT's pooler and sequence classifier on the [CLS] row:
// hidden[0] -> int8 logits.
#include "mcubert_tflm.h"
#include "mcubert_tflm_common.h"
#include "tensorflow/lite/micro/kernels/kernel_util.h"

namespace mcubert {
namespace {

using Params = mcubert_classifier_head_params;
constexpr char kOp[] = "MCUBERT_CLASSIFIER_HEAD";

int32_t ScratchBytes(const Params& p) { return mcubert_classifier_head_get_buffer_size(p.seq_len, p.hidden, p.labels); }

void* Init(TfLiteContext* context, const char* buffer, size_t length) {
  return tflm::InitOpData<Params>(context, buffer, length, mcubert_classifier_head_parse_options);
}

TfLiteStatus Prepare(TfLiteContext* context, TfLiteNode* node) {
  return tflm::PrepareOp<Params>(context, node, kOp, MCUBERT_CLASSIFIER_HEAD_RUNTIME_INPUTS,
                                 mcubert_classifier_head_validate, ScratchBytes);
}

TfLiteStatus Eval(TfLiteContext* context, TfLiteNode* node) {
  mcubert_classifier_head_weights w;
  w.pooler_weights = tflm::Input<int8_t>(context, node, MCUBERT_CLASSIFIER_HEAD_POOLER_WEIGHTS);
  w.pooler_channels = tflm::Input<int32_t>(context, node, MCUBERT_CLASSIFIER_HEAD_POOLER_CHANNELS);
  w.tanh_lut = tflm::Input<int8_t>(context, node, MCUBERT_CLASSIFIER_HEAD_TANH_LUT);
  w.classifier_weights = tflm::Input<int8_t>(context, node, MCUBERT_CLASSIFIER_HEAD_CLASSIFIER_WEIGHTS);
  w.classifier_channels = tflm::Input<int32_t>(context, node, MCUBERT_CLASSIFIER_HEAD_CLASSIFIER_CHANNELS);
  const int8_t* hidden = tflm::Input<int8_t>(context, node, MCUBERT_CLASSIFIER_HEAD_HIDDEN);
  int8_t* logits = tflite::micro::GetTensorData<int8_t>(tflite::micro::GetEvalOutput(context, node, 0));
  const tflm::OpData<Params>& data = tflm::Prepared<Params>(node);
  const mcubert_context scratch = tflm::ScratchOf(context, node, data.scratch);
  mcubert_message message;
  return tflm::Report(mcubert_classifier_head_s8(&data.params, &w, hidden, logits, &scratch, &message), message);
}

}  // namespace

TFLMRegistration* Register_MCUBERT_CLASSIFIER_HEAD() {
  static TFLMRegistration registration = tflite::micro::RegisterOp(Init, Prepare, Eval);
  return &registration;
}

}  // namespace mcubert
