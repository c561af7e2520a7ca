/* levels.h: the kernel levels the tests compare with the generic oracle. */
#ifndef CPULM_TESTS_LEVELS_H
#define CPULM_TESTS_LEVELS_H

#include <stddef.h>

#include "kernels/kernels.h"

/* Every level this CPU runs (cpulm_kernels_levels, generic first), then, on an x86 CPU that
 * lacks a level of the avx512 family, that level as built under SIMDe emulation
 * (cmake/emu512.cmake), merged over its base as dispatch.c merges: "avx512(emu)" over avx2,
 * "avx512vnni(emu)" over avx512 (native or emulated). Returns the count written (<= cap).
 * Not for dispatch tests: the emulated names are no CPULM_ISA level. */
int test_kernel_levels(const cpulm_kernels **out, int cap);

/* The avx512 levels this CPU cannot run natively and which this build cannot check under
 * emulation (x86 without SIMDe): 0 when none, else the count, with the levels named in
 * why. */
int test_emu512_unchecked(char *why, size_t cap);

#endif
