// MCUBERT_MLP (SPEC 4.3): FC1 + activation table + FC2 + residual + LayerNorm, tiled over
// tokens, in place on the hidden state.
#include "mcubert_tflm.h"
#include "mcubert_tflm_common.h"
#include "tensorflow/lite/micro/kernels/kernel_util.h"

namespace mcubert {
namespace {

using Params = mcubert_mlp_params;
constexpr char kOp[] = "MCUBERT_MLP";

int32_t ScratchBytes(const Params& p) { return mcubert_mlp_get_buffer_size(p.seq_len, p.hidden, p.ffn, p.tile); }

void* Init(TfLiteContext* context, const char* buffer, size_t length) {
  return tflm::InitOpData<Params>(context, buffer, length, mcubert_mlp_parse_options);
}

TfLiteStatus Prepare(TfLiteContext* context, TfLiteNode* node) {
  return tflm::PrepareOp<Params>(context, node, kOp, MCUBERT_MLP_RUNTIME_INPUTS, mcubert_mlp_validate, ScratchBytes);
}

TfLiteStatus Eval(TfLiteContext* context, TfLiteNode* node) {
  mcubert_mlp_weights w;
  w.fc1_weights = tflm::Input<int8_t>(context, node, MCUBERT_MLP_FC1_WEIGHTS);
  w.fc1_channels = tflm::Input<int32_t>(context, node, MCUBERT_MLP_FC1_CHANNELS);
  w.activation_lut = tflm::Input<int8_t>(context, node, MCUBERT_MLP_ACTIVATION_LUT);
  w.fc2_weights = tflm::Input<int8_t>(context, node, MCUBERT_MLP_FC2_WEIGHTS);
  w.fc2_channels = tflm::Input<int32_t>(context, node, MCUBERT_MLP_FC2_CHANNELS);
  w.layer_norm = tflm::Input<int32_t>(context, node, MCUBERT_MLP_LAYER_NORM);
  w.residual = tflm::Input<int32_t>(context, node, MCUBERT_MLP_RESIDUAL);
  int8_t* hidden = tflm::InPlaceHidden(context, node);
  const tflm::OpData<Params>& data = tflm::Prepared<Params>(node);
  const mcubert_context scratch = tflm::ScratchOf(context, node, data.scratch);
  mcubert_message message;
  return tflm::Report(mcubert_mlp_s8(&data.params, &w, hidden, &scratch, &message), message);
}

}  // namespace

TFLMRegistration* Register_MCUBERT_MLP() {
  static TFLMRegistration registration = tflite::micro::RegisterOp(Init, Prepare, Eval);
  return &registration;
}

}  // namespace mcubert
