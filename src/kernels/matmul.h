/* matmul.h: y = W x for a batch of activation rows, split over threads. ISA-free: it tiles
 * and threads over entries of the kernel table: weights repacked into 16-row groups
 * (kernels.h, CPULM_PACK_ROWS) go through the gemm_x16 microkernels for any number of
 * rows (one token is a GEMV of the same kernel), F32, F16 and BF16 weights through gemm_rows
 * (several weight rows against up to 16 activation rows per pass), the others through
 * vec_dot.
 * Determinism: every output element is computed by exactly one thread with the same
 * arithmetic whatever nth (and whatever the batch size) is. */
#ifndef CPULM_KERNELS_MATMUL_H
#define CPULM_KERNELS_MATMUL_H

#include <stddef.h>
#include <stdint.h>

#include "kernels.h"

/* Activation rows per gemm_x16 call over the packed groups: their Q8_0 data (~70 KB at n =
 * 1024..2048) stays in L2 while the groups stream by. (`cpulm roofline` times the GEMM
 * microkernels with calls of this size, the ones prompt processing makes.) */
#define CPULM_MATMUL_TOK_CHUNK 64

typedef struct cpulm_matmul_args {
    const void *w; /* weights: n_out rows of n_in elements of w_type */
    cpulm_dtype w_type;
    uint64_t w_row_bytes;
    int64_t n_in, n_out;
    int packed; /* 0, or 1 + the 16-row group layout of w (n_out % 16 == 0): the one k reads */
    const uint8_t *act; /* n_rows activation rows made by cpulm_matmul_quantize_act */
    size_t act_stride;  /* bytes between activation rows */
    int64_t n_rows;
    float *out; /* [n_rows][ld_out], columns [0, n_out) written */
    int64_t ld_out;
    const float *bias; /* [n_out] or NULL */
    /* packed Q8_0 weights widened from Q4_1 / Q5_1 (kernels.h cpulm_kernels_packs_as): each
     * block's min, per 16-row group g at mins[(g * n_in / 32 + b) * 16 + r % 16]; the output
     * gets sum over blocks b of min * s_b, s_b = fp16(d_b * sum(q_b)) of the activation row's
     * Q8_0 block b (Q8_1's s, from the rounded scale), after the GEMM. NULL: none. */
    const float *mins;
    int accumulate; /* out += W x instead of out = W x */
} cpulm_matmul_args;

/* Bytes one activation row of n elements of type vdt (a vec_dot_type) takes: the row
 * itself, plus the per-block extras for Q8_0 and Q8_K (cpulm_pack_act_row_bytes,
 * cpulm_pack_actk_row_bytes). */
uint64_t cpulm_matmul_act_bytes(cpulm_dtype vdt, int64_t n);
/* Converts n floats into an activation row of type vdt (from_float, then the extras). */
void cpulm_matmul_quantize_act(const cpulm_kernels *k, cpulm_dtype vdt, const float *x,
                               uint8_t *dst, int64_t n);

/* Computes this thread's share (ith of nth) of the output columns. */
void cpulm_matmul(const cpulm_kernels *k, const cpulm_matmul_args *a, int ith, int nth);

#endif
