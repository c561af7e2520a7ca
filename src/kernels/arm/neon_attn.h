/* neon_attn.h: the neon level's attention kernels (neon_attn.c), for neon.c's table; the
 * dotprod, i8mm and sve levels inherit them. Contracts are kernels.h's attn_f16 and attn_*
 * ops. Baseline armv8-a code. */
#ifndef CPULM_KERNELS_ARM_NEON_ATTN_H
#define CPULM_KERNELS_ARM_NEON_ATTN_H

#include <stdint.h>

void cpulm_neon_attn_f16(int64_t d, int64_t n, const uint16_t *q16, const uint8_t *k,
                         const uint8_t *v, uint64_t stride, float scale, float *out);
void cpulm_neon_attn_scores(int64_t d, int m, int n, const float *q, int64_t ldq, const float *k,
                            int64_t ldk, float scale, float *s, int64_t lds);
float cpulm_neon_attn_softmax_row(int n, int lim, float *s, float *M, float *L);
void cpulm_neon_attn_pv(int64_t d, int m, int n, const float *p, int64_t ldp, const float *v,
                        int64_t ldv, const float *a, float *o, int64_t ldo);
void cpulm_neon_attn_merge(int64_t d, int m, const float *mc, const float *lc, const float *oc,
                           int64_t ldoc, float *M, float *L, float *o, int64_t ldo);

#endif
