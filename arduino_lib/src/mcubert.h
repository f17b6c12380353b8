/* GENERATED FILE - do not edit. Generated from the MAIN_HEADER template in tools/sync_arduino_lib.py by tools/sync_arduino_lib.py;
 * edit the source, not this copy, and re-run the script. */
/* The MCUBERT kernels' Arduino header: the portable C99 kernel API (mcubert/mcubert_ops.h).
 * Usable from C and C++ sketches; the declarations are extern "C". */
#ifndef MCUBERT_H
#define MCUBERT_H

#include "mcubert/mcubert_ops.h"

#endif /* MCUBERT_H */
