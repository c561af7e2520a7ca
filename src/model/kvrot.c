/* kvrot.c: the quantized KV cache's Hadamard rotation (see kvrot.h). */
#include "kvrot.h"

#include <math.h>

#include "format/quant.h"

void cpulm_kvrot_plan(const cpulm_model *m, int kv, int32_t *rot_k, int32_t *rot_v) {
    const cpulm_hparams *hp = &m->hp;
    const int32_t d = hp->head_dim;
    int varies = hp->head_dim_swa > 0 && hp->head_dim_swa != d;
    for (int32_t il = 0; il < hp->n_layer; il++)
        varies |= m->layers[il].head_dim > 0 && m->layers[il].head_dim != d;
    *rot_k = *rot_v = 0;
    if ((kv != CPULM_DTYPE_Q8_0 && kv != CPULM_DTYPE_Q4_0) || d % 64 != 0 || varies) return;
    int32_t n = 64;
    while (d % (2 * n) == 0)
        n *= 2;
    *rot_k = n;
    *rot_v = 64; /* llama.cpp: "using smaller rotation matrices for V seems beneficial" */
}

void cpulm_kvrot_rows(float *x, int64_t n, int32_t blk) {
    if (blk <= 1) return; /* no rotation */
    const float s = 1.0f / sqrtf((float)blk);
    for (int64_t o = 0; o < n; o += blk) {
        float *y = x + o;
        for (int32_t h = 1; h < blk; h *= 2)
            for (int32_t i = 0; i < blk; i += 2 * h)
                for (int32_t j = i; j < i + h; j++) {
                    const float a = y[j], b = y[j + h];
                    y[j] = a + b;
                    y[j + h] = a - b;
                }
        for (int32_t j = 0; j < blk; j++)
            y[j] *= s;
    }
}
