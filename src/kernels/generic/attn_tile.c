/* attn_tile.c: portable tiled-attention steps (contracts in kernels.h, attn_*): the scalar
 * definitions the SIMD levels reproduce bit for bit. Every step is per row (and per
 * element), so a row's result never depends on how many rows or keys share a call. */
#include <math.h>

#include "generic.h"

void cpulm_generic_attn_scores(int64_t d, int m, int n, const float *q, int64_t ldq, const float *k,
                               int64_t ldk, float scale, float *s, int64_t lds) {
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            float x;
            cpulm_generic_vec_dot_f32(d, &x, q + (int64_t)i * ldq, k + (int64_t)j * ldk);
            s[(int64_t)i * lds + j] = x * scale;
        }
}

float cpulm_generic_attn_softmax_row(int n, int lim, float *s, float *M, float *L) {
    return cpulm_generic_softmax_with(n, lim, s, M, L, cpulm_generic_vexpf);
}

void cpulm_generic_attn_pv(int64_t d, int m, int n, const float *p, int64_t ldp, const float *v,
                           int64_t ldv, const float *a, float *o, int64_t ldo) {
    for (int i = 0; i < m; i++) {
        float *oi = o + (int64_t)i * ldo;
        for (int64_t c = 0; c < d; c++)
            oi[c] *= a[i];
        for (int j = 0; j < n; j++) {
            const float pij = p[(int64_t)i * ldp + j];
            const float *vj = v + (int64_t)j * ldv;
            for (int64_t c = 0; c < d; c++)
                oi[c] = fmaf(pij, vj[c], oi[c]);
        }
    }
}

void cpulm_generic_attn_merge(int64_t d, int m, const float *mc, const float *lc, const float *oc,
                              int64_t ldoc, float *M, float *L, float *o, int64_t ldo) {
    for (int i = 0; i < m; i++) {
        if (mc[i] == -INFINITY) continue;
        float a, b;
        cpulm_attn_merge_row(&M[i], &L[i], mc[i], lc[i], &a, &b);
        float *oi = o + (int64_t)i * ldo;
        const float *ci = oc + (int64_t)i * ldoc;
        for (int64_t c = 0; c < d; c++)
            oi[c] = fmaf(ci[c], b, oi[c] * a);
    }
}
