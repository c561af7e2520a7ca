/* x86_dnet.h: the x86 levels' Gated DeltaNet ops (kernels.h: dnet_step, dnet_mm,
 * dnet_conv, and silu: the convolution's and the gate's activation), which live outside their
 * level's main file (avx2_dnet.c, avx512_dnet.c), for avx2.c's and avx512.c's tables. Bit-identical
 * to the generic versions (every element one fma chain in the contract's order). Reached only
 * through a level's table. */
#ifndef CPULM_KERNELS_X86_DNET_H
#define CPULM_KERNELS_X86_DNET_H

#include <stdint.h>

void cpulm_avx2_dnet_step(int64_t n, float *T, const float *q, const float *k, const float *v,
                          float beta, float decay, float scale, float *o, float *d);
void cpulm_avx2_dnet_mm(int m, int n, int k, const float *a, int64_t lda, const float *b,
                        int64_t ldb, float *c, int64_t ldc, int acc);
void cpulm_avx2_dnet_conv(int64_t n, int taps, float *x, float *win, int64_t ldwin, const float *w,
                          int64_t ldw);
void cpulm_avx2_silu(int64_t n, float *y, const float *x);

void cpulm_avx512_dnet_step(int64_t n, float *T, const float *q, const float *k, const float *v,
                            float beta, float decay, float scale, float *o, float *d);
void cpulm_avx512_dnet_mm(int m, int n, int k, const float *a, int64_t lda, const float *b,
                          int64_t ldb, float *c, int64_t ldc, int acc);
void cpulm_avx512_dnet_conv(int64_t n, int taps, float *x, float *win, int64_t ldwin,
                            const float *w, int64_t ldw);
void cpulm_avx512_silu(int64_t n, float *y, const float *x);

#endif
