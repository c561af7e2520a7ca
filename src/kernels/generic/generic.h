/* generic.h: the portable-C kernels behind cpulm_kernels_generic, declared so the table
 * (table.c) and the ISA levels can reach them (an ISA file may call these for tails or
 * shapes it does not specialise: baseline code is safe on every CPU).
 * Contracts are those of kernels.h; n is a multiple of the weight type's block size. */
#ifndef CPULM_KERNELS_GENERIC_H
#define CPULM_KERNELS_GENERIC_H

#include <stdint.h>

/* ---- dot products (dot.c): weight row x against an activation row y ---- */
void cpulm_generic_vec_dot_f32(int64_t n, float *s, const void *x, const void *y);
void cpulm_generic_vec_dot_f16(int64_t n, float *s, const void *x, const void *y);
void cpulm_generic_vec_dot_bf16(int64_t n, float *s, const void *x, const void *y);
void cpulm_generic_vec_dot_q8_0_q8_0(int64_t n, float *s, const void *x, const void *y);
void cpulm_generic_vec_dot_q4_0_q8_0(int64_t n, float *s, const void *x, const void *y);
void cpulm_generic_vec_dot_q4_1_q8_1(int64_t n, float *s, const void *x, const void *y);
void cpulm_generic_vec_dot_q5_0_q8_0(int64_t n, float *s, const void *x, const void *y);
void cpulm_generic_vec_dot_q5_1_q8_1(int64_t n, float *s, const void *x, const void *y);
void cpulm_generic_vec_dot_q4_K_q8_K(int64_t n, float *s, const void *x, const void *y);
void cpulm_generic_vec_dot_q5_K_q8_K(int64_t n, float *s, const void *x, const void *y);
void cpulm_generic_vec_dot_q6_K_q8_K(int64_t n, float *s, const void *x, const void *y);

/* ---- f32 vector ops (vec.c) ---- */
void cpulm_generic_rms_norm(int64_t n, float *y, const float *x, const float *w, float eps);
void cpulm_generic_swiglu(int64_t n, float *y, const float *g, const float *u);
void cpulm_generic_softmax(int64_t n, float *x);
void cpulm_generic_axpy(int64_t n, float *y, float a, const float *x);
float cpulm_generic_dot_f32(int64_t n, const float *x, const float *y);
/* Tree sum of 16 lanes in the order of a 512-bit reduction (halves, quarters, pairs). */
float cpulm_generic_reduce16(const float *a);
/* exp(x) by the degree-5 polynomial vectorized code uses (about 1.5 ulp). */
float cpulm_generic_vexpf(float x);
void cpulm_generic_scale_f16(int64_t n, uint16_t *y, float v);
void cpulm_generic_mad_f16(int64_t n, uint16_t *y, const uint16_t *x, float v);

/* ---- attention over an F16 cache (attn.c), contract in kernels.h ---- */
void cpulm_generic_attn_f16(int64_t d, int64_t n, const uint16_t *q16, const uint8_t *k,
                            const uint8_t *v, uint64_t stride, float scale, float *out);

/* ---- tiled attention (attn_tile.c), contracts in kernels.h ---- */
void cpulm_generic_attn_scores(int64_t d, int m, int n, const float *q, int64_t ldq,
                               const float *k, int64_t ldk, float scale, float *s, int64_t lds);
float cpulm_generic_attn_softmax_row(int n, int lim, float *s, float *M, float *L);
void cpulm_generic_attn_pv(int64_t d, int m, int n, const float *p, int64_t ldp, const float *v,
                           int64_t ldv, const float *a, float *o, int64_t ldo);
void cpulm_generic_attn_merge(int64_t d, int m, const float *mc, const float *lc,
                              const float *oc, int64_t ldoc, float *M, float *L, float *o,
                              int64_t ldo);

/* ---- repacked-weight GEMM (gemm.c), contracts in kernels.h (cpulm_gemm_fn) ---- */
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
