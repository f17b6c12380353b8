// MCUBERT_DECODER_MLP (SPEC 4.7): a decoder's pre-LayerNorm MLP for one token, in place on its residual
// stream.
#include "mcubert_tflm.h"
#include "mcubert_tflm_common.h"
#include "tensorflow/lite/micro/kernels/kernel_util.h"

namespace mcubert {
namespace {

using Params = mcubert_decoder_mlp_params;
constexpr char kOp[] = "MCUBERT_DECODER_MLP";

int32_t ScratchBytes(const Params& p) { return mcubert_decoder_mlp_get_buffer_size(p.hidden, p.ffn); }

void* Init(TfLiteContext* context, const char* buffer, size_t length) {
  return tflm::InitOpData<Params>(context, buffer, length, mcubert_decoder_mlp_parse_options);
}

TfLiteStatus Prepare(TfLiteContext* context, TfLiteNode* node) {
  return tflm::PrepareOp<Params>(context, node, kOp, MCUBERT_DECODER_MLP_RUNTIME_INPUTS, mcubert_decoder_mlp_validate,
                                 ScratchBytes);
}

TfLiteStatus Eval(TfLiteContext* context, TfLiteNode* node) {
  mcubert_decoder_mlp_weights w;
  w.layer_norm = tflm::Input<int32_t>(context, node, MCUBERT_DECODER_MLP_LAYER_NORM);
  w.fc1_weights = tflm::Input<int8_t>(context, node, MCUBERT_DECODER_MLP_FC1_WEIGHTS);
  w.fc1_channels = tflm::Input<int32_t>(context, node, MCUBERT_DECODER_MLP_FC1_CHANNELS);
  w.activation_lut = tflm::Input<int8_t>(context, node, MCUBERT_DECODER_MLP_ACTIVATION_LUT);
  w.fc2_weights = tflm::Input<int8_t>(context, node, MCUBERT_DECODER_MLP_FC2_WEIGHTS);
  w.fc2_channels = tflm::Input<int32_t>(context, node, MCUBERT_DECODER_MLP_FC2_CHANNELS);
  w.residual = tflm::Input<int32_t>(context, node, MCUBERT_DECODER_MLP_RESIDUAL);
  w.output_residual = tflm::Input<int32_t>(context, node, MCUBERT_DECODER_MLP_OUTPUT_RESIDUAL);
  int8_t* hidden = tflm::InPlaceHidden(context, node);
  const tflm::OpData<Params>& data = tflm::Prepared<Params>(node);
  const mcubert_context scratch = tflm::ScratchOf(context, node, data.scratch);
  mcubert_message message;
  return tflm::Report(mcubert_decoder_mlp_s8(&data.params, &w, hidden, &scratch, &message), message);
}

}  // namespace

TFLMRegistration* Register_MCUBERT_DECODER_MLP() {
  static TFLMRegistration registration = tflite::micro::RegisterOp(Init, Prepare, Eval);
  return &registration;
}

}  // namespace mcubert
