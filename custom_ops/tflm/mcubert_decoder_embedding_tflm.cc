// MCUBERT_DECODER_EMBEDDING (SPEC 4.8): a decoder's input for one token, the clustered word row plus the
// position row, written as the residual stream.
#include "mcubert_tflm.h"
#include "mcubert_tflm_common.h"
#include "tensorflow/lite/micro/kernels/kernel_util.h"

namespace mcubert {
namespace {

using Params = mcubert_decoder_embedding_params;
constexpr char kOp[] = "MCUBERT_DECODER_EMBEDDING";

int32_t ScratchBytes(const Params& p) { return mcubert_decoder_embedding_get_buffer_size(p.context, p.hidden); }

void* Init(TfLiteContext* context, const char* buffer, size_t length) {
  return tflm::InitOpData<Params>(context, buffer, length, mcubert_decoder_embedding_parse_options);
}

TfLiteStatus Prepare(TfLiteContext* context, TfLiteNode* node) {
  return tflm::PrepareOp<Params>(context, node, kOp, MCUBERT_DECODER_EMBEDDING_RUNTIME_INPUTS,
                                 mcubert_decoder_embedding_validate, ScratchBytes);
}

TfLiteStatus Eval(TfLiteContext* context, TfLiteNode* node) {
  mcubert_decoder_embedding_weights w;
  w.clusters = tflm::Input<int32_t>(context, node, MCUBERT_DECODER_EMBEDDING_CLUSTERS);
  w.word_rows = tflm::Input<int8_t>(context, node, MCUBERT_DECODER_EMBEDDING_WORD_ROWS);
  w.word_projections = tflm::Input<int8_t>(context, node, MCUBERT_DECODER_EMBEDDING_WORD_PROJECTIONS);
  w.word_requant = tflm::Input<int32_t>(context, node, MCUBERT_DECODER_EMBEDDING_WORD_REQUANT);
  w.position_table = tflm::Input<int8_t>(context, node, MCUBERT_DECODER_EMBEDDING_POSITION_TABLE);
  w.position_requant = tflm::Input<int32_t>(context, node, MCUBERT_DECODER_EMBEDDING_POSITION_REQUANT);
  w.output_residual = tflm::Input<int32_t>(context, node, MCUBERT_DECODER_EMBEDDING_OUTPUT_RESIDUAL);
  const int32_t* input_id = tflm::Input<int32_t>(context, node, MCUBERT_DECODER_EMBEDDING_INPUT_ID);
  const int32_t* position = tflm::Input<int32_t>(context, node, MCUBERT_DECODER_EMBEDDING_POSITION);
  int8_t* hidden = tflite::micro::GetTensorData<int8_t>(tflite::micro::GetEvalOutput(context, node, 0));
  const tflm::OpData<Params>& data = tflm::Prepared<Params>(node);
  const mcubert_context scratch = tflm::ScratchOf(context, node, data.scratch);
  mcubert_message message;
  return tflm::Report(mcubert_decoder_embedding_s8(&data.params, &w, input_id, position, hidden, &scratch, &message),
                      message);
}

}  // namespace

TFLMRegistration* Register_MCUBERT_DECODER_EMBEDDING() {
  static TFLMRegistration registration = tflite::micro::RegisterOp(Init, Prepare, Eval);
  return &registration;
}

}  // namespace mcubert
