/* x86.h: static inline helpers shared by the x86 kernel files (avx2.c, avx512.c, ...).
 * Included only by the .c files of src/kernels/x86/, each compiled with its own -m flags.
 * Everything here must stay static inline: an out-of-line copy emitted by the AVX-512 TU could be
 * picked by the linker for an AVX2 caller and fault on older CPUs. The AVX-512 helpers
 * are visible only to TUs built with -mavx512f (and friends).
 */
#ifndef CPULM_KERNELS_X86_H
#define CPULM_KERNELS_X86_H

#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#include "kernels/kernels.h"

/* cpulm_avx2_<op> and cpulm_avx512_<op> for every op of kernels.h: the names by which a
 * level's table (avx2.c, avx512.c) reaches the ops its part files (avx2_attn.c, ...) define;
 * declared for every op, referenced only for those a part file has. */
#define X86_DECLARE_AVX2(ID, name, ret, params, group)   ret cpulm_avx2_##name params;
#define X86_DECLARE_AVX512(ID, name, ret, params, group) ret cpulm_avx512_##name params;
CPULM_KERNEL_OPS(X86_DECLARE_AVX2)
CPULM_KERNEL_OPS(X86_DECLARE_AVX512)
/* the avx512vnni level's own attention op (avx512_attn.c: the avx512 one with vpdpbusd) */
void cpulm_avx512vnni_attn_qscores(int64_t d, cpulm_dtype kt, int m, int n, const int8_t *q8,
                                   const float *qd, float sc, const uint8_t *k, uint64_t ldk,
                                   float *s, int64_t lds, const uint8_t *next);
/* the avx512bf16 level's BF16 weight dots (avx512bf16_gemm.c) */
void cpulm_avx512bf16_vec_dot_bf16(int64_t n, float *s, const void *x, const void *y);
void cpulm_avx512bf16_gemm_rows_bf16(int64_t n, int nr, int nt, float *s, int64_t ld, const void *w,
                                     uint64_t ws, const uint8_t *a, uint64_t as);
/* the amx level's own attention op (amx_attn.c) */
void cpulm_amx_attn_qscores(int64_t d, cpulm_dtype kt, int m, int n, const int8_t *q8,
                            const float *qd, float sc, const uint8_t *k, uint64_t ldk, float *s,
                            int64_t lds, const uint8_t *next);
/* The tile configuration this thread has loaded (amx.c): 0 none, 1..16 the GEMM's (its
 * rows), X86_AMX_ATTN + N amx_attn.c's for N query rows. Whoever loads another sets it. */
extern _Thread_local int x86_amx_tiles;
#define X86_AMX_ATTN 100

/* ---- reductions ---- */

static inline float x86_hsum_ps128(__m128 v) {
    v = _mm_add_ps(v, _mm_movehl_ps(v, v));
    v = _mm_add_ss(v, _mm_movehdup_ps(v));
    return _mm_cvtss_f32(v);
}

static inline float x86_hsum_ps256(__m256 v) {
    return x86_hsum_ps128(_mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1)));
}

static inline float x86_hmax_ps256(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

/* max(start, x[0..n)): 8 lanes of vmaxps, then fmaxf over the tail (softmax's row max). */
static inline float x86_max_f32(const float *x, int64_t n, float start) {
    __m256 vmax = _mm256_set1_ps(start);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(x + i));
    float m = x86_hmax_ps256(vmax);
    for (; i < n; i++)
        m = fmaxf(m, x[i]);
    return m;
}

static inline float x86_fp16(uint16_t h) {
    return _cvtsh_ss(h);
}

/* ---- int8 helpers ---- */

/* 16 bytes of packed nibbles -> 32 bytes 0..15: low nibbles first (elements 0..15 of a
 * Q4 block), then high nibbles (elements 16..31). */
static inline __m256i x86_nibbles_32(const uint8_t *qs) {
    const __m128i b = _mm_loadu_si128((const __m128i *)qs);
    const __m256i both = _mm256_set_m128i(_mm_srli_epi16(b, 4), b);
    return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

/* Sum of x*y over pairs of int8, as 8 int32 lanes (each lane sums 4 adjacent products).
 * maddubs needs unsigned x signed: take |x| and move x's sign onto y. Exact when y has no
 * -128 (our activation quantizers never produce it; x = -128 is fine: |x| reads as 128 and
 * pairs stay <= 2 * 128 * 127 < 32768, so the int16 step cannot saturate). */
static inline __m256i x86_dot_i8_pairs(__m256i x, __m256i y) {
    const __m256i ax = _mm256_sign_epi8(x, x);
    const __m256i sy = _mm256_sign_epi8(y, x);
    const __m256i p16 = _mm256_maddubs_epi16(ax, sy);
    return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

/* MXFP4 codes (0..15, one per byte) -> their doubled E2M1 values (cpulm_mxfp4_values2),
 * by a byte shuffle; bias 12 adds 12 to every value (0..24, for unsigned-times-signed
 * dots, the -12 * sum(y) taken off afterwards). */
static inline __m256i x86_mxfp4_lut256(int bias) {
    return _mm256_setr_epi8(
        (char)(0 + bias), (char)(1 + bias), (char)(2 + bias), (char)(3 + bias), (char)(4 + bias),
        (char)(6 + bias), (char)(8 + bias), (char)(12 + bias), (char)(0 + bias), (char)(-1 + bias),
        (char)(-2 + bias), (char)(-3 + bias), (char)(-4 + bias), (char)(-6 + bias),
        (char)(-8 + bias), (char)(-12 + bias), (char)(0 + bias), (char)(1 + bias), (char)(2 + bias),
        (char)(3 + bias), (char)(4 + bias), (char)(6 + bias), (char)(8 + bias), (char)(12 + bias),
        (char)(0 + bias), (char)(-1 + bias), (char)(-2 + bias), (char)(-3 + bias),
        (char)(-4 + bias), (char)(-6 + bias), (char)(-8 + bias), (char)(-12 + bias));
}

/* 8 E8M0 exponents (zero-extended int32 lanes) -> 2^(e - 128) as floats, from the bits as
 * cpulm_e8m0_half builds them (e < 2: the subnormals 0x00200000 << e). */
static inline __m256 x86_e8m0_half256(__m256i e) {
    const __m256i one = _mm256_set1_epi32(1);
    const __m256i norm = _mm256_slli_epi32(_mm256_sub_epi32(e, one), 23);
    const __m256i sub = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
    return _mm256_castsi256_ps(_mm256_blendv_epi8(sub, norm, _mm256_cmpgt_epi32(e, one)));
}

/* roundf() semantics (half away from zero), exactly, on 8 floats: truncate, then step
 * away from zero when the dropped fraction is >= 0.5 (v - trunc(v) is exact). */
static inline __m256 x86_round_away_ps256(__m256 v) {
    const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256 frac = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), _mm256_sub_ps(v, t));
    const __m256 step =
        _mm256_or_ps(_mm256_set1_ps(1.0f), _mm256_and_ps(v, _mm256_set1_ps(-0.0f))); /* +-1 */
    const __m256 ge = _mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ);
    return _mm256_add_ps(t, _mm256_and_ps(ge, step));
}

/* ---- exp ---- */

/* e^x for 8 floats: x = n ln2 + r with |r| <= ln2/2, e^r by its degree-6 Taylor polynomial
 * (truncation error < 1.3e-7 relative, about 1 ulp), times 2^n built in the exponent
 * field. x < -87.3 gives exactly 0 (so -inf masks vanish), x > 88.7 gives +inf. */
static inline __m256 x86_exp_ps256(__m256 x) {
    const __m256 hi = _mm256_set1_ps(88.0f), lo = _mm256_set1_ps(-87.3f);
    const __m256 xc = _mm256_max_ps(_mm256_min_ps(x, hi), lo);
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145752f), xc); /* ln2 split in two */
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.42860677e-6f), r);
    __m256 p = _mm256_set1_ps(1.0f / 720);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i e =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    __m256 y = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
    y = _mm256_blendv_ps(y, _mm256_setzero_ps(), _mm256_cmp_ps(x, lo, _CMP_LT_OQ));
    return _mm256_blendv_ps(y, _mm256_set1_ps(INFINITY), _mm256_cmp_ps(x, hi, _CMP_GT_OQ));
}

/* ---- AVX-512 ---- */
/* ---- canonical float arithmetic ----
 * The generic kernels define one order of operations for F32/F16 dots, rms sums, silu's exp
 * and the f16 accumulators (see generic/dot.c, generic/vec.c). These helpers compute exactly
 * that, so every level gives bit-identical results for float models. */

/* Tree sum of 16 lanes (lanes 0-7 in lo, 8-15 in hi): halves, quarters, then pairs. */
static inline float x86_reduce16_256(__m256 lo, __m256 hi) {
    const __m256 h = _mm256_add_ps(hi, lo);
    const __m128 g = _mm_add_ps(_mm256_extractf128_ps(h, 1), _mm256_castps256_ps128(h));
    const __m128 p = _mm_add_ps(g, _mm_movehl_ps(g, g));
    return _mm_cvtss_f32(_mm_add_ss(p, _mm_movehdup_ps(p)));
}

/* The canonical polynomial exp before scaling: returns j and n with exp(x) = j * 2^n. */
static inline __m256 x86_vexp_parts256(__m256 x, __m256 *n_out) {
    const __m256 r = _mm256_set1_ps(0x1.8p23f);
    const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), r);
    const __m256 n = _mm256_sub_ps(z, r);
    const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f),
                                      _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x));
    const __m256 u = _mm256_mul_ps(b, b);
    const __m256 p = _mm256_fmadd_ps(
        _mm256_fmadd_ps(
            _mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b, _mm256_set1_ps(0x1.573e2ep-5f)), u,
            _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b, _mm256_set1_ps(0x1.fffdb6p-2f))),
        u, _mm256_fmadd_ps(_mm256_set1_ps(0x1.ffffecp-1f), b, _mm256_set1_ps(1.0f)));
    *n_out = n;
    return p;
}

/* cpulm_generic_vexpf on 8 lanes: the polynomial above, then 2^n applied as ldexpf does (one
 * rounding of j * 2^n). For |n| <= 126, 2^n is a normal float and one multiply is that
 * rounding (subnormal results included); other lanes (|x| > ~87, inf) go through ldexpf. */
static inline __m256 x86_canon_vexp256(__m256 x) {
    __m256 n;
    const __m256 p = x86_vexp_parts256(x, &n);
    const __m256 big = _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), n),
                                     _mm256_set1_ps(126.0f), _CMP_GT_OQ);
    const __m256i e =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    __m256 r = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
    if (_mm256_movemask_ps(big)) {
        float pv[8], nv[8], rv[8];
        _mm256_storeu_ps(pv, p);
        _mm256_storeu_ps(nv, n);
        _mm256_storeu_ps(rv, r);
        for (int l = 0; l < 8; l++)
            if (fabsf(nv[l]) > 126.0f) rv[l] = ldexpf(pv[l], (int)nv[l]);
        r = _mm256_loadu_ps(rv);
    }
    return r;
}

/* Sequential double sum of float squares (the canonical rms sum). */
static inline double x86_sum_squares(int64_t n, const float *x) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)(x[i] * x[i]);
    return sum;
}

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__)

/* Two 256-bit halves -> one 512-bit register (lo in lanes 0..7). */
static inline __m512i x86_join_si512(__m256i lo, __m256i hi) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* {a x 8, b x 8}: per-block scales for two blocks held in one register. */
static inline __m512 x86_two_scales(float a, float b) {
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(a)), _mm256_set1_ps(b), 1);
}

/* The 16 rows' MXFP4 scales 2^(e - 128) (16 E8M0 bytes), two halves of x86_e8m0_half256. */
static inline __m512 x86_mxfp4_scales_x16(const uint8_t *g) {
    const __m128i e = _mm_loadu_si128((const __m128i *)g);
    const __m256 lo = x86_e8m0_half256(_mm256_cvtepu8_epi32(e));
    const __m256 hi = x86_e8m0_half256(_mm256_cvtepu8_epi32(_mm_srli_si128(e, 8)));
    return _mm512_castsi512_ps(x86_join_si512(_mm256_castps_si256(lo), _mm256_castps_si256(hi)));
}

/* The 6-bit scales and mins of 16 rows, from the 3 scales chunks (lane r: scales[4c..4c+3]
 * of row r): lane bytes of sc[0] = scales 0..3, sc[1] = 4..7, likewise mn[]. */
static inline void x86_k4_scales_x16(const uint8_t *g, __m512i sc[2], __m512i mn[2]) {
    const __m512i a = _mm512_loadu_si512(g), b = _mm512_loadu_si512(g + 64),
                  c = _mm512_loadu_si512(g + 128);
    const __m512i m6 = _mm512_set1_epi32((int)0x3f3f3f3fu),
                  m4 = _mm512_set1_epi32((int)0x0f0f0f0fu),
                  hi2 = _mm512_set1_epi32((int)0x30303030u);
    sc[0] = _mm512_and_si512(a, m6);
    mn[0] = _mm512_and_si512(b, m6);
    sc[1] =
        _mm512_or_si512(_mm512_and_si512(c, m4), _mm512_and_si512(_mm512_srli_epi32(a, 2), hi2));
    mn[1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(c, 4), m4),
                            _mm512_and_si512(_mm512_srli_epi32(b, 2), hi2));
}

/* The 16 x 16 transpose of floats in registers: out[i] lane j = in[j] lane i (pairs of rows,
 * then pairs of pairs, then 128-bit lanes). */
static inline void x86_transpose16_ps(const __m512 in[16], __m512 out[16]) {
    __m512 t[16], u[16];
    _Pragma("GCC unroll 16") for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(in[i], in[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(in[i], in[i + 1]);
    }
    _Pragma("GCC unroll 16") for (int i = 0; i < 16;
                                  i += 4) { /* u[i + x], lane L: rows i..i+3 of column 4L + x */
        const __m512d t0 = _mm512_castps_pd(t[i]), t1 = _mm512_castps_pd(t[i + 1]);
        const __m512d t2 = _mm512_castps_pd(t[i + 2]), t3 = _mm512_castps_pd(t[i + 3]);
        u[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(t0, t2));
        u[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(t0, t2));
        u[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(t1, t3));
        u[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(t1, t3));
    }
    _Pragma("GCC unroll 16") for (int x = 0; x < 4; x++) {
        const __m512 va = _mm512_shuffle_f32x4(u[x], u[4 + x], 0x44);
        const __m512 vb = _mm512_shuffle_f32x4(u[x], u[4 + x], 0xEE);
        const __m512 wa = _mm512_shuffle_f32x4(u[8 + x], u[12 + x], 0x44);
        const __m512 wb = _mm512_shuffle_f32x4(u[8 + x], u[12 + x], 0xEE);
        out[x] = _mm512_shuffle_f32x4(va, wa, 0x88);
        out[4 + x] = _mm512_shuffle_f32x4(va, wa, 0xDD);
        out[8 + x] = _mm512_shuffle_f32x4(vb, wb, 0x88);
        out[12 + x] = _mm512_shuffle_f32x4(vb, wb, 0xDD);
    }
}

static inline __m512 x86_exp_ps512(__m512 x) {
    const __m512 hi = _mm512_set1_ps(88.0f), lo = _mm512_set1_ps(-87.3f);
    const __m512 xc = _mm512_max_ps(_mm512_min_ps(x, hi), lo);
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145752f), xc);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860677e-6f), r);
    __m512 p = _mm512_set1_ps(1.0f / 720);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    /* scalef multiplies by 2^n without building the exponent by hand */
    __m512 y = _mm512_scalef_ps(p, n);
    y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ), _mm512_setzero_ps());
    return _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, hi, _CMP_GT_OQ), _mm512_set1_ps(INFINITY));
}

static inline float x86_reduce16_512(__m512 a) {
    const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1));
    return x86_reduce16_256(_mm512_castps512_ps256(a), hi);
}

static inline __m512 x86_vexp_ps512(__m512 x) {
    const __m512 r = _mm512_set1_ps(0x1.8p23f);
    const __m512 z = _mm512_fmadd_ps(x, _mm512_set1_ps(0x1.715476p+0f), r);
    const __m512 n = _mm512_sub_ps(z, r);
    const __m512 b = _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.7f7d1cp-20f),
                                      _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.62e4p-1f), x));
    const __m512 u = _mm512_mul_ps(b, b);
    const __m512 p = _mm512_fmadd_ps(
        _mm512_fmadd_ps(
            _mm512_fmadd_ps(_mm512_set1_ps(0x1.0e4020p-7f), b, _mm512_set1_ps(0x1.573e2ep-5f)), u,
            _mm512_fmadd_ps(_mm512_set1_ps(0x1.555e66p-3f), b, _mm512_set1_ps(0x1.fffdb6p-2f))),
        u, _mm512_fmadd_ps(_mm512_set1_ps(0x1.ffffecp-1f), b, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(p, n); /* exact scaling by 2^n, like ldexpf */
}

#endif /* AVX-512 */

#endif
