/* GENERATED FILE - do not edit. Generated from the MAIN_HEADER template in tflm_mcubert/export/arduino_library.py by arduino_lib/extras/sync_from_custom_ops.py;
 * edit the source, not this copy, and re-run the script. */
/* The MCUBERT kernels' Arduino header: the portable C99 kernel API (mcubert/mcubert_ops.h) and the
 * on-device tokenizer (mcubert/mcubert_tokenizer.h). Usable from C and C++ sketches; the declarations
 * are extern "C". */
#ifndef MCUBERT_H
#define MCUBERT_H

#include "mcubert/mcubert_ops.h"
#include "mcubert/mcubert_tokenizer.h"

#endif /* MCUBERT_H */
