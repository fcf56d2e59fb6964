#ifndef BRICK_CFUZZER_SHIM_H
#define BRICK_CFUZZER_SHIM_H

#include <stddef.h>
#include <stdint.h>

// libFuzzer's driver (compiler-rt's FuzzerDriver.cpp): parses libFuzzer's flags from argv and
// runs `callback` on each input. In libclang_rt.fuzzer_no_main, which module.modulemap links.
int LLVMFuzzerRunDriver(int *argc, char ***argv, int (*callback)(const uint8_t *data, size_t size));

#endif
