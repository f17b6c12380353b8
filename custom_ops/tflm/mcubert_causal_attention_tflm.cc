// MCUBERT_CAUSAL_ATTENTION (SPEC 4.6): a decoder's pre-LayerNorm self-attention for one token over an int8
// KV cache. Inputs 0..2 are computed at run time: the residual stream (updated in place, output 0 shares
// its buffer), the position, and the cache, a variable tensor the interpreter keeps between invokes
// (MicroInterpreter::ResetVariableTensors() clears it for a new sequence).
#include "mcubert_tflm.h"
#include "mcubert_tflm_common.h"
#include "tensorflow/lite/micro/kernels/kernel_util.h"

namespace mcubert {
namespace {

using Params = mcubert_causal_attention_params;
constexpr char kOp[] = "MCUBERT_CAUSAL_ATTENTION";

int32_t ScratchBytes(const Params& p) { return mcubert_causal_attention_get_buffer_size(p.context, p.hidden, p.heads); }

void* Init(TfLiteContext* context, const char* buffer, size_t length) {
  return tflm::InitOpData<Params>(context, buffer, length, mcubert_causal_attention_parse_options);
}

TfLiteStatus Prepare(TfLiteContext* context, TfLiteNode* node) {
  return tflm::PrepareOp<Params>(context, node, kOp, MCUBERT_CAUSAL_ATTENTION_RUNTIME_INPUTS,
                                 mcubert_causal_attention_validate, ScratchBytes);
}

TfLiteStatus Eval(TfLiteContext* context, TfLiteNode* node) {
  mcubert_causal_attention_weights w;
  w.layer_norm = tflm::Input<int32_t>(context, node, MCUBERT_CAUSAL_ATTENTION_LAYER_NORM);
  w.query_weights = tflm::Input<int8_t>(context, node, MCUBERT_CAUSAL_ATTENTION_QUERY_WEIGHTS);
  w.query_channels = tflm::Input<int32_t>(context, node, MCUBERT_CAUSAL_ATTENTION_QUERY_CHANNELS);
  w.key_weights = tflm::Input<int8_t>(context, node, MCUBERT_CAUSAL_ATTENTION_KEY_WEIGHTS);
  w.key_channels = tflm::Input<int32_t>(context, node, MCUBERT_CAUSAL_ATTENTION_KEY_CHANNELS);
  w.value_weights = tflm::Input<int8_t>(context, node, MCUBERT_CAUSAL_ATTENTION_VALUE_WEIGHTS);
  w.value_channels = tflm::Input<int32_t>(context, node, MCUBERT_CAUSAL_ATTENTION_VALUE_CHANNELS);
  w.output_weights = tflm::Input<int8_t>(context, node, MCUBERT_CAUSAL_ATTENTION_OUTPUT_WEIGHTS);
  w.output_channels = tflm::Input<int32_t>(context, node, MCUBERT_CAUSAL_ATTENTION_OUTPUT_CHANNELS);
  w.exp_lut = tflm::Input<int16_t>(context, node, MCUBERT_CAUSAL_ATTENTION_EXP_LUT);
  w.residual = tflm::Input<int32_t>(context, node, MCUBERT_CAUSAL_ATTENTION_RESIDUAL);
  w.output_residual = tflm::Input<int32_t>(context, node, MCUBERT_CAUSAL_ATTENTION_OUTPUT_RESIDUAL);
  int8_t* hidden = tflm::InPlaceHidden(context, node);
  const int32_t* position = tflm::Input<int32_t>(context, node, MCUBERT_CAUSAL_ATTENTION_POSITION);
  TfLiteEvalTensor* cache = tflite::micro::GetMutableEvalInput(context, node, MCUBERT_CAUSAL_ATTENTION_CACHE);
  const tflm::OpData<Params>& data = tflm::Prepared<Params>(node);
  const mcubert_context scratch = tflm::ScratchOf(context, node, data.scratch);
  mcubert_message message;
  return tflm::Report(mcubert_causal_attention_s8(&data.params, &w, hidden, position,
                                                  tflite::micro::GetTensorData<int8_t>(cache), &scratch, &message),
                      message);
}

}  // namespace

TFLMRegistration* Register_MCUBERT_CAUSAL_ATTENTION() {
  static TFLMRegistration registration = tflite::micro::RegisterOp(Init, Prepare, Eval);
  return &registration;
}

}  // namespace mcubert
