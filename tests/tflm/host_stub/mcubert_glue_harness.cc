// Runs one MCUBERT op's registration (custom_ops/tflm/) against the stand-in TFLM of this folder:
// Init with the flexbuffer options, Prepare, Invoke, the way TFLM's KernelRunner does, with an
// arena whose size the caller picks (so running out of it can be tested too). Always builds: no
// TFLM checkout needed. tests/tflm/test_tflm_binding_glue.py drives it with ctypes.
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "mcubert_test_node.h"
#include "mcubert_tflm.h"
#include "mcubert_tflm_text.h"
#include "tensorflow/lite/micro/kernels/kernel_util.h"
#include "tensorflow/lite/micro/micro_context.h"
#include "tensorflow/lite/micro/micro_log.h"
#include "tensorflow/lite/micro/micro_utils.h"

namespace {

using mcubert_test::kMaxTensors;
constexpr size_t kArenaCapacity = 1 << 20;
constexpr int kMaxScratch = 4;

char g_log[4096];
size_t g_log_used = 0;

alignas(16) uint8_t g_arena[kArenaCapacity];
size_t g_arena_limit = kArenaCapacity;
size_t g_arena_used = 0;
void* g_scratch[kMaxScratch];
int g_scratch_count = 0;

mcubert_test::Node g_node;
TfLiteEvalTensor g_eval[kMaxTensors];

void* Allocate(size_t bytes) {
  const size_t start = (g_arena_used + 15u) & ~static_cast<size_t>(15u);
  if (start + bytes > g_arena_limit) return nullptr;
  g_arena_used = start + bytes;
  return g_arena + start;
}

void* AllocatePersistentBuffer(TfLiteContext*, size_t bytes) { return Allocate(bytes); }

TfLiteStatus RequestScratchBufferInArena(TfLiteContext*, size_t bytes, int* index) {
  void* buffer = Allocate(bytes);
  if (buffer == nullptr || g_scratch_count == kMaxScratch) return kTfLiteError;
  g_scratch[g_scratch_count] = buffer;
  *index = g_scratch_count++;
  return kTfLiteOk;
}

void* GetScratchBuffer(TfLiteContext*, int index) {
  return index >= 0 && index < g_scratch_count ? g_scratch[index] : nullptr;
}

class HarnessContext : public tflite::MicroContext {
 public:
  TfLiteTensor* AllocateTempInputTensor(const TfLiteNode* node, int index) override {
    return index < node->inputs->size ? &g_node.tensors[node->inputs->data[index]] : nullptr;
  }
  TfLiteTensor* AllocateTempOutputTensor(const TfLiteNode* node, int index) override {
    return index < node->outputs->size ? &g_node.tensors[node->outputs->data[index]] : nullptr;
  }
  void DeallocateTempTfLiteTensor(TfLiteTensor*) override {}
};

HarnessContext g_micro_context;

}  // namespace

void MicroPrintf(const char* format, ...) {
  va_list args;
  va_start(args, format);
  const int written = vsnprintf(g_log + g_log_used, sizeof(g_log) - g_log_used, format, args);
  va_end(args);
  if (written > 0) g_log_used += static_cast<size_t>(written);
  if (g_log_used >= sizeof(g_log) - 1) g_log_used = sizeof(g_log) - 2;
  g_log[g_log_used++] = '\n';
  g_log[g_log_used] = '\0';
}

namespace tflite {

int ElementCount(const TfLiteIntArray& dims) {
  int count = 1;
  for (int i = 0; i < dims.size; ++i) count *= dims.data[i];
  return count;
}

size_t EvalTensorBytes(const TfLiteEvalTensor* tensor) {
  for (int i = 0; i < kMaxTensors; ++i) {
    if (&g_eval[i] == tensor) return g_node.tensors[i].bytes;
  }
  return 0;
}

MicroContext* GetMicroContext(const TfLiteContext*) { return &g_micro_context; }

namespace micro {

const TfLiteEvalTensor* GetEvalInput(const TfLiteContext*, const TfLiteNode* node, int index) {
  return &g_eval[node->inputs->data[index]];
}

TfLiteEvalTensor* GetMutableEvalInput(const TfLiteContext*, const TfLiteNode* node, int index) {
  return &g_eval[node->inputs->data[index]];
}

TfLiteEvalTensor* GetEvalOutput(const TfLiteContext*, const TfLiteNode* node, int index) {
  return &g_eval[node->outputs->data[index]];
}

TFLMRegistration RegisterOp(void* (*init)(TfLiteContext*, const char*, size_t),
                            TfLiteStatus (*prepare)(TfLiteContext*, TfLiteNode*),
                            TfLiteStatus (*invoke)(TfLiteContext*, TfLiteNode*), void (*free)(TfLiteContext*, void*),
                            void (*reset)(TfLiteContext*, void*)) {
  TFLMRegistration registration = {init, free, prepare, invoke, reset};
  return registration;
}

}  // namespace micro
}  // namespace tflite

extern "C" const char* mcubert_glue_log(void) { return g_log; }

// AddMcubertOps into a resolver with room for `room` ops (1..8): 0 = every op added, 1 = refused.
// room 0: a resolver with one slot too few; 1: exactly kOpCount slots.
extern "C" int mcubert_glue_add_ops(int room) {
  if (room == 0) {
    tflite::MicroMutableOpResolver<mcubert::kOpCount - 1> resolver;
    return mcubert::AddMcubertOps(resolver) == kTfLiteOk ? 0 : 1;
  }
  if (room == 1) {
    tflite::MicroMutableOpResolver<mcubert::kOpCount> resolver;
    return mcubert::AddMcubertOps(resolver) == kTfLiteOk && resolver.count() == mcubert::kOpCount ? 0 : 1;
  }
  return -1;
}

// What Init's persistent data and the scratch requests of the next runs may use together.
extern "C" int mcubert_glue_set_arena_bytes(int32_t arena_bytes) {
  if (arena_bytes < 0 || static_cast<size_t>(arena_bytes) > kArenaCapacity) return 1;
  g_arena_limit = static_cast<size_t>(arena_bytes);
  return 0;
}

// The entry of tests/tflm/kernel_runner/mcubert_kernel_runner.cc, with the same arguments.
extern "C" int mcubert_glue_run(const char* op, const uint8_t* options, int32_t options_bytes, int32_t tensor_count,
                                int32_t input_count, const int32_t* types, const int32_t* constant,
                                const int32_t* ranks, const int32_t* dims, void* const* data, const int32_t* bytes) {
  g_log_used = 0;
  g_log[0] = '\0';
  const TFLMRegistration* registration = mcubert_test::RegistrationOf(op);
  if (registration == nullptr ||
      !mcubert_test::LayOut(&g_node, tensor_count, input_count, types, constant, ranks, dims, data, bytes)) {
    return mcubert_test::kRunBadArguments;
  }
  for (int i = 0; i < tensor_count; ++i) {
    g_eval[i].data = g_node.tensors[i].data;
    g_eval[i].dims = g_node.tensors[i].dims;
    g_eval[i].type = g_node.tensors[i].type;
  }
  TfLiteNode node = {};
  node.inputs = g_node.inputs;
  node.outputs = g_node.outputs;
  TfLiteContext context = {AllocatePersistentBuffer, RequestScratchBufferInArena, GetScratchBuffer, nullptr};
  g_arena_used = 0;
  g_scratch_count = 0;
  node.user_data = registration->init(&context, reinterpret_cast<const char*>(options), options_bytes);
  if (registration->prepare(&context, &node) != kTfLiteOk) return mcubert_test::kRunPrepareFailed;
  return registration->invoke(&context, &node) == kTfLiteOk ? mcubert_test::kRunOk : mcubert_test::kRunInvokeFailed;
}

// mcubert::TextInput::Fill on three stand-in input tensors (types as TfLiteType values, each seq_len
// long): returns 0 (filled) or 1, *valid gets the tokens used, message (128 B) why not.
extern "C" int mcubert_glue_text_fill(const uint8_t* blob, uint32_t blob_bytes, const uint8_t* text,
                                      uint32_t text_bytes, const int32_t* types, void* const* data, uint32_t seq_len,
                                      uint32_t* valid, char* message) {
  static TfLiteTensor inputs[3];
  const uint32_t element_bytes[3] = {4, 4, 1};
  for (int i = 0; i < 3; ++i) {
    inputs[i] = TfLiteTensor{};
    inputs[i].type = static_cast<TfLiteType>(types[i]);
    inputs[i].data.data = data[i];
    inputs[i].bytes = seq_len * element_bytes[i];
  }
  tflite::MicroInterpreter interpreter(inputs, 3);
  mcubert::TextInput text_input(blob, blob_bytes);
  const TfLiteStatus status = text_input.Fill(interpreter, {0, 1, 2}, text, text_bytes, valid);
  strncpy(message, text_input.message(), 127);
  message[127] = '\0';
  return status == kTfLiteOk ? 0 : 1;
}
