// What both single-op harnesses do alike — kernel_runner/ (TFLM's KernelRunner) and host_stub/
// (the stand-in TFLM): find an op's registration by its custom code, and lay the caller's flat
// tensor description out as TFLM tensors and a node's input/output index lists. Header-only: each
// harness compiles it against its own "tensorflow/lite/c/common.h".
#ifndef MCUBERT_TEST_NODE_H_
#define MCUBERT_TEST_NODE_H_

#include <stdint.h>
#include <string.h>

#include "mcubert_tflm.h"
#include "tensorflow/lite/c/common.h"

namespace mcubert_test
{

constexpr int kMaxTensors = 24;
constexpr int kMaxDims = kMaxTensors * 8;

// What the harnesses' entry functions return.
enum RunStatus { kRunOk = 0, kRunPrepareFailed = 1, kRunInvokeFailed = 2, kRunBadArguments = 3 };

// Every op of the generated list (mcubert_contract.h's MCUBERT_OPS), by its custom code.
inline const TFLMRegistration *RegistrationOf(const char *op)
{
#define MCUBERT_TEST_REGISTRATION(lower, upper, code)                                                                  \
    if (strcmp(op, code) == 0)                                                                                         \
        return mcubert::Register_MCUBERT_##upper();
    MCUBERT_OPS(MCUBERT_TEST_REGISTRATION)
#undef MCUBERT_TEST_REGISTRATION
    return nullptr;
}

// TfLiteIntArray is {int size; int data[]}: TFLM's tests lay it out over an int buffer the same way.
inline TfLiteIntArray *IntArray(int *storage, int size, const int32_t *values)
{
    storage[0] = size;
    for (int i = 0; i < size; ++i)
        storage[1 + i] = values[i];
    return reinterpret_cast<TfLiteIntArray *>(storage);
}

// One node: tensors 0..input_count-1 are its inputs, the rest its outputs.
struct Node {
    TfLiteTensor tensors[kMaxTensors];
    int dim_storage[kMaxDims + kMaxTensors];
    int input_storage[kMaxTensors + 1];
    int output_storage[kMaxTensors + 1];
    TfLiteIntArray *inputs;
    TfLiteIntArray *outputs;
    int tensor_count;
};

// Fills `node` from the entry functions' arguments; `constant[i]` marks the inputs TFLM would read
// from the flatbuffer (kTfLiteMmapRo: the ops validate their contents). False on arguments that do
// not describe a node.
inline bool LayOut(Node *node, int32_t tensor_count, int32_t input_count, const int32_t *types, const int32_t *constant,
                   const int32_t *ranks, const int32_t *dims, void *const *data, const int32_t *bytes)
{
    if (tensor_count > kMaxTensors || input_count < 1 || input_count >= tensor_count)
        return false;
    int used = 0;
    const int32_t *shape = dims;
    for (int i = 0; i < tensor_count; ++i) {
        if (ranks[i] < 0 || used + 1 + ranks[i] > kMaxDims + kMaxTensors)
            return false;
        TfLiteTensor &tensor = node->tensors[i];
        tensor = TfLiteTensor{};
        tensor.type = static_cast<TfLiteType>(types[i]);
        tensor.data.data = data[i];
        tensor.dims = IntArray(&node->dim_storage[used], ranks[i], shape);
        tensor.bytes = static_cast<size_t>(bytes[i]);
        tensor.allocation_type = i < input_count && constant[i] ? kTfLiteMmapRo : kTfLiteArenaRw;
        used += 1 + ranks[i];
        shape += ranks[i];
    }
    int32_t indices[kMaxTensors];
    for (int i = 0; i < tensor_count; ++i)
        indices[i] = i;
    node->inputs = IntArray(node->input_storage, input_count, indices);
    node->outputs = IntArray(node->output_storage, tensor_count - input_count, indices + input_count);
    node->tensor_count = tensor_count;
    return true;
}

} // namespace mcubert_test

#endif // MCUBERT_TEST_NODE_H_
