/* avx2.c: the avx2 kernel level (Haswell / Zen 1 and later), built with -mavx2 -mfma
 * -mf16c. Reached only through cpulm_kernels_avx2 after dispatch.c verified AVX2, FMA, F16C
 * and OS support of YMM state. Entries left NULL inherit the generic ones.
 *
 * The int8 dots use maddubs (u8 x s8 -> s16 pairs) with the sign trick, then madd to int32:
 * the per-block integer sums are exact, so results differ from generic only in the order
 * floats are accumulated. Two independent accumulators per loop hide FMA latency; the
 * quantized dots are memory-bound at decode time, so no more unrolling than that.
 */
#if defined(__x86_64__)
#include <string.h>

#include "kernels/kernels.h"
#include "x86.h"

/* ---- quantized dots ---- */

static void vec_dot_q8_0_q8_0(int64_t n, float *s, const void *vx, const void *vy) {
    const cpulm_block_q8_0 *x = vx, *y = vy;
    const int64_t nb = n / 32;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 1 < nb; i += 2) {
        const __m256i p0 = x86_dot_i8_pairs(_mm256_loadu_si256((const __m256i *)x[i].qs),
                                            _mm256_loadu_si256((const __m256i *)y[i].qs));
        const __m256i p1 = x86_dot_i8_pairs(_mm256_loadu_si256((const __m256i *)x[i + 1].qs),
                                            _mm256_loadu_si256((const __m256i *)y[i + 1].qs));
        const float d0 = x86_fp16(x[i].d) * x86_fp16(y[i].d);
        const float d1 = x86_fp16(x[i + 1].d) * x86_fp16(y[i + 1].d);
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(d0), _mm256_cvtepi32_ps(p0), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(d1), _mm256_cvtepi32_ps(p1), acc1);
    }
    for (; i < nb; i++) {
        const __m256i p = x86_dot_i8_pairs(_mm256_loadu_si256((const __m256i *)x[i].qs),
                                           _mm256_loadu_si256((const __m256i *)y[i].qs));
        const float d = x86_fp16(x[i].d) * x86_fp16(y[i].d);
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(p), acc0);
    }
    *s = x86_hsum_ps256(_mm256_add_ps(acc0, acc1));
}

static void vec_dot_q4_0_q8_0(int64_t n, float *s, const void *vx, const void *vy) {
    const cpulm_block_q4_0 *x = vx;
    const cpulm_block_q8_0 *y = vy;
    const int64_t nb = n / 32;
    const __m256i eight = _mm256_set1_epi8(8);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 1 < nb; i += 2) {
        const __m256i q0 = _mm256_sub_epi8(x86_nibbles_32(x[i].qs), eight);
        const __m256i q1 = _mm256_sub_epi8(x86_nibbles_32(x[i + 1].qs), eight);
        const __m256i p0 = x86_dot_i8_pairs(q0, _mm256_loadu_si256((const __m256i *)y[i].qs));
        const __m256i p1 =
            x86_dot_i8_pairs(q1, _mm256_loadu_si256((const __m256i *)y[i + 1].qs));
        const float d0 = x86_fp16(x[i].d) * x86_fp16(y[i].d);
        const float d1 = x86_fp16(x[i + 1].d) * x86_fp16(y[i + 1].d);
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(d0), _mm256_cvtepi32_ps(p0), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(d1), _mm256_cvtepi32_ps(p1), acc1);
    }
    for (; i < nb; i++) {
        const __m256i q = _mm256_sub_epi8(x86_nibbles_32(x[i].qs), eight);
        const __m256i p = x86_dot_i8_pairs(q, _mm256_loadu_si256((const __m256i *)y[i].qs));
        const float d = x86_fp16(x[i].d) * x86_fp16(y[i].d);
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(p), acc0);
    }
    *s = x86_hsum_ps256(_mm256_add_ps(acc0, acc1));
}

/* ---- float dots: 32 elements per step in 4 accumulators, 8-wide then scalar tails ---- */

static inline __m256 load8_f32(const void *p, int64_t i) {
    return _mm256_loadu_ps((const float *)p + i);
}

static inline __m256 load8_f16(const void *p, int64_t i) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)p + i)));
}

/* bf16 is the top half of an f32: widen and shift into place */
static inline __m256 load8_bf16(const void *p, int64_t i) {
    const __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)p + i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

static inline float load1_f32(const void *p, int64_t i) {
    return ((const float *)p)[i];
}

static inline float load1_f16(const void *p, int64_t i) {
    return x86_fp16(((const uint16_t *)p)[i]);
}

static inline float load1_bf16(const void *p, int64_t i) {
    uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

#define FLOAT_DOT(name, load8, load1)                                                              \
    static float name(int64_t n, const void *x, const void *y) {                                   \
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;                                \
        int64_t i = 0;                                                                             \
        for (; i + 32 <= n; i += 32) {                                                             \
            a0 = _mm256_fmadd_ps(load8(x, i), load8(y, i), a0);                                    \
            a1 = _mm256_fmadd_ps(load8(x, i + 8), load8(y, i + 8), a1);                            \
            a2 = _mm256_fmadd_ps(load8(x, i + 16), load8(y, i + 16), a2);                          \
            a3 = _mm256_fmadd_ps(load8(x, i + 24), load8(y, i + 24), a3);                          \
        }                                                                                          \
        for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(load8(x, i), load8(y, i), a0);             \
        float sum = x86_hsum_ps256(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));   \
        for (; i < n; i++) sum += load1(x, i) * load1(y, i);                                       \
        return sum;                                                                                \
    }

FLOAT_DOT(dot_f32_impl, load8_f32, load1_f32)
FLOAT_DOT(dot_f16_impl, load8_f16, load1_f16)
FLOAT_DOT(dot_bf16_impl, load8_bf16, load1_bf16)

static void vec_dot_f32(int64_t n, float *s, const void *x, const void *y) {
    *s = dot_f32_impl(n, x, y);
}

static void vec_dot_f16(int64_t n, float *s, const void *x, const void *y) {
    *s = dot_f16_impl(n, x, y);
}

static void vec_dot_bf16(int64_t n, float *s, const void *x, const void *y) {
    *s = dot_bf16_impl(n, x, y);
}

static float dot_f32(int64_t n, const float *x, const float *y) {
    return dot_f32_impl(n, x, y);
}

/* ---- conversions ---- */

/* Bit-identical to the reference: same amax, same d = amax / 127, same x * id, and roundf
 * reproduced exactly (see x86_round_away_ps256); fp16 conversion rounds to nearest even. */
static void from_float_q8_0(const float *x, void *vy, int64_t n) {
    cpulm_block_q8_0 *y = vy;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        __m256 v[4], amax = _mm256_setzero_ps();
        for (int k = 0; k < 4; k++) {
            v[k] = _mm256_loadu_ps(x + 8 * k);
            amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[k]));
        }
        const float d = x86_hmax_ps256(amax) / 127.0f;
        const __m256 id = _mm256_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
        y[i].d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
        __m256i q[4];
        for (int k = 0; k < 4; k++)
            q[k] = _mm256_cvtps_epi32(x86_round_away_ps256(_mm256_mul_ps(v[k], id)));
        /* packs work per 128-bit lane; the permute restores element order */
        const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]),
                                             _mm256_packs_epi32(q[2], q[3]));
        _mm256_storeu_si256((__m256i *)y[i].qs, _mm256_permutevar8x32_epi32(p, order));
    }
}

static void from_float_f16(const float *x, void *vy, int64_t n) {
    uint16_t *y = vy;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(y + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) y[i] = _cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT);
}

static void to_float_f16(const void *vx, float *y, int64_t n) {
    const uint16_t *x = vx;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, load8_f16(x, i));
    for (; i < n; i++) y[i] = x86_fp16(x[i]);
}

/* ---- f32 vector ops ---- */

static void rms_norm(int64_t n, float *y, const float *x, const float *w, float eps) {
    const float mean = dot_f32_impl(n, x, x) / (float)n;
    const float scale = 1.0f / sqrtf(mean + eps);
    const __m256 vs = _mm256_set1_ps(scale);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), vs);
        _mm256_storeu_ps(y + i, _mm256_mul_ps(v, _mm256_loadu_ps(w + i)));
    }
    for (; i < n; i++) y[i] = (x[i] * scale) * w[i];
}

static void swiglu(int64_t n, float *y, const float *g, const float *u) {
    const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 vg = _mm256_loadu_ps(g + i);
        const __m256 e = x86_exp_ps256(_mm256_xor_ps(vg, sign));
        const __m256 silu = _mm256_div_ps(vg, _mm256_add_ps(one, e));
        _mm256_storeu_ps(y + i, _mm256_mul_ps(silu, _mm256_loadu_ps(u + i)));
    }
    for (; i < n; i++) y[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

static void softmax(int64_t n, float *x) {
    __m256 vmax = _mm256_set1_ps(-INFINITY);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(x + i));
    float max = x86_hmax_ps256(vmax);
    for (; i < n; i++) max = fmaxf(max, x[i]);
    const __m256 vm = _mm256_set1_ps(max);
    __m256 vsum = _mm256_setzero_ps();
    for (i = 0; i + 8 <= n; i += 8) {
        const __m256 e = x86_exp_ps256(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
        _mm256_storeu_ps(x + i, e);
        vsum = _mm256_add_ps(vsum, e);
    }
    float sum = x86_hsum_ps256(vsum);
    for (; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += x[i];
    }
    const __m256 inv = _mm256_set1_ps(1.0f / sum);
    for (i = 0; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), inv));
    for (; i < n; i++) x[i] *= 1.0f / sum;
}

static void axpy(int64_t n, float *y, float a, const float *x) {
    const __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * x[i];
}

const cpulm_kernels cpulm_kernels_avx2 = {
    .name = "avx2",
    .vec_dot =
        {
            [CPULM_DTYPE_F32] = vec_dot_f32,
            [CPULM_DTYPE_F16] = vec_dot_f16,
            [CPULM_DTYPE_BF16] = vec_dot_bf16,
            [CPULM_DTYPE_Q8_0] = vec_dot_q8_0_q8_0,
            [CPULM_DTYPE_Q4_0] = vec_dot_q4_0_q8_0,
        },
    .from_float = {[CPULM_DTYPE_Q8_0] = from_float_q8_0, [CPULM_DTYPE_F16] = from_float_f16},
    .to_float = {[CPULM_DTYPE_F16] = to_float_f16},
    .rms_norm = rms_norm,
    .swiglu = swiglu,
    .softmax = softmax,
    .axpy = axpy,
    .dot_f32 = dot_f32,
};
#endif
