/* attn_exact.c: portable exact tiled-attention steps (contracts in kernels.h, attn_x*): the
 * scalar definitions the SIMD levels reproduce bit for bit. Together they are attn_f16's
 * recurrence (attn.c) split into tiles: a row's scores, then its key-by-key softmax weights,
 * then the f16 accumulation of V, so a tile of keys can serve many rows at once. */
#include <math.h>

#include "../../base/fp16.h"
#include "generic.h"

void cpulm_generic_attn_xscores(int64_t d, int m, int n, const double *qt, int64_t ldqt,
                                const float *k, int64_t ldk, float scale, float *s, int64_t lds) {
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            const float *kj = k + (int64_t)j * ldk;
            /* double products of floats are exact: for f16 values they equal the f32
             * products vec_dot_f16 adds, so the sum is the same, in the same order */
            double sum = 0.0;
            for (int64_t c = 0; c < d; c++)
                sum += qt[c * ldqt + i] * (double)kj[c];
            s[(int64_t)i * lds + j] = (float)sum * scale;
        }
}

void cpulm_generic_attn_xweights(int n, float *s, float *ms, float *M) {
    float m = *M;
    for (int j = 0; j < n; j++) {
        const float x = s[j];
        if (x > m) {
            ms[j] = expf(m - x);
            s[j] = 1.0f;
            m = x;
        } else {
            ms[j] = 1.0f;
            s[j] = expf(x - m);
        }
    }
    *M = m;
}

static inline float round_f16(float x) {
    return cpulm_fp16_to_f32(cpulm_f32_to_fp16(x));
}

/* Skipping the scale when ms == 1 is attn_f16's arithmetic: it scales only when the max
 * moves, and a move by so little that expf rounds to 1 multiplies f16 values by 1. */
void cpulm_generic_attn_xpv(int64_t d, int m, int n, const float *ms, const float *vs, int64_t ldw,
                            const float *v, int64_t ldv, float *acc, int64_t lda, float *S) {
    for (int i = 0; i < m; i++) {
        float *a = acc + (int64_t)i * lda;
        for (int j = 0; j < n; j++) {
            const float mij = ms[(int64_t)i * ldw + j], vij = vs[(int64_t)i * ldw + j];
            const float *vj = v + (int64_t)j * ldv;
            if (mij != 1.0f)
                for (int64_t c = 0; c < d; c++)
                    a[c] = round_f16(a[c] * mij);
            for (int64_t c = 0; c < d; c++)
                a[c] = round_f16(fmaf(vj[c], vij, a[c]));
            S[i] = fmaf(S[i], mij, vij);
        }
    }
}
