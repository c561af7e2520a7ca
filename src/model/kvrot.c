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

/* a, b = a + b, a - b over 8 floats (restrict: the two rows never overlap, so gcc -O2
 * vectorizes without a runtime check) */
static inline void bfly8(float *restrict a, float *restrict b) {
    for (int e = 0; e < 8; e++) {
        const float x = a[e], y = b[e];
        a[e] = x + y;
        b[e] = x - y;
    }
}

/* The stages h = 1, 2, 4 of 8 floats, unrolled (each pair as the loop form: a + b, a - b). */
static inline void wht8(float *z) {
    const float a0 = z[0] + z[1], a1 = z[0] - z[1], a2 = z[2] + z[3], a3 = z[2] - z[3];
    const float a4 = z[4] + z[5], a5 = z[4] - z[5], a6 = z[6] + z[7], a7 = z[6] - z[7];
    const float b0 = a0 + a2, b2 = a0 - a2, b1 = a1 + a3, b3 = a1 - a3;
    const float b4 = a4 + a6, b6 = a4 - a6, b5 = a5 + a7, b7 = a5 - a7;
    z[0] = b0 + b4, z[4] = b0 - b4, z[1] = b1 + b5, z[5] = b1 - b5;
    z[2] = b2 + b6, z[6] = b2 - b6, z[3] = b3 + b7, z[7] = b3 - b7;
}

/* One block's butterflies, stage by stage (h = 1, 2, 4, ...: each stage's pairs are disjoint,
 * so this order is the plain FWHT's bit for bit). The stages of h >= 8 run over rows of 8 in
 * a loop of constant trip count, which gcc -O2 vectorizes, the first three unrolled: 1.3% of
 * a pp2048 on a q8_0 cache, 2.75% as one scalar loop nest. */
static void fwht(float *y, int32_t blk) {
    for (int32_t g = 0; g < blk; g += 8)
        wht8(y + g);
    for (int32_t h = 8; h < blk; h *= 2)
        for (int32_t i = 0; i < blk; i += 2 * h)
            for (int32_t j = i; j < i + h; j += 8)
                bfly8(y + j, y + j + h);
}

void cpulm_kvrot_rows(float *x, int64_t n, int32_t blk) {
    if (blk < 8) return; /* no rotation (the plan's sizes are 64 and up) */
    const float s = 1.0f / sqrtf((float)blk);
    for (int64_t o = 0; o < n; o += blk) {
        fwht(x + o, blk);
        for (int32_t j = 0; j < blk; j += 8)
            for (int e = 0; e < 8; e++)
                x[o + j + e] *= s;
    }
}
