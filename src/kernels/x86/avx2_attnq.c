/* avx2_attnq.c: the avx2 level's attention steps straight from Q8_0 / Q4_0 cache rows
 * (contracts in kernels.h, attn_q*), built with the avx2 flags and reached only through
 * cpulm_kernels_avx2 (the avx512 levels inherit them).
 *
 * Bit-identical to generic/attn_q.c. Scores: a block's int32 dot is exact whatever the
 * order (vpmaddwd of the int16 query against the quants widened to int16, then adds), so
 * only the per-block float steps have an order: 4 rows x 2 keys of them share one __m256
 * (rows in lanes), one cvt and one fma per block in block order, as the generic loop. P.V:
 * per element fmas in key order with the weight p * d folded per block (precomputed per
 * key and block), so any register blocking gives the same bits. Softmax: the canonical
 * polynomial exp without its ldexpf lanes (those are flushed to 0 by the contract).
 */
#if defined(__x86_64__)
#include <math.h>

#include "x86_attn.h"
#include "avx2_softmax.h"
#include "kernels/generic/generic.h"
#include "quant.h"
#include "x86.h"

#define AVX2_INLINE static inline __attribute__((always_inline))

/* ---- query rows to int16 ---- */

void cpulm_avx2_attn_qquant(int64_t d, int m, const float *q, int64_t ldq, float scale,
                            int16_t *q16, float *qs) {
    if (d % 16 != 0) {
        cpulm_generic_attn_qquant(d, m, q, ldq, scale, q16, qs);
        return;
    }
    const __m256 sign = _mm256_set1_ps(-0.0f), lim = _mm256_set1_ps(32767.0f);
    for (int i = 0; i < m; i++) {
        const float *qi = q + (int64_t)i * ldq;
        __m256 vmax = _mm256_setzero_ps();
        for (int64_t e = 0; e < d; e += 8)
            vmax = _mm256_max_ps(vmax, _mm256_andnot_ps(sign, _mm256_loadu_ps(qi + e)));
        const float amax = x86_hmax_ps256(vmax), id = amax > 0.0f ? 32767.0f / amax : 0.0f;
        const __m256 vid = _mm256_set1_ps(id);
        for (int64_t e = 0; e < d; e += 16) {
            __m256i r[2];
            for (int h = 0; h < 2; h++) {
                __m256 x = _mm256_mul_ps(_mm256_loadu_ps(qi + e + 8 * h), vid);
                x = _mm256_max_ps(_mm256_min_ps(x, lim), _mm256_sub_ps(_mm256_setzero_ps(), lim));
                /* x + (x >= 0 ? 0.5 : -0.5), truncated: the generic rounding */
                const __m256 half = _mm256_or_ps(_mm256_and_ps(x, sign), _mm256_set1_ps(0.5f));
                r[h] = _mm256_cvttps_epi32(_mm256_add_ps(x, half));
            }
            const __m256i pk = _mm256_permute4x64_epi64(_mm256_packs_epi32(r[0], r[1]), 0xd8);
            _mm256_storeu_si256((__m256i *)(q16 + (int64_t)i * d + e), pk);
        }
        qs[i] = amax / 32767.0f * scale;
    }
}

/* ---- scores ---- */

/* Block b of a cache row: the 32 quants as two int16 vectors (elements 0-15, 16-31). Q4 is
 * a constant at every call: each op is built once per cache type, with no test per block. */
AVX2_INLINE void block_k16(const uint8_t *row, int64_t b, const int Q4, __m256i *k0, __m256i *k1) {
    if (!Q4) {
        const uint8_t *qs = row + b * (int64_t)sizeof(cpulm_block_q8_0) + 2;
        *k0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)qs));
        *k1 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(qs + 16)));
        return;
    }
    const __m128i m4 = _mm_set1_epi8(0x0f);
    const __m128i q =
        _mm_loadu_si128((const __m128i *)(row + b * (int64_t)sizeof(cpulm_block_q4_0) + 2));
    const __m256i b8 = _mm256_set1_epi16(8);
    *k0 = _mm256_sub_epi16(_mm256_cvtepu8_epi16(_mm_and_si128(q, m4)), b8);
    *k1 = _mm256_sub_epi16(_mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(q, 4), m4)), b8);
}

#define KT X86Q_KT

/* 8 int32 partial sums of a query block row against a key block (exact). */
AVX2_INLINE __m256i qdot(const int16_t *q, __m256i k0, __m256i k1) {
    return _mm256_add_epi32(_mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)q), k0),
                            _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(q + 16)), k1));
}

/* a + b of two rows' partial sums, interleaved: [a0+a2 b0+b2 a1+a3 b1+b3] per 128 bits */
AVX2_INLINE __m256i pair_sum(__m256i a, __m256i b) {
    return _mm256_add_epi32(_mm256_unpacklo_epi32(a, b), _mm256_unpackhi_epi32(a, b));
}

/* The block sums of 4 rows against one key: [r0..r3 | r0..r3] halves to be added (int
 * sums are exact in any order; unpacks and adds: vphaddd is 3 uops on Zen 3). */
AVX2_INLINE __m256i rows4(const int16_t *const qr[4], int64_t c, __m256i k0, __m256i k1) {
    const __m256i t01 = pair_sum(qdot(qr[0] + c, k0, k1), qdot(qr[1] + c, k0, k1));
    const __m256i t23 = pair_sum(qdot(qr[2] + c, k0, k1), qdot(qr[3] + c, k0, k1));
    return _mm256_add_epi32(_mm256_unpacklo_epi64(t01, t23), _mm256_unpackhi_epi64(t01, t23));
}

/* Keys a, b: cache rows, or (WIDE) int16 rows of d widened beforehand for blocks of many
 * query rows, which read each key 1 + m / 4 times. */
typedef struct kpair {
    const uint8_t *ra, *rb; /* cache rows, or NULL */
    const int16_t *wa, *wb; /* widened rows */
} kpair;

/* Scores of 4 rows x keys a, b: lanes [a: r0..r3 | b: r0..r3], times qs; da, db: the keys'
 * block scales, KT apart. */
#define DKA (WIDE ? da[b * KT] : key_d(kp.ra, b, Q4))
#define DKB (WIDE ? db[b * KT] : key_d(kp.rb, b, Q4))
AVX2_INLINE float key_d(const uint8_t *row, int64_t b, const int Q4) {
    const size_t bs = Q4 ? sizeof(cpulm_block_q4_0) : sizeof(cpulm_block_q8_0);
    uint16_t h;
    __builtin_memcpy(&h, row + (size_t)b * bs, 2);
    return x86_fp16(h);
}

AVX2_INLINE __m256 scores_4x2(int64_t d, const int Q4, const int WIDE, const int16_t *const qr[4],
                              __m256 qsv, kpair kp, const float *da, const float *db) {
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < X86Q_MCA_D(d) / 32; b++) {
        __m256i a0, a1, b0, b1;
        if (!WIDE) {
            block_k16(kp.ra, b, Q4, &a0, &a1);
            block_k16(kp.rb, b, Q4, &b0, &b1);
        } else {
            a0 = _mm256_loadu_si256((const __m256i *)(kp.wa + b * 32));
            a1 = _mm256_loadu_si256((const __m256i *)(kp.wa + b * 32 + 16));
            b0 = _mm256_loadu_si256((const __m256i *)(kp.wb + b * 32));
            b1 = _mm256_loadu_si256((const __m256i *)(kp.wb + b * 32 + 16));
        }
        const __m256i ta = rows4(qr, b * 32, a0, a1), tb = rows4(qr, b * 32, b0, b1);
        const __m256i x = _mm256_add_epi32(_mm256_permute2x128_si256(ta, tb, 0x20),
                                           _mm256_permute2x128_si256(ta, tb, 0x31));
        const __m256 dk =
            _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_set1_ps(DKA)), _mm_set1_ps(DKB), 1);
        acc = _mm256_fmadd_ps(dk, _mm256_cvtepi32_ps(x), acc);
    }
    return _mm256_mul_ps(acc, qsv);
}
#undef DKA
#undef DKB

#define WDIM X86Q_WDIM

/* Rows i.. (rows <= 4 of them) x keys 0..n-1 (n <= KT): 4 keys at a time, 2 per scores_4x2.
 * The first rows' pass hints the rows at next (NULL: none). */
AVX2_INLINE void scores_rows(int64_t d, const int Q4, const int WIDE, int i, int rows, int n,
                             const int16_t *q16, int64_t ldq, const float *qs, const uint8_t *k,
                             uint64_t ldk, const int16_t *kw, const float *dk, float *s,
                             int64_t lds, const uint8_t *next) {
    const int16_t *qr[4]; /* a short group repeats its last row; only real rows are stored */
    float qsr[4];
    for (int r = 0; r < 4; r++) {
        const int ri = i + (r < rows ? r : rows - 1);
        qr[r] = q16 + (int64_t)ri * ldq;
        qsr[r] = qs[ri];
    }
    const __m128 q4s = _mm_loadu_ps(qsr);
    const __m256 qsv = _mm256_insertf128_ps(_mm256_castps128_ps256(q4s), q4s, 1);
    const size_t rb = (size_t)(d / 32) * (Q4 ? sizeof(cpulm_block_q4_0) : sizeof(cpulm_block_q8_0));
    for (int j = 0; j < n; j += 4) {
        if (i == 0 && next)
            for (int t = 0; t < 4; t++)
                x86q_hint_row(next + (uint64_t)(j + t) * ldk, rb);
        if (!Q4 && !WIDE) X86Q_MCA_BEGIN("avx2_attn_qscores");
        int jt[4];
        for (int t = 0; t < 4; t++)
            jt[t] = j + t < n ? j + t : n - 1;
        kpair p0, p1;
        if (WIDE) {
            p0 = (kpair){NULL, NULL, kw + jt[0] * d, kw + jt[1] * d};
            p1 = (kpair){NULL, NULL, kw + jt[2] * d, kw + jt[3] * d};
        } else {
            p0 = (kpair){k + (uint64_t)jt[0] * ldk, k + (uint64_t)jt[1] * ldk, NULL, NULL};
            p1 = (kpair){k + (uint64_t)jt[2] * ldk, k + (uint64_t)jt[3] * ldk, NULL, NULL};
        }
        const __m256 x = scores_4x2(d, Q4, WIDE, qr, qsv, p0, dk + jt[0], dk + jt[1]);
        const __m256 y = scores_4x2(d, Q4, WIDE, qr, qsv, p1, dk + jt[2], dk + jt[3]);
        /* x = [k0 | k1], y = [k2 | k3], rows in lanes: to rows of 4 keys */
        const __m256 lo = _mm256_unpacklo_ps(x, y), hi = _mm256_unpackhi_ps(x, y);
        const __m128 l0 = _mm256_castps256_ps128(lo), l1 = _mm256_extractf128_ps(lo, 1);
        const __m128 h0 = _mm256_castps256_ps128(hi), h1 = _mm256_extractf128_ps(hi, 1);
        __m128 row[4] = {_mm_unpacklo_ps(l0, l1), _mm_unpackhi_ps(l0, l1), _mm_unpacklo_ps(h0, h1),
                         _mm_unpackhi_ps(h0, h1)};
        for (int r = 0; r < rows; r++) {
            float *sr = s + (int64_t)(i + r) * lds + j;
            if (j + 4 <= n) {
                _mm_storeu_ps(sr, row[r]);
            } else {
                float tmp[4];
                _mm_storeu_ps(tmp, row[r]);
                for (int t = 0; t < n - j; t++)
                    sr[t] = tmp[t];
            }
        }
        if (!Q4 && !WIDE) X86Q_MCA_END("avx2_attn_qscores");
    }
}

/* attn_qscores on n <= KT keys of one cache type. */
AVX2_INLINE void qscores_tile(int64_t d, const int Q4, int m, int n, const int16_t *q16,
                              int64_t ldq, const float *qs, const uint8_t *k, uint64_t ldk,
                              float *s, int64_t lds, const uint8_t *next) {
    float dk[WDIM / 32 * KT];
    int16_t kw[WDIM * KT];
    const int wide = m > 4;
    if (wide)
        x86q_block_scales(d, k, ldk, n, Q4 ? sizeof(cpulm_block_q4_0) : sizeof(cpulm_block_q8_0),
                          dk);
    if (wide)
        for (int j = 0; j < n; j++)
            for (int64_t b = 0; b < d / 32; b++) {
                __m256i k0, k1;
                block_k16(k + (uint64_t)j * ldk, b, Q4, &k0, &k1);
                _mm256_storeu_si256((__m256i *)(kw + j * d + b * 32), k0);
                _mm256_storeu_si256((__m256i *)(kw + j * d + b * 32 + 16), k1);
            }
    for (int i = 0; i < m; i += 4) {
        const int rows = m - i < 4 ? m - i : 4;
        if (wide)
            scores_rows(d, Q4, 1, i, rows, n, q16, ldq, qs, k, ldk, kw, dk, s, lds, next);
        else
            scores_rows(d, Q4, 0, i, rows, n, q16, ldq, qs, k, ldk, NULL, dk, s, lds, next);
    }
}

void cpulm_avx2_attn_qscores(int64_t d, cpulm_dtype kt, int m, int n, const int16_t *q16,
                             int64_t ldq, const float *qs, const uint8_t *k, uint64_t ldk, float *s,
                             int64_t lds, const uint8_t *next) {
    if (d % 32 != 0 || d > WDIM || (kt != CPULM_DTYPE_Q8_0 && kt != CPULM_DTYPE_Q4_0)) {
        cpulm_generic_attn_qscores(d, kt, m, n, q16, ldq, qs, k, ldk, s, lds, next);
        return;
    }
    for (int j = 0; j < n; j += KT) {
        const int nk = n - j < KT ? n - j : KT;
        const uint8_t *kj = k + (uint64_t)j * ldk, *nj = next ? next + (uint64_t)j * ldk : NULL;
        if (kt == CPULM_DTYPE_Q4_0)
            qscores_tile(d, 1, m, nk, q16, ldq, qs, kj, ldk, s + j, lds, nj);
        else
            qscores_tile(d, 0, m, nk, q16, ldq, qs, kj, ldk, s + j, lds, nj);
    }
}

/* ---- online softmax, underflow flushed ---- */

/* vexpz on 8 lanes: the canonical polynomial and one multiply by 2^n; lanes below -87 (n
 * would leave the normal range) are 0. */
AVX2_INLINE __m256 vexpz8(__m256 x) {
    __m256 n;
    const __m256 p = x86_vexp_parts256(x, &n);
    const __m256i e =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    const __m256 live = _mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_GE_OQ);
    return _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(e)), live);
}

/* s[j..j+8) = vexpz(s - mx) where j + lane < lim, else 0; returns the stored values. */
AVX2_INLINE __m256 expz8_live(float *s, int j, int lim, __m256 vm) {
    __m256 e;
    if (j + 8 <= lim) {
        e = vexpz8(_mm256_sub_ps(_mm256_loadu_ps(s + j), vm));
    } else if (j >= lim) {
        e = _mm256_setzero_ps();
    } else {
        e = _mm256_and_ps(vexpz8(_mm256_sub_ps(_mm256_loadu_ps(s + j), vm)), avx2_live8(j, lim));
    }
    _mm256_storeu_ps(s + j, e);
    return e;
}

float cpulm_avx2_attn_softmaxz(int n, int lim, float *s, float *M, float *L) {
    return avx2_softmax_with(n, lim, s, M, L, expz8_live, cpulm_generic_vexpzf);
}

/* ---- P.V ---- */

/* Where a P.V pass reads its 16 values per key (VQ8: 16 int8 of a Q8_0 row at vq + j * ldv;
 * VQ4: the low or high nibbles (by sh) of 16 bytes of a Q4_0 row; VF32: 16 floats at
 * vf + j * 16, converted beforehand for blocks of many rows). */
enum { VQ8, VQ4, VF32 };

AVX2_INLINE void pv_vals(const int MODE, const uint8_t *q, __m128i sh, const float *f, __m256 *v0,
                         __m256 *v1) {
    if (MODE == VF32) {
        *v0 = _mm256_loadu_ps(f);
        *v1 = _mm256_loadu_ps(f + 8);
    } else if (MODE == VQ8) { /* pmovsxbd straight from memory */
        *v0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)q)));
        *v1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(q + 8))));
    } else {
        __m128i x = _mm_srl_epi16(_mm_loadu_si128((const __m128i *)q), sh);
        x = _mm_sub_epi8(_mm_and_si128(x, _mm_set1_epi8(0x0f)), _mm_set1_epi8(8));
        *v0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(x));
        *v1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(x, x)));
    }
}

/* One pass: R rows x 16 dims (at column c of orow[r]) over n keys, o = fma(w_rj, v_j, o) in
 * key order; row r's weights at w[r * KT + j]. R, MODE and PF are constants at every call
 * (pv_pass_any), so the key loop has no test: PF hints the rows pf + j * ldv (pfn bytes)
 * as it goes. */
AVX2_INLINE void pv_pass(int n, const uint8_t *vq, uint64_t ldv, __m128i sh, const float *vf,
                         const float *w, float *const orow[4], int64_t c, const uint8_t *pf,
                         size_t pfn, const int R, const int MODE, const int PF) {
    __m256 acc[4][2];
    _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {
        acc[r][0] = _mm256_loadu_ps(orow[r] + c);
        acc[r][1] = _mm256_loadu_ps(orow[r] + c + 8);
    }
    for (int j = 0; j < n; j++) {
        if (R == 4 && MODE == VQ8 && !PF) X86Q_MCA_BEGIN("avx2_attn_qpv");
        if (PF) x86q_hint_row(pf + (uint64_t)j * ldv, pfn);
        __m256 v0, v1;
        pv_vals(MODE, vq + (uint64_t)j * ldv, sh, vf + j * 16, &v0, &v1);
        _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {
            const __m256 wj = _mm256_broadcast_ss(w + r * KT + j);
            acc[r][0] = _mm256_fmadd_ps(wj, v0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(wj, v1, acc[r][1]);
        }
        if (R == 4 && MODE == VQ8 && !PF) X86Q_MCA_END("avx2_attn_qpv");
    }
    _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {
        _mm256_storeu_ps(orow[r] + c, acc[r][0]);
        _mm256_storeu_ps(orow[r] + c + 8, acc[r][1]);
    }
}

#define PV_R(R, MODE, PF) pv_pass(n, vq, ldv, sh, vf, w, orow, c, pf, pfn, R, MODE, PF)
#define PV_RS(MODE, PF)                \
    switch (R) {                       \
    case 4: PV_R(4, MODE, PF); break;  \
    case 3: PV_R(3, MODE, PF); break;  \
    case 2: PV_R(2, MODE, PF); break;  \
    default: PV_R(1, MODE, PF); break; \
    }

/* pv_pass with its constants chosen here, once per pass. */
static void pv_pass_any(int R, int mode, int n, const uint8_t *vq, uint64_t ldv, __m128i sh,
                        const float *vf, const float *w, float *const orow[4], int64_t c,
                        const uint8_t *pf, size_t pfn) {
    if (mode == VF32) {
        PV_RS(VF32, 0);
    } else if (pf) {
        if (mode == VQ8) PV_RS(VQ8, 1) else PV_RS(VQ4, 1)
    } else {
        if (mode == VQ8) PV_RS(VQ8, 0) else PV_RS(VQ4, 0)
    }
}
#undef PV_RS
#undef PV_R

void cpulm_avx2_attn_qpv(int64_t d, cpulm_dtype vt, int m, int n, const float *p, int64_t ldp,
                         const uint8_t *v, uint64_t ldv, const float *a, float *o, int64_t ldo,
                         const uint8_t *next) {
    if (d % 32 != 0 || d > WDIM || (vt != CPULM_DTYPE_Q8_0 && vt != CPULM_DTYPE_Q4_0)) {
        cpulm_generic_attn_qpv(d, vt, m, n, p, ldp, v, ldv, a, o, ldo, next);
        return;
    }
    const int q4 = vt == CPULM_DTYPE_Q4_0;
    const size_t bs = q4 ? sizeof(cpulm_block_q4_0) : sizeof(cpulm_block_q8_0);
    for (int i = 0; i < m; i++) { /* o *= a first: the per-key fmas follow */
        float *oi = o + (int64_t)i * ldo;
        const __m256 va = _mm256_set1_ps(a[i]);
        for (int64_t c = 0; c < d; c += 8)
            _mm256_storeu_ps(oi + c, _mm256_mul_ps(_mm256_loadu_ps(oi + c), va));
    }
    float dv[WDIM / 32 * KT], w[4 * KT], vf[2 * 16 * KT];
    for (int j0 = 0; j0 < n; j0 += KT) {
        const int nk = n - j0 < KT ? n - j0 : KT;
        const uint8_t *vj0 = v + (uint64_t)j0 * ldv;
        x86q_block_scales(d, vj0, ldv, nk, bs, dv);
        for (int64_t b = 0; b < d / 32; b++) {
            const uint8_t *vb = vj0 + (size_t)b * bs + 2; /* block b's quants in key 0 */
            if (m > 4) /* many rows: the block's quants as f32 once, not once per 4 rows */
                for (int h = 0; h < 2; h++)
                    for (int j = 0; j < nk; j++) {
                        __m256 v0, v1;
                        if (q4)
                            pv_vals(VQ4, vb + (uint64_t)j * ldv, _mm_cvtsi32_si128(4 * h), NULL,
                                    &v0, &v1);
                        else
                            pv_vals(VQ8, vb + (uint64_t)j * ldv + 16 * h, _mm_setzero_si128(), NULL,
                                    &v0, &v1);
                        _mm256_storeu_ps(vf + h * 16 * KT + j * 16, v0);
                        _mm256_storeu_ps(vf + h * 16 * KT + j * 16 + 8, v1);
                    }
            for (int i = 0; i < m; i += 4) {
                const int R = m - i < 4 ? m - i : 4;
                float *orow[4];
                for (int r = 0; r < R; r++) {
                    const float *pr = p + (int64_t)(i + r) * ldp + j0;
                    const float *db = dv + b * KT;
                    int j = 0;
                    for (; j + 8 <= nk; j += 8)
                        _mm256_storeu_ps(w + r * KT + j, _mm256_mul_ps(_mm256_loadu_ps(pr + j),
                                                                       _mm256_loadu_ps(db + j)));
                    for (; j < nk; j++)
                        w[r * KT + j] = pr[j] * db[j];
                    orow[r] = o + (int64_t)(i + r) * ldo;
                }
                for (int h = 0; h < 2; h++) {
                    const int64_t c = b * 32 + h * 16;
                    /* the first pass over the keys hints the next rows */
                    const uint8_t *pf =
                        next && b == 0 && h == 0 && i == 0 ? next + (uint64_t)j0 * ldv : NULL;
                    const size_t pfn = (size_t)(d / 32) * bs;
                    const int mode = m > 4 ? VF32 : q4 ? VQ4 : VQ8;
                    const uint8_t *vq = vb + (q4 ? 0 : 16 * h);
                    pv_pass_any(R, mode, nk, vq, ldv, _mm_cvtsi32_si128(q4 ? 4 * h : 0),
                                vf + h * 16 * KT, w, orow, c, pf, pfn);
                }
            }
        }
    }
}
#endif
