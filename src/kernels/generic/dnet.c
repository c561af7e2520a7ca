/* dnet.c: portable-C Gated DeltaNet ops (kernels.h: dnet_step, dnet_mm, dnet_conv), the
 * oracle of their SIMD versions. Each output element is one chain of fused multiply-adds
 * in a fixed order with no reduction tree, so a level that vectorizes across elements
 * (columns, channels) computes exactly these bits. */
#include "generic.h"

void cpulm_generic_dnet_step(int64_t n, float *T, const float *q, const float *k, const float *v,
                             float beta, float decay, float scale, float *o, float *d) {
    for (int64_t r = 0; r < n; r++)
        d[r] = 0.0f;
    for (int64_t i = 0; i < n; i++) /* u = T^T k, kept in d */
        for (int64_t r = 0; r < n; r++)
            d[r] = fmaf(k[i], T[i * n + r], d[r]);
    for (int64_t r = 0; r < n; r++) {
        d[r] = (v[r] - decay * d[r]) * beta;
        o[r] = 0.0f;
    }
    for (int64_t i = 0; i < n; i++) {
        float *row = T + i * n;
        for (int64_t r = 0; r < n; r++) {
            row[r] = fmaf(k[i], d[r], decay * row[r]);
            o[r] = fmaf(q[i], row[r], o[r]);
        }
    }
    for (int64_t r = 0; r < n; r++)
        o[r] *= scale;
}

void cpulm_generic_dnet_mm(int m, int n, int k, const float *a, int64_t lda, const float *b,
                           int64_t ldb, float *c, int64_t ldc, int acc) {
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            float s = acc ? c[(int64_t)i * ldc + j] : 0.0f;
            for (int p = 0; p < k; p++)
                s = fmaf(a[(int64_t)i * lda + p], b[(int64_t)p * ldb + j], s);
            c[(int64_t)i * ldc + j] = s;
        }
}

void cpulm_generic_dnet_conv(int64_t n, int taps, float *x, float *win, int64_t ldwin,
                             const float *w, int64_t ldw) {
    for (int64_t c = 0; c < n; c++) {
        const float in = x[c];
        float s = 0.0f;
        for (int j = 0; j < taps - 1; j++)
            s = fmaf(win[j * ldwin + c], w[j * ldw + c], s);
        s = fmaf(in, w[(int64_t)(taps - 1) * ldw + c], s);
        for (int j = 0; j + 1 < taps - 1; j++)
            win[j * ldwin + c] = win[(j + 1) * ldwin + c];
        if (taps > 1) win[(int64_t)(taps - 2) * ldwin + c] = in;
        x[c] = s;
    }
}
