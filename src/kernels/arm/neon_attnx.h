/* neon_attnx.h: the neon level's exact tiled-attention steps (neon_attnx.c), for neon.c's
 * table; the dotprod, i8mm and sve levels inherit them. Contracts are kernels.h's attn_x*
 * ops. Baseline armv8-a code. */
#ifndef CPULM_KERNELS_ARM_NEON_ATTNX_H
#define CPULM_KERNELS_ARM_NEON_ATTNX_H

#include <stdint.h>

void cpulm_neon_attn_xscores(int64_t d, int m, int n, const double *qt, int64_t ldqt,
                             const float *k, int64_t ldk, float scale, float *s, int64_t lds);
void cpulm_neon_attn_xweights(int n, float *s, float *ms, float *M);
void cpulm_neon_attn_xpv(int64_t d, int m, int n, const float *ms, const float *vs, int64_t ldw,
                         const float *v, int64_t ldv, float *acc, int64_t lda, float *S);

#endif
