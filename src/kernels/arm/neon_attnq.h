/* neon_attnq.h: the neon level's attention steps straight from a Q8_0 / Q4_0 cache
 * (neon_attnq.c), for neon.c's table; the dotprod, i8mm and sve levels inherit them.
 * Contracts are kernels.h's attn_q* ops. Baseline armv8-a code. */
#ifndef CPULM_KERNELS_ARM_NEON_ATTNQ_H
#define CPULM_KERNELS_ARM_NEON_ATTNQ_H

#include <stdint.h>

#include "kernels/kernels.h"

void cpulm_neon_attn_qquant(int64_t d, int m, const float *q, int64_t ldq, float scale,
                            int16_t *q16, float *qs);
void cpulm_neon_attn_qscores(int64_t d, cpulm_dtype kt, int m, int n, const int16_t *q16,
                             int64_t ldq, const float *qs, const uint8_t *k, uint64_t ldk, float *s,
                             int64_t lds, const uint8_t *next);
float cpulm_neon_attn_softmaxz(int n, int lim, float *s, float *M, float *L);
void cpulm_neon_attn_qpv(int64_t d, cpulm_dtype vt, int m, int n, const float *p, int64_t ldp,
                         const uint8_t *v, uint64_t ldv, const float *a, float *o, int64_t ldo,
                         const uint8_t *next);

/* The dotprod level's attn_qscores (dotprod_attnq.c, built with the dotprod flags): SDOT on
 * the int16 query split into two int8 halves. */
void cpulm_dotprod_attn_qscores(int64_t d, cpulm_dtype kt, int m, int n, const int16_t *q16,
                                int64_t ldq, const float *qs, const uint8_t *k, uint64_t ldk,
                                float *s, int64_t lds, const uint8_t *next);

#endif
