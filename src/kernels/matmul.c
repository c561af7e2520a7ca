/* matmul.c: threading and tiling of y = W x over the kernel table (see matmul.h). */
#include "matmul.h"

#define ROW_BLOCK 16 /* weight rows kept hot in cache while every activation row visits them */

void cpulm_matmul(const cpulm_kernels *k, const cpulm_matmul_args *a, int ith, int nth) {
    int64_t r0 = a->n_out * ith / nth, r1 = a->n_out * (ith + 1) / nth;
    cpulm_vec_dot_fn dot = k->vec_dot[a->w_type];
    const uint8_t *wd = a->w;
    for (int64_t rb = r0; rb < r1; rb += ROW_BLOCK) {
        int64_t re = rb + ROW_BLOCK < r1 ? rb + ROW_BLOCK : r1;
        for (int64_t t = 0; t < a->n_rows; t++) {
            const uint8_t *x = a->act + (size_t)t * a->act_stride;
            float *o = a->out + t * a->ld_out;
            for (int64_t r = rb; r < re; r++) {
                float s;
                dot(a->n_in, &s, wd + (size_t)r * a->w_row_bytes, x);
                if (a->bias) s += a->bias[r];
                o[r] = a->accumulate ? o[r] + s : s;
            }
        }
    }
}
