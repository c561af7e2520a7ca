/* simde_avx512.h: forced-include header (gcc -include) of the TEST-ONLY emulated build of
 * the avx512* kernel translation units (cmake/emu512.cmake). Those files are compiled a
 * second time with the avx2 flags only; this header makes their _mm512_* intrinsics and
 * __m512* / __mmask* types SIMDe's portable implementations (on AVX2 underneath), so the
 * tests can run the avx512 / avx512vnni tables on a CPU without AVX-512.
 *
 * Never part of libcpulm or the cpulm binary. The emulated objects' external symbols get an
 * _emu suffix after compilation (cmake/emu_rename.cmake), so both copies link together.
 *
 * Debian 12's SIMDe (0.7.4) lacks some intrinsics the kernels use; they are defined below
 * (shims), each as the instruction's documented per-lane operation. Masked loads and stores
 * touch only the selected lanes, as the hardware does (its fault suppression is what lets
 * the kernels load tails that way). The _mm512_reduce_* shims add in GCC's tree order (its
 * avx512fintrin.h), so the emulated results equal the native gcc build's. test_emu512.c checks
 * every shim (and scalef's, roundscale's and fmadd's rounding) against a scalar definition
 * (tests/emu/shim_check.c). A missing intrinsic cannot slip through: the compiler's own
 * AVX-512 intrinsic would then be called, which fails to build without -mavx512f (gcc:
 * always_inline target mismatch; clang: "needs target feature"); and the tests run these
 * objects on CPUs without AVX-512, where any EVEX instruction would fault.
 */
#ifndef CPULM_TESTS_EMU_SIMDE_AVX512_H
#define CPULM_TESTS_EMU_SIMDE_AVX512_H

#if defined(__AVX512F__)
#error "the emulated avx512 build must be compiled without -mavx512f"
#endif

#define SIMDE_ENABLE_NATIVE_ALIASES
/* SIMDe's functions out of line: inlined, avx512vnni.c's fully unrolled K-quant tiles take
 * minutes and gigabytes to compile (43 s at -O1 out of line) */
#define SIMDE_NO_INLINE
/* clang: shift counts the kernels make constant by unrolling are not constant to the front
 * end; SIMDe's emulation takes any count */
#define SIMDE_NO_CHECK_IMMEDIATE_CONSTANT
#include <simde/x86/avx512.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* x86.h and the kernels test these to see the AVX-512 helpers; SIMDe has read the real
 * (absent) feature macros above already, so it keeps its emulation. */
#define __AVX512F__    1
#define __AVX512BW__   1
#define __AVX512DQ__   1
#define __AVX512VL__   1
#define __AVX512VNNI__ 1
#define __AVX512BF16__ 1

#define EMU_INLINE static inline __attribute__((always_inline, unused))

/* SIMDe 0.7.4 aliases _mm512_madd_epi16 with four arguments (its mask form's). */
#undef _mm512_madd_epi16
#define _mm512_madd_epi16(a, b) simde_mm512_madd_epi16(a, b)
#undef _mm512_shuffle_f32x4 /* a macro in clang's headers, missing from SIMDe's aliases */
#define _mm512_shuffle_f32x4(a, b, imm) simde_mm512_shuffle_f32x4(a, b, imm)

/* ---- lanes in and out: a vector as its two 256-bit halves ---- */

typedef union {
    __m512 v;
    __m256 h[2];
    float f[16];
} emu_ps;
typedef union {
    __m512d v;
    __m256d h[2];
    double f[8];
} emu_pd;
typedef union {
    __m512i v;
    __m256i h[2];
    __m128i q[4];
    int32_t i32[16];
    uint16_t u16[32];
} emu_si;

/* ---- conversions ---- */

EMU_INLINE __m512 emu_mm512_cvtepi32_ps(__m512i a) {
    emu_si x = {.v = a};
    emu_ps r;
    r.h[0] = _mm256_cvtepi32_ps(x.h[0]);
    r.h[1] = _mm256_cvtepi32_ps(x.h[1]);
    return r.v;
}

EMU_INLINE __m512i emu_mm512_cvtepu16_epi32(__m256i a) {
    emu_si r;
    r.h[0] = _mm256_cvtepu16_epi32(_mm256_castsi256_si128(a));
    r.h[1] = _mm256_cvtepu16_epi32(_mm256_extracti128_si256(a, 1));
    return r.v;
}

EMU_INLINE __m512i emu_mm512_cvtepi8_epi32(__m128i a) {
    emu_si r;
    r.h[0] = _mm256_cvtepi8_epi32(a);
    r.h[1] = _mm256_cvtepi8_epi32(_mm_srli_si128(a, 8));
    return r.v;
}

EMU_INLINE __m512d emu_mm512_cvtps_pd(__m256 a) {
    emu_pd r;
    r.h[0] = _mm256_cvtps_pd(_mm256_castps256_ps128(a));
    r.h[1] = _mm256_cvtps_pd(_mm256_extractf128_ps(a, 1));
    return r.v;
}

/* current rounding mode (round to nearest even), as vcvtpd2ps without {er} */
EMU_INLINE __m256 emu_mm512_cvtpd_ps(__m512d a) {
    emu_pd x = {.v = a};
    return _mm256_set_m128(_mm256_cvtpd_ps(x.h[1]), _mm256_cvtpd_ps(x.h[0]));
}

EMU_INLINE __m512 emu_mm512_cvtph_ps(__m256i a) {
    emu_ps r;
    r.h[0] = _mm256_cvtph_ps(_mm256_castsi256_si128(a));
    r.h[1] = _mm256_cvtph_ps(_mm256_extracti128_si256(a, 1));
    return r.v;
}

/* ---- AVX512-BF16 (the avx512bf16 level). SIMDe 0.7.4 has no vcvtne2ps2bf16, and its
 * vdpbf16ps adds a lane's two products before rounding; the instruction rounds after each
 * (the high element's first) and flushes subnormals (Intel SDM; checked on Zen 5). bf16
 * vectors are integer vectors here: the level's file casts through its BF16_* macros. */

/* a float of exponent field 0 as a zero of its sign (DAZ, FTZ) */
EMU_INLINE float emu_flush(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) == 0) u &= 0x80000000u;
    memcpy(&x, &u, 4);
    return x;
}

EMU_INLINE uint16_t emu_bf16(float f) { /* nearest even, DAZ (finite f) */
    uint32_t u;
    f = emu_flush(f);
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

EMU_INLINE float emu_bf16_f32(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return emu_flush(f);
}

/* 32 bf16: lo's 16 in the low half, hi's in the high one */
EMU_INLINE __m512i emu_mm512_cvtne2ps_pbh(__m512 hi, __m512 lo) {
    emu_ps h = {.v = hi}, l = {.v = lo};
    emu_si r;
    for (int i = 0; i < 16; i++) {
        r.u16[i] = emu_bf16(l.f[i]);
        r.u16[16 + i] = emu_bf16(h.f[i]);
    }
    return r.v;
}

EMU_INLINE __m512 emu_mm512_dpbf16_ps(__m512 acc, __m512i a, __m512i b) {
    emu_ps r = {.v = acc};
    emu_si x = {.v = a}, y = {.v = b};
    for (int i = 0; i < 16; i++) {
        float t = emu_flush(r.f[i]);
        t = emu_flush(fmaf(emu_bf16_f32(x.u16[2 * i + 1]), emu_bf16_f32(y.u16[2 * i + 1]), t));
        r.f[i] = emu_flush(fmaf(emu_bf16_f32(x.u16[2 * i]), emu_bf16_f32(y.u16[2 * i]), t));
    }
    return r.v;
}

/* the rounding argument must be a constant (an immediate of vcvtps2ph): a macro */
#define emu_mm512_cvtps_ph(a, rounding)                         \
    __extension__({                                             \
        emu_ps x_ = {.v = (a)};                                 \
        _mm256_set_m128i(_mm256_cvtps_ph(x_.h[1], (rounding)),  \
                         _mm256_cvtps_ph(x_.h[0], (rounding))); \
    })

EMU_INLINE float emu_mm512_cvtss_f32(__m512 a) {
    emu_ps x = {.v = a};
    return x.f[0];
}

EMU_INLINE __m512i emu_mm512_srai_epi32_(__m512i a, unsigned c) {
    emu_si x = {.v = a}, r;
    const int s = c > 31 ? 31 : (int)c;
    for (int l = 0; l < 16; l++)
        r.i32[l] = x.i32[l] >> s; /* arithmetic on int32 (gcc, clang) */
    return r.v;
}

/* vscalefps: a * 2^floor(b) rounded ONCE (subnormal results included). SIMDe 0.7.4 computes
 * a * exp2(floor(b)), which rounds twice where 2^floor(b) is not a normal float, and flushes
 * subnormal a: x86_vexp_ps512's underflow range then differs from ldexpf. */
EMU_INLINE float emu_scalef1(float a, float b) {
    if (isnan(a) || isnan(b)) return a + b;
    if (isinf(b)) return b > 0 ? (a == 0.0f ? NAN : a * b) : (isinf(a) ? NAN : a * 0.0f);
    const float e = floorf(b);
    return ldexpf(a, e > 400.0f ? 400 : e < -400.0f ? -400 : (int)e);
}

EMU_INLINE __m512 emu_mm512_scalef_ps(__m512 a, __m512 b) {
    emu_ps x = {.v = a}, y = {.v = b}, r;
    for (int l = 0; l < 16; l++)
        r.f[l] = emu_scalef1(x.f[l], y.f[l]);
    return r.v;
}

/* ---- masked loads and stores: only the selected lanes are touched ---- */

EMU_INLINE __m512 emu_mm512_mask_loadu_ps(__m512 src, __mmask16 k, const void *p) {
    emu_ps r = {.v = src};
    for (int l = 0; l < 16; l++)
        if (k >> l & 1) memcpy(&r.f[l], (const float *)p + l, sizeof(float));
    return r.v;
}

EMU_INLINE __m512 emu_mm512_maskz_loadu_ps(__mmask16 k, const void *p) {
    return emu_mm512_mask_loadu_ps(_mm512_setzero_ps(), k, p);
}

EMU_INLINE __m512d emu_mm512_maskz_loadu_pd(__mmask8 k, const void *p) {
    emu_pd r = {.v = _mm512_setzero_pd()};
    for (int l = 0; l < 8; l++)
        if (k >> l & 1) memcpy(&r.f[l], (const double *)p + l, sizeof(double));
    return r.v;
}

EMU_INLINE void emu_mm512_mask_storeu_ps(void *p, __mmask16 k, __m512 a) {
    emu_ps x = {.v = a};
    for (int l = 0; l < 16; l++)
        if (k >> l & 1) memcpy((float *)p + l, &x.f[l], sizeof(float));
}

EMU_INLINE void emu_mm_mask_storeu_ps(void *p, __mmask8 k, __m128 a) {
    float x[4];
    _mm_storeu_ps(x, a);
    for (int l = 0; l < 4; l++)
        if (k >> l & 1) memcpy((float *)p + l, &x[l], sizeof(float));
}

EMU_INLINE __m256i emu_mm256_maskz_loadu_epi16(__mmask16 k, const void *p) {
    uint16_t v[16] = {0};
    for (int l = 0; l < 16; l++)
        if (k >> l & 1) memcpy(&v[l], (const uint16_t *)p + l, sizeof(uint16_t));
    return _mm256_loadu_si256((const __m256i *)v);
}

EMU_INLINE void emu_mm256_mask_storeu_epi16(void *p, __mmask16 k, __m256i a) {
    uint16_t v[16];
    _mm256_storeu_si256((__m256i *)v, a);
    for (int l = 0; l < 16; l++)
        if (k >> l & 1) memcpy((uint16_t *)p + l, &v[l], sizeof(uint16_t));
}

/* ---- reductions, in GCC's order (avx512fintrin.h __MM512_REDUCE_OP) ---- */

EMU_INLINE float emu_mm512_reduce_add_ps(__m512 a) {
    emu_ps x = {.v = a};
    const __m256 t3 = _mm256_add_ps(x.h[1], x.h[0]);
    const __m128 t6 = _mm_add_ps(_mm256_extractf128_ps(t3, 1), _mm256_castps256_ps128(t3));
    const __m128 t8 = _mm_add_ps(t6, _mm_shuffle_ps(t6, t6, _MM_SHUFFLE(1, 0, 3, 2)));
    float l[4];
    _mm_storeu_ps(l, t8);
    return l[0] + l[1];
}

EMU_INLINE double emu_mm512_reduce_add_pd(__m512d a) {
    emu_pd x = {.v = a};
    const __m256d t3 = _mm256_add_pd(x.h[1], x.h[0]);
    const __m128d t6 = _mm_add_pd(_mm256_extractf128_pd(t3, 1), _mm256_castpd256_pd128(t3));
    double l[2];
    _mm_storeu_pd(l, t6);
    return l[0] + l[1];
}

/* vmaxps returns its second operand on NaN or equal zeros: the operand order is kept */
EMU_INLINE float emu_mm512_reduce_max_ps(__m512 a) {
    emu_ps x = {.v = a};
    const __m256 t3 = _mm256_max_ps(x.h[1], x.h[0]);
    const __m128 t6 = _mm_max_ps(_mm256_extractf128_ps(t3, 1), _mm256_castps256_ps128(t3));
    const __m128 t8 = _mm_max_ps(t6, _mm_shuffle_ps(t6, t6, _MM_SHUFFLE(1, 0, 3, 2)));
    const __m128 t10 = _mm_max_ps(t8, _mm_shuffle_ps(t8, t8, _MM_SHUFFLE(0, 1, 0, 1)));
    return _mm_cvtss_f32(t10);
}

/* The kernels' names for the shims (their native declarations are never reached; at -O0 the
 * compiler's headers define some of them as macros, hence the #undefs). */
#undef _mm512_cvtepi32_ps
#define _mm512_cvtepi32_ps emu_mm512_cvtepi32_ps
#undef _mm512_cvtepi8_epi32
#define _mm512_cvtepi8_epi32 emu_mm512_cvtepi8_epi32
#undef _mm512_cvtepu16_epi32
#define _mm512_cvtepu16_epi32 emu_mm512_cvtepu16_epi32
#undef _mm512_cvtps_pd
#define _mm512_cvtps_pd emu_mm512_cvtps_pd
#undef _mm512_cvtpd_ps
#define _mm512_cvtpd_ps emu_mm512_cvtpd_ps
#undef _mm512_cvtph_ps
#define _mm512_cvtph_ps emu_mm512_cvtph_ps
#undef _mm512_cvtps_ph
#define _mm512_cvtps_ph emu_mm512_cvtps_ph
#undef _mm512_cvtss_f32
#define _mm512_cvtss_f32 emu_mm512_cvtss_f32
#undef _mm512_srai_epi32
#define _mm512_srai_epi32 emu_mm512_srai_epi32_
#undef _mm512_mask_loadu_ps
#define _mm512_mask_loadu_ps emu_mm512_mask_loadu_ps
#undef _mm512_maskz_loadu_ps
#define _mm512_maskz_loadu_ps emu_mm512_maskz_loadu_ps
#undef _mm512_maskz_loadu_pd
#define _mm512_maskz_loadu_pd emu_mm512_maskz_loadu_pd
#undef _mm512_mask_storeu_ps
#define _mm512_mask_storeu_ps emu_mm512_mask_storeu_ps
#undef _mm_mask_storeu_ps
#define _mm_mask_storeu_ps emu_mm_mask_storeu_ps
#undef _mm256_maskz_loadu_epi16
#define _mm256_maskz_loadu_epi16 emu_mm256_maskz_loadu_epi16
#undef _mm256_mask_storeu_epi16
#define _mm256_mask_storeu_epi16 emu_mm256_mask_storeu_epi16
#undef _mm512_reduce_add_ps
#define _mm512_reduce_add_ps emu_mm512_reduce_add_ps
#undef _mm512_reduce_add_pd
#define _mm512_reduce_add_pd emu_mm512_reduce_add_pd
#undef _mm512_reduce_max_ps
#define _mm512_reduce_max_ps emu_mm512_reduce_max_ps
#undef _mm512_scalef_ps
#define _mm512_scalef_ps emu_mm512_scalef_ps
#undef _mm512_cvtne2ps_pbh
#define _mm512_cvtne2ps_pbh emu_mm512_cvtne2ps_pbh
#undef _mm512_dpbf16_ps
#define _mm512_dpbf16_ps emu_mm512_dpbf16_ps

#endif
