// Registerer for the tflite-micro Python interpreter:
//
//   Interpreter.from_bytes(model, custom_op_registerers=["mcubert_register_ops"])
//
// The interpreter finds it with dlsym(RTLD_DEFAULT, ...), so the shared library holding it must
// be loaded with RTLD_GLOBAL first (tflm_mcubert/runtime/tflm_binding.py does both).
#include "mcubert_tflm.h"
#include "python/tflite_micro/python_ops_resolver.h"

extern "C" bool mcubert_register_ops(tflite::PythonOpsResolver* resolver) {
  return resolver != nullptr && mcubert::AddMcubertOps(*resolver) == kTfLiteOk;
}
