// mcubert_app: an exported model through tflite::MicroInterpreter on bare metal.
//
// Everything model-specific comes from the export directory: the model (model_data.cc), its arena
// size, op registration and tensor facts (model_settings.h), and a test sequence with the output
// the host reference computes for it (model_test_input.cc). The app runs that sequence once and
// prints the label ("label <name> (<id>)", the names from model_settings.h), the output (dequantized
// logits), the cycles and milliseconds of Invoke(), the arena TFLM used, and whether the output
// matches the reference. Exit status: 0 match, 1 mismatch, 2 setup failed (the message says which
// step). Output goes through mcubert_platform_write(), TFLM's own messages too
// (RegisterDebugLogCallback: a TFLM library built with TARGET=cortex_m_generic).
//
// `arena=<bytes>` on the command line (QEMU: -append) hands TFLM only that much of the arena: the
// least that works on this core is found by running again, not by rebuilding.
//
// Text in (MCUBERT_APP_TEXT, set when the export has the tokenizer blob model_vocab.cc): `text=<UTF-8>`
// as the last thing on the command line is tokenized on the device (mcubert_tokenize) and run instead
// of the test sequence; the app prints the label, the scores and the cycles of tokenize and invoke.
// On a board, define mcubert_platform_command_line() to return the line your UART received.
#include <cstdint>
#include <cstring>

#include "model_data.h"
#include "model_settings.h"
#include "model_test_input.h"
#include "platform.h"
#include "tensorflow/lite/micro/cortex_m_generic/debug_log_callback.h"
#include "tensorflow/lite/micro/micro_interpreter.h"
#if MCUBERT_APP_PROFILE
#include <new>

#include "tensorflow/lite/micro/micro_profiler.h"
#endif
#include "tensorflow/lite/micro/micro_mutable_op_resolver.h"
#include "tensorflow/lite/schema/schema_generated.h"
#include "mcubert/mcubert_ops.h"  // mcubert_verify_model, for any export
#if MCUBERT_MODEL_USES_CUSTOM_OPS
#include "mcubert_tflm.h"
#endif
#if MCUBERT_APP_TEXT
#include "mcubert_tflm_text.h"
#include "model_vocab.h"
#endif

#ifndef MCUBERT_APP_ARENA_EXTRA_BYTES
#define MCUBERT_APP_ARENA_EXTRA_BYTES 0
#endif

namespace {

constexpr size_t kArenaBytes = MCUBERT_MODEL_ARENA_BYTES + MCUBERT_APP_ARENA_EXTRA_BYTES;
// In the board's largest contiguous SRAM region (the linker script's REGION_ARENA).
alignas(MCUBERT_MODEL_ARENA_ALIGNMENT) __attribute__((section(".bss.mcubert_arena"))) uint8_t tensor_arena[kArenaBytes];

using OutputType = MCUBERT_MODEL_OUTPUT_TYPE;
constexpr int32_t kFixedDecimals = 4;  // printed reals: 4 decimals, without printf's float support

void Write(const char* text) { mcubert_platform_write(text); }

// `arena=<bytes>` from the command line, or the whole arena. 0 when the text is not a number that fits.
size_t ArenaBytesToUse(const char* command_line) {
  const char* text = std::strstr(command_line, "arena=");
  if (text == nullptr) {
    return kArenaBytes;
  }
  size_t bytes = 0;
  for (text += 6; *text >= '0' && *text <= '9'; ++text) {
    bytes = bytes * 10u + static_cast<size_t>(*text - '0');
    if (bytes > kArenaBytes) {
      return 0;
    }
  }
  return bytes;
}

int Fail(const char* step) {
  Write("FAIL: ");
  Write(step);
  Write("\n");
  return 2;
}

// A real number as fixed point (value * 10^4, rounded); no libm, no float printf.
void WriteReal(float value) {
  float scaled = value * 10000.0f;
  mcubert_platform_write_fixed(static_cast<int32_t>(scaled + (scaled >= 0.0f ? 0.5f : -0.5f)), kFixedDecimals);
}

float Dequantized(OutputType q) {
#if MCUBERT_MODEL_OUTPUT_PER_TENSOR_QUANTIZED
  return (static_cast<float>(q) - static_cast<float>(MCUBERT_MODEL_OUTPUT_ZERO_POINT)) * MCUBERT_MODEL_OUTPUT_SCALE;
#else
  return static_cast<float>(q);  // float output, or per-channel quantized: print as stored
#endif
}

void WriteOutput(const OutputType* values) {
  constexpr int32_t kShown = MCUBERT_MODEL_NUM_LABELS > 0 ? MCUBERT_MODEL_NUM_LABELS : 8;
  Write(MCUBERT_MODEL_OUTPUT_NAME);
  Write(MCUBERT_MODEL_NUM_LABELS > 0 ? ":\n" : " (first 8 values):\n");
  for (int32_t i = 0; i < kShown && i < MCUBERT_MODEL_OUTPUT_ELEMENTS; ++i) {
    Write("  [");
    mcubert_platform_write_int(i);
    Write("] ");
#if MCUBERT_MODEL_OUTPUT_PER_TENSOR_QUANTIZED
    mcubert_platform_write_int(values[i]);
    Write(" = ");
#endif
    WriteReal(Dequantized(values[i]));
    Write("\n");
  }
}

void WriteCycles(uint32_t cycles) {
  Write("invoke: ");
  mcubert_platform_write_uint(cycles);
  Write(" cycles");
  if (mcubert_core_clock_hz != 0u) {
    const uint64_t micro = static_cast<uint64_t>(cycles) * 1000000u / mcubert_core_clock_hz;
    Write(" = ");
    mcubert_platform_write_fixed(static_cast<int32_t>(micro), 3);
    Write(" ms at ");
    mcubert_platform_write_uint(mcubert_core_clock_hz / 1000000u);
    Write(" MHz (mcubert_core_clock_hz)");
  }
  Write("\n");
}

// Largest |output - expected| and how many elements differ.
bool MatchesReference(const OutputType* values, float* max_difference, int32_t* differing) {
  *max_difference = 0.0f;
  *differing = 0;
  for (int32_t i = 0; i < MCUBERT_MODEL_OUTPUT_ELEMENTS; ++i) {
    float difference = static_cast<float>(values[i]) - static_cast<float>(g_model_test_expected_output[i]);
    difference = difference < 0.0f ? -difference : difference;
    if (difference > 0.0f) {
      ++*differing;
    }
    if (difference > *max_difference) {
      *max_difference = difference;
    }
  }
  return *max_difference <= static_cast<float>(MCUBERT_TEST_OUTPUT_TOLERANCE);
}

#if MCUBERT_APP_TEXT
// The text after `text=` on the command line, or nullptr.
const char* TextFromCommandLine(const char* command_line) {
  const char* text = std::strstr(command_line, "text=");
  return text == nullptr ? nullptr : text + 5;
}

// Tokenizes `text` into the interpreter's three inputs; false (after saying why) when it cannot.
bool TokenizeInto(tflite::MicroInterpreter& interpreter, const char* text, uint32_t* cycles) {
  static mcubert::TextInput text_input(g_model_vocab, g_model_vocab_len);  // checks the blob once
  uint32_t valid = 0;
  const uint32_t start = mcubert_cycles();
  const TfLiteStatus status = text_input.Fill(
      interpreter,
      {MCUBERT_MODEL_INPUT_IDS_INDEX, MCUBERT_MODEL_TOKEN_TYPE_IDS_INDEX, MCUBERT_MODEL_ATTENTION_MASK_INDEX},
      reinterpret_cast<const uint8_t*>(text), static_cast<uint32_t>(std::strlen(text)), &valid);
  *cycles = mcubert_cycles() - start;
  if (status != kTfLiteOk) {
    Write(text_input.message());
    Write("\n");
    return false;
  }
  Write("tokens: ");
  mcubert_platform_write_uint(valid);
  Write(" of ");
  mcubert_platform_write_int(MCUBERT_MODEL_SEQ_LEN);
  Write("\ntokenize: ");
  mcubert_platform_write_uint(*cycles);
  Write(" cycles\n");
  return true;
}

#endif

// "label <name> (<id>)": the largest score's class, named as model_settings.h names it (the first on ties).
void WriteLabel(const OutputType* values) {
#if MCUBERT_MODEL_NUM_LABELS > 0
  static const char* const kLabels[MCUBERT_MODEL_LABEL_COUNT] = MCUBERT_MODEL_LABELS;
  int32_t best = 0;
  for (int32_t i = 1; i < MCUBERT_MODEL_NUM_LABELS; ++i) {
    if (values[i] > values[best]) {
      best = i;
    }
  }
  Write("label ");
  Write(kLabels[best]);
  Write(" (");
  mcubert_platform_write_int(best);
  Write(")\n");
#else
  (void)values;
#endif
}

}  // namespace

int main() {
  RegisterDebugLogCallback(mcubert_platform_write);
  Write("mcubert_app: " MCUBERT_MODEL_SCHEDULE " schedule, exported for " MCUBERT_MODEL_BOARD ", seq_len ");
  mcubert_platform_write_int(MCUBERT_MODEL_SEQ_LEN);
  Write(", arena ");
  const size_t arena_bytes = ArenaBytesToUse(mcubert_platform_command_line());
  mcubert_platform_write_uint(arena_bytes);
  if (arena_bytes != kArenaBytes) {
    Write(" of ");
    mcubert_platform_write_uint(kArenaBytes);
  }
  Write(" B\n");
  if (arena_bytes == 0) {
    return Fail("arena=<bytes> must be a number from 1 to the built arena's size");
  }

  // Before TFLM trusts the bytes: a corrupted model, or another than model_settings.h describes (even one
  // whose integrity record a corruption hid), is reported, not run. MCUBERT_OK means verified.
  mcubert_model_integrity integrity;
  mcubert_message message;
  if (mcubert_verify_model_expected(g_model_data, g_model_data_len, MCUBERT_MODEL_TFLITE_BYTES,
                                    MCUBERT_MODEL_TFLITE_CRC32, &integrity, &message) != MCUBERT_OK) {
    Write(message.text);
    Write("\n");
    return Fail("the model in Flash is corrupted or not model_settings.h's (flash the firmware again)");
  }
  Write("model integrity: verified\n");

  const tflite::Model* model = tflite::GetModel(g_model_data);
  if (model->version() != TFLITE_SCHEMA_VERSION) {
    return Fail("the model's schema version is not this TFLM's");
  }
  static_assert(MCUBERT_MODEL_OP_RESOLVER_SIZE > 0, "the model has no ops");
  tflite::MicroMutableOpResolver<MCUBERT_MODEL_OP_RESOLVER_SIZE> resolver;
  if (MCUBERT_MODEL_REGISTER_OPS(resolver) != kTfLiteOk) {
    return Fail("registering the model's ops");
  }
#if MCUBERT_APP_PROFILE  // per-op ticks (the DWT cycle counter) after Invoke: bench/whole_model.py
  // Placement new into static storage: no destructor to register, so no C++ runtime exit machinery.
  alignas(tflite::MicroProfiler) static uint8_t profiler_storage[sizeof(tflite::MicroProfiler)];
  tflite::MicroProfiler& profiler = *new (profiler_storage) tflite::MicroProfiler();
  tflite::MicroInterpreter interpreter(model, resolver, tensor_arena, arena_bytes, nullptr, &profiler);
#else
  tflite::MicroInterpreter interpreter(model, resolver, tensor_arena, arena_bytes);
#endif
  if (interpreter.AllocateTensors() != kTfLiteOk) {
    return Fail("AllocateTensors (TFLM's message above; too small an arena: -DMCUBERT_APP_ARENA_EXTRA_BYTES=...)");
  }
  if (interpreter.inputs_size() != MCUBERT_MODEL_INPUT_COUNT) {
    return Fail("the model's input count differs from model_settings.h");
  }
  for (size_t i = 0; i < MCUBERT_MODEL_INPUT_COUNT; ++i) {
    TfLiteTensor* input = interpreter.input(i);
    if (input == nullptr || input->bytes != g_model_test_inputs[i].bytes) {
      Write(g_model_test_inputs[i].name);
      Write(": ");
      return Fail("input size differs from model_test_input.cc");
    }
    std::memcpy(input->data.raw, g_model_test_inputs[i].data, g_model_test_inputs[i].bytes);
  }
#if MCUBERT_APP_TEXT
  const char* text = TextFromCommandLine(mcubert_platform_command_line());
  uint32_t tokenize_cycles = 0;
  if (text != nullptr && !TokenizeInto(interpreter, text, &tokenize_cycles)) {
    return Fail("tokenizing the text (the tokenizer's message above)");
  }
#endif

  const uint32_t start = mcubert_cycles();
  const TfLiteStatus status = interpreter.Invoke();
  const uint32_t cycles = mcubert_cycles() - start;
  if (status != kTfLiteOk) {
    return Fail("Invoke (TFLM's message above)");
  }
#if MCUBERT_APP_PROFILE
  profiler.LogTicksPerTagCsv();
#endif
  const TfLiteTensor* output = interpreter.output(MCUBERT_MODEL_OUTPUT_INDEX);
  if (output == nullptr || output->bytes != sizeof(g_model_test_expected_output)) {
    return Fail("output size differs from model_settings.h");
  }
  const OutputType* values = reinterpret_cast<const OutputType*>(output->data.raw);
#if MCUBERT_APP_TEXT
  if (text != nullptr) {  // text in: no reference output to compare with
    WriteLabel(values);
    WriteOutput(values);
    WriteCycles(cycles);
    return 0;
  }
#endif

  WriteLabel(values);
  WriteOutput(values);
  WriteCycles(cycles);
  Write("arena used: ");
  mcubert_platform_write_uint(interpreter.arena_used_bytes());
  Write(" of ");
  mcubert_platform_write_uint(arena_bytes);
  Write(" B\n");
  Write("stack used: ");
  mcubert_platform_write_uint(mcubert_stack_used_bytes());
  Write(" of ");
  mcubert_platform_write_uint(mcubert_stack_size_bytes());
  Write(" B\n");

  float max_difference = 0.0f;
  int32_t differing = 0;
  const bool matches = MatchesReference(values, &max_difference, &differing);
  Write("output matches the reference: ");
  Write(matches ? "yes" : "no");
  if (differing != 0) {
    Write(" (");
    mcubert_platform_write_int(differing);
    Write(" of ");
    mcubert_platform_write_int(MCUBERT_MODEL_OUTPUT_ELEMENTS);
    Write(" values differ, largest difference ");
    WriteReal(max_difference);
    Write(")");
  }
  Write("\n");
  return matches ? 0 : 1;
}
