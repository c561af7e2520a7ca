/* neon_dnet.c: the Gated DeltaNet ops at the neon level (neon_dnet.h). Elements are
 * vectorized across columns / channels, 4 per register, each one the generic fma chain
 * (vfmaq is fused, like fmaf), so results are the generic ones bit for bit; columns past
 * the last whole register take the generic scalar steps. */
#include <arm_neon.h>
#include <math.h>

#include "arm.h"
#include "neon_dnet.h"

#define INLINE static inline __attribute__((always_inline))

/* ---- dnet_step: whole registers of columns [c0, c0 + 4 NV), then scalar columns ---- */

INLINE void step_cols(const int NV, int64_t n, int64_t c0, float *T, const float *q, const float *k,
                      const float *v, float beta, float decay, float scale, float *o, float *d) {
    float32x4_t acc[8], dv[8];
#pragma GCC unroll 8
    for (int j = 0; j < NV; j++)
        acc[j] = vdupq_n_f32(0.0f);
    for (int64_t i = 0; i < n; i++) { /* u = T^T k */
        const float *row = T + i * n + c0;
#pragma GCC unroll 8
        for (int j = 0; j < NV; j++)
            acc[j] = vfmaq_n_f32(acc[j], vld1q_f32(row + 4 * j), k[i]);
    }
#pragma GCC unroll 8
    for (int j = 0; j < NV; j++) {
        const float32x4_t vv = vld1q_f32(v + c0 + 4 * j);
        dv[j] = vmulq_n_f32(vsubq_f32(vv, vmulq_n_f32(acc[j], decay)), beta);
        vst1q_f32(d + c0 + 4 * j, dv[j]);
        acc[j] = vdupq_n_f32(0.0f);
    }
    for (int64_t i = 0; i < n; i++) { /* T = decay T + k d^T, o = T^T q */
        float *row = T + i * n + c0;
#pragma GCC unroll 8
        for (int j = 0; j < NV; j++) {
            const float32x4_t u =
                vfmaq_n_f32(vmulq_n_f32(vld1q_f32(row + 4 * j), decay), dv[j], k[i]);
            vst1q_f32(row + 4 * j, u);
            acc[j] = vfmaq_n_f32(acc[j], u, q[i]);
        }
    }
#pragma GCC unroll 8
    for (int j = 0; j < NV; j++)
        vst1q_f32(o + c0 + 4 * j, vmulq_n_f32(acc[j], scale));
}

/* Columns [c0, c1) one at a time: the generic arithmetic. */
static void step_scalar(int64_t n, int64_t c0, int64_t c1, float *T, const float *q, const float *k,
                        const float *v, float beta, float decay, float scale, float *o, float *d) {
    for (int64_t r = c0; r < c1; r++) {
        float u = 0.0f, acc = 0.0f;
        for (int64_t i = 0; i < n; i++)
            u = fmaf(k[i], T[i * n + r], u);
        d[r] = (v[r] - decay * u) * beta;
        for (int64_t i = 0; i < n; i++) {
            T[i * n + r] = fmaf(k[i], d[r], decay * T[i * n + r]);
            acc = fmaf(q[i], T[i * n + r], acc);
        }
        o[r] = acc * scale;
    }
}

void cpulm_neon_dnet_step(int64_t n, float *T, const float *q, const float *k, const float *v,
                          float beta, float decay, float scale, float *o, float *d) {
    const int64_t nv = n & ~(int64_t)3;
    for (int64_t c0 = 0; c0 < nv; c0 += 32) { /* columns are independent: blocks of 32 */
        switch ((int)((nv - c0 < 32 ? nv - c0 : 32) / 4)) {
        case 1: step_cols(1, n, c0, T, q, k, v, beta, decay, scale, o, d); break;
        case 2: step_cols(2, n, c0, T, q, k, v, beta, decay, scale, o, d); break;
        case 3: step_cols(3, n, c0, T, q, k, v, beta, decay, scale, o, d); break;
        case 4: step_cols(4, n, c0, T, q, k, v, beta, decay, scale, o, d); break;
        case 5: step_cols(5, n, c0, T, q, k, v, beta, decay, scale, o, d); break;
        case 6: step_cols(6, n, c0, T, q, k, v, beta, decay, scale, o, d); break;
        case 7: step_cols(7, n, c0, T, q, k, v, beta, decay, scale, o, d); break;
        default: step_cols(8, n, c0, T, q, k, v, beta, decay, scale, o, d); break;
        }
    }
    step_scalar(n, nv, n, T, q, k, v, beta, decay, scale, o, d);
}

/* ---- dnet_mm: tiles of MR rows x 16 columns (4 registers), scalar columns past them ---- */

INLINE void mm_tile(const int MR, int k, const float *a, int64_t lda, const float *b, int64_t ldb,
                    float *c, int64_t ldc, int acc) {
    float32x4_t s[4][4];
#pragma GCC unroll 4
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++)
            s[i][j] = acc ? vld1q_f32(c + i * ldc + 4 * j) : vdupq_n_f32(0.0f);
    for (int p = 0; p < k; p++) {
        float32x4_t bj[4];
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++)
            bj[j] = vld1q_f32(b + (int64_t)p * ldb + 4 * j);
#pragma GCC unroll 4
        for (int i = 0; i < MR; i++) {
            const float ai = a[i * lda + p];
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++)
                s[i][j] = vfmaq_n_f32(s[i][j], bj[j], ai);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++)
            vst1q_f32(c + i * ldc + 4 * j, s[i][j]);
}

void cpulm_neon_dnet_mm(int m, int n, int k, const float *a, int64_t lda, const float *b,
                        int64_t ldb, float *c, int64_t ldc, int acc) {
    const int n16 = n & ~15;
    for (int j0 = 0; j0 < n16; j0 += 16)
        for (int i0 = 0; i0 < m; i0 += 4) {
            const float *ai = a + i0 * lda;
            float *ci = c + i0 * ldc + j0;
            switch (m - i0 < 4 ? m - i0 : 4) {
            case 1: mm_tile(1, k, ai, lda, b + j0, ldb, ci, ldc, acc); break;
            case 2: mm_tile(2, k, ai, lda, b + j0, ldb, ci, ldc, acc); break;
            case 3: mm_tile(3, k, ai, lda, b + j0, ldb, ci, ldc, acc); break;
            default: mm_tile(4, k, ai, lda, b + j0, ldb, ci, ldc, acc); break;
            }
        }
    for (int i = 0; i < m; i++)
        for (int j = n16; j < n; j++) {
            float s = acc ? c[(int64_t)i * ldc + j] : 0.0f;
            for (int p = 0; p < k; p++)
                s = fmaf(a[(int64_t)i * lda + p], b[(int64_t)p * ldb + j], s);
            c[(int64_t)i * ldc + j] = s;
        }
}

/* ---- dnet_conv: 4 channels per register, scalar channels past them ---- */

void cpulm_neon_dnet_conv(int64_t n, int taps, float *x, float *win, int64_t ldwin, const float *w,
                          int64_t ldw) {
    int64_t c = 0;
    for (; c + 4 <= n; c += 4) {
        const float32x4_t in = vld1q_f32(x + c);
        float32x4_t s = vdupq_n_f32(0.0f);
        for (int j = 0; j < taps - 1; j++)
            s = vfmaq_f32(s, vld1q_f32(win + j * ldwin + c), vld1q_f32(w + j * ldw + c));
        s = vfmaq_f32(s, in, vld1q_f32(w + (int64_t)(taps - 1) * ldw + c));
        for (int j = 0; j + 1 < taps - 1; j++)
            vst1q_f32(win + j * ldwin + c, vld1q_f32(win + (j + 1) * ldwin + c));
        if (taps > 1) vst1q_f32(win + (int64_t)(taps - 2) * ldwin + c, in);
        vst1q_f32(x + c, s);
    }
    for (; c < n; c++) {
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

/* ---- silu: canonical as swiglu (whole groups of 16 on the polynomial exp, the rest libm's) ----
 */

void cpulm_neon_silu(int64_t n, float *y, const float *x) {
    const float32x4_t one = vdupq_n_f32(1.0f);
    const int64_t nv = n & ~(int64_t)15;
    int64_t i = 0;
    for (; i < nv; i += 4) {
        const float32x4_t v = vld1q_f32(x + i);
        vst1q_f32(y + i, vdivq_f32(v, vaddq_f32(one, arm_canon_vexp(vnegq_f32(v)))));
    }
    for (; i < n; i++)
        y[i] = x[i] / (1.0f + expf(-x[i]));
}
