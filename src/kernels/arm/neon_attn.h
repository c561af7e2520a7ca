/* neon_attn.h: the neon level's attention tile ops (neon_attn.c: f32 tiles, the exact
 * numerics, Q8_0 / Q4_0 rows in place), for neon.c's table; the dotprod, i8mm and sve levels
 * inherit them, dotprod overrides attn_qscores (dotprod_attn.c). Contracts are kernels.h's attn_*
 * ops. Baseline armv8-a code. */
#ifndef CPULM_KERNELS_ARM_NEON_ATTN_H
#define CPULM_KERNELS_ARM_NEON_ATTN_H

#include <stdint.h>

#include "kernels/kernels.h"
void cpulm_neon_attn_scores(int64_t d, int m, int n, const float *q, int64_t ldq, const float *k,
                            int64_t ldk, float scale, float *s, int64_t lds);
float cpulm_neon_attn_softmax_row(int n, int lim, float *s, float *M, float *L);
void cpulm_neon_attn_pv(int64_t d, int m, int n, const float *p, int64_t ldp, const float *v,
                        int64_t ldv, const float *a, float *o, int64_t ldo);
void cpulm_neon_attn_merge(int64_t d, int m, const float *mc, const float *lc, const float *oc,
                           int64_t ldoc, float *M, float *L, float *o, int64_t ldo);
/* the exact numerics */
void cpulm_neon_attn_xscores(int64_t d, int m, int n, const double *qt, int64_t ldqt,
                             const float *k, int64_t ldk, float scale, float *s, int64_t lds);
void cpulm_neon_attn_xweights(int n, float *s, float *ms, float *M);
void cpulm_neon_attn_xpv(int64_t d, int m, int n, const float *ms, const float *vs, int64_t ldw,
                         const float *v, int64_t ldv, float *acc, int64_t lda, float *S);
/* Q8_0 / Q4_0 rows in place */
void cpulm_neon_attn_qquant(int64_t d, int m, const float *q, int64_t ldq, float scale,
                            int16_t *q16, float *qs);
void cpulm_neon_attn_qscores(int64_t d, cpulm_dtype kt, int m, int n, const int16_t *q16,
                             int64_t ldq, const float *qs, const uint8_t *k, uint64_t ldk, float *s,
                             int64_t lds, const uint8_t *next);
float cpulm_neon_attn_softmaxz(int n, int lim, float *s, float *M, float *L);
void cpulm_neon_attn_qpv(int64_t d, cpulm_dtype vt, int m, int n, const float *p, int64_t ldp,
                         const uint8_t *v, uint64_t ldv, const float *a, float *o, int64_t ldo,
                         const uint8_t *next);

/* The dotprod level's attn_qscores (dotprod_attn.c, built with the dotprod flags): SDOT on
 * the int16 query split into two int8 halves. */
void cpulm_dotprod_attn_qscores(int64_t d, cpulm_dtype kt, int m, int n, const int16_t *q16,
                                int64_t ldq, const float *qs, const uint8_t *k, uint64_t ldk,
                                float *s, int64_t lds, const uint8_t *next);

#endif
