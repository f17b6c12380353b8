// MCUBERT on Mbed OS: runs the exported model once on the export's test sequence, times Invoke()
// with the DWT cycle counter and checks the output against the host reference.
//
// Everything model-specific comes from the export (copied into model/ by sync_sources.py):
//   model_data.h        g_model_data[], the .tflite
//   model_settings.h    arena size and alignment, op resolver size and MCUBERT_MODEL_REGISTER_OPS,
//                       input order and output facts
//   model_test_input.h  one input sequence and the output the host reference computed for it
//   model_vocab.h       (when the checkpoint has a tokenizer) the on-device tokenizer's vocabulary:
//                       after the test, every line typed into the serial terminal is tokenized on
//                       the board and classified
// so a new model needs no edit here: export, sync, rebuild.

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <chrono>

#include "mbed.h"

#include "model_data.h"
#include "model_settings.h"
#include "model_test_input.h"
#include "tensorflow/lite/micro/micro_interpreter.h"
#include "tensorflow/lite/micro/micro_mutable_op_resolver.h"
#include "tensorflow/lite/micro/system_setup.h"
#include "tensorflow/lite/schema/schema_generated.h"
#if MCUBERT_MODEL_USES_CUSTOM_OPS
#include "mcubert/mcubert_ops.h"
#include "mcubert_tflm.h"
#if defined(__has_include)
#if __has_include("model_vocab.h")
#define MCUBERT_APP_TEXT 1
#include "mcubert_tflm_text.h"
#include "model_vocab.h"
#endif
#endif
#endif
#ifndef MCUBERT_APP_TEXT
#define MCUBERT_APP_TEXT 0
#endif

namespace {

// Output goes through Mbed's minimal-printf (mbed_app.json): %f with floating point enabled, no %g/%e.

// Timed runs after one warm-up run (which also fills the caches); MBED_CONF_APP_TIMED_RUNS comes
// from mbed_app.json.
#ifdef MBED_CONF_APP_TIMED_RUNS
constexpr int kTimedRuns = MBED_CONF_APP_TIMED_RUNS;
#else
constexpr int kTimedRuns = 5;
#endif
static_assert(kTimedRuns >= 1, "app.timed-runs must be at least 1");

// The arena is an ordinary static buffer: it lands in .bss, which Mbed's linker scripts place in
// the target's RAM region. mbed_app.json pins that region to the largest contiguous SRAM of each
// board (on the NUCLEO-H7A3ZI-Q the 1 MB AXI SRAM, not the 128 KB DTCM) and PlacementIsExpected()
// checks it at boot, because a model sized for 1 MB cannot live anywhere else.
alignas(MCUBERT_MODEL_ARENA_ALIGNMENT) uint8_t g_arena[MCUBERT_MODEL_ARENA_BYTES];

// Static rather than on main's stack: the bare-metal profile's stack is a few KB.
tflite::MicroMutableOpResolver<MCUBERT_MODEL_OP_RESOLVER_SIZE> g_resolver;

// DWT->CYCCNT counts core cycles. On the Cortex-M7 the DWT sits behind a software lock (LAR) that
// must be opened before CYCCNT counts; on other cores the write is ignored.
void StartCycleCounter() {
  CoreDebug->DEMCR |= CoreDebug_DEMCR_TRCENA_Msk;
  DWT->LAR = 0xC5ACCE55;
  DWT->CYCCNT = 0;
  DWT->CTRL |= DWT_CTRL_CYCCNTENA_Msk;
}

bool PlacementIsExpected() {
#if defined(MBED_CONF_APP_ARENA_REGION_START) && defined(MBED_CONF_APP_ARENA_REGION_SIZE)
  const uintptr_t start = MBED_CONF_APP_ARENA_REGION_START;
  const uintptr_t end = start + MBED_CONF_APP_ARENA_REGION_SIZE;
  const uintptr_t arena = reinterpret_cast<uintptr_t>(g_arena);
  printf("arena: %u B at 0x%08" PRIxPTR " (%s)\n", static_cast<unsigned>(sizeof(g_arena)), arena,
         MBED_CONF_APP_ARENA_REGION_NAME);
  if (arena < start || arena + sizeof(g_arena) > end) {
    printf("error: the arena is outside %s (0x%08" PRIxPTR "..0x%08" PRIxPTR
           "): check target.mbed_ram_start "
           "in mbed_app.json against this target's linker script\n",
           MBED_CONF_APP_ARENA_REGION_NAME, start, end);
    return false;
  }
#else
  printf("arena: %u B at %p (no expected region configured for this target)\n", static_cast<unsigned>(sizeof(g_arena)),
         static_cast<void*>(g_arena));
#endif
  return true;
}

bool CopyTestInputs(tflite::MicroInterpreter& interpreter) {
  for (int i = 0; i < MCUBERT_MODEL_INPUT_COUNT; ++i) {
    TfLiteTensor* tensor = interpreter.input(i);
    const mcubert_test_tensor& sample = g_model_test_inputs[i];
    if (tensor == nullptr || tensor->bytes != sample.bytes) {
      printf(
          "error: input %d (%s) takes %u bytes, the test input has %u: model_test_input.* and "
          "model_data.cc come from different exports\n",
          i, sample.name, tensor ? static_cast<unsigned>(tensor->bytes) : 0u, static_cast<unsigned>(sample.bytes));
      return false;
    }
    memcpy(tensor->data.raw, sample.data, sample.bytes);
  }
  return true;
}

double Dequantized(double value) {
#if MCUBERT_MODEL_OUTPUT_PER_TENSOR_QUANTIZED
  return (value - MCUBERT_MODEL_OUTPUT_ZERO_POINT) * MCUBERT_MODEL_OUTPUT_SCALE;
#else
  return value;  // float output, or per-channel scales (hidden state): print as stored
#endif
}

// Prints the output: all logits, or the first values of a hidden state.
void ReportScores(const MCUBERT_MODEL_OUTPUT_TYPE* values) {
  const int shown = MCUBERT_MODEL_NUM_LABELS > 0 ? MCUBERT_MODEL_NUM_LABELS : 8;
  printf("%s:", MCUBERT_MODEL_OUTPUT_NAME);
  for (int i = 0; i < shown && i < MCUBERT_MODEL_OUTPUT_ELEMENTS; ++i) {
    printf(" %.4f", Dequantized(static_cast<double>(values[i])));
  }
  printf(MCUBERT_MODEL_NUM_LABELS > 0 ? "\n" : " ...\n");
}

// Prints the output and returns how many values differ from the reference by more than
// MCUBERT_TEST_OUTPUT_TOLERANCE.
int ReportOutput(const TfLiteTensor& output) {
  const auto* values = reinterpret_cast<const MCUBERT_MODEL_OUTPUT_TYPE*>(output.data.raw);
  ReportScores(values);
  int mismatches = 0;
  double worst = 0.0;
  for (int i = 0; i < MCUBERT_MODEL_OUTPUT_ELEMENTS; ++i) {
    const double difference = static_cast<double>(values[i]) - static_cast<double>(g_model_test_expected_output[i]);
    const double magnitude = difference < 0 ? -difference : difference;
    worst = magnitude > worst ? magnitude : worst;
    mismatches += magnitude > MCUBERT_TEST_OUTPUT_TOLERANCE;
  }
  printf("matches the reference: %s (%d of %d values off by more than %.6f; largest difference %.6f)\n",
         mismatches == 0 ? "yes" : "NO", mismatches, MCUBERT_MODEL_OUTPUT_ELEMENTS,
         static_cast<double>(MCUBERT_TEST_OUTPUT_TOLERANCE), worst);
  return mismatches;
}

// The interpreter Run() set up, for the text loop (nullptr until then).
tflite::MicroInterpreter* g_interpreter = nullptr;

int Run() {
  printf("\nMCUBERT on %s (export for %s, %s schedule), seq len %d, core clock %" PRIu32
         " Hz, "
         "I-cache %s, D-cache %s\n",
         MBED_STRINGIFY(TARGET_NAME), MCUBERT_MODEL_BOARD, MCUBERT_MODEL_SCHEDULE, MCUBERT_MODEL_SEQ_LEN,
         static_cast<uint32_t>(SystemCoreClock), (SCB->CCR & SCB_CCR_IC_Msk) ? "on" : "off",
         (SCB->CCR & SCB_CCR_DC_Msk) ? "on" : "off");
  if (!PlacementIsExpected()) return 1;

  // Before TFLM trusts the bytes: a corrupted model, or another than model_settings.h describes (even one
  // whose integrity record a corruption hid), is reported, not run. MCUBERT_OK means verified.
  mcubert_model_integrity integrity;
  mcubert_message message;
  if (mcubert_verify_model_expected(g_model_data, g_model_data_len, MCUBERT_MODEL_TFLITE_BYTES,
                                    MCUBERT_MODEL_TFLITE_CRC32, &integrity, &message) != MCUBERT_OK) {
    printf("error: the model in Flash is corrupted or not model_settings.h's (flash the firmware again): %s\n",
           message.text);
    return 1;
  }
  printf("model integrity: verified\n");

  const tflite::Model* model = tflite::GetModel(g_model_data);
  if (model->version() != TFLITE_SCHEMA_VERSION) {
    printf("error: model schema %" PRIu32 ", this TFLM reads %d\n", static_cast<uint32_t>(model->version()),
           TFLITE_SCHEMA_VERSION);
    return 1;
  }
  if (MCUBERT_MODEL_REGISTER_OPS(g_resolver) != kTfLiteOk) {
    printf("error: registering the model's ops failed (resolver of %d slots)\n", MCUBERT_MODEL_OP_RESOLVER_SIZE);
    return 1;
  }
  static tflite::MicroInterpreter interpreter(model, g_resolver, g_arena, sizeof(g_arena));
  g_interpreter = &interpreter;
  if (interpreter.AllocateTensors() != kTfLiteOk) {
    printf("error: AllocateTensors failed with a %d B arena (TFLM printed why above)\n", MCUBERT_MODEL_ARENA_BYTES);
    return 1;
  }
  printf("arena used: %u of %d B\n", static_cast<unsigned>(interpreter.arena_used_bytes()), MCUBERT_MODEL_ARENA_BYTES);

  StartCycleCounter();
  uint32_t fastest = UINT32_MAX;
  uint64_t total = 0;
  for (int run = 0; run <= kTimedRuns; ++run) {  // run 0 warms the caches and is not counted
    if (!CopyTestInputs(interpreter)) return 1;  // inputs live in the arena: restore them every run
    mbed::Timer timer;
    timer.start();
    const uint32_t begin = DWT->CYCCNT;
    const TfLiteStatus status = interpreter.Invoke();
    const uint32_t cycles = DWT->CYCCNT - begin;  // unsigned: correct across one wrap of the counter
    timer.stop();
    if (status != kTfLiteOk) {
      printf("error: Invoke failed (TFLM printed why above)\n");
      return 1;
    }
    // The 32-bit counter wraps after 2^32 cycles (~20 s at 216 MHz); the microsecond ticker does
    // not, so a run long enough to wrap shows as a gap between the two.
    const double ticker_ms = std::chrono::duration<double, std::milli>(timer.elapsed_time()).count();
    const double cycle_ms = 1e3 * cycles / SystemCoreClock;
    const double wrap_ms = 1e3 * 4294967296.0 / SystemCoreClock;
    if (ticker_ms - cycle_ms > wrap_ms / 2) {
      printf("error: Invoke took %.0f ms, too long for the cycle counter\n", ticker_ms);
      return 1;
    }
    printf("%s: %" PRIu32 " cycles, %.2f ms (ticker %.2f ms)\n", run == 0 ? "warm-up" : "invoke", cycles, cycle_ms,
           ticker_ms);
    if (run > 0) {
      fastest = cycles < fastest ? cycles : fastest;
      total += cycles;
    }
  }
  printf("invoke over %d runs: fastest %" PRIu32 " cycles (%.2f ms), mean %.2f ms\n", kTimedRuns, fastest,
         1e3 * fastest / SystemCoreClock, 1e3 * (static_cast<double>(total) / kTimedRuns) / SystemCoreClock);

  const TfLiteTensor* output = interpreter.output(MCUBERT_MODEL_OUTPUT_INDEX);
  if (output == nullptr || output->bytes != sizeof(g_model_test_expected_output)) {
    printf("error: output %d is not the %u B the export describes\n", MCUBERT_MODEL_OUTPUT_INDEX,
           static_cast<unsigned>(sizeof(g_model_test_expected_output)));
    return 1;
  }
  return ReportOutput(*output) == 0 ? 0 : 1;
}

#if MCUBERT_APP_TEXT
// One line from the serial terminal (stdin): Enter sends "\r", "\n" or both, either ends it; longer
// lines are cut at the buffer (the tokenizer truncates to the sequence length anyway). -1 at EOF.
int ReadLine(char* line, int capacity) {
  int length = 0;
  int c;
  while ((c = getchar()) != EOF) {
    if (c == '\n' || c == '\r') {
      if (length > 0) return length;
      continue;  // the second half of "\r\n", or an empty line
    }
    if (length < capacity) line[length++] = static_cast<char>(c);
  }
  return length > 0 ? length : -1;
}

// Tokenizes, runs and prints label, logits and cycles for every line typed until EOF.
void ClassifyLines(tflite::MicroInterpreter& interpreter) {
  static mcubert::TextInput text(g_model_vocab, g_model_vocab_len);  // checks the vocabulary once
  static char line[256];
  printf("type a sentence:\n");
  int length;
  while ((length = ReadLine(line, sizeof(line))) >= 0) {
    uint32_t tokens = 0;
    const uint32_t start = DWT->CYCCNT;
    const TfLiteStatus tokenized = text.Fill(
        interpreter,
        {MCUBERT_MODEL_INPUT_IDS_INDEX, MCUBERT_MODEL_TOKEN_TYPE_IDS_INDEX, MCUBERT_MODEL_ATTENTION_MASK_INDEX},
        reinterpret_cast<const uint8_t*>(line), static_cast<uint32_t>(length), &tokens);
    const uint32_t tokenize_cycles = DWT->CYCCNT - start;
    if (tokenized != kTfLiteOk) {
      printf("error: %s\n", text.message());
      continue;
    }
    const uint32_t invoke_start = DWT->CYCCNT;
    if (interpreter.Invoke() != kTfLiteOk) {
      printf("error: Invoke failed (TFLM printed why above)\n");
      continue;
    }
    const uint32_t invoke_cycles = DWT->CYCCNT - invoke_start;
    const auto* values =
        reinterpret_cast<const MCUBERT_MODEL_OUTPUT_TYPE*>(interpreter.output(MCUBERT_MODEL_OUTPUT_INDEX)->data.raw);
    int label = 0;
    for (int i = 1; i < MCUBERT_MODEL_NUM_LABELS; ++i) label = values[i] > values[label] ? i : label;
#if MCUBERT_MODEL_NUM_LABELS > 0  // "label <name> (<id>)", the names from model_settings.h
    static const char* const kLabels[MCUBERT_MODEL_LABEL_COUNT] = MCUBERT_MODEL_LABELS;
    printf("label %s (%d)\n", kLabels[label], label);
#else
    (void)label;  // a hidden-state export has no labels
#endif
    printf("tokens %" PRIu32 " of %d; tokenize %" PRIu32 " cycles, invoke %" PRIu32 " cycles, %.2f ms\n", tokens,
           MCUBERT_MODEL_SEQ_LEN, tokenize_cycles, invoke_cycles, 1e3 * invoke_cycles / SystemCoreClock);
    ReportScores(values);
    printf("type a sentence:\n");
  }
}
#endif

}  // namespace

int main() {
  tflite::InitializeTarget();
  const int result = Run();
  printf("done: %s\n", result == 0 ? "PASS" : "FAIL");
#if MCUBERT_APP_TEXT
  if (result == 0 && g_interpreter != nullptr) ClassifyLines(*g_interpreter);
#endif
  while (true) {
    __WFI();  // nothing else to do; the serial output stays on the terminal
  }
}
