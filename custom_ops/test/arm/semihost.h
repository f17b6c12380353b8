/* Arm semihosting (BKPT 0xAB on M-profile): console output and exit with a status for QEMU. */
#ifndef MCUBERT_SEMIHOST_H
#define MCUBERT_SEMIHOST_H

#include <stdint.h>

void semihost_write(const char *text);
void semihost_write_int(int32_t value);
void semihost_exit(int32_t code) __attribute__((noreturn));

#endif
