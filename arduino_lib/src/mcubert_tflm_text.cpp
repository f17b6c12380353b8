/* GENERATED FILE - do not edit. Generated from custom_ops/tflm/mcubert_tflm_text.cc by arduino_lib/extras/sync_from_custom_ops.py;
 * edit the source, not this copy, and re-run the script. */
// Compiled only when the sketch uses Arduino_TensorFlowLite (TFLM's headers on the include
// path): the Arduino builder compiles every source of a library, and kernel-only sketches
// must build without TFLM.
#if defined(__has_include)
#if __has_include("tensorflow/lite/micro/micro_interpreter.h")

#include "mcubert_tflm_text.h"

namespace mcubert {
namespace {

// message = the concatenation of `parts` (truncated to fit): no printf, which a firmware may not link.
void SetMessage(mcubert_message* message, const char* const* parts, int count) {
  uint32_t at = 0;
  for (int i = 0; i < count; ++i) {
    for (const char* c = parts[i]; *c != '\0' && at + 1 < sizeof(message->text); ++c) {
      message->text[at++] = *c;
    }
  }
  message->text[at] = '\0';
}

}  // namespace

TextInput::TextInput(const uint8_t* blob, uint32_t blob_bytes) : message_(), ok_(false) {
  if (mcubert_tokenizer_init(&tokenizer_, blob, blob_bytes, &message_) != MCUBERT_OK) {
    return;
  }
  if (mcubert_tokenizer_get_buffer_size(&tokenizer_) > kWordBufferBytes) {
    const char* parts[] = {"tokenizer: a word of this vocabulary needs more scratch than TextInput's ",
                           "kWordBufferBytes (raise it in mcubert_tflm_text.h)"};
    SetMessage(&message_, parts, 2);
    return;
  }
  ok_ = true;
}

bool TextInput::CheckInput(const TfLiteTensor* tensor, const char* name, TfLiteType type, uint32_t element_bytes,
                           uint32_t seq_len) {
  if (tensor == nullptr || seq_len == 0u || tensor->type != type || tensor->bytes != seq_len * element_bytes) {
    const char* parts[] = {"tokenizer: input ", name, " is not the ", TfLiteTypeGetName(type),
                           " tensor of the sequence length the tokenizer writes (not an MCUBERT export?)"};
    SetMessage(&message_, parts, 5);
    return false;
  }
  return true;
}

TfLiteStatus TextInput::Fill(tflite::MicroInterpreter& interpreter, const TextInputIndices& inputs, const uint8_t* text,
                             uint32_t text_bytes, uint32_t* valid_tokens) {
  *valid_tokens = 0;
  if (!ok_) {
    return kTfLiteError;
  }
  TfLiteTensor* ids = interpreter.input(inputs.ids);
  TfLiteTensor* types = interpreter.input(inputs.token_types);
  TfLiteTensor* mask = interpreter.input(inputs.mask);
  const uint32_t seq_len = ids == nullptr ? 0u : static_cast<uint32_t>(ids->bytes / sizeof(int32_t));
  if (!CheckInput(ids, "input_ids", kTfLiteInt32, 4, seq_len) ||
      !CheckInput(types, "token_type_ids", kTfLiteInt32, 4, seq_len) ||
      !CheckInput(mask, "attention_mask", kTfLiteInt8, 1, seq_len)) {
    return kTfLiteError;
  }
  const mcubert_status status =
      mcubert_tokenize(&tokenizer_, text, text_bytes, nullptr, 0u, seq_len, ids->data.i32, types->data.i32,
                       mask->data.int8, valid_tokens, word_buffer_, sizeof(word_buffer_), &message_);
  return status == MCUBERT_OK ? kTfLiteOk : kTfLiteError;
}

}  // namespace mcubert

#endif  // TFLM on the include path
#endif  // defined(__has_include)
