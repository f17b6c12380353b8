// mcubert_classify: proves the MCUBERT kernels build and link on a board, and times one call.
//
// Runs MCUBERT_CLASSIFIER_HEAD (BERT's pooler + tanh table + sequence classifier on the [CLS]
// row) on the tiny built-in test vector in mcubert_test_vector.h (hidden size 32, 3 labels;
// generated with the numpy reference by arduino_lib/extras/sync_from_custom_ops.py), prints the int8 logits, the
// reference's logits and the latency in microseconds.
//
// This calls the portable C kernel API (mcubert/mcubert_ops.h) directly: validate (what a TFLM
// op's Prepare does), get_buffer_size (the scratch Prepare requests from the arena), then the
// kernel (Eval). Needs no TFLM. A whole exported model (`python -m tflm_mcubert export`) runs
// through TFLM's MicroInterpreter and this library's op binding: examples/mcubert_bert_tiny.

#include <mcubert.h>

#include "mcubert_test_vector.h"

// Scratch for the kernel: 4-byte alignment is required (TFLM's arena gives 16).
static const int32_t kScratchBytes = 256;
alignas(16) static uint8_t scratch[kScratchBytes];
static int8_t logits[TV_LABELS];

static mcubert_classifier_head_params params;
static mcubert_classifier_head_weights weights;
static mcubert_message message;
static bool ready = false;

static void fail(const char *what, mcubert_status status) {
  Serial.print(what);
  Serial.print(" failed: ");
  Serial.print(mcubert_status_name(status));
  Serial.print(": ");
  Serial.println(message.text);
}

static bool prepare() {
  params.spec_version = MCUBERT_SPEC_VERSION;
  params.spec_hash = MCUBERT_SPEC_HASH;
  params.seq_len = TV_SEQ_LEN;
  params.hidden = TV_HIDDEN;
  params.labels = TV_LABELS;
  params.pooler_zero_point = TV_POOLER_ZERO_POINT;
  params.logits_zero_point = TV_LOGITS_ZERO_POINT;
  weights.pooler_weights = tv_pooler_weights;
  weights.pooler_channels = tv_pooler_channels;
  weights.tanh_lut = tv_tanh_lut;
  weights.classifier_weights = tv_classifier_weights;
  weights.classifier_channels = tv_classifier_channels;

  // Tensors in contract order (inputs, then the output); constants get their contents checked.
  const mcubert_tensor_view tensors[MCUBERT_CLASSIFIER_HEAD_NUM_TENSORS] = {
      {tv_hidden, MCUBERT_DTYPE_INT8, TV_SEQ_LEN * TV_HIDDEN},
      {tv_pooler_weights, MCUBERT_DTYPE_INT8, (int32_t)sizeof(tv_pooler_weights)},
      {tv_pooler_channels, MCUBERT_DTYPE_INT32, TV_HIDDEN * 3},
      {tv_tanh_lut, MCUBERT_DTYPE_INT8, 256},
      {tv_classifier_weights, MCUBERT_DTYPE_INT8, (int32_t)sizeof(tv_classifier_weights)},
      {tv_classifier_channels, MCUBERT_DTYPE_INT32, TV_LABELS * 3},
      {nullptr, MCUBERT_DTYPE_INT8, TV_LABELS},
  };
  mcubert_status status = mcubert_classifier_head_validate(
      &params, tensors, MCUBERT_CLASSIFIER_HEAD_NUM_TENSORS, &message);
  if (status != MCUBERT_OK) {
    fail("validate", status);
    return false;
  }
  int32_t needed = mcubert_classifier_head_get_buffer_size(TV_SEQ_LEN, TV_HIDDEN, TV_LABELS);
  if (needed < 0 || needed > kScratchBytes) {
    Serial.print("scratch too small, need ");
    Serial.println(needed);
    return false;
  }
  Serial.print("scratch bytes: ");
  Serial.println(needed);
  Serial.print("DSP path: ");
  Serial.println(mcubert_uses_dsp_path() ? "yes" : "no");
  return true;
}

static void run_once() {
  const mcubert_context context = {scratch, kScratchBytes};
  unsigned long start = micros();
  mcubert_status status =
      mcubert_classifier_head_s8(&params, &weights, tv_hidden, logits, &context, &message);
  unsigned long elapsed = micros() - start;
  if (status != MCUBERT_OK) {
    fail("mcubert_classifier_head_s8", status);
    return;
  }
  bool match = true;
  Serial.print("logits:");
  for (int i = 0; i < TV_LABELS; ++i) {
    Serial.print(' ');
    Serial.print((int)logits[i]);
    match = match && logits[i] == tv_expected_logits[i];
  }
  Serial.print("  reference:");
  for (int i = 0; i < TV_LABELS; ++i) {
    Serial.print(' ');
    Serial.print((int)tv_expected_logits[i]);
  }
  Serial.println(match ? "  (match)" : "  (MISMATCH)");
  Serial.print("latency us: ");
  Serial.println(elapsed);
}

void setup() {
  Serial.begin(115200);
  while (!Serial && millis() < 3000) {
  }
  Serial.println("mcubert_classify");
  ready = prepare();
}

void loop() {
  if (ready) {
    run_once();
  }
  delay(1000);
}
