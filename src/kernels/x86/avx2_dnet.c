/* avx2_dnet.c: the Gated DeltaNet ops at the avx2 level (kernels.h: dnet_step, dnet_mm,
 * dnet_conv; x86_dnet.h). Elements are vectorized across columns / channels, 8 per
 * register, each one the generic fma chain, so results are the generic ones bit for bit;
 * the last register of a row is masked (maskload / maskstore). */
#include <immintrin.h>

#include "x86.h"
#include "x86_dnet.h"

#define INLINE static inline __attribute__((always_inline))

/* lanes < rem set (rem >= 8: all) */
INLINE __m256i mask_of(int64_t rem) {
    const int r = rem >= 8 ? 8 : rem < 0 ? 0 : (int)rem;
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(r), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

INLINE __m256 load(__m256i m, const float *p) {
    return _mm256_maskload_ps(p, m);
}

/* ---- dnet_step: columns [c0, c0 + 8 NV), the last register masked ---- */

INLINE void step_cols(const int NV, int64_t n, int64_t c0, float *T, const float *q, const float *k,
                      const float *v, float beta, float decay, float scale, float *o, float *d) {
    __m256 acc[4], dv[4];
    __m256i m[4];
#pragma GCC unroll 4
    for (int j = 0; j < NV; j++) {
        m[j] = mask_of(n - c0 - 8 * j);
        acc[j] = _mm256_setzero_ps();
    }
    for (int64_t i = 0; i < n; i++) { /* u = T^T k */
        const __m256 ki = _mm256_set1_ps(k[i]);
        const float *row = T + i * n + c0;
#pragma GCC unroll 4
        for (int j = 0; j < NV; j++)
            acc[j] = _mm256_fmadd_ps(ki, load(m[j], row + 8 * j), acc[j]);
    }
    const __m256 vdec = _mm256_set1_ps(decay), vbeta = _mm256_set1_ps(beta);
#pragma GCC unroll 4
    for (int j = 0; j < NV; j++) {
        const __m256 vv = load(m[j], v + c0 + 8 * j);
        dv[j] = _mm256_mul_ps(_mm256_sub_ps(vv, _mm256_mul_ps(vdec, acc[j])), vbeta);
        _mm256_maskstore_ps(d + c0 + 8 * j, m[j], dv[j]);
        acc[j] = _mm256_setzero_ps();
    }
    for (int64_t i = 0; i < n; i++) { /* T = decay T + k d^T, o = T^T q */
        const __m256 ki = _mm256_set1_ps(k[i]), qi = _mm256_set1_ps(q[i]);
        float *row = T + i * n + c0;
#pragma GCC unroll 4
        for (int j = 0; j < NV; j++) {
            const __m256 u =
                _mm256_fmadd_ps(ki, dv[j], _mm256_mul_ps(vdec, load(m[j], row + 8 * j)));
            _mm256_maskstore_ps(row + 8 * j, m[j], u);
            acc[j] = _mm256_fmadd_ps(qi, u, acc[j]);
        }
    }
    const __m256 vs = _mm256_set1_ps(scale);
#pragma GCC unroll 4
    for (int j = 0; j < NV; j++)
        _mm256_maskstore_ps(o + c0 + 8 * j, m[j], _mm256_mul_ps(acc[j], vs));
}

void cpulm_avx2_dnet_step(int64_t n, float *T, const float *q, const float *k, const float *v,
                          float beta, float decay, float scale, float *o, float *d) {
    for (int64_t c0 = 0; c0 < n; c0 += 32) { /* columns are independent: blocks of 32 */
        switch ((int)((n - c0 < 32 ? n - c0 : 32) + 7) / 8) {
        case 1: step_cols(1, n, c0, T, q, k, v, beta, decay, scale, o, d); break;
        case 2: step_cols(2, n, c0, T, q, k, v, beta, decay, scale, o, d); break;
        case 3: step_cols(3, n, c0, T, q, k, v, beta, decay, scale, o, d); break;
        default: step_cols(4, n, c0, T, q, k, v, beta, decay, scale, o, d); break;
        }
    }
}

/* ---- dnet_mm: tiles of MR rows x 16 columns (2 registers, masked past n) ---- */

INLINE void mm_tile(const int MR, int n, int k, const float *a, int64_t lda, const float *b,
                    int64_t ldb, float *c, int64_t ldc, int acc) {
    __m256 s[6][2];
    const __m256i m[2] = {mask_of(n), mask_of(n - 8)};
#pragma GCC unroll 6
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 2
        for (int j = 0; j < 2; j++)
            s[i][j] = acc ? load(m[j], c + i * ldc + 8 * j) : _mm256_setzero_ps();
    for (int p = 0; p < k; p++) {
        const __m256 b0 = load(m[0], b + (int64_t)p * ldb),
                     b1 = load(m[1], b + (int64_t)p * ldb + 8);
#pragma GCC unroll 6
        for (int i = 0; i < MR; i++) {
            const __m256 ai = _mm256_set1_ps(a[i * lda + p]);
            s[i][0] = _mm256_fmadd_ps(ai, b0, s[i][0]);
            s[i][1] = _mm256_fmadd_ps(ai, b1, s[i][1]);
        }
    }
#pragma GCC unroll 6
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 2
        for (int j = 0; j < 2; j++)
            _mm256_maskstore_ps(c + i * ldc + 8 * j, m[j], s[i][j]);
}

#define MM_CASE(MR) \
    case MR: mm_tile(MR, w, k, ai, lda, b + j0, ldb, ci, ldc, acc); break;

void cpulm_avx2_dnet_mm(int m, int n, int k, const float *a, int64_t lda, const float *b,
                        int64_t ldb, float *c, int64_t ldc, int acc) {
    for (int j0 = 0; j0 < n; j0 += 16) {
        const int w = n - j0 < 16 ? n - j0 : 16;
        for (int i0 = 0; i0 < m; i0 += 6) {
            const float *ai = a + i0 * lda;
            float *ci = c + i0 * ldc + j0;
            switch (m - i0 < 6 ? m - i0 : 6) {
                MM_CASE(1)
                MM_CASE(2)
                MM_CASE(3)
                MM_CASE(4)
                MM_CASE(5)
                MM_CASE(6)
            }
        }
    }
}

/* ---- dnet_conv: 8 channels per register ---- */

void cpulm_avx2_dnet_conv(int64_t n, int taps, float *x, float *win, int64_t ldwin, const float *w,
                          int64_t ldw) {
    for (int64_t c = 0; c < n; c += 8) {
        const __m256i m = mask_of(n - c);
        const __m256 in = load(m, x + c);
        __m256 s = _mm256_setzero_ps();
        for (int j = 0; j < taps - 1; j++)
            s = _mm256_fmadd_ps(load(m, win + j * ldwin + c), load(m, w + j * ldw + c), s);
        s = _mm256_fmadd_ps(in, load(m, w + (int64_t)(taps - 1) * ldw + c), s);
        for (int j = 0; j + 1 < taps - 1; j++)
            _mm256_maskstore_ps(win + j * ldwin + c, m, load(m, win + (j + 1) * ldwin + c));
        if (taps > 1) _mm256_maskstore_ps(win + (int64_t)(taps - 2) * ldwin + c, m, in);
        _mm256_maskstore_ps(x + c, m, s);
    }
}

/* ---- silu: canonical as swiglu (whole groups of 16 on the polynomial exp, the rest libm's) ----
 */

void cpulm_avx2_silu(int64_t n, float *y, const float *x) {
    const __m256 one = _mm256_set1_ps(1.0f);
    const int64_t nv = n & ~(int64_t)15;
    int64_t i = 0;
    for (; i < nv; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        const __m256 e = x86_canon_vexp256(_mm256_sub_ps(_mm256_setzero_ps(), v));
        _mm256_storeu_ps(y + i, _mm256_div_ps(v, _mm256_add_ps(one, e)));
    }
    for (; i < n; i++)
        y[i] = x[i] / (1.0f + expf(-x[i]));
}
