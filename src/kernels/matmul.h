/* matmul.h: y = W x for a batch of activation rows, split over threads. ISA-free: it tiles
 * and threads over entries of the kernel table, choosing the GEMV path for one row and the
 * tiled GEMM path for several.
 * Determinism: every output element is computed by exactly one thread with the same
 * arithmetic whatever nth is, so results do not depend on the thread count. */
#ifndef CPULM_KERNELS_MATMUL_H
#define CPULM_KERNELS_MATMUL_H

#include <stddef.h>
#include <stdint.h>

#include "kernels.h"

typedef struct cpulm_matmul_args {
    const void *w;        /* weights: n_out rows of n_in elements of w_type */
    cpulm_dtype w_type;
    uint64_t w_row_bytes;
    int64_t n_in, n_out;
    const uint8_t *act;   /* n_rows activation rows in w_type's vec_dot_type */
    size_t act_stride;    /* bytes between activation rows */
    int64_t n_rows;
    float *out;           /* [n_rows][ld_out], columns [0, n_out) written */
    int64_t ld_out;
    const float *bias;    /* [n_out] or NULL */
    int accumulate;       /* out += W x instead of out = W x */
} cpulm_matmul_args;

/* Computes this thread's share (ith of nth) of the output columns. */
void cpulm_matmul(const cpulm_kernels *k, const cpulm_matmul_args *a, int ith, int nth);

#endif
