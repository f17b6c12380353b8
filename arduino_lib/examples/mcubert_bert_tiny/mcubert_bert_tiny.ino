// mcubert_bert_tiny: an exported BERT (mcubert schedule) through tflite::MicroInterpreter.
//
// The model and its facts are not in this folder in git: export a model
// (`python -m tflm_mcubert export --out OUT`) and copy its files here with
//   python arduino_lib/extras/copy_export_to_sketch.py OUT <this sketch folder>
// (README.md in this folder). Needs the Arduino_TensorFlowLite library with a TFLM that has
// TFLMRegistration (this library's README.md says which).
//
// Runs the export's test sequence once and prints the logits (int8 and dequantized), the latency of
// Invoke() (micros()), the arena TFLM used, and whether the output equals the one the host
// reference computed for the same sequence. Open the serial monitor at 115200 baud.

#include <mcubert_tflm_arduino.h>
#include <mcubert/mcubert_ops.h>
#include <string.h>

#include "model_data.h"
#include "model_settings.h"
#include "model_test_input.h"
#include "tensorflow/lite/micro/micro_interpreter.h"
#include "tensorflow/lite/micro/micro_mutable_op_resolver.h"
#include "tensorflow/lite/schema/schema_generated.h"

// Text in: an export of a checkpoint with a tokenizer writes model_vocab.h/.cpp (the on-device
// tokenizer's vocabulary). With them in the sketch folder, every line typed into the serial monitor is
// tokenized on the board and classified.
#if defined(__has_include)
#if __has_include("model_vocab.h")
#define MCUBERT_SKETCH_TEXT 1
#include <mcubert_tflm_text.h>
#include "model_vocab.h"
#endif
#endif
#ifndef MCUBERT_SKETCH_TEXT
#define MCUBERT_SKETCH_TEXT 0
#endif

// The arena the export planned (MCUBERT_MODEL_ARENA_BYTES: the offline plan plus TFLM's own
// allocations); raise MCUBERT_SKETCH_ARENA_EXTRA_BYTES if AllocateTensors() reports it too small.
#define MCUBERT_SKETCH_ARENA_EXTRA_BYTES 0
constexpr size_t kArenaBytes = MCUBERT_MODEL_ARENA_BYTES + MCUBERT_SKETCH_ARENA_EXTRA_BYTES;
alignas(MCUBERT_MODEL_ARENA_ALIGNMENT) static uint8_t tensor_arena[kArenaBytes];

using OutputType = MCUBERT_MODEL_OUTPUT_TYPE;

static void fail(const char *step) {
  Serial.print("FAIL: ");
  Serial.println(step);
}

static float dequantized(OutputType q) {
#if MCUBERT_MODEL_OUTPUT_PER_TENSOR_QUANTIZED
  return (static_cast<float>(q) - static_cast<float>(MCUBERT_MODEL_OUTPUT_ZERO_POINT)) *
         MCUBERT_MODEL_OUTPUT_SCALE;
#else
  return static_cast<float>(q);   // float output, or per-channel quantized: printed as stored
#endif
}

static void print_output(const OutputType *values) {
  // Logits: all of them; a hidden-state output (a model without classifier): the first 8.
  const int shown = MCUBERT_MODEL_NUM_LABELS > 0 ? MCUBERT_MODEL_NUM_LABELS : 8;
  Serial.println(MCUBERT_MODEL_OUTPUT_NAME ":");
  for (int i = 0; i < shown && i < MCUBERT_MODEL_OUTPUT_ELEMENTS; ++i) {
    Serial.print("  [");
    Serial.print(i);
    Serial.print("] ");
#if MCUBERT_MODEL_OUTPUT_PER_TENSOR_QUANTIZED
    Serial.print(static_cast<int>(values[i]));
    Serial.print(" = ");
#endif
    Serial.println(dequantized(values[i]), 4);
  }
}

// How many output values differ from the reference by more than MCUBERT_TEST_OUTPUT_TOLERANCE
// (0 for integer outputs: the MCUBERT kernels are bit-exact with the reference).
static int differing_values(const OutputType *values) {
  int differing = 0;
  for (int i = 0; i < MCUBERT_MODEL_OUTPUT_ELEMENTS; ++i) {
    float difference = static_cast<float>(values[i]) - static_cast<float>(g_model_test_expected_output[i]);
    if (difference < 0.0f) {
      difference = -difference;
    }
    if (difference > static_cast<float>(MCUBERT_TEST_OUTPUT_TOLERANCE)) {
      ++differing;
    }
  }
  return differing;
}

// The interpreter run_test_sequence() set up (nullptr when it failed), for the text loop.
static tflite::MicroInterpreter *g_interpreter = nullptr;

static void run_test_sequence() {
  Serial.print("mcubert_bert_tiny: " MCUBERT_MODEL_SCHEDULE " schedule, exported for " MCUBERT_MODEL_BOARD
               ", seq_len ");
  Serial.print(MCUBERT_MODEL_SEQ_LEN);
  Serial.print(", arena ");
  Serial.print(static_cast<unsigned long>(kArenaBytes));
  Serial.println(" B");

  // Before TFLM trusts the bytes: a corrupted model, or another than model_settings.h describes (even one
  // whose integrity record a corruption hid), is reported, not run. MCUBERT_OK means verified.
  mcubert_model_integrity integrity;
  mcubert_message message;
  if (mcubert_verify_model_expected(g_model_data, g_model_data_len, MCUBERT_MODEL_TFLITE_BYTES,
                                    MCUBERT_MODEL_TFLITE_CRC32, &integrity, &message) != MCUBERT_OK) {
    Serial.println(message.text);
    fail("the model in Flash is corrupted or not model_settings.h's (upload the sketch again)");
    return;
  }
  Serial.println("model integrity: verified");

  const tflite::Model *model = tflite::GetModel(g_model_data);
  if (model->version() != TFLITE_SCHEMA_VERSION) {
    fail("the model's schema version is not this TFLM's");
    return;
  }
  // Static: the interpreter keeps pointers to the resolver for its whole life.
  static tflite::MicroMutableOpResolver<MCUBERT_MODEL_OP_RESOLVER_SIZE> resolver;
  if (MCUBERT_MODEL_REGISTER_OPS(resolver) != kTfLiteOk) {
    fail("registering the model's ops");
    return;
  }
  static tflite::MicroInterpreter interpreter(model, resolver, tensor_arena, kArenaBytes);
  g_interpreter = &interpreter;
  if (interpreter.AllocateTensors() != kTfLiteOk) {
    fail("AllocateTensors (TFLM's message above; arena too small: raise MCUBERT_SKETCH_ARENA_EXTRA_BYTES)");
    return;
  }
  if (interpreter.inputs_size() != MCUBERT_MODEL_INPUT_COUNT) {
    fail("the model's input count differs from model_settings.h");
    return;
  }
  for (size_t i = 0; i < MCUBERT_MODEL_INPUT_COUNT; ++i) {
    TfLiteTensor *input = interpreter.input(i);
    if (input == nullptr || input->bytes != g_model_test_inputs[i].bytes) {
      Serial.print(g_model_test_inputs[i].name);
      Serial.print(": ");
      fail("input size differs from model_test_input.cpp");
      return;
    }
    memcpy(input->data.raw, g_model_test_inputs[i].data, g_model_test_inputs[i].bytes);
  }

  const unsigned long start = micros();
  const TfLiteStatus status = interpreter.Invoke();
  const unsigned long latency_us = micros() - start;
  if (status != kTfLiteOk) {
    fail("Invoke (TFLM's message above)");
    return;
  }
  const TfLiteTensor *output = interpreter.output(MCUBERT_MODEL_OUTPUT_INDEX);
  if (output == nullptr || output->bytes != sizeof(g_model_test_expected_output)) {
    fail("output size differs from model_settings.h");
    return;
  }
  const OutputType *values = reinterpret_cast<const OutputType *>(output->data.raw);

  print_output(values);
  Serial.print("latency us: ");
  Serial.println(latency_us);
  Serial.print("arena used: ");
  Serial.print(static_cast<unsigned long>(interpreter.arena_used_bytes()));
  Serial.print(" of ");
  Serial.print(static_cast<unsigned long>(kArenaBytes));
  Serial.println(" B");
  const int differing = differing_values(values);
  Serial.print("output matches the reference: ");
  if (differing == 0) {
    Serial.println("yes");
  } else {
    Serial.print("no (");
    Serial.print(differing);
    Serial.print(" of ");
    Serial.print(MCUBERT_MODEL_OUTPUT_ELEMENTS);
    Serial.println(" values differ)");
  }
}

#if MCUBERT_SKETCH_TEXT
// Tokenizes one line, runs the model and prints the label, the logits and the time of each step.
static void classify(const char *line, size_t bytes) {
  static mcubert::TextInput text(g_model_vocab, g_model_vocab_len);  // checks the vocabulary once
  uint32_t tokens = 0;
  const unsigned long start = micros();
  const TfLiteStatus tokenized = text.Fill(
      *g_interpreter,
      {MCUBERT_MODEL_INPUT_IDS_INDEX, MCUBERT_MODEL_TOKEN_TYPE_IDS_INDEX, MCUBERT_MODEL_ATTENTION_MASK_INDEX},
      reinterpret_cast<const uint8_t *>(line), static_cast<uint32_t>(bytes), &tokens);
  const unsigned long tokenize_us = micros() - start;
  if (tokenized != kTfLiteOk) {
    Serial.println(text.message());
    return;
  }
  const unsigned long invoke_start = micros();
  if (g_interpreter->Invoke() != kTfLiteOk) {
    fail("Invoke (TFLM's message above)");
    return;
  }
  const unsigned long invoke_us = micros() - invoke_start;
  const OutputType *values =
      reinterpret_cast<const OutputType *>(g_interpreter->output(MCUBERT_MODEL_OUTPUT_INDEX)->data.raw);
  int label = 0;
  for (int i = 1; i < MCUBERT_MODEL_NUM_LABELS; ++i) {
    if (values[i] > values[label]) {
      label = i;
    }
  }
#if MCUBERT_MODEL_NUM_LABELS > 0  // "label <name> (<id>)", the names from model_settings.h
  static const char *const kLabels[MCUBERT_MODEL_LABEL_COUNT] = MCUBERT_MODEL_LABELS;
  Serial.print("label ");
  Serial.print(kLabels[label]);
  Serial.print(" (");
  Serial.print(label);
  Serial.println(")");
#else
  (void)label;  // a hidden-state export has no labels
#endif
  print_output(values);
  Serial.print("tokens: ");
  Serial.print(tokens);
  Serial.print(" of ");
  Serial.print(MCUBERT_MODEL_SEQ_LEN);
  Serial.print(", tokenize us: ");
  Serial.print(tokenize_us);
  Serial.print(", invoke us: ");
  Serial.println(invoke_us);
}

// One line from the serial monitor (Enter sends "\n", "\r" or both: either ends it; an empty line
// is skipped); longer lines are cut at the buffer, as the tokenizer would truncate them anyway.
static void read_serial_lines() {
  static char line[256];
  static size_t length = 0;
  while (Serial.available() > 0) {
    const int c = Serial.read();
    if (c == '\n' || c == '\r') {
      if (length > 0) {
        classify(line, length);
        Serial.println("type a sentence:");
      }
      length = 0;
    } else if (length < sizeof(line)) {
      line[length++] = static_cast<char>(c);
    }
  }
}
#endif

void setup() {
  Serial.begin(115200);
  const unsigned long start = millis();
  while (!Serial && millis() - start < 4000) {   // USB serial: wait for the monitor, not forever
    delay(10);
  }
  run_test_sequence();
#if MCUBERT_SKETCH_TEXT
  if (g_interpreter != nullptr) {
    Serial.println("type a sentence:");
  }
#endif
}

void loop() {
#if MCUBERT_SKETCH_TEXT
  if (g_interpreter != nullptr) {
    read_serial_lines();
  }
#endif
}
