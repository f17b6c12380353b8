/* GENERATED FILE - do not edit. Generated from the TFLM_HEADER template in tflm_mcubert/export/arduino_library.py by arduino_lib/extras/sync_from_custom_ops.py;
 * edit the source, not this copy, and re-run the script. */
// The MCUBERT TFLM binding's Arduino header: TFLM first, then mcubert::AddMcubertOps() and the ops'
// registrations (mcubert_tflm.h). Needs the Arduino_TensorFlowLite library with a TFLM that has
// TFLMRegistration (see this library's README.md).
#ifndef MCUBERT_TFLM_ARDUINO_H
#define MCUBERT_TFLM_ARDUINO_H

// Included first so that the Arduino builder finds Arduino_TensorFlowLite: it resolves a library by
// a header in that library's src/ root, never by a path like "tensorflow/lite/c/common.h".
#include <TensorFlowLite.h>

#include "mcubert_tflm.h"

#endif  // MCUBERT_TFLM_ARDUINO_H
