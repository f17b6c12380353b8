// Stand-in for TFLM's log (see tensorflow/lite/c/common.h here): the harness keeps the text.
#ifndef MCUBERT_HOST_STUB_MICRO_LOG_H_
#define MCUBERT_HOST_STUB_MICRO_LOG_H_

void MicroPrintf(const char *format, ...) __attribute__((format(printf, 1, 2)));

#endif // MCUBERT_HOST_STUB_MICRO_LOG_H_
