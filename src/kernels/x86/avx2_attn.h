/* avx2_attn.h: the avx2 level's tiled-attention steps (avx2_attn.c, avx2_attnx.c), for
 * avx2.c's table. Contracts are kernels.h's attn_* ops. AVX2 + FMA code: reached only through
 * cpulm_kernels_avx2 (or an avx512 table), after dispatch.c verified the CPU. */
#ifndef CPULM_KERNELS_X86_AVX2_ATTN_H
#define CPULM_KERNELS_X86_AVX2_ATTN_H

#include <stdint.h>

#include "quant.h"

void cpulm_avx2_attn_scores(int64_t d, int m, int n, const float *q, int64_t ldq, const float *k,
                            int64_t ldk, float scale, float *s, int64_t lds);
float cpulm_avx2_attn_softmax_row(int n, int lim, float *s, float *M, float *L);
void cpulm_avx2_attn_pv(int64_t d, int m, int n, const float *p, int64_t ldp, const float *v,
                        int64_t ldv, const float *a, float *o, int64_t ldo);
/* to_float of Q8_0 and Q4_0 rows (the K/V tiles of quantized caches), same bits as the
 * reference dequantizers */
void cpulm_avx2_to_float_q8_0(const void *vx, float *y, int64_t n);
void cpulm_avx2_to_float_q4_0(const void *vx, float *y, int64_t n);
void cpulm_avx2_attn_merge(int64_t d, int m, const float *mc, const float *lc, const float *oc,
                           int64_t ldoc, float *M, float *L, float *o, int64_t ldo);
/* the exact path's steps (avx2_attnx.c); the avx512 levels call them for the head sizes
 * their own versions leave out */
void cpulm_avx2_attn_xscores(int64_t d, int m, int n, const double *qt, int64_t ldqt,
                             const float *k, int64_t ldk, float scale, float *s, int64_t lds);
void cpulm_avx2_attn_xweights(int n, float *s, float *ms, float *M);
void cpulm_avx2_attn_xpv(int64_t d, int m, int n, const float *ms, const float *vs, int64_t ldw,
                         const float *v, int64_t ldv, float *acc, int64_t lda, float *S);
/* 2^(i/32), i = 0..31, as glibc's expf tables it (avx2_attnx.c; 64-byte aligned): the exact
 * expf of the avx2 and avx512 levels */
extern const double cpulm_x86_exp2_tab32[32];
/* the steps straight from Q8_0 / Q4_0 cache rows (avx2_attnq.c; kernels.h attn_q*) */
void cpulm_avx2_attn_qquant(int64_t d, int m, const float *q, int64_t ldq, float scale,
                            int16_t *q16, float *qs);
void cpulm_avx2_attn_qscores(int64_t d, cpulm_dtype kt, int m, int n, const int16_t *q16,
                             int64_t ldq, const float *qs, const uint8_t *k, uint64_t ldk, float *s,
                             int64_t lds, const uint8_t *next);
float cpulm_avx2_attn_softmaxz(int n, int lim, float *s, float *M, float *L);
void cpulm_avx2_attn_qpv(int64_t d, cpulm_dtype vt, int m, int n, const float *p, int64_t ldp,
                         const uint8_t *v, uint64_t ldv, const float *a, float *o, int64_t ldo,
                         const uint8_t *next);

#endif
