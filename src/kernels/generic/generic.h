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

#endif
