/* avx2_attnx.c: the avx2 level's exact tiled-attention steps (contracts in kernels.h: attn_x*),
 * built with the avx2 flags (AVX2, FMA, F16C) and reached through cpulm_kernels_avx2 (avx2.c's
 * table); the avx512 levels call them for the head sizes their 512-bit versions do not take.
 *
 * Bit-identical to generic/attn_exact.c:
 * - xscores puts query rows in the lanes of __m256d vectors (four rows per vector), each key
 *   element broadcast: every (row, key) lane adds its exact products in c order, as the
 *   generic double sum does (fma of an exact product = one rounded addition).
 * - xpv rounds every accumulator through VCVTPS2PH (round to nearest even, immediate) and
 *   VCVTPH2PS, and uses fused multiply-adds like fmaf.
 * attn_xweights stays generic: the exact expf (avx512.c) needs AVX-512's table permutes.
 */
#if defined(__x86_64__)
#include <math.h>

#include "avx2_attn.h"
#include "kernels/generic/generic.h"
#include "x86.h"

#define AVX2_INLINE static inline __attribute__((always_inline))

/* ---- scores ---- */

enum { XKD = 8 * 256 }; /* key elements as doubles: KJ <= 8 keys of d <= 256 */

/* Lane l < rows of a 4-row vector (maskload never touches the lanes left out). */
AVX2_INLINE __m256i xrows_mask(int rows) {
    return _mm256_cmpgt_epi64(_mm256_set1_epi64x(rows), _mm256_setr_epi64x(0, 1, 2, 3));
}

/* Rows (NV vectors of 4, the last one masked to the rows left) x KJ keys (kd: [KJ][d]
 * doubles) into s. The loops unroll fully, so the NV * KJ accumulators live in registers. */
AVX2_INLINE void xscores_keys(int64_t d, const double *qt, int64_t ldqt, int rows, const double *kd,
                              float scale, float *s, int64_t lds, const int NV, const int KJ) {
    __m256d acc[8];
    const __m256i last = xrows_mask(rows - 4 * (NV - 1));
    _Pragma("GCC unroll 8") for (int u = 0; u < NV * KJ; u++) acc[u] = _mm256_setzero_pd();
    for (int64_t c = 0; c < d; c++) {
        _Pragma("GCC unroll 2") for (int v = 0; v < NV; v++) {
            const double *p = qt + c * ldqt + 4 * v;
            const __m256d qv = v == NV - 1 ? _mm256_maskload_pd(p, last) : _mm256_loadu_pd(p);
            _Pragma("GCC unroll 8") for (int kk = 0; kk < KJ; kk++) acc[v * KJ + kk] =
                _mm256_fmadd_pd(qv, _mm256_broadcast_sd(kd + kk * d + c), acc[v * KJ + kk]);
        }
    }
    const __m128 vs = _mm_set1_ps(scale);
    _Pragma("GCC unroll 2") for (int v = 0; v < NV; v++) {
        _Pragma("GCC unroll 8") for (int kk = 0; kk < KJ; kk++) {
            float out[4];
            _mm_storeu_ps(out, _mm_mul_ps(_mm256_cvtpd_ps(acc[v * KJ + kk]), vs));
            for (int l = 0; l < 4 && 4 * v + l < rows; l++)
                s[(4 * v + l) * lds + kk] = out[l];
        }
    }
}

/* K rows (KJ of them, f32) as doubles into kd [KJ][d]. */
AVX2_INLINE void xscores_kd(int64_t d, const float *k, int64_t ldk, double *kd, const int KJ) {
    for (int kk = 0; kk < KJ; kk++) {
        int64_t c = 0;
        for (; c + 4 <= d; c += 4)
            _mm256_storeu_pd(kd + kk * d + c, _mm256_cvtps_pd(_mm_loadu_ps(k + kk * ldk + c)));
        for (; c < d; c++)
            kd[kk * d + c] = (double)k[kk * ldk + c];
    }
}

/* Up to 4 NV rows x every key, KJ keys at a time (the last ones one by one). */
AVX2_INLINE void xscores_pass(int64_t d, int rows, const double *qt, int64_t ldqt, int n,
                              const float *k, int64_t ldk, float scale, float *s, int64_t lds,
                              const int NV, const int KJ) {
    double kd[XKD];
    int j = 0;
    for (; j + KJ <= n; j += KJ) {
        xscores_kd(d, k + j * ldk, ldk, kd, KJ);
        xscores_keys(d, qt, ldqt, rows, kd, scale, s + j, lds, NV, KJ);
    }
    for (; j < n; j++) {
        xscores_kd(d, k + j * ldk, ldk, kd, 1);
        xscores_keys(d, qt, ldqt, rows, kd, scale, s + j, lds, NV, 1);
    }
}

void cpulm_avx2_attn_xscores(int64_t d, int m, int n, const double *qt, int64_t ldqt,
                             const float *k, int64_t ldk, float scale, float *s, int64_t lds) {
    if (d > XKD / 8) {
        cpulm_generic_attn_xscores(d, m, n, qt, ldqt, k, ldk, scale, s, lds);
        return;
    }
    for (int i0 = 0; i0 < m; i0 += 8) {
        const int rows = m - i0 < 8 ? m - i0 : 8;
        const double *q = qt + i0;
        float *si = s + (int64_t)i0 * lds;
        if (rows <= 4) /* 8 accumulators: enough in flight for the fma latency */
            xscores_pass(d, rows, q, ldqt, n, k, ldk, scale, si, lds, 1, 8);
        else
            xscores_pass(d, rows, q, ldqt, n, k, ldk, scale, si, lds, 2, 4);
    }
}

/* ---- P.V ---- */

AVX2_INLINE __m256 xround_f16(__m256 x) {
    return _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

/* R rows x V vectors of 8 dims, the f16 accumulators in registers (values exactly f16). */
AVX2_INLINE void xpv_block(int n, const float *ms, const float *vs, int64_t ldw, const float *v,
                           int64_t ldv, float *acc, int64_t lda, const int R, const int V) {
    __m256 a[4][4];
    _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {
        _Pragma("GCC unroll 4") for (int c = 0; c < V; c++) a[r][c] =
            _mm256_loadu_ps(acc + r * lda + 8 * c);
    }
    for (int j = 0; j < n; j++) {
        __m256 vv[4];
        _Pragma("GCC unroll 4") for (int c = 0; c < V; c++) vv[c] =
            _mm256_loadu_ps(v + (int64_t)j * ldv + 8 * c);
        _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {
            const float mij = ms[r * ldw + j];
            if (mij != 1.0f) {
                const __m256 vm = _mm256_set1_ps(mij);
                _Pragma("GCC unroll 4") for (int c = 0; c < V; c++) a[r][c] =
                    xround_f16(_mm256_mul_ps(a[r][c], vm));
            }
            const __m256 vw = _mm256_set1_ps(vs[r * ldw + j]);
            _Pragma("GCC unroll 4") for (int c = 0; c < V; c++) a[r][c] =
                xround_f16(_mm256_fmadd_ps(vv[c], vw, a[r][c]));
        }
    }
    _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {
        _Pragma("GCC unroll 4") for (int c = 0; c < V; c++)
            _mm256_storeu_ps(acc + r * lda + 8 * c, a[r][c]);
    }
}

/* rows * vecs <= 8 accumulators (16 ymm registers: the values and a broadcast besides) */
#define XPV_CASE(R, V) xpv_block(n, ms, vs, ldw, v, ldv, acc, lda, R, V)
static void xpv_rows(int rows, int vecs, int n, const float *ms, const float *vs, int64_t ldw,
                     const float *v, int64_t ldv, float *acc, int64_t lda) {
    switch (rows * 8 + vecs) {
    case 4 * 8 + 2: XPV_CASE(4, 2); break;
    case 4 * 8 + 1: XPV_CASE(4, 1); break;
    case 3 * 8 + 2: XPV_CASE(3, 2); break;
    case 3 * 8 + 1: XPV_CASE(3, 1); break;
    case 2 * 8 + 4: XPV_CASE(2, 4); break;
    case 2 * 8 + 3: XPV_CASE(2, 3); break;
    case 2 * 8 + 2: XPV_CASE(2, 2); break;
    case 2 * 8 + 1: XPV_CASE(2, 1); break;
    case 1 * 8 + 4: XPV_CASE(1, 4); break;
    case 1 * 8 + 3: XPV_CASE(1, 3); break;
    case 1 * 8 + 2: XPV_CASE(1, 2); break;
    default: XPV_CASE(1, 1); break;
    }
}
#undef XPV_CASE

/* Columns are independent, so blocks of rows x dims in any order give the generic bits:
 * 4 rows x 16 dims, or 2 rows x 32 dims when at most two rows are left. d % 8 != 0 (no
 * such head size in practice) stays generic. */
void cpulm_avx2_attn_xpv(int64_t d, int m, int n, const float *ms, const float *vs, int64_t ldw,
                         const float *v, int64_t ldv, float *acc, int64_t lda, float *S) {
    if (d % 8 != 0) {
        cpulm_generic_attn_xpv(d, m, n, ms, vs, ldw, v, ldv, acc, lda, S);
        return;
    }
    for (int i = 0; i < m; i += 4) {
        const int rows = m - i < 4 ? m - i : 4, maxv = rows <= 2 ? 4 : 2;
        for (int64_t c = 0; c < d; c += 8 * maxv) {
            const int vecs = d - c < 8 * maxv ? (int)((d - c) / 8) : maxv;
            xpv_rows(rows, vecs, n, ms + (int64_t)i * ldw, vs + (int64_t)i * ldw, ldw, v + c, ldv,
                     acc + (int64_t)i * lda + c, lda);
        }
    }
    for (int i = 0; i < m; i++) {
        float si = S[i];
        for (int j = 0; j < n; j++)
            si = fmaf(si, ms[(int64_t)i * ldw + j], vs[(int64_t)i * ldw + j]);
        S[i] = si;
    }
}
#endif
