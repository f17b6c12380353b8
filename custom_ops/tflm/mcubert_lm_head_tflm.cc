// MCUBERT_LM_HEAD (SPEC 4.5): a decoder's LN_f and tied LM head over the embedding's clustered word table:
// one token's residual stream hidden[d] -> int32[2][k], the k best ids and their scores.
#include "mcubert_tflm.h"
#include "mcubert_tflm_common.h"
#include "tensorflow/lite/micro/kernels/kernel_util.h"

namespace mcubert {
namespace {

using Params = mcubert_lm_head_params;
constexpr char kOp[] = "MCUBERT_LM_HEAD";

int32_t ScratchBytes(const Params& p) { return mcubert_lm_head_get_buffer_size(p.hidden, p.top_k); }

void* Init(TfLiteContext* context, const char* buffer, size_t length) {
  return tflm::InitOpData<Params>(context, buffer, length, mcubert_lm_head_parse_options);
}

TfLiteStatus Prepare(TfLiteContext* context, TfLiteNode* node) {
  return tflm::PrepareOp<Params>(context, node, kOp, MCUBERT_LM_HEAD_RUNTIME_INPUTS, mcubert_lm_head_validate,
                                 ScratchBytes);
}

TfLiteStatus Eval(TfLiteContext* context, TfLiteNode* node) {
  mcubert_lm_head_weights w;
  w.residual = tflm::Input<int32_t>(context, node, MCUBERT_LM_HEAD_RESIDUAL);
  w.layer_norm = tflm::Input<int32_t>(context, node, MCUBERT_LM_HEAD_LAYER_NORM);
  w.clusters = tflm::Input<int32_t>(context, node, MCUBERT_LM_HEAD_CLUSTERS);
  w.word_rows = tflm::Input<int8_t>(context, node, MCUBERT_LM_HEAD_WORD_ROWS);
  w.word_projections = tflm::Input<int8_t>(context, node, MCUBERT_LM_HEAD_WORD_PROJECTIONS);
  w.channel_requant = tflm::Input<int32_t>(context, node, MCUBERT_LM_HEAD_CHANNEL_REQUANT);
  w.cluster_requant = tflm::Input<int32_t>(context, node, MCUBERT_LM_HEAD_CLUSTER_REQUANT);
  const int8_t* hidden = tflm::Input<int8_t>(context, node, MCUBERT_LM_HEAD_HIDDEN);
  int32_t* top = tflite::micro::GetTensorData<int32_t>(tflite::micro::GetEvalOutput(context, node, 0));
  const tflm::OpData<Params>& data = tflm::Prepared<Params>(node);
  const mcubert_context scratch = tflm::ScratchOf(context, node, data.scratch);
  mcubert_message message;
  return tflm::Report(mcubert_lm_head_s8(&data.params, &w, hidden, top, &scratch, &message), message);
}

}  // namespace

TFLMRegistration* Register_MCUBERT_LM_HEAD() {
  static TFLMRegistration registration = tflite::micro::RegisterOp(Init, Prepare, Eval);
  return &registration;
}

}  // namespace mcubert
