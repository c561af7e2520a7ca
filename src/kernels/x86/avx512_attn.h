/* avx512_attn.h: the avx512 level's attention steps that live outside avx512.c, for its
 * table. Contracts are kernels.h's attn_q* ops. AVX-512 F/BW/VL/DQ code: reached only
 * through cpulm_kernels_avx512 (or avx512vnni's), after dispatch.c verified the CPU. */
#ifndef CPULM_KERNELS_X86_AVX512_ATTN_H
#define CPULM_KERNELS_X86_AVX512_ATTN_H

#include <stdint.h>

#include "quant.h"

/* the steps straight from Q8_0 / Q4_0 cache rows (avx512_attnq.c) */
void cpulm_avx512_attn_qscores(int64_t d, cpulm_dtype kt, int m, int n, const int16_t *q16,
                               int64_t ldq, const float *qs, const uint8_t *k, uint64_t ldk,
                               float *s, int64_t lds, const uint8_t *next);
void cpulm_avx512_attn_qpv(int64_t d, cpulm_dtype vt, int m, int n, const float *p, int64_t ldp,
                           const uint8_t *v, uint64_t ldv, const float *a, float *o, int64_t ldo,
                           const uint8_t *next);

#endif
