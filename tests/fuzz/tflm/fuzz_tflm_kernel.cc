// libFuzzer harness: one MCUBERT op through the TFLM binding (custom_ops/tflm/) and TFLM's own
// single-kernel harness, tflite::micro::KernelRunner (tests/tflm/kernel_runner/), with hostile tensors
// and options: what Prepare and Eval see when a .tflite lies about its shapes, types or options
// (issue 28, finding 6). Built by tests/fuzz/tflm/CMakeLists.txt with ASan + UBSan against a TFLM
// checkout (TFLM_DIR); seeds are valid nodes written by tests/fuzz/tflm/make_seeds.py.
//
// Input (little-endian):
//   u8 op (0 embedding, 1 attention, 2 MLP, 3 classifier head), u8 tensor count, u8 input count,
//   per tensor: u8 TfLiteType (modulo the enum's 22 values: TFLM converts a flatbuffer's tensor type
//   into a valid enum or refuses the model), u8 constant (inputs only), u8 rank (<= 5), rank x u16 dims,
//   u16 options bytes, the options (flexbuffer),
//   then each tensor's data in order, as many bytes as its shape and type make (missing bytes are 0).
// Every tensor buffer has exactly the bytes its shape and type make, as TFLM's allocator gives it, so
// ASan catches any read or write past a tensor. TFLM's messages are silenced (this file's DebugLog, in
// place of TFLM's debug_log.cc) unless MCUBERT_FUZZ_LOG is set, to read a finding's refusals.
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mcubert_tflm.h"

extern "C" int mcubert_kernel_runner_run(const char* op, const uint8_t* options, int32_t options_bytes,
                                         int32_t tensor_count, int32_t input_count, const int32_t* types,
                                         const int32_t* constant, const int32_t* ranks, const int32_t* dims,
                                         void* const* data, const int32_t* bytes);

extern "C" void DebugLog(const char* format, va_list args) {
  static const bool enabled = getenv("MCUBERT_FUZZ_LOG") != nullptr;
  if (enabled) vfprintf(stderr, format, args);
}

extern "C" int DebugVsnprintf(char* buffer, size_t buf_size, const char* format, va_list vlist) {
  return vsnprintf(buffer, buf_size, format, vlist);
}

namespace {

constexpr int kTfLiteTypeCount = 22;  // kTfLiteNoType (0) .. kTfLiteUInt4 (21) at TFLM 90b983c
constexpr int kMaxTensors = 24;
constexpr int kMaxRank = 5;
constexpr size_t kMaxTensorBytes = 1 << 22;  // 4 MB: bounds memory, far above any seed's tensors

struct Reader {
  const uint8_t* at;
  size_t left;
  bool ok = true;

  uint32_t Take(int width) {
    if (left < static_cast<size_t>(width)) {
      ok = false;
      return 0;
    }
    uint32_t value = 0;
    for (int i = 0; i < width; ++i) value |= static_cast<uint32_t>(at[i]) << (8 * i);
    at += width;
    left -= width;
    return value;
  }
};

size_t ElementBytes(int32_t type) {
  switch (type) {
    case 1:
      return 4;  // kTfLiteFloat32
    case 2:
      return 4;  // kTfLiteInt32
    case 3:
      return 1;  // kTfLiteUInt8
    case 4:
      return 8;  // kTfLiteInt64
    case 7:
      return 2;  // kTfLiteInt16
    case 9:
      return 1;  // kTfLiteInt8
    default:
      return 1;  // any other type: a byte an element (the ops must refuse it anyway)
  }
}

#define MCUBERT_FUZZ_OP_NAME(lower, upper, code) code,
constexpr const char* kOpNames[] = {MCUBERT_OPS(MCUBERT_FUZZ_OP_NAME)};
#undef MCUBERT_FUZZ_OP_NAME

// Every op of the generated list (mcubert_contract.h), chosen by the input's first byte.
const char* OpName(uint8_t op) { return kOpNames[op % MCUBERT_OP_COUNT]; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* input, size_t size) {
  Reader in{input, size};
  const char* op = OpName(static_cast<uint8_t>(in.Take(1)));
  const int32_t tensor_count = static_cast<int32_t>(in.Take(1));
  const int32_t input_count = static_cast<int32_t>(in.Take(1));
  if (!in.ok || tensor_count < 2 || tensor_count > kMaxTensors || input_count < 1 || input_count >= tensor_count)
    return 0;
  int32_t types[kMaxTensors], constant[kMaxTensors], ranks[kMaxTensors], bytes[kMaxTensors];
  int32_t dims[kMaxTensors * kMaxRank];
  int32_t used_dims = 0;
  for (int32_t i = 0; i < tensor_count; ++i) {
    types[i] = static_cast<int32_t>(in.Take(1) % kTfLiteTypeCount);
    constant[i] = i < input_count ? static_cast<int32_t>(in.Take(1) & 1) : 0;
    ranks[i] = static_cast<int32_t>(in.Take(1));
    if (!in.ok || ranks[i] > kMaxRank) return 0;
    size_t elements = 1;
    for (int32_t d = 0; d < ranks[i]; ++d) {
      dims[used_dims] = static_cast<int32_t>(in.Take(2));
      elements *= static_cast<size_t>(dims[used_dims]);
      if (elements > kMaxTensorBytes) return 0;
      ++used_dims;
    }
    const size_t tensor_bytes = elements * ElementBytes(types[i]);
    if (tensor_bytes > kMaxTensorBytes) return 0;
    bytes[i] = static_cast<int32_t>(tensor_bytes);
  }
  const uint32_t options_bytes = in.Take(2);
  if (!in.ok || options_bytes > in.left) return 0;
  const uint8_t* options = in.at;
  in.at += options_bytes;
  in.left -= options_bytes;

  void* data[kMaxTensors] = {};
  for (int32_t i = 0; i < tensor_count; ++i) {
    // Exactly the tensor's bytes (malloc(0) may return NULL: a 1-byte block keeps the pointer valid).
    data[i] = malloc(bytes[i] > 0 ? static_cast<size_t>(bytes[i]) : 1);
    const size_t copy = in.left < static_cast<size_t>(bytes[i]) ? in.left : static_cast<size_t>(bytes[i]);
    memset(data[i], 0, static_cast<size_t>(bytes[i]));
    memcpy(data[i], in.at, copy);
    in.at += copy;
    in.left -= copy;
  }
  mcubert_kernel_runner_run(op, options, static_cast<int32_t>(options_bytes), tensor_count, input_count, types,
                            constant, ranks, dims, data, bytes);
  for (int32_t i = 0; i < tensor_count; ++i) free(data[i]);
  return 0;
}
