/* generic.h: the portable-C kernels behind cpulm_kernels_generic, declared so the table
 * (table.c) and the ISA levels can reach them (an ISA file may call these for tails or
 * shapes it does not specialise: baseline code is safe on every CPU).
 * Contracts are those of kernels.h; n is a multiple of the weight type's block size. */
#ifndef CPULM_KERNELS_GENERIC_H
#define CPULM_KERNELS_GENERIC_H

#include <math.h>
#include <stdint.h>

#include "kernels/kernels.h"

/* ---- dot products (dot.c): weight row x against an activation row y ---- */
void cpulm_generic_vec_dot_f32(int64_t n, float *s, const void *x, const void *y);
void cpulm_generic_vec_dot_f16(int64_t n, float *s, const void *x, const void *y);
void cpulm_generic_vec_dot_bf16(int64_t n, float *s, const void *x, const void *y);
void cpulm_generic_vec_dot_q8_0_q8_0(int64_t n, float *s, const void *x, const void *y);
void cpulm_generic_vec_dot_q4_0_q8_0(int64_t n, float *s, const void *x, const void *y);
void cpulm_generic_vec_dot_mxfp4_q8_0(int64_t n, float *s, const void *x, const void *y);
void cpulm_generic_vec_dot_q4_1_q8_1(int64_t n, float *s, const void *x, const void *y);
void cpulm_generic_vec_dot_q5_0_q8_0(int64_t n, float *s, const void *x, const void *y);
void cpulm_generic_vec_dot_q5_1_q8_1(int64_t n, float *s, const void *x, const void *y);
void cpulm_generic_vec_dot_q4_K_q8_K(int64_t n, float *s, const void *x, const void *y);
void cpulm_generic_vec_dot_q5_K_q8_K(int64_t n, float *s, const void *x, const void *y);
void cpulm_generic_vec_dot_q6_K_q8_K(int64_t n, float *s, const void *x, const void *y);
/* gemm_rows (kernels.h): the vec_dot of every (row, activation row) pair */
void cpulm_generic_gemm_rows_f32(int64_t n, int nr, int nt, float *s, int64_t ld, const void *w,
                                 uint64_t w_stride, const uint8_t *act, uint64_t act_stride);
void cpulm_generic_gemm_rows_f16(int64_t n, int nr, int nt, float *s, int64_t ld, const void *w,
                                 uint64_t w_stride, const uint8_t *act, uint64_t act_stride);

/* ---- the plain ops of kernels.h's CPULM_KERNEL_OPS: cpulm_generic_<name> each (f32 ops in
 * vec.c, attention in attn.c) ---- */
#define CPULM_GENERIC_DECLARE(ID, name, ret, params, group) ret cpulm_generic_##name params;
CPULM_KERNEL_OPS(CPULM_GENERIC_DECLARE)
#undef CPULM_GENERIC_DECLARE

/* ---- helpers shared with the ISA levels (vec.c) ---- */
/* attn_f16's f16 accumulator steps: y[i] = f16(f32(y[i]) * v); y[i] = f16(fma(f32(x[i]), v,
 * f32(y[i]))). */
void cpulm_generic_scale_f16(int64_t n, uint16_t *y, float v);
void cpulm_generic_mad_f16(int64_t n, uint16_t *y, const uint16_t *x, float v);
/* Tree sum of 16 lanes in the order of a 512-bit reduction (halves, quarters, pairs). */
float cpulm_generic_reduce16(const float *a);
/* exp(x) by the degree-5 polynomial vectorized code uses (about 1.5 ulp). */
float cpulm_generic_vexpf(float x);

/* vexp with results below the normal floats flushed to 0 (the attn_softmaxz ops). */
static inline float cpulm_generic_vexpzf(float x) {
    return x < -87.0f ? 0.0f : cpulm_generic_vexpf(x);
}

/* The generic body of attn_softmax_row (ex = cpulm_generic_vexpf) and of attn_softmaxz
 * (ex = cpulm_generic_vexpzf): the running max over the live scores, s[j] = ex(s[j] - max)
 * (0 past lim), their 16-lane sum folded into *L. Returns the old sum's scale. */
static inline float cpulm_generic_softmax_with(int n, int lim, float *s, float *M, float *L,
                                               float (*ex)(float)) {
    float mx = *M;
    for (int j = 0; j < lim; j++)
        mx = fmaxf(mx, s[j]);
    float lanes[16] = {0};
    for (int j = 0; j < n; j++) {
        s[j] = j < lim ? ex(s[j] - mx) : 0.0f;
        lanes[j % 16] += s[j];
    }
    /* -inf (nothing seen yet) would make vexp's range reduction NaN: its weight is 0 */
    const float a = *M == -INFINITY ? 0.0f : ex(*M - mx);
    *L = fmaf(*L, a, cpulm_generic_reduce16(lanes));
    *M = mx;
    return a;
}

/* attn_merge's per-row step (kernels.h): folds a chunk's (mc, lc) into the running (*M, *L)
 * and returns the scales of the running output (*a) and of the chunk's (*b). Shared by every
 * level so the scalar part of the merge is written once; ex is cpulm_generic_vexpf or a
 * level's inline twin (the same bits without ldexpf's libm call). */
static inline __attribute__((always_inline)) void cpulm_attn_merge_row(float *M, float *L, float mc,
                                                                       float lc, float *a, float *b,
                                                                       float (*ex)(float)) {
    const float mx = fmaxf(*M, mc);
    *a = *M == -INFINITY ? 0.0f : ex(*M - mx);
    *b = ex(mc - mx);
    *L = fmaf(*L, *a, lc * *b);
    *M = mx;
}

/* ---- repacked-weight GEMM (gemm.c), contracts in kernels.h (cpulm_gemm_fn) ---- */
void cpulm_generic_gemm_mxfp4_x16(int64_t n, int nt, float *s, int64_t ld, const void *w,
                                  const uint8_t *act, uint64_t act_stride);
void cpulm_generic_gemm_q4_0_x16(int64_t n, int nt, float *s, int64_t ld, const void *w,
                                 const uint8_t *act, uint64_t act_stride);
void cpulm_generic_gemm_q8_0_x16(int64_t n, int nt, float *s, int64_t ld, const void *w,
                                 const uint8_t *act, uint64_t act_stride);
/* K-quants (gemm_k.c): activations are Q8_K rows with their extras */
void cpulm_generic_gemm_q4_K_x16(int64_t n, int nt, float *s, int64_t ld, const void *w,
                                 const uint8_t *act, uint64_t act_stride);
void cpulm_generic_gemm_q5_K_x16(int64_t n, int nt, float *s, int64_t ld, const void *w,
                                 const uint8_t *act, uint64_t act_stride);
void cpulm_generic_gemm_q6_K_x16(int64_t n, int nt, float *s, int64_t ld, const void *w,
                                 const uint8_t *act, uint64_t act_stride);

#endif
