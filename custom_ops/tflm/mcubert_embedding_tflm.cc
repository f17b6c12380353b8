// MCUBERT_EMBEDDING (SPEC 4.1): clustered low-rank word lookup + position + token type, then
// LayerNorm. Token ids or types out of range fail Invoke with the kernel's message.
#include "mcubert_tflm.h"
#include "mcubert_tflm_common.h"
#include "tensorflow/lite/micro/kernels/kernel_util.h"

namespace mcubert {
namespace {

using Params = mcubert_embedding_params;
constexpr char kOp[] = "MCUBERT_EMBEDDING";

int32_t ScratchBytes(const Params& p) { return mcubert_embedding_get_buffer_size(p.seq_len, p.hidden); }

void* Init(TfLiteContext* context, const char* buffer, size_t length) {
  return tflm::InitOpData<Params>(context, buffer, length, mcubert_embedding_parse_options);
}

TfLiteStatus Prepare(TfLiteContext* context, TfLiteNode* node) {
  return tflm::PrepareOp<Params>(context, node, kOp, MCUBERT_EMBEDDING_RUNTIME_INPUTS, mcubert_embedding_validate,
                                 ScratchBytes);
}

TfLiteStatus Eval(TfLiteContext* context, TfLiteNode* node) {
  mcubert_embedding_weights w;
  w.clusters = tflm::Input<int32_t>(context, node, MCUBERT_EMBEDDING_CLUSTERS);
  w.word_rows = tflm::Input<int8_t>(context, node, MCUBERT_EMBEDDING_WORD_ROWS);
  w.word_projections = tflm::Input<int8_t>(context, node, MCUBERT_EMBEDDING_WORD_PROJECTIONS);
  w.word_requant = tflm::Input<int32_t>(context, node, MCUBERT_EMBEDDING_WORD_REQUANT);
  w.position_table = tflm::Input<int8_t>(context, node, MCUBERT_EMBEDDING_POSITION_TABLE);
  w.position_requant = tflm::Input<int32_t>(context, node, MCUBERT_EMBEDDING_POSITION_REQUANT);
  w.token_type_table = tflm::Input<int8_t>(context, node, MCUBERT_EMBEDDING_TOKEN_TYPE_TABLE);
  w.token_type_requant = tflm::Input<int32_t>(context, node, MCUBERT_EMBEDDING_TOKEN_TYPE_REQUANT);
  w.layer_norm = tflm::Input<int32_t>(context, node, MCUBERT_EMBEDDING_LAYER_NORM);
  const int32_t* input_ids = tflm::Input<int32_t>(context, node, MCUBERT_EMBEDDING_INPUT_IDS);
  const int32_t* token_types = tflm::Input<int32_t>(context, node, MCUBERT_EMBEDDING_TOKEN_TYPE_IDS);
  int8_t* hidden = tflite::micro::GetTensorData<int8_t>(tflite::micro::GetEvalOutput(context, node, 0));
  const tflm::OpData<Params>& data = tflm::Prepared<Params>(node);
  const mcubert_context scratch = tflm::ScratchOf(context, node, data.scratch);
  mcubert_message message;
  return tflm::Report(mcubert_embedding_s8(&data.params, &w, input_ids, token_types, hidden, &scratch, &message),
                      message);
}

}  // namespace

TFLMRegistration* Register_MCUBERT_EMBEDDING() {
  static TFLMRegistration registration = tflite::micro::RegisterOp(Init, Prepare, Eval);
  return &registration;
}

}  // namespace mcubert
