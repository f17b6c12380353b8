// MCUBERT_SAMPLE (SPEC 4.9): a decoder's next token drawn from the LM head's candidates. Inputs 0..1 are
// computed at run time: the candidates int32[2][k] (updated in place, output 0 shares their buffer) and the
// generator's state int32[1], a variable tensor the interpreter keeps between invokes
// (MicroInterpreter::Reset() zeroes it: a new text draws the same ids for the same seed).
#include "mcubert_tflm.h"
#include "mcubert_tflm_common.h"
#include "tensorflow/lite/micro/kernels/kernel_util.h"

namespace mcubert {
namespace {

using Params = mcubert_sample_params;
constexpr char kOp[] = "MCUBERT_SAMPLE";

int32_t ScratchBytes(const Params& p) { return mcubert_sample_get_buffer_size(p.top_k); }

void* Init(TfLiteContext* context, const char* buffer, size_t length) {
  return tflm::InitOpData<Params>(context, buffer, length, mcubert_sample_parse_options);
}

TfLiteStatus Prepare(TfLiteContext* context, TfLiteNode* node) {
  return tflm::PrepareOp<Params>(context, node, kOp, MCUBERT_SAMPLE_RUNTIME_INPUTS, mcubert_sample_validate,
                                 ScratchBytes);
}

TfLiteStatus Eval(TfLiteContext* context, TfLiteNode* node) {
  mcubert_sample_weights w;
  w.exp_lut = tflm::Input<int16_t>(context, node, MCUBERT_SAMPLE_EXP_LUT);
  int32_t* top = static_cast<int32_t*>(tflm::InPlaceOutput(context, node));
  TfLiteEvalTensor* state = tflite::micro::GetMutableEvalInput(context, node, MCUBERT_SAMPLE_RNG_STATE);
  const tflm::OpData<Params>& data = tflm::Prepared<Params>(node);
  const mcubert_context scratch = tflm::ScratchOf(context, node, data.scratch);
  mcubert_message message;
  return tflm::Report(
      mcubert_sample_s8(&data.params, &w, top, tflite::micro::GetTensorData<int32_t>(state), &scratch, &message),
      message);
}

}  // namespace

TFLMRegistration* Register_MCUBERT_SAMPLE() {
  static TFLMRegistration registration = tflite::micro::RegisterOp(Init, Prepare, Eval);
  return &registration;
}

}  // namespace mcubert
