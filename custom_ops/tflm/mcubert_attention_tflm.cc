// MCUBERT_ATTENTION (SPEC 4.2): multi-head self-attention + output projection + residual +
// LayerNorm, tiled over query rows, in place on the hidden state.
#include "mcubert_tflm.h"
#include "mcubert_tflm_common.h"
#include "tensorflow/lite/micro/kernels/kernel_util.h"

namespace mcubert {
namespace {

using Params = mcubert_attention_params;
constexpr char kOp[] = "MCUBERT_ATTENTION";

int32_t ScratchBytes(const Params& p) {
  return mcubert_attention_get_buffer_size(p.seq_len, p.hidden, p.heads, p.tile);
}

void* Init(TfLiteContext* context, const char* buffer, size_t length) {
  return tflm::InitOpData<Params>(context, buffer, length, mcubert_attention_parse_options);
}

TfLiteStatus Prepare(TfLiteContext* context, TfLiteNode* node) {
  return tflm::PrepareOp<Params>(context, node, kOp, MCUBERT_ATTENTION_RUNTIME_INPUTS, mcubert_attention_validate,
                                 ScratchBytes);
}

TfLiteStatus Eval(TfLiteContext* context, TfLiteNode* node) {
  mcubert_attention_weights w;
  w.query_weights = tflm::Input<int8_t>(context, node, MCUBERT_ATTENTION_QUERY_WEIGHTS);
  w.query_channels = tflm::Input<int32_t>(context, node, MCUBERT_ATTENTION_QUERY_CHANNELS);
  w.key_weights = tflm::Input<int8_t>(context, node, MCUBERT_ATTENTION_KEY_WEIGHTS);
  w.key_channels = tflm::Input<int32_t>(context, node, MCUBERT_ATTENTION_KEY_CHANNELS);
  w.value_weights = tflm::Input<int8_t>(context, node, MCUBERT_ATTENTION_VALUE_WEIGHTS);
  w.value_channels = tflm::Input<int32_t>(context, node, MCUBERT_ATTENTION_VALUE_CHANNELS);
  w.output_weights = tflm::Input<int8_t>(context, node, MCUBERT_ATTENTION_OUTPUT_WEIGHTS);
  w.output_channels = tflm::Input<int32_t>(context, node, MCUBERT_ATTENTION_OUTPUT_CHANNELS);
  w.exp_lut = tflm::Input<int16_t>(context, node, MCUBERT_ATTENTION_EXP_LUT);
  w.layer_norm = tflm::Input<int32_t>(context, node, MCUBERT_ATTENTION_LAYER_NORM);
  w.residual = tflm::Input<int32_t>(context, node, MCUBERT_ATTENTION_RESIDUAL);
  const void* mask = tflm::InputData(context, node, MCUBERT_ATTENTION_MASK);
  int8_t* hidden = tflm::InPlaceHidden(context, node);
  const tflm::OpData<Params>& data = tflm::Prepared<Params>(node);
  const mcubert_context scratch = tflm::ScratchOf(context, node, data.scratch);
  mcubert_message message;
  return tflm::Report(mcubert_attention_s8(&data.params, &w, hidden, mask, &scratch, &message), message);
}

}  // namespace

TFLMRegistration* Register_MCUBERT_ATTENTION() {
  static TFLMRegistration registration = tflite::micro::RegisterOp(Init, Prepare, Eval);
  return &registration;
}

}  // namespace mcubert
