/* avx2_attn.c: the avx2 level's attention tile ops (contracts in kernels.h: attn_*, attn_x*,
 * attn_q*), built with the avx2 flags (AVX2, FMA, F16C) and reached only through
 * cpulm_kernels_avx2 (avx2.c's table); the avx512 levels inherit the query quantization,
 * and call the attn_x* ops for the head sizes their 512-bit versions do not take.
 * attn_scores, attn_pv, attn_merge, attn_xpv, attn_qquant, attn_qpv and the two softmax
 * ops are attn_simd.h's over the 8-lane layer below. Every op is bit-identical to generic/attn.c,
 * by the arguments of docs/CORRECTNESS.md "Default attention numerics and the tiled path": per
 * element the generic order, integer block dots exact in any order; the exact scores put 4 query
 * rows in the lanes of a __m256d, the exact weights evaluate glibc's x86_64 FMA expf in __m256d
 * lanes (its table by VGATHERQPD), the f16 rounding is VCVTPS2PH / VCVTPH2PS.
 */
#if defined(__x86_64__)
#include <math.h>
#include <string.h>

#include "format/quant.h"
#include "kernels/attn_simd.h"
#include "x86.h"

#define AVX2_INLINE static inline __attribute__((always_inline))

/* ======== f32 tiles (attn_scores' keys; the ops are attn_simd.h's, below) ======== */

/* ---- attn_simd.h's layer: quantized queries and values ---- */

/* asv_store_q8: x[0..4)'s 32 lanes to int8 at p (vcvtps2dq: nearest even, as the generic
 * nearbyintf; |x| < 127.5, so the packs never saturate) */
AVX2_INLINE void avx2_store_q8(int8_t *p, const __m256 x[4]) {
    const __m256i p01 = _mm256_packs_epi32(_mm256_cvtps_epi32(x[0]), _mm256_cvtps_epi32(x[1]));
    const __m256i p23 = _mm256_packs_epi32(_mm256_cvtps_epi32(x[2]), _mm256_cvtps_epi32(x[3]));
    /* dwords [x0 0-3, x1 0-3, x2 0-3, x3 0-3, x0 4-7, x1 4-7, ...] to element order */
    const __m256i b = _mm256_packs_epi16(p01, p23);
    _mm256_storeu_si256((__m256i *)p,
                        _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

/* 16 values of a key as floats (asv_qvals; Q8: pmovsxbd straight from memory). */
AVX2_INLINE void avx2_qvals(const int MODE, const void *q, __m256 v[2]) {
    const uint8_t *b = q;
    if (MODE == ATT_VQ8) {
        v[0] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)b)));
        v[1] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(b + 8))));
    } else {
        __m128i x = _mm_loadu_si128((const __m128i *)b);
        if (MODE == ATT_VQ4H) x = _mm_srli_epi16(x, 4);
        x = _mm_sub_epi8(_mm_and_si128(x, _mm_set1_epi8(0x0f)), _mm_set1_epi8(8));
        v[0] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(x));
        v[1] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(x, x)));
    }
}

/* kt[c * ATT_SK_KEYS + j] = k_j[c] for j < nk (lanes past nk repeat key nk - 1), c < dc (a
 * multiple of 8), by 8 x 8 register transposes. */
static void asv_transpose_keys(const float *k, int64_t ldk, int nk, int dc, float *kt) {
    for (int j0 = 0; j0 < nk; j0 += 8)
        for (int c = 0; c < dc; c += 8) {
            __m256 r[8], t[8], u[8];
            _Pragma("GCC unroll 8") for (int x = 0; x < 8; x++) r[x] =
                _mm256_loadu_ps(k + (int64_t)(j0 + x < nk ? j0 + x : nk - 1) * ldk + c);
            _Pragma("GCC unroll 8") for (int x = 0; x < 8; x += 2) {
                t[x] = _mm256_unpacklo_ps(r[x], r[x + 1]);
                t[x + 1] = _mm256_unpackhi_ps(r[x], r[x + 1]);
            }
            _Pragma("GCC unroll 8") for (int g = 0; g < 8; g += 4) { /* dim 4l + x: u[g + x] */
                u[g] = _mm256_shuffle_ps(t[g], t[g + 2], 0x44);
                u[g + 1] = _mm256_shuffle_ps(t[g], t[g + 2], 0xEE);
                u[g + 2] = _mm256_shuffle_ps(t[g + 1], t[g + 3], 0x44);
                u[g + 3] = _mm256_shuffle_ps(t[g + 1], t[g + 3], 0xEE);
            }
            float *o = kt + (int64_t)c * ATT_SK_KEYS + j0;
            _Pragma("GCC unroll 8") for (int x = 0; x < 4; x++) {
                _mm256_storeu_ps(o + x * ATT_SK_KEYS, _mm256_permute2f128_ps(u[x], u[4 + x], 0x20));
                _mm256_storeu_ps(o + (4 + x) * ATT_SK_KEYS,
                                 _mm256_permute2f128_ps(u[x], u[4 + x], 0x31));
            }
        }
}

/* ======== the exact numerics (attn_x*) ======== */

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
 * x86_xexpf_special (attn_simd.h). avx512.c evaluates the same with table permutes; AVX2 has none
 * across 32 doubles, so a gather. attn_xweights_expf_is_libms compares it (through attn_xweights)
 * with this process's libm over floats in [-104, 0], the arguments attention passes. */
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
    return _mm256_movemask_ps(sp) ? x86_xexpf_special(f, x) : f;
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

/* ======== attn_simd.h's ops (f32 tiles, softmax family, attn_xweights, attn_xpv) ======== */

/* All ones in the lanes below nl (for the one group of a row that lim cuts). */
AVX2_INLINE __m256 avx2_live8(int nl) {
    return _mm256_castsi256_ps(
        _mm256_cmpgt_epi32(_mm256_set1_epi32(nl), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
}

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

#define ASV_LEVEL             avx2
#define ASV                   __m256
#define ASV_W                 8
#define asv_load(p)           _mm256_loadu_ps(p)
#define asv_store(p, x)       _mm256_storeu_ps(p, x)
#define asv_set1(x)           _mm256_set1_ps(x)
#define asv_mul(a, b)         _mm256_mul_ps(a, b)
#define asv_fma(a, b, c)      _mm256_fmadd_ps(a, b, c)
#define asv_load_n(p, nl)     _mm256_maskload_ps(p, _mm256_castps_si256(avx2_live8(nl)))
#define asv_store_n(p, x, nl) _mm256_maskstore_ps(p, _mm256_castps_si256(avx2_live8(nl)), x)
#define asv_round_f16(x) \
    _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC))
#define asv_add(a, b)       _mm256_add_ps(a, b)
#define asv_sub(a, b)       _mm256_sub_ps(a, b)
#define asv_max(a, b)       _mm256_max_ps(a, b)
#define asv_hmax(x)         x86_hmax_ps256(x)
#define asv_exp(x)          x86_canon_vexp256(x)
#define asv_expz(x)         vexpz8(x)
#define ASV_MASK            __m256
#define asv_live(nl)        avx2_live8(nl)
#define asv_select(k, a, b) _mm256_blendv_ps(b, a, k)
#define asv_keep(x, k)      _mm256_and_ps(x, k)
#define ASV_REDUCE16(acc)   x86_reduce16_256(acc[0], acc[1])
#define asv_gt(a, b)        _mm256_cmp_ps(a, b, _CMP_GT_OQ)
#define asv_ord(x)          _mm256_cmp_ps(x, x, _CMP_ORD_Q)
#define asv_any(k)          _mm256_movemask_ps(k)
#define asv_keep_max(a, b)  _mm256_max_ps(b, a) /* vmaxps: the second operand on ties */
#define asv_lanes_up        xlanes_up
#define asv_last(x)         _mm_cvtss_f32(_mm_permute_ps(_mm256_extractf128_ps(x, 1), 0xFF))
#define asv_expf(x)         xexpf8(x)
/* scores: 3 rows x 4 vectors (12 accumulators); xpv: 4 rows x 3 vectors or 2 x 4, the sums
 * riding in blocks of <= 8 accumulators (12 chains of FMA, VCVTPS2PH, VCVTPH2PS, ~14 cycles
 * on Zen 3, in flight; VCVTPS2PH, 2 cycles per ymm there, bounds the rest) */
#define ASV_SC_ROWS        3
#define ASV_SC_CASES(X)    CPULM_BLOCKS_UPTO4(3, X) CPULM_BLOCKS_UPTO4(2, X) CPULM_BLOCKS_UPTO4(1, X)
#define ASV_XPV_VECS(rows) ((rows) <= 2 ? 4 : 3)
#define ASV_XPV_SUM_MAX    8
#define ASV_XPV_CASES(X)     \
    CPULM_BLOCKS_UPTO3(4, X) \
    CPULM_BLOCKS_UPTO3(3, X) CPULM_BLOCKS_UPTO4(2, X) CPULM_BLOCKS_UPTO4(1, X)
#define ASV_XPV_NARROW cpulm_generic_attn_xpv
/* P.V: 2 rows x 4 vectors sharing each loaded value vector, or a lone row x 8 */
#define ASV_PV_ROWS       2
#define ASV_PV_VECS(rows) ((rows) == 1 ? 8 : 4)
#define ASV_PV_DIMS_OUTER 0
#define ASV_PV_CASES(X)   CPULM_BLOCKS_UPTO4(2, X) CPULM_BLOCKS_UPTO8(1, X)
/* attn_qpv: a block's values converted once for more than 4 rows */
#define ASV_QPV_F32           1
#define ASV_QPV_BLOCKS        1
#define ASV_QPV_HALVES        1
#define asv_qvals(MODE, q, v) avx2_qvals(MODE, q, v)
#define asv_scale(p)          _mm256_cvtph_ps(_mm_set1_epi16(x86_half_at(p)))
/* attn_qquant */
#define asv_absmax(m, x)   _mm256_max_ps(m, _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x))
#define asv_store_q8(p, x) avx2_store_q8(p, x)
#include "kernels/attn_simd.h"

/* ======== Q8_0 / Q4_0 rows in place (attn_q*) ======== */

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

#define KT ATT_QKT

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

/* Scores of 4 rows x keys a, b: lanes [a: r0..r3 | b: r0..r3], times sc; the rows' block
 * scales by block in dqt (att_rows4); da, db: the keys' block scales, KT apart. */
#define DKA (WIDE ? da[b * KT] : key_d(kp.ra, b, Q4))
#define DKB (WIDE ? db[b * KT] : key_d(kp.rb, b, Q4))
AVX2_INLINE float key_d(const uint8_t *row, int64_t b, const int Q4) {
    uint16_t h;
    __builtin_memcpy(&h, row + (size_t)b * att_block_bytes(Q4), 2);
    return x86_fp16(h);
}

AVX2_INLINE __m256 scores_4x2(int64_t d, const int Q4, const int WIDE, const int16_t *const qr[4],
                              const float *dqt, __m256 scv, kpair kp, const float *da,
                              const float *db) {
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
        const __m256 dq = _mm256_broadcast_ps((const __m128 *)(dqt + 4 * b));
        acc = _mm256_fmadd_ps(_mm256_mul_ps(dk, dq), _mm256_cvtepi32_ps(x), acc);
    }
    return _mm256_mul_ps(acc, scv);
}
#undef DKA
#undef DKB

#define WDIM ATT_QWDIM

/* Rows i.. (rows <= 4 of them) x keys 0..n-1 (n <= KT): 4 keys at a time, 2 per scores_4x2.
 * The first rows' pass hints the rows at next (NULL: none). */
AVX2_INLINE void scores_rows(int64_t d, const int Q4, const int WIDE, int i, int rows, int n,
                             const int8_t *q8, const float *qd, float sc, const uint8_t *k,
                             uint64_t ldk, const int16_t *kw, const float *dk, float *s,
                             int64_t lds, const uint8_t *next) {
    const int16_t *qr[4];
    int16_t w[4 * WDIM];
    float dqt[4 * (WDIM / 32)];
    att_rows4_w(d, q8, qd, i, rows, w, qr, dqt);
    const __m256 scv = _mm256_set1_ps(sc);
    const size_t rb = (size_t)(d / 32) * att_block_bytes(Q4);
    for (int j = 0; j < n; j += 4) {
        if (i == 0 && next)
            for (int t = 0; t < 4; t++)
                att_hint_row(next + (uint64_t)(j + t) * ldk, rb);
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
        const __m256 x = scores_4x2(d, Q4, WIDE, qr, dqt, scv, p0, dk + jt[0], dk + jt[1]);
        const __m256 y = scores_4x2(d, Q4, WIDE, qr, dqt, scv, p1, dk + jt[2], dk + jt[3]);
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

/* attn_qscores on n keys of one cache type (n <= KT for more than 4 rows: its buffers). */
AVX2_INLINE void qscores_tile(int64_t d, const int Q4, int m, int n, const int8_t *q8,
                              const float *qd, float sc, const uint8_t *k, uint64_t ldk, float *s,
                              int64_t lds, const uint8_t *next) {
    float dk[WDIM / 32 * KT];
    int16_t kw[WDIM * KT];
    const int wide = m > 4;
    if (wide) x86q_block_scales(d, k, ldk, n, att_block_bytes(Q4), dk);
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
            scores_rows(d, Q4, 1, i, rows, n, q8, qd, sc, k, ldk, kw, dk, s, lds, next);
        else
            scores_rows(d, Q4, 0, i, rows, n, q8, qd, sc, k, ldk, NULL, dk, s, lds, next);
    }
}

void cpulm_avx2_attn_qscores(int64_t d, cpulm_dtype kt, int m, int n, const int8_t *q8,
                             const float *qd, float sc, const uint8_t *k, uint64_t ldk, float *s,
                             int64_t lds, const uint8_t *next) {
    if (d % 32 != 0 || d > WDIM || (kt != CPULM_DTYPE_Q8_0 && kt != CPULM_DTYPE_Q4_0)) {
        cpulm_generic_attn_qscores(d, kt, m, n, q8, qd, sc, k, ldk, s, lds, next);
        return;
    }
    if (m <= 4) { /* generation: one group of rows, widened once for all n keys */
        if (kt == CPULM_DTYPE_Q4_0)
            qscores_tile(d, 1, m, n, q8, qd, sc, k, ldk, s, lds, next);
        else
            qscores_tile(d, 0, m, n, q8, qd, sc, k, ldk, s, lds, next);
        return;
    }
    for (int j = 0; j < n; j += KT) {
        const int nk = n - j < KT ? n - j : KT;
        const uint8_t *kj = k + (uint64_t)j * ldk, *nj = next ? next + (uint64_t)j * ldk : NULL;
        if (kt == CPULM_DTYPE_Q4_0)
            qscores_tile(d, 1, m, nk, q8, qd, sc, kj, ldk, s + j, lds, nj);
        else
            qscores_tile(d, 0, m, nk, q8, qd, sc, kj, ldk, s + j, lds, nj);
    }
}

#endif
