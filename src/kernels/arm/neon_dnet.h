/* neon_dnet.h: the neon level's Gated DeltaNet ops (neon_dnet.c; kernels.h: dnet_step,
 * dnet_mm, dnet_conv, and silu: the convolution's and the gate's activation), for neon.c's table;
 * the dotprod, i8mm and sve levels inherit them. Baseline armv8-a code, bit-identical to the
 * generic versions. */
#ifndef CPULM_KERNELS_ARM_NEON_DNET_H
#define CPULM_KERNELS_ARM_NEON_DNET_H

#include <stdint.h>

void cpulm_neon_dnet_step(int64_t n, float *T, const float *q, const float *k, const float *v,
                          float beta, float decay, float scale, float *o, float *d);
void cpulm_neon_dnet_mm(int m, int n, int k, const float *a, int64_t lda, const float *b,
                        int64_t ldb, float *c, int64_t ldc, int acc);
void cpulm_neon_dnet_conv(int64_t n, int taps, float *x, float *win, int64_t ldwin, const float *w,
                          int64_t ldw);
void cpulm_neon_silu(int64_t n, float *y, const float *x);

#endif
