/* avx2_attnx.c: the avx2 level's exact tiled-attention steps (contracts in kernels.h: attn_x*),
 * built with the avx2 flags (AVX2, FMA, F16C) and reached through cpulm_kernels_avx2 (avx2.c's
 * table); the avx512 levels call them for the head sizes their 512-bit versions do not take.
 *
 * Bit-identical to generic/attn.c (attn_x*):
 * - xscores puts query rows in the lanes of __m256d vectors (four rows per vector), each key
 *   element broadcast (keys converted to doubles once per call): every (row, key) lane adds its
 * exact products in c order, as the generic double sum does (fma of an exact product = one rounded
 * addition).
 * - xpv rounds every accumulator through VCVTPS2PH (round to nearest even, immediate) and
 *   VCVTPH2PS, and uses fused multiply-adds like fmaf.
 * - xweights takes the running max before each key as a prefix max over 8 lanes, so every
 *   key's exponent is known before any expf, and evaluates glibc's x86_64 FMA expf in
 *   __m256d lanes, its table by VGATHERQPD.
 */
#if defined(__x86_64__)
#include <math.h>
#include <string.h>

#include "kernels/blocks.h"
#include "x86_attn.h"
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
    __m256d acc[12];
    const __m256i last = xrows_mask(rows - 4 * (NV - 1));
    _Pragma("GCC unroll 12") for (int u = 0; u < NV * KJ; u++) acc[u] = _mm256_setzero_pd();
    const int full = rows == 4 * NV;
    for (int64_t c = 0; c < d; c++) {
        __m256d qv[3];
        _Pragma("GCC unroll 3") for (int v = 0; v < NV; v++) {
            const double *p = qt + c * ldqt + 4 * v;
            qv[v] = v == NV - 1 && !full ? _mm256_maskload_pd(p, last) : _mm256_loadu_pd(p);
        }
        _Pragma("GCC unroll 8") for (int kk = 0; kk < KJ; kk++) {
            const __m256d kb = _mm256_broadcast_sd(kd + kk * d + c);
            _Pragma("GCC unroll 3") for (int v = 0; v < NV; v++) acc[v * KJ + kk] =
                _mm256_fmadd_pd(qv[v], kb, acc[v * KJ + kk]);
        }
    }
    const __m128 vs = _mm_set1_ps(scale);
    _Pragma("GCC unroll 3") for (int v = 0; v < NV; v++) {
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

/* Every row x KJ keys (kd, converted once for all of them): passes of 8 rows x KJ keys
 * (12 accumulators for KJ = 6: enough in flight for the fma latency), the last rows in one
 * pass of 4 or 8. */
AVX2_INLINE void xscores_rows(int64_t d, int m, const double *qt, int64_t ldqt, const double *kd,
                              float scale, float *s, int64_t lds, const int KJ) {
    int i0 = 0;
    for (; i0 + 8 <= m; i0 += 8)
        xscores_keys(d, qt + i0, ldqt, 8, kd, scale, s + (int64_t)i0 * lds, lds, 2, KJ);
    if (m - i0 > 4)
        xscores_keys(d, qt + i0, ldqt, m - i0, kd, scale, s + (int64_t)i0 * lds, lds, 2, KJ);
    else if (m > i0)
        xscores_keys(d, qt + i0, ldqt, m - i0, kd, scale, s + (int64_t)i0 * lds, lds, 1, KJ);
}

/* Keys outer: each group of keys is converted to doubles once for every row (per pass of 8
 * rows it was ~15% of the prompt's xscores time). Up to 4 rows (generation): 8 keys per
 * pass, one vector of rows. */
void cpulm_avx2_attn_xscores(int64_t d, int m, int n, const double *qt, int64_t ldqt,
                             const float *k, int64_t ldk, float scale, float *s, int64_t lds) {
    if (d > XKD / 8) {
        cpulm_generic_attn_xscores(d, m, n, qt, ldqt, k, ldk, scale, s, lds);
        return;
    }
    double kd[XKD];
    int j = 0;
    if (m <= 4)
        for (; j + 8 <= n; j += 8) {
            xscores_kd(d, k + j * ldk, ldk, kd, 8);
            xscores_keys(d, qt, ldqt, m, kd, scale, s + j, lds, 1, 8);
        }
    for (; j + 6 <= n; j += 6) {
        xscores_kd(d, k + j * ldk, ldk, kd, 6);
        xscores_rows(d, m, qt, ldqt, kd, scale, s + j, lds, 6);
    }
    for (; j + 4 <= n; j += 4) {
        xscores_kd(d, k + j * ldk, ldk, kd, 4);
        xscores_rows(d, m, qt, ldqt, kd, scale, s + j, lds, 4);
    }
    for (; j < n; j++) {
        xscores_kd(d, k + j * ldk, ldk, kd, 1);
        xscores_rows(d, m, qt, ldqt, kd, scale, s + j, lds, 1);
    }
}

/* ---- weights ---- */

/* expf of 8 floats, the same bits as glibc's expf (2.28 and later, the x86_64 FMA variant its
 * ifunc picks on every CPU this level runs on; __expf_fma as Debian's 2.36 libm.so.6 is built,
 * disassembled): kd = fma(x, 32/ln2, 1.5 * 2^52), r = fms(x, 32/ln2, kd - 1.5 * 2^52),
 * 2^(k/32) from the table of 2^(i/32) with (k - i)/32 added to the exponent field,
 * y = fma(fma(C0, r, C1), r*r, fma(C2, r, 1)) * 2^(k/32) rounded to float; its special cases
 * below. avx512.c evaluates the same with table permutes; AVX2 has none across 32 doubles, so
 * a gather. attn_xweights_expf_is_libms compares it (through attn_xweights) with this
 * process's libm over floats in [-104, 0], the arguments attention passes. */
/* 2^(i/32) rounded to double, glibc's table; aligned for avx512.c's 512-bit loads. */
const double cpulm_x86_exp2_tab32[32] __attribute__((aligned(64))) = {
    0x1.0000000000000p+0, 0x1.059b0d3158574p+0, 0x1.0b5586cf9890fp+0, 0x1.11301d0125b51p+0,
    0x1.172b83c7d517bp+0, 0x1.1d4873168b9aap+0, 0x1.2387a6e756238p+0, 0x1.29e9df51fdee1p+0,
    0x1.306fe0a31b715p+0, 0x1.371a7373aa9cbp+0, 0x1.3dea64c123422p+0, 0x1.44e086061892dp+0,
    0x1.4bfdad5362a27p+0, 0x1.5342b569d4f82p+0, 0x1.5ab07dd485429p+0, 0x1.6247eb03a5585p+0,
    0x1.6a09e667f3bcdp+0, 0x1.71f75e8ec5f74p+0, 0x1.7a11473eb0187p+0, 0x1.82589994cce13p+0,
    0x1.8ace5422aa0dbp+0, 0x1.93737b0cdc5e5p+0, 0x1.9c49182a3f090p+0, 0x1.a5503b23e255dp+0,
    0x1.ae89f995ad3adp+0, 0x1.b7f76f2fb5e47p+0, 0x1.c199bdd85529cp+0, 0x1.cb720dcef9069p+0,
    0x1.d5818dcfba487p+0, 0x1.dfc97337b9b5fp+0, 0x1.ea4afa2a490dap+0, 0x1.f50765b6e4540p+0,
};

/* The main path of 4 lanes, before the rounding to float. */
AVX2_INLINE __m256d xexp4(__m128 x) {
    const __m256d invln2n = _mm256_set1_pd(0x1.71547652b82fep+0 * 32);
    const __m256d shift = _mm256_set1_pd(0x1.8p52);
    const __m256d xd = _mm256_cvtps_pd(x);
    const __m256d kd = _mm256_fmadd_pd(invln2n, xd, shift);
    const __m256i ki = _mm256_castpd_si256(kd);
    const __m256d r = _mm256_fmsub_pd(invln2n, xd, _mm256_sub_pd(kd, shift));
    const __m256i i = _mm256_and_si256(ki, _mm256_set1_epi64x(31));
    const __m256d t = _mm256_i64gather_pd(cpulm_x86_exp2_tab32, i, 8);
    /* 2^(k/32) = 2^(i/32) * 2^((k - i)/32): add (k - i)/32 to the exponent field */
    const __m256i e = _mm256_slli_epi64(_mm256_andnot_si256(_mm256_set1_epi64x(31), ki), 47);
    const __m256d sc = _mm256_castsi256_pd(_mm256_add_epi64(_mm256_castpd_si256(t), e));
    const __m256d z = _mm256_fmadd_pd(r, _mm256_set1_pd(0x1.c6af84b912394p-5 / 32 / 32 / 32),
                                      _mm256_set1_pd(0x1.ebfce50fac4f3p-3 / 32 / 32));
    const __m256d r2 = _mm256_mul_pd(r, r);
    const __m256d y0 =
        _mm256_fmadd_pd(r, _mm256_set1_pd(0x1.62e42ff0c52d6p-1 / 32), _mm256_set1_pd(1.0));
    return _mm256_mul_pd(_mm256_fmadd_pd(z, r2, y0), sc);
}

#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 28))
#define XEXP_EXACT 1
#else
#define XEXP_EXACT 0
#endif

AVX2_INLINE __m256 xexpf8(__m256 x) {
    if (!XEXP_EXACT) { /* another libm: its own expf, key by key */
        float a[8];
        _mm256_storeu_ps(a, x);
        for (int l = 0; l < 8; l++)
            a[l] = expf(a[l]);
        return _mm256_loadu_ps(a);
    }
    const __m128 lo = _mm256_cvtpd_ps(xexp4(_mm256_castps256_ps128(x)));
    const __m128 hi = _mm256_cvtpd_ps(xexp4(_mm256_extractf128_ps(x, 1)));
    __m256 f = _mm256_set_m128(hi, lo);
    /* no lane in a special range (nor NaN): the usual case, one branch */
    const __m256 sp = _mm256_or_ps(_mm256_cmp_ps(x, _mm256_set1_ps(-0x1.9d1d9ep6f), _CMP_NGE_UQ),
                                   _mm256_cmp_ps(x, _mm256_set1_ps(0x1.62e42ep6f), _CMP_GT_OQ));
    if (!_mm256_movemask_ps(sp)) return f;
    /* glibc's cases for |x| >= 88: overflow to inf, underflow to 0, and between
     * log(2^-150) and log(2^-149) the smallest subnormal; NaN gives x + x */
    f = _mm256_blendv_ps(f, _mm256_set1_ps(0x1p-149f),
                         _mm256_cmp_ps(x, _mm256_set1_ps(-0x1.9d1d9ep6f), _CMP_LT_OQ));
    f = _mm256_blendv_ps(f, _mm256_setzero_ps(),
                         _mm256_cmp_ps(x, _mm256_set1_ps(-0x1.9fe368p6f), _CMP_LT_OQ));
    f = _mm256_blendv_ps(f, _mm256_set1_ps(INFINITY),
                         _mm256_cmp_ps(x, _mm256_set1_ps(0x1.62e42ep6f), _CMP_GT_OQ));
    return _mm256_blendv_ps(f, _mm256_add_ps(x, x), _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

/* Lane l takes lane l - k of p (lanes below k take fill): k = 1, 2 or 4. */
AVX2_INLINE __m256 xlanes_up(__m256 p, const int k, __m256 fill) {
    const __m256i idx = _mm256_max_epi32(
        _mm256_sub_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(k)),
        _mm256_setzero_si256());
    const __m256 up = _mm256_permutevar8x32_ps(p, idx);
    return k == 1   ? _mm256_blend_ps(up, fill, 0x01)
           : k == 2 ? _mm256_blend_ps(up, fill, 0x03)
                    : _mm256_blend_ps(up, fill, 0x0F);
}

/* 8 keys x[0..7] (a tail padded with -inf) after the running max m: their weights into
 * e (the factor of the key's own exponent) and up (keys that move the max); returns the
 * running max after them. The running max before each key is a prefix max (ties keep the
 * earlier value, as "x > M" does), so every key's exponent is known before any expf. */
AVX2_INLINE float xweights8(__m256 x, float m, __m256 *e, __m256 *up) {
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    /* a NaN score never becomes the max ("x > M" is false): -inf in the scan */
    __m256 p = _mm256_blendv_ps(x, ninf, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    /* max(later, earlier): vmaxps returns the second operand on ties */
    p = _mm256_max_ps(p, xlanes_up(p, 1, ninf));
    p = _mm256_max_ps(p, xlanes_up(p, 2, ninf));
    p = _mm256_max_ps(p, xlanes_up(p, 4, ninf));
    const __m256 vm = _mm256_set1_ps(m);
    const __m256 incl = _mm256_max_ps(p, vm);
    const __m256 prev = xlanes_up(incl, 1, vm);
    *up = _mm256_cmp_ps(x, prev, _CMP_GT_OQ);
    *e = xexpf8(_mm256_blendv_ps(_mm256_sub_ps(x, prev), _mm256_sub_ps(prev, x), *up));
    return _mm_cvtss_f32(_mm_permute_ps(_mm256_extractf128_ps(incl, 1), 0xFF));
}

/* 8 keys at once; the tail through buffers (VMASKMOVPS stores are microcoded on AMD). */
void cpulm_avx2_attn_xweights(int n, float *s, float *ms, float *M) {
    const __m256 one = _mm256_set1_ps(1.0f);
    float m = *M;
    __m256 e, up;
    int j = 0;
    for (; j + 8 <= n; j += 8) {
        const __m256 x = _mm256_loadu_ps(s + j), vm = _mm256_set1_ps(m);
        /* the usual group: no key above the running max (NaN is not), so it stays m, every
         * key's weight is expf(x - m) and its factor 1: no prefix max */
        if (!_mm256_movemask_ps(_mm256_cmp_ps(x, vm, _CMP_GT_OQ))) {
            _mm256_storeu_ps(ms + j, one);
            _mm256_storeu_ps(s + j, xexpf8(_mm256_sub_ps(x, vm)));
            continue;
        }
        m = xweights8(x, m, &e, &up);
        _mm256_storeu_ps(ms + j, _mm256_blendv_ps(one, e, up));
        _mm256_storeu_ps(s + j, _mm256_blendv_ps(e, one, up));
    }
    if (j < n) {
        float xb[8] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY,
                       -INFINITY, -INFINITY, -INFINITY, -INFINITY};
        float wb[8], sb[8];
        memcpy(xb, s + j, sizeof(float) * (size_t)(n - j));
        m = xweights8(_mm256_loadu_ps(xb), m, &e, &up);
        _mm256_storeu_ps(wb, _mm256_blendv_ps(one, e, up));
        _mm256_storeu_ps(sb, _mm256_blendv_ps(e, one, up));
        memcpy(ms + j, wb, sizeof(float) * (size_t)(n - j));
        memcpy(s + j, sb, sizeof(float) * (size_t)(n - j));
    }
    *M = m;
}

/* ---- P.V ---- */

AVX2_INLINE __m256 xround_f16(__m256 x) {
    return _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

/* R rows x V vectors of 8 dims, the f16 accumulators in registers (values exactly f16). */
AVX2_INLINE void xpv_block(int n, const float *ms, const float *vs, int64_t ldw, const float *v,
                           int64_t ldv, float *acc, int64_t lda, float *S, const int R, const int V,
                           const int WS) {
    __m256 a[4][4];
    float sum[4] = {0};
    _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {
        if (WS) sum[r] = S[r];
        _Pragma("GCC unroll 4") for (int c = 0; c < V; c++) a[r][c] =
            _mm256_loadu_ps(acc + r * lda + 8 * c);
    }
    for (int j = 0; j < n; j++) {
        __m256 vv[4];
        _Pragma("GCC unroll 4") for (int c = 0; c < V; c++) vv[c] =
            _mm256_loadu_ps(v + (int64_t)j * ldv + 8 * c);
        _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {
            const float mij = ms[r * ldw + j];
            if (WS) sum[r] = fmaf(sum[r], mij, vs[r * ldw + j]);
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
        if (WS) S[r] = sum[r];
        _Pragma("GCC unroll 4") for (int c = 0; c < V; c++)
            _mm256_storeu_ps(acc + r * lda + 8 * c, a[r][c]);
    }
}

/* rows * vecs <= 12 accumulators: 12 chains of FMA, VCVTPS2PH, VCVTPH2PS (~14 cycles on Zen 3)
 * in flight; VCVTPS2PH (2 cycles per ymm there) bounds the rest */
#define XPV_CASE(R, V)                                                   \
    if (R * V <= 8 && S)                                                 \
        xpv_block(n, ms, vs, ldw, v, ldv, acc, lda, S, R, V, R *V <= 8); \
    else                                                                 \
        xpv_block(n, ms, vs, ldw, v, ldv, acc, lda, S, R, V, 0)
static void xpv_rows(int rows, int vecs, int n, const float *ms, const float *vs, int64_t ldw,
                     const float *v, int64_t ldv, float *acc, int64_t lda, float *S) {
    CPULM_BLOCKS_SWITCH(rows, vecs,
                        CPULM_BLOCKS_UPTO3(4, XPV_CASE) CPULM_BLOCKS_UPTO3(3, XPV_CASE)
                            CPULM_BLOCKS_UPTO4(2, XPV_CASE) CPULM_BLOCKS_UPTO4(1, XPV_CASE))
}
#undef XPV_CASE

/* Columns are independent, so blocks of rows x dims in any order give the generic bits:
 * 4 rows x 24 dims, or 2 rows x 32 dims when at most two rows are left. The rows' weight
 * sums S[i] = fmaf(S[i], ms, vs), a chain of one FMA latency per key, ride in the last block
 * when it has at most 8 accumulators (registers to spare; d = 64: 4 rows x 16 dims), hidden
 * in its key step; otherwise four rows' chains side by side after the blocks. d % 8 != 0 (no
 * such head size in practice) stays generic. */
void cpulm_avx2_attn_xpv(int64_t d, int m, int n, const float *ms, const float *vs, int64_t ldw,
                         const float *v, int64_t ldv, float *acc, int64_t lda, float *S) {
    if (d % 8 != 0) {
        cpulm_generic_attn_xpv(d, m, n, ms, vs, ldw, v, ldv, acc, lda, S);
        return;
    }
    for (int i = 0; i < m; i += 4) {
        const int rows = m - i < 4 ? m - i : 4, maxv = rows <= 2 ? 4 : 3;
        const float *mi = ms + (int64_t)i * ldw, *vi = vs + (int64_t)i * ldw;
        int summed = 0;
        for (int64_t c = 0; c < d; c += 8 * maxv) {
            const int vecs = d - c < 8 * maxv ? (int)((d - c) / 8) : maxv;
            const int last = c + 8 * maxv >= d && rows * vecs <= 8;
            xpv_rows(rows, vecs, n, mi, vi, ldw, v + c, ldv, acc + (int64_t)i * lda + c, lda,
                     last ? S + i : NULL);
            summed |= last;
        }
        if (summed) continue;
        if (rows == 4) {
            float s0 = S[i], s1 = S[i + 1], s2 = S[i + 2], s3 = S[i + 3];
            for (int j = 0; j < n; j++) {
                s0 = fmaf(s0, mi[j], vi[j]);
                s1 = fmaf(s1, mi[ldw + j], vi[ldw + j]);
                s2 = fmaf(s2, mi[2 * ldw + j], vi[2 * ldw + j]);
                s3 = fmaf(s3, mi[3 * ldw + j], vi[3 * ldw + j]);
            }
            S[i] = s0, S[i + 1] = s1, S[i + 2] = s2, S[i + 3] = s3;
        } else
            for (int r = 0; r < rows; r++) {
                float si = S[i + r];
                for (int j = 0; j < n; j++)
                    si = fmaf(si, mi[r * ldw + j], vi[r * ldw + j]);
                S[i + r] = si;
            }
    }
}
#endif
