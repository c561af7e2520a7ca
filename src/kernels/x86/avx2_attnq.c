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

#include "avx2_attn.h"
#include "avx2_softmax.h"
#include "kernels/generic/generic.h"
#include "quant.h"
#include "x86.h"

#define AVX2_INLINE static inline __attribute__((always_inline))

/* A hint for the bytes [p, p + n) (no fault, no effect on results). The ops hint the rows
 * that follow their tile (the next tile of the same head) while they compute, a few lines
 * per key: attention.c's hints of whole tiles came in bursts that stalled on the miss
 * buffers. */
AVX2_INLINE void hint_row(const uint8_t *p, size_t n) {
    for (size_t o = 0; o < n; o += 64)
        __builtin_prefetch(p + o, 0, 3);
    __builtin_prefetch(p + n - 1, 0, 3);
}
#define QTILE 64 /* keys per pass of attn_qpv (its weight buffer) */

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

/* Block b of a cache row: the 32 quants as two int16 vectors (elements 0-15, 16-31). */
AVX2_INLINE void block_k16(const uint8_t *row, int64_t b, int q4, __m256i *k0, __m256i *k1) {
    if (!q4) {
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

AVX2_INLINE float block_d(const uint8_t *row, int64_t b, int q4) {
    const size_t bs = q4 ? sizeof(cpulm_block_q4_0) : sizeof(cpulm_block_q8_0);
    uint16_t h;
    __builtin_memcpy(&h, row + (size_t)b * bs, 2);
    return x86_fp16(h);
}

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

/* Scores of 4 rows x keys ka, kb: lanes [ka: r0..r3 | kb: r0..r3], times qs. */
AVX2_INLINE __m256 scores_4x2(int64_t d, int q4, const int16_t *const qr[4], __m256 qsv,
                              const uint8_t *ka, const uint8_t *kb) {
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < d / 32; b++) {
        __m256i a0, a1, b0, b1;
        block_k16(ka, b, q4, &a0, &a1);
        block_k16(kb, b, q4, &b0, &b1);
        const __m256i ta = rows4(qr, b * 32, a0, a1), tb = rows4(qr, b * 32, b0, b1);
        const __m256i x = _mm256_add_epi32(_mm256_permute2x128_si256(ta, tb, 0x20),
                                           _mm256_permute2x128_si256(ta, tb, 0x31));
        const __m256 dk =
            _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_set1_ps(block_d(ka, b, q4))),
                                 _mm_set1_ps(block_d(kb, b, q4)), 1);
        acc = _mm256_fmadd_ps(dk, _mm256_cvtepi32_ps(x), acc);
    }
    return _mm256_mul_ps(acc, qsv);
}

/* scores_4x2 on keys widened beforehand (kw: int16 rows of d, dw: their block scales):
 * blocks of many query rows read each key 1 + m / 4 times; widening once saves the rest. */
AVX2_INLINE __m256 scores_4x2w(int64_t d, const int16_t *const qr[4], __m256 qsv, const int16_t *ka,
                               const int16_t *kb, const float *da, const float *db) {
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < d / 32; b++) {
        const __m256i a0 = _mm256_loadu_si256((const __m256i *)(ka + b * 32));
        const __m256i a1 = _mm256_loadu_si256((const __m256i *)(ka + b * 32 + 16));
        const __m256i b0 = _mm256_loadu_si256((const __m256i *)(kb + b * 32));
        const __m256i b1 = _mm256_loadu_si256((const __m256i *)(kb + b * 32 + 16));
        const __m256i ta = rows4(qr, b * 32, a0, a1), tb = rows4(qr, b * 32, b0, b1);
        const __m256i x = _mm256_add_epi32(_mm256_permute2x128_si256(ta, tb, 0x20),
                                           _mm256_permute2x128_si256(ta, tb, 0x31));
        const __m256 dk =
            _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_set1_ps(da[b])), _mm_set1_ps(db[b]), 1);
        acc = _mm256_fmadd_ps(dk, _mm256_cvtepi32_ps(x), acc);
    }
    return _mm256_mul_ps(acc, qsv);
}

#define WKEYS 64  /* keys widened at once for blocks of many rows */
#define WDIM  256 /* the largest head size widened */

void cpulm_avx2_attn_qscores(int64_t d, cpulm_dtype kt, int m, int n, const int16_t *q16,
                             int64_t ldq, const float *qs, const uint8_t *k, uint64_t ldk, float *s,
                             int64_t lds) {
    if (d % 32 != 0 || (kt != CPULM_DTYPE_Q8_0 && kt != CPULM_DTYPE_Q4_0)) {
        cpulm_generic_attn_qscores(d, kt, m, n, q16, ldq, qs, k, ldk, s, lds);
        return;
    }
    const int q4 = kt == CPULM_DTYPE_Q4_0;
    if (m > 4 && n > WKEYS) { /* the widened tile holds WKEYS keys */
        for (int j = 0; j < n; j += WKEYS)
            cpulm_avx2_attn_qscores(d, kt, m, n - j < WKEYS ? n - j : WKEYS, q16, ldq, qs,
                                    k + (uint64_t)j * ldk, ldk, s + j, lds);
        return;
    }
    const int wide = m > 4 && d <= WDIM;
    int16_t kw[WDIM * WKEYS];
    float dw[WDIM / 32 * WKEYS];
    if (wide)
        for (int j = 0; j < n; j++)
            for (int64_t b = 0; b < d / 32; b++) {
                __m256i k0, k1;
                block_k16(k + (uint64_t)j * ldk, b, q4, &k0, &k1);
                _mm256_storeu_si256((__m256i *)(kw + j * d + b * 32), k0);
                _mm256_storeu_si256((__m256i *)(kw + j * d + b * 32 + 16), k1);
                dw[j * (d / 32) + b] = block_d(k + (uint64_t)j * ldk, b, q4);
            }
    for (int i = 0; i < m; i += 4) {
        const int rows = m - i < 4 ? m - i : 4;
        const int16_t *qr[4]; /* a short group repeats its last row; only real rows are stored */
        float qsr[4];
        for (int r = 0; r < 4; r++) {
            const int ri = i + (r < rows ? r : rows - 1);
            qr[r] = q16 + (int64_t)ri * ldq;
            qsr[r] = qs[ri];
        }
        const __m128 q4s = _mm_loadu_ps(qsr);
        const __m256 qsv = _mm256_insertf128_ps(_mm256_castps128_ps256(q4s), q4s, 1);
        for (int j = 0; j < n; j += 4) {
            if (i == 0)
                for (int t = 0; t < 4; t++)
                    hint_row(k + (uint64_t)(j + t + n) * ldk, (size_t)(d / 32) * (q4 ? 18 : 34));
            int jt[4];
            for (int t = 0; t < 4; t++)
                jt[t] = j + t < n ? j + t : n - 1;
            __m256 x, y;
            if (wide) {
                const int64_t nb = d / 32;
                x = scores_4x2w(d, qr, qsv, kw + jt[0] * d, kw + jt[1] * d, dw + jt[0] * nb,
                                dw + jt[1] * nb);
                y = scores_4x2w(d, qr, qsv, kw + jt[2] * d, kw + jt[3] * d, dw + jt[2] * nb,
                                dw + jt[3] * nb);
            } else {
                x = scores_4x2(d, q4, qr, qsv, k + (uint64_t)jt[0] * ldk,
                               k + (uint64_t)jt[1] * ldk);
                y = scores_4x2(d, q4, qr, qsv, k + (uint64_t)jt[2] * ldk,
                               k + (uint64_t)jt[3] * ldk);
            }
            /* x = [k0 | k1], y = [k2 | k3], rows in lanes: to rows of 4 keys */
            const __m256 lo = _mm256_unpacklo_ps(x, y), hi = _mm256_unpackhi_ps(x, y);
            const __m128 l0 = _mm256_castps256_ps128(lo), l1 = _mm256_extractf128_ps(lo, 1);
            const __m128 h0 = _mm256_castps256_ps128(hi), h1 = _mm256_extractf128_ps(hi, 1);
            __m128 row[4] = {_mm_unpacklo_ps(l0, l1), _mm_unpackhi_ps(l0, l1),
                             _mm_unpacklo_ps(h0, h1), _mm_unpackhi_ps(h0, h1)};
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
        }
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
        const __m256i idx =
            _mm256_add_epi32(_mm256_set1_epi32(j), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        const __m256 live = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(lim), idx));
        e = _mm256_and_ps(vexpz8(_mm256_sub_ps(_mm256_loadu_ps(s + j), vm)), live);
    }
    _mm256_storeu_ps(s + j, e);
    return e;
}

float cpulm_avx2_attn_softmaxz(int n, int lim, float *s, float *M, float *L) {
    return avx2_softmax_with(n, lim, s, M, L, expz8_live, cpulm_generic_vexpzf);
}

/* ---- P.V ---- */

/* 16 quants of value row `row`, block b, elements h * 16.. as two f32 vectors. */
AVX2_INLINE void v16(const uint8_t *row, int64_t b, int h, int q4, __m256 *v0, __m256 *v1) {
    __m128i q;
    if (!q4) { /* pmovsxbd straight from memory */
        const uint8_t *qs = row + b * (int64_t)sizeof(cpulm_block_q8_0) + 2 + 16 * h;
        *v0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)qs)));
        *v1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(qs + 8))));
        return;
    } else {
        q = _mm_loadu_si128((const __m128i *)(row + b * (int64_t)sizeof(cpulm_block_q4_0) + 2));
        if (h) q = _mm_srli_epi16(q, 4);
        q = _mm_sub_epi8(_mm_and_si128(q, _mm_set1_epi8(0x0f)), _mm_set1_epi8(8));
    }
    *v0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q));
    *v1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(q, q)));
}

/* R rows x 16 dims (block b, half h) over n keys: o = fma(w_rj, v_j, o) in key order. w holds
 * the rows' weights of this block: row r's key j at w[r * QTILE + j]. */
AVX2_INLINE void qpv_rows(int n, const uint8_t *v, uint64_t ldv, int64_t b, int h, int q4,
                          const float *vf, const float *w, float *const orow[4], int64_t c,
                          const uint8_t *pf, size_t pfn, const int R) {
    __m256 acc[4][2];
    _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {
        acc[r][0] = _mm256_loadu_ps(orow[r] + c);
        acc[r][1] = _mm256_loadu_ps(orow[r] + c + 8);
    }
    for (int j = 0; j < n; j++) {
        __m256 v0, v1;
        if (pf) hint_row(pf + (uint64_t)j * ldv, pfn);
        if (vf) { /* converted beforehand */
            v0 = _mm256_loadu_ps(vf + j * 16);
            v1 = _mm256_loadu_ps(vf + j * 16 + 8);
        } else {
            v16(v + (uint64_t)j * ldv, b, h, q4, &v0, &v1);
        }
        _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {
            const __m256 wj = _mm256_broadcast_ss(w + r * QTILE + j);
            acc[r][0] = _mm256_fmadd_ps(wj, v0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(wj, v1, acc[r][1]);
        }
    }
    _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {
        _mm256_storeu_ps(orow[r] + c, acc[r][0]);
        _mm256_storeu_ps(orow[r] + c + 8, acc[r][1]);
    }
}

void cpulm_avx2_attn_qpv(int64_t d, cpulm_dtype vt, int m, int n, const float *p, int64_t ldp,
                         const uint8_t *v, uint64_t ldv, const float *a, float *o, int64_t ldo) {
    if (d % 32 != 0 || (vt != CPULM_DTYPE_Q8_0 && vt != CPULM_DTYPE_Q4_0)) {
        cpulm_generic_attn_qpv(d, vt, m, n, p, ldp, v, ldv, a, o, ldo);
        return;
    }
    const int q4 = vt == CPULM_DTYPE_Q4_0;
    for (int i = 0; i < m; i++) { /* o *= a first: the per-key fmas follow */
        float *oi = o + (int64_t)i * ldo;
        const __m256 va = _mm256_set1_ps(a[i]);
        for (int64_t c = 0; c < d; c += 8)
            _mm256_storeu_ps(oi + c, _mm256_mul_ps(_mm256_loadu_ps(oi + c), va));
    }
    float dv[QTILE], w[4 * QTILE], vf[2 * 16 * QTILE];
    for (int j0 = 0; j0 < n; j0 += QTILE) {
        const int nk = n - j0 < QTILE ? n - j0 : QTILE;
        const uint8_t *vj0 = v + (uint64_t)j0 * ldv;
        for (int64_t b = 0; b < d / 32; b++) {
            for (int j = 0; j < nk; j++)
                dv[j] = block_d(vj0 + (uint64_t)j * ldv, b, q4);
            if (m > 4) /* many rows: the block's quants as f32 once, not once per 4 rows */
                for (int h = 0; h < 2; h++)
                    for (int j = 0; j < nk; j++) {
                        __m256 v0, v1;
                        v16(vj0 + (uint64_t)j * ldv, b, h, q4, &v0, &v1);
                        _mm256_storeu_ps(vf + h * 16 * QTILE + j * 16, v0);
                        _mm256_storeu_ps(vf + h * 16 * QTILE + j * 16 + 8, v1);
                    }
            for (int i = 0; i < m; i += 4) {
                const int R = m - i < 4 ? m - i : 4;
                float *orow[4];
                for (int r = 0; r < R; r++) {
                    const float *pr = p + (int64_t)(i + r) * ldp + j0;
                    int j = 0;
                    for (; j + 8 <= nk; j += 8)
                        _mm256_storeu_ps(w + r * QTILE + j, _mm256_mul_ps(_mm256_loadu_ps(pr + j),
                                                                          _mm256_loadu_ps(dv + j)));
                    for (; j < nk; j++)
                        w[r * QTILE + j] = pr[j] * dv[j];
                    orow[r] = o + (int64_t)(i + r) * ldo;
                }
                for (int h = 0; h < 2; h++) {
                    const int64_t c = b * 32 + h * 16;
                    const float *buf = m > 4 ? vf + h * 16 * QTILE : NULL;
                    /* the first pass over the keys hints the rows after the tile */
                    const uint8_t *pf = b == 0 && h == 0 && i == 0 ? vj0 + (uint64_t)n * ldv : NULL;
                    const size_t pfn = (size_t)(d / 32) * (q4 ? 18 : 34);
                    switch (R) {
                    case 4: qpv_rows(nk, vj0, ldv, b, h, q4, buf, w, orow, c, pf, pfn, 4); break;
                    case 3: qpv_rows(nk, vj0, ldv, b, h, q4, buf, w, orow, c, pf, pfn, 3); break;
                    case 2: qpv_rows(nk, vj0, ldv, b, h, q4, buf, w, orow, c, pf, pfn, 2); break;
                    default: qpv_rows(nk, vj0, ldv, b, h, q4, buf, w, orow, c, pf, pfn, 1); break;
                    }
                }
            }
        }
    }
}
#endif
