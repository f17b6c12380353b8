// Text in for a TFLM firmware: the on-device tokenizer (../include/mcubert/mcubert_tokenizer.h) writing
// straight into an MCUBERT export's input tensors (ids and token types int32, attention mask int8:
// the tokenizer's own output types, so no copy and no extra RAM).
//
//   static mcubert::TextInput text(g_model_vocab, g_model_vocab_len);  // checks the blob once
//   if (!text.ok()) { print(text.message()); }
//   uint32_t tokens = 0;
//   if (text.Fill(interpreter, {MCUBERT_MODEL_INPUT_IDS_INDEX, MCUBERT_MODEL_TOKEN_TYPE_IDS_INDEX,
//                               MCUBERT_MODEL_ATTENTION_MASK_INDEX}, line, line_bytes, &tokens) != kTfLiteOk) {
//     print(text.message());
//   }
//   interpreter.Invoke();
//
// Shared by the Arduino sketch, the Mbed application and the bare-metal mcubert_app.
#ifndef MCUBERT_TFLM_TEXT_H_
#define MCUBERT_TFLM_TEXT_H_

#include <stdint.h>

#include "mcubert/mcubert_tokenizer.h"
#include "tensorflow/lite/c/common.h"
#include "tensorflow/lite/micro/micro_interpreter.h"

namespace mcubert {

// Positions of the three inputs in the interpreter (model_settings.h's MCUBERT_MODEL_*_INDEX).
struct TextInputIndices {
  int ids;
  int token_types;
  int mask;
};

class TextInput {
 public:
  // One word's scratch for mcubert_tokenize(): BERT's 100-character words need 608 B.
  static constexpr uint32_t kWordBufferBytes = 1024;

  TextInput(const uint8_t* blob, uint32_t blob_bytes);

  // Whether the blob passed mcubert_tokenizer_init() (and fits the word buffer); message() says why not.
  bool ok() const { return ok_; }
  const char* message() const { return message_.text; }

  // Tokenizes `text` (UTF-8, `text_bytes` long; invalid sequences are dropped, longer text truncated to
  // the model's sequence length) into the three inputs; *valid_tokens gets the positions used. kTfLiteError
  // with message() saying why when the blob was bad or an input is not the tensor the tokenizer fills.
  TfLiteStatus Fill(tflite::MicroInterpreter& interpreter, const TextInputIndices& inputs, const uint8_t* text,
                    uint32_t text_bytes, uint32_t* valid_tokens);

 private:
  bool CheckInput(const TfLiteTensor* tensor, const char* name, TfLiteType type, uint32_t element_bytes,
                  uint32_t seq_len);

  mcubert_tokenizer tokenizer_;
  mcubert_message message_;
  bool ok_;
  uint32_t word_buffer_[kWordBufferBytes / 4];
};

}  // namespace mcubert

#endif  // MCUBERT_TFLM_TEXT_H_
