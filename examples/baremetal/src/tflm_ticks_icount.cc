// TFLM's clock on the emulator-only board emulator-m55: tflite::GetCurrentTimeTicks(), which
// MicroProfiler reads around every op, returns mcubert_cycles(), i.e. EXECUTED INSTRUCTIONS under QEMU's
// `-icount shift=0` (icount_systick.c). TFLM's cortex_m_generic micro_time.cc reads the PMU cycle counter
// on the Cortex-M55, which QEMU does not model; defining both of its functions here keeps that object
// out of the link.
#include <cstdint>

#include "platform.h"
#include "tensorflow/lite/micro/micro_time.h"

namespace tflite {

uint32_t ticks_per_second() { return 0; }  // instructions have no time base: no milliseconds

uint32_t GetCurrentTimeTicks() { return mcubert_cycles(); }

}  // namespace tflite
