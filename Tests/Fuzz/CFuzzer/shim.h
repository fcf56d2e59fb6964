#ifndef BRICK_CFUZZER_SHIM_H
#define BRICK_CFUZZER_SHIM_H

#include <stddef.h>
#include <stdint.h>

// libFuzzer's driver (compiler-rt's FuzzerDriver.cpp): parses libFuzzer's flags from argv and
// runs `callback` on each input. Linked by `-sanitize=fuzzer`; Scripts/fuzz.sh builds with it.
int LLVMFuzzerRunDriver(int *argc, char ***argv, int (*callback)(const uint8_t *data, size_t size));

#endif
