/* avx512_dnet.c: the Gated DeltaNet ops at the avx512 level (kernels.h: dnet_step, dnet_mm,
 * dnet_conv; x86_dnet.h). Elements are vectorized across columns / channels, 16 per
 * register, each one the generic fma chain, so results are the generic ones bit for bit;
 * the last register of a row is masked. Loops over the registers of a block are unrolled
 * (the arrays of registers then live in registers, not on the stack). */
#include <immintrin.h>

#include "x86.h"
#include "x86_dnet.h"

#define INLINE static inline __attribute__((always_inline))

INLINE __mmask16 mask_of(int64_t rem) {
    return rem >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << rem) - 1);
}

/* ---- dnet_step: columns [c0, c0 + 16 NV) of the state, the last register masked ---- */

INLINE void step_cols(const int NV, int64_t n, int64_t c0, float *T, const float *q, const float *k,
                      const float *v, float beta, float decay, float scale, float *o, float *d) {
    __m512 acc[8], dv[8];
    __mmask16 m[8];
#pragma GCC unroll 8
    for (int j = 0; j < NV; j++) {
        m[j] = j == NV - 1 ? mask_of(n - c0 - 16 * j) : (__mmask16)0xFFFF;
        acc[j] = _mm512_setzero_ps();
    }
    for (int64_t i = 0; i < n; i++) { /* u = T^T k */
        const __m512 ki = _mm512_set1_ps(k[i]);
        const float *row = T + i * n + c0;
#pragma GCC unroll 8
        for (int j = 0; j < NV; j++)
            acc[j] = _mm512_fmadd_ps(ki, _mm512_maskz_loadu_ps(m[j], row + 16 * j), acc[j]);
    }
    const __m512 vdec = _mm512_set1_ps(decay), vbeta = _mm512_set1_ps(beta);
#pragma GCC unroll 8
    for (int j = 0; j < NV; j++) {
        const __m512 vv = _mm512_maskz_loadu_ps(m[j], v + c0 + 16 * j);
        dv[j] = _mm512_mul_ps(_mm512_sub_ps(vv, _mm512_mul_ps(vdec, acc[j])), vbeta);
        _mm512_mask_storeu_ps(d + c0 + 16 * j, m[j], dv[j]);
        acc[j] = _mm512_setzero_ps();
    }
    for (int64_t i = 0; i < n; i++) { /* T = decay T + k d^T, o = T^T q */
        const __m512 ki = _mm512_set1_ps(k[i]), qi = _mm512_set1_ps(q[i]);
        float *row = T + i * n + c0;
#pragma GCC unroll 8
        for (int j = 0; j < NV; j++) {
            const __m512 t = _mm512_maskz_loadu_ps(m[j], row + 16 * j);
            const __m512 u = _mm512_fmadd_ps(ki, dv[j], _mm512_mul_ps(vdec, t));
            _mm512_mask_storeu_ps(row + 16 * j, m[j], u);
            acc[j] = _mm512_fmadd_ps(qi, u, acc[j]);
        }
    }
    const __m512 vs = _mm512_set1_ps(scale);
#pragma GCC unroll 8
    for (int j = 0; j < NV; j++)
        _mm512_mask_storeu_ps(o + c0 + 16 * j, m[j], _mm512_mul_ps(acc[j], vs));
}

#define STEP_CASE(NV) \
    case NV: step_cols(NV, n, c0, T, q, k, v, beta, decay, scale, o, d); break;

void cpulm_avx512_dnet_step(int64_t n, float *T, const float *q, const float *k, const float *v,
                            float beta, float decay, float scale, float *o, float *d) {
    for (int64_t c0 = 0; c0 < n; c0 += 128) { /* columns are independent: blocks of 128 */
        const int64_t w = n - c0 < 128 ? n - c0 : 128;
        switch ((int)((w + 15) / 16)) {
            STEP_CASE(1)
            STEP_CASE(2)
            STEP_CASE(3)
            STEP_CASE(4)
            STEP_CASE(5)
            STEP_CASE(6)
            STEP_CASE(7)
            STEP_CASE(8)
        }
    }
}

/* ---- dnet_mm: tiles of MR rows x 64 columns (4 registers, masked past n) ---- */

INLINE void mm_tile(const int MR, int n, int k, const float *a, int64_t lda, const float *b,
                    int64_t ldb, float *c, int64_t ldc, int acc) {
    __m512 s[4][4];
    __mmask16 m[4];
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++)
        m[j] = n > 16 * j ? mask_of(n - 16 * j) : (__mmask16)0;
#pragma GCC unroll 4
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++)
            s[i][j] = acc ? _mm512_maskz_loadu_ps(m[j], c + i * ldc + 16 * j) : _mm512_setzero_ps();
    for (int p = 0; p < k; p++) {
        __m512 bj[4];
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++)
            bj[j] = _mm512_maskz_loadu_ps(m[j], b + (int64_t)p * ldb + 16 * j);
#pragma GCC unroll 4
        for (int i = 0; i < MR; i++) {
            const __m512 ai = _mm512_set1_ps(a[i * lda + p]);
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++)
                s[i][j] = _mm512_fmadd_ps(ai, bj[j], s[i][j]);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++)
            _mm512_mask_storeu_ps(c + i * ldc + 16 * j, m[j], s[i][j]);
}

void cpulm_avx512_dnet_mm(int m, int n, int k, const float *a, int64_t lda, const float *b,
                          int64_t ldb, float *c, int64_t ldc, int acc) {
    for (int j0 = 0; j0 < n; j0 += 64) {
        const int w = n - j0 < 64 ? n - j0 : 64;
        for (int i0 = 0; i0 < m; i0 += 4) {
            const float *ai = a + i0 * lda;
            float *ci = c + i0 * ldc + j0;
            switch (m - i0 < 4 ? m - i0 : 4) {
            case 1: mm_tile(1, w, k, ai, lda, b + j0, ldb, ci, ldc, acc); break;
            case 2: mm_tile(2, w, k, ai, lda, b + j0, ldb, ci, ldc, acc); break;
            case 3: mm_tile(3, w, k, ai, lda, b + j0, ldb, ci, ldc, acc); break;
            default: mm_tile(4, w, k, ai, lda, b + j0, ldb, ci, ldc, acc); break;
            }
        }
    }
}

/* ---- dnet_conv: 16 channels per register ---- */

void cpulm_avx512_dnet_conv(int64_t n, int taps, float *x, float *win, int64_t ldwin,
                            const float *w, int64_t ldw) {
    for (int64_t c = 0; c < n; c += 16) {
        const __mmask16 m = mask_of(n - c);
        const __m512 in = _mm512_maskz_loadu_ps(m, x + c);
        __m512 s = _mm512_setzero_ps();
        for (int j = 0; j < taps - 1; j++)
            s = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, win + j * ldwin + c),
                                _mm512_maskz_loadu_ps(m, w + j * ldw + c), s);
        s = _mm512_fmadd_ps(in, _mm512_maskz_loadu_ps(m, w + (int64_t)(taps - 1) * ldw + c), s);
        for (int j = 0; j + 1 < taps - 1; j++)
            _mm512_mask_storeu_ps(win + j * ldwin + c, m,
                                  _mm512_maskz_loadu_ps(m, win + (j + 1) * ldwin + c));
        if (taps > 1) _mm512_mask_storeu_ps(win + (int64_t)(taps - 2) * ldwin + c, m, in);
        _mm512_mask_storeu_ps(x + c, m, s);
    }
}

/* ---- silu: canonical as swiglu (whole groups of 16 on the polynomial exp, the rest libm's) ----
 */

void cpulm_avx512_silu(int64_t n, float *y, const float *x) {
    const __m512 one = _mm512_set1_ps(1.0f);
    const int64_t nv = n & ~(int64_t)15;
    int64_t i = 0;
    for (; i < nv; i += 16) {
        const __m512 v = _mm512_loadu_ps(x + i);
        const __m512 e = x86_vexp_ps512(_mm512_sub_ps(_mm512_setzero_ps(), v));
        _mm512_storeu_ps(y + i, _mm512_div_ps(v, _mm512_add_ps(one, e)));
    }
    for (; i < n; i++)
        y[i] = x[i] / (1.0f + expf(-x[i]));
}
