/* avx2_attn.c: the avx2 level's tiled-attention steps (contracts in kernels.h, attn_*), built
 * with the avx2 flags and reached only through cpulm_kernels_avx2 (avx2.c's table; the
 * avx512 levels override scores, softmax and P.V and inherit the merge from here).
 *
 * Bit-identical to generic/attn.c. The canonical F32 dot of a score has 16 lanes: here
 * two 8-lane accumulators (lanes 0-7 and 8-15), fused multiply-adds in the same order, and
 * the same reduce16 tree, done for four dots at once (reduce16x4). Softmax takes the
 * canonical polynomial exp (x86_canon_vexp256) and the same 16 lane sums; P.V and the merge
 * are per element fmas in key order, so any register blocking gives the same bits.
 */
#if defined(__x86_64__)
#include "kernels/blocks.h"
#include "x86_attn.h"
#include "avx2_softmax.h"

#include "kernels/generic/generic.h"
#include "quant.h"
#include "x86.h"

#define AVX2_INLINE static inline __attribute__((always_inline))

/* ---- scores ---- */

/* The reduce16 sums of four 16-lane accumulators (lo: lanes 0-7, hi: 8-15), in order. Each
 * stage adds the lane pairs cpulm_generic_reduce16 adds, for several accumulators at once:
 * h = a[8..15] + a[0..7], g = h[4..7] + h[0..3], then (g0 + g2) + (g1 + g3). */
AVX2_INLINE __m128 reduce16x4(const __m256 lo[4], const __m256 hi[4]) {
    __m256 h[4];
    _Pragma("GCC unroll 8") for (int i = 0; i < 4; i++) h[i] = _mm256_add_ps(hi[i], lo[i]);
    /* accumulators 0 | 1 and 2 | 3 side by side, 4 lanes each */
    const __m256 g01 = _mm256_add_ps(_mm256_permute2f128_ps(h[0], h[1], 0x31),
                                     _mm256_permute2f128_ps(h[0], h[1], 0x20));
    const __m256 g23 = _mm256_add_ps(_mm256_permute2f128_ps(h[2], h[3], 0x31),
                                     _mm256_permute2f128_ps(h[2], h[3], 0x20));
    /* lanes {g0 + g2, g1 + g3} of accumulators 0, 2 | 1, 3 */
    const __m256d a = _mm256_castps_pd(g01), b = _mm256_castps_pd(g23);
    const __m256 z = _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(a, b)),
                                   _mm256_castpd_ps(_mm256_unpackhi_pd(a, b)));
    const __m256 t = _mm256_hadd_ps(z, z); /* s0 s2 s0 s2 | s1 s3 s1 s3 */
    return _mm_unpacklo_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
}

/* R query rows x K keys (R * K == 4) of the score tile, d a multiple of 16: the query
 * halves stay in registers, each key half is loaded once for the R rows. */
AVX2_INLINE void scores_block(int64_t d, const float *q, int64_t ldq, const float *k, int64_t ldk,
                              float scale, float *s, int64_t lds, const int R, const int K) {
    __m256 lo[4], hi[4];
    _Pragma("GCC unroll 8") for (int i = 0; i < 4; i++) lo[i] = hi[i] = _mm256_setzero_ps();
    for (int64_t c = 0; c < d; c += 16) {
        __m256 q0[2], q1[2];
        _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) {
            q0[r] = _mm256_loadu_ps(q + r * ldq + c);
            q1[r] = _mm256_loadu_ps(q + r * ldq + c + 8);
        }
        _Pragma("GCC unroll 8") for (int j = 0; j < K; j++) {
            const __m256 k0 = _mm256_loadu_ps(k + j * ldk + c);
            const __m256 k1 = _mm256_loadu_ps(k + j * ldk + c + 8);
            _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) {
                lo[r * K + j] = _mm256_fmadd_ps(q0[r], k0, lo[r * K + j]);
                hi[r * K + j] = _mm256_fmadd_ps(q1[r], k1, hi[r * K + j]);
            }
        }
    }
    const __m128 sv = _mm_mul_ps(reduce16x4(lo, hi), _mm_set1_ps(scale));
    if (R == 2) { /* {s00, s01, s10, s11} */
        _mm_storel_pi((__m64 *)s, sv);
        _mm_storeh_pi((__m64 *)(s + lds), sv);
    } else {
        _mm_storeu_ps(s, sv);
    }
}

/* One score by the canonical dot (d a multiple of 16): for the keys left over by the blocks. */
static float score_one(int64_t d, const float *q, const float *k, float scale) {
    __m256 lo = _mm256_setzero_ps(), hi = lo;
    for (int64_t c = 0; c < d; c += 16) {
        lo = _mm256_fmadd_ps(_mm256_loadu_ps(q + c), _mm256_loadu_ps(k + c), lo);
        hi = _mm256_fmadd_ps(_mm256_loadu_ps(q + c + 8), _mm256_loadu_ps(k + c + 8), hi);
    }
    return x86_reduce16_256(lo, hi) * scale;
}

void cpulm_avx2_attn_scores(int64_t d, int m, int n, const float *q, int64_t ldq, const float *k,
                            int64_t ldk, float scale, float *s, int64_t lds) {
    if (d % 16 != 0) { /* the canonical dot of such rows has a scalar tail */
        cpulm_generic_attn_scores(d, m, n, q, ldq, k, ldk, scale, s, lds);
        return;
    }
    int i = 0;
    for (; i + 2 <= m; i += 2) { /* row pairs x key pairs */
        const float *qi = q + (int64_t)i * ldq;
        float *si = s + (int64_t)i * lds;
        int j = 0;
        for (; j + 2 <= n; j += 2)
            scores_block(d, qi, ldq, k + (int64_t)j * ldk, ldk, scale, si + j, lds, 2, 2);
        for (; j < n; j++) {
            si[j] = score_one(d, qi, k + (int64_t)j * ldk, scale);
            si[lds + j] = score_one(d, qi + ldq, k + (int64_t)j * ldk, scale);
        }
    }
    if (i < m) { /* the last row x key quads */
        const float *qi = q + (int64_t)i * ldq;
        float *si = s + (int64_t)i * lds;
        int j = 0;
        for (; j + 4 <= n; j += 4)
            scores_block(d, qi, ldq, k + (int64_t)j * ldk, ldk, scale, si + j, lds, 1, 4);
        for (; j < n; j++)
            si[j] = score_one(d, qi, k + (int64_t)j * ldk, scale);
    }
}

/* ---- online softmax ---- */

/* s[j..j+8) = vexp(s - mx) where j + lane < lim, else 0; returns the stored values. Dead
 * lanes are not exponentiated (their scores may be anything). */
AVX2_INLINE __m256 exp8_live(float *s, int j, int lim, __m256 vm) {
    __m256 e;
    if (j + 8 <= lim) {
        e = x86_canon_vexp256(_mm256_sub_ps(_mm256_loadu_ps(s + j), vm));
    } else if (j >= lim) {
        e = _mm256_setzero_ps();
    } else {
        const __m256 live = avx2_live8(j, lim);
        const __m256 x = _mm256_blendv_ps(vm, _mm256_loadu_ps(s + j), live); /* dead: exp(0) */
        e = _mm256_and_ps(x86_canon_vexp256(_mm256_sub_ps(x, vm)), live);
    }
    _mm256_storeu_ps(s + j, e);
    return e;
}

float cpulm_avx2_attn_softmax_row(int n, int lim, float *s, float *M, float *L) {
    return avx2_softmax_with(n, lim, s, M, L, exp8_live, cpulm_generic_vexpf);
}

/* ---- P.V ---- */

/* R rows (1 or 2) x V vectors of 8 dims: o = o * a, then o = fma(p_j, v_j, o) over the keys.
 * Two rows share each loaded value vector; a lone row takes them as memory operands (8
 * accumulators and 8 loaded vectors would not fit the 16 registers). */
AVX2_INLINE void pv_block(int n, const float *p, int64_t ldp, const float *v, int64_t ldv,
                          const float *a, float *o, int64_t ldo, const int R, const int V) {
    __m256 acc[2][8];
    _Pragma("GCC unroll 8") for (int r = 0; r < R; r++)
        _Pragma("GCC unroll 8") for (int c = 0; c < V; c++) acc[r][c] =
            _mm256_mul_ps(_mm256_loadu_ps(o + r * ldo + 8 * c), _mm256_set1_ps(a[r]));
    for (int j = 0; j < n; j++) {
        const float *vj = v + (int64_t)j * ldv;
        if (R == 1) {
            const __m256 pj = _mm256_broadcast_ss(p + j);
            _Pragma("GCC unroll 8") for (int c = 0; c < V; c++) acc[0][c] =
                _mm256_fmadd_ps(pj, _mm256_loadu_ps(vj + 8 * c), acc[0][c]);
            continue;
        }
        __m256 vv[8];
        _Pragma("GCC unroll 8") for (int c = 0; c < V; c++) vv[c] = _mm256_loadu_ps(vj + 8 * c);
        _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) {
            const __m256 pj = _mm256_broadcast_ss(p + r * ldp + j);
            _Pragma("GCC unroll 8") for (int c = 0; c < V; c++) acc[r][c] =
                _mm256_fmadd_ps(pj, vv[c], acc[r][c]);
        }
    }
    _Pragma("GCC unroll 8") for (int r = 0; r < R; r++)
        _Pragma("GCC unroll 8") for (int c = 0; c < V; c++)
            _mm256_storeu_ps(o + r * ldo + 8 * c, acc[r][c]);
}

#define PV_CASE(R, V) pv_block(n, p, ldp, v, ldv, a, o, ldo, R, V)
static void pv_rows(int rows, int vecs, int n, const float *p, int64_t ldp, const float *v,
                    int64_t ldv, const float *a, float *o, int64_t ldo) {
    CPULM_BLOCKS_SWITCH(rows, vecs, CPULM_BLOCKS_UPTO4(2, PV_CASE) CPULM_BLOCKS_UPTO8(1, PV_CASE))
}
#undef PV_CASE

void cpulm_avx2_attn_pv(int64_t d, int m, int n, const float *p, int64_t ldp, const float *v,
                        int64_t ldv, const float *a, float *o, int64_t ldo) {
    if (d % 8 != 0) {
        cpulm_generic_attn_pv(d, m, n, p, ldp, v, ldv, a, o, ldo);
        return;
    }
    for (int i = 0; i < m; i += 2) {
        const int rows = m - i < 2 ? m - i : 2, step = rows == 2 ? 4 : 8; /* vectors per pass */
        for (int64_t c = 0; c < d; c += 8 * step) {
            const int vecs = d - c < 8 * step ? (int)((d - c) / 8) : step;
            pv_rows(rows, vecs, n, p + (int64_t)i * ldp, ldp, v + c, ldv, a + i,
                    o + (int64_t)i * ldo + c, ldo);
        }
    }
}

/* ---- to_float of Q8_0 and Q4_0 ----
 * Written when the tiled path converted every K/V tile of a q8_0 / q4_0 cache to f32 (the
 * attn_q* ops now read those rows in place; the embedding lookup still converts rows). Each
 * element is the reference's (float)q * d: the int -> float conversion is exact and the
 * product is one rounding, so the vector lanes give the same bits. */

/* The low 8 int8 of q as f32 lanes, times d. */
AVX2_INLINE __m256 q8x8_scaled(__m128i q, __m256 d) {
    return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d);
}

void cpulm_avx2_to_float_q8_0(const void *vx, float *y, int64_t n) {
    const cpulm_block_q8_0 *x = vx;
    for (int64_t i = 0; i < n / CPULM_QK8_0; i++, y += CPULM_QK8_0) {
        const __m256 d = _mm256_set1_ps(x86_fp16(x[i].d));
        const __m128i lo = _mm_loadu_si128((const __m128i *)x[i].qs);
        const __m128i hi = _mm_loadu_si128((const __m128i *)(x[i].qs + 16));
        _mm256_storeu_ps(y, q8x8_scaled(lo, d));
        _mm256_storeu_ps(y + 8, q8x8_scaled(_mm_unpackhi_epi64(lo, lo), d));
        _mm256_storeu_ps(y + 16, q8x8_scaled(hi, d));
        _mm256_storeu_ps(y + 24, q8x8_scaled(_mm_unpackhi_epi64(hi, hi), d));
    }
}

void cpulm_avx2_to_float_q4_0(const void *vx, float *y, int64_t n) {
    const cpulm_block_q4_0 *x = vx;
    const __m128i m4 = _mm_set1_epi8(0x0f), b8 = _mm_set1_epi8(8);
    for (int64_t i = 0; i < n / CPULM_QK4_0; i++, y += CPULM_QK4_0) {
        const __m256 d = _mm256_set1_ps(x86_fp16(x[i].d));
        const __m128i q = _mm_loadu_si128((const __m128i *)x[i].qs);
        const __m128i lo = _mm_sub_epi8(_mm_and_si128(q, m4), b8); /* elements 0..15 */
        const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), m4), b8);
        _mm256_storeu_ps(y, q8x8_scaled(lo, d));
        _mm256_storeu_ps(y + 8, q8x8_scaled(_mm_unpackhi_epi64(lo, lo), d));
        _mm256_storeu_ps(y + 16, q8x8_scaled(hi, d));
        _mm256_storeu_ps(y + 24, q8x8_scaled(_mm_unpackhi_epi64(hi, hi), d));
    }
}

/* ---- merge of chunk partials ---- */

void cpulm_avx2_attn_merge(int64_t d, int m, const float *mc, const float *lc, const float *oc,
                           int64_t ldoc, float *M, float *L, float *o, int64_t ldo) {
    for (int i = 0; i < m; i++) {
        if (mc[i] == -INFINITY) continue;
        float a, b;
        cpulm_attn_merge_row(&M[i], &L[i], mc[i], lc[i], &a, &b);
        float *oi = o + (int64_t)i * ldo;
        const float *ci = oc + (int64_t)i * ldoc;
        const __m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b);
        int64_t c = 0;
        for (; c + 8 <= d; c += 8)
            _mm256_storeu_ps(oi + c, _mm256_fmadd_ps(_mm256_loadu_ps(ci + c), vb,
                                                     _mm256_mul_ps(_mm256_loadu_ps(oi + c), va)));
        for (; c < d; c++)
            oi[c] = fmaf(ci[c], b, oi[c] * a);
    }
}
#endif
