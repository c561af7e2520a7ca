/* avx512.c: the avx512 kernel level (AVX-512 F/BW/VL/DQ: Skylake-SP and later, Zen 4),
 * built with the avx2 flags plus -mavx512f -mavx512bw -mavx512vl -mavx512dq. Reached only
 * through cpulm_kernels_avx512 after dispatch.c verified the features and OS ZMM state.
 * Extends avx2: entries left NULL inherit the avx2 (or generic) ones.
 *
 * Quantized dots take two 32-element blocks per 512-bit register (block i in lanes 0..7
 * of the int32 sums, block i+1 in 8..15) with a matching two-scale vector. Float loops
 * use masked loads for tails, so there is no scalar remainder.
 */
#if defined(__x86_64__)
#include <string.h>

#include "kernels/blocks.h"
#include "x86_dnet.h"
#include "kernels/generic/generic.h"
#include "kernels/kernels.h"
#include "kernels/rows.h"
#include "x86.h"

/* ---- quantized dots ---- */

/* sum of x*y per group of 4 int8, sign trick as in x86_dot_i8_pairs, 64 bytes at once */
static inline __m512i dot_i8_pairs_512(__m512i x, __m512i y) {
    const __m512i ax = _mm512_abs_epi8(x);
    const __m512i sy = _mm512_mask_sub_epi8(y, _mm512_movepi8_mask(x), _mm512_setzero_si512(), y);
    return _mm512_madd_epi16(_mm512_maddubs_epi16(ax, sy), _mm512_set1_epi16(1));
}

static inline __m512i load_q8_pair(const cpulm_block_q8_0 *b) {
    return x86_join_si512(_mm256_loadu_si256((const __m256i *)b[0].qs),
                          _mm256_loadu_si256((const __m256i *)b[1].qs));
}

static inline __m512i load_q4_pair(const cpulm_block_q4_0 *b) {
    const __m512i q = x86_join_si512(x86_nibbles_32(b[0].qs), x86_nibbles_32(b[1].qs));
    return _mm512_sub_epi8(q, _mm512_set1_epi8(8));
}

static void vec_dot_q8_0_q8_0(int64_t n, float *s, const void *vx, const void *vy) {
    const cpulm_block_q8_0 *x = vx, *y = vy;
    const int64_t nb = n / 32;
    __m512 acc = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 1 < nb; i += 2) {
        const __m512i p = dot_i8_pairs_512(load_q8_pair(x + i), load_q8_pair(y + i));
        const __m512 d = x86_two_scales(x86_fp16(x[i].d) * x86_fp16(y[i].d),
                                        x86_fp16(x[i + 1].d) * x86_fp16(y[i + 1].d));
        acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(p), acc);
    }
    float sum = _mm512_reduce_add_ps(acc);
    if (i < nb) { /* odd block count: last block 256-bit */
        const __m256i p = x86_dot_i8_pairs(_mm256_loadu_si256((const __m256i *)x[i].qs),
                                           _mm256_loadu_si256((const __m256i *)y[i].qs));
        sum += x86_fp16(x[i].d) * x86_fp16(y[i].d) * x86_hsum_ps256(_mm256_cvtepi32_ps(p));
    }
    *s = sum;
}

static void vec_dot_q4_0_q8_0(int64_t n, float *s, const void *vx, const void *vy) {
    const cpulm_block_q4_0 *x = vx;
    const cpulm_block_q8_0 *y = vy;
    const int64_t nb = n / 32;
    __m512 acc = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 1 < nb; i += 2) {
        const __m512i p = dot_i8_pairs_512(load_q4_pair(x + i), load_q8_pair(y + i));
        const __m512 d = x86_two_scales(x86_fp16(x[i].d) * x86_fp16(y[i].d),
                                        x86_fp16(x[i + 1].d) * x86_fp16(y[i + 1].d));
        acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(p), acc);
    }
    float sum = _mm512_reduce_add_ps(acc);
    if (i < nb) {
        const __m256i q = _mm256_sub_epi8(x86_nibbles_32(x[i].qs), _mm256_set1_epi8(8));
        const __m256i p = x86_dot_i8_pairs(q, _mm256_loadu_si256((const __m256i *)y[i].qs));
        sum += x86_fp16(x[i].d) * x86_fp16(y[i].d) * x86_hsum_ps256(_mm256_cvtepi32_ps(p));
    }
    *s = sum;
}

/* ---- float dots: 64 elements per step in 4 accumulators, masked tail ---- */

static inline __mmask16 tail_mask(int64_t rem) {
    return (__mmask16)((1u << rem) - 1);
}

static inline __m512 load16_f32(const void *p, int64_t i, __mmask16 m) {
    return _mm512_maskz_loadu_ps(m, (const float *)p + i);
}

static inline __m512 load16_bf16(const void *p, int64_t i, __mmask16 m) {
    const __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)p + i);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

#define FLOAT_DOT(name, load16)                                                                   \
    static float name(int64_t n, const void *x, const void *y) {                                  \
        const __mmask16 all = 0xFFFF;                                                             \
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;                               \
        int64_t i = 0;                                                                            \
        for (; i + 64 <= n; i += 64) {                                                            \
            a0 = _mm512_fmadd_ps(load16(x, i, all), load16(y, i, all), a0);                       \
            a1 = _mm512_fmadd_ps(load16(x, i + 16, all), load16(y, i + 16, all), a1);             \
            a2 = _mm512_fmadd_ps(load16(x, i + 32, all), load16(y, i + 32, all), a2);             \
            a3 = _mm512_fmadd_ps(load16(x, i + 48, all), load16(y, i + 48, all), a3);             \
        }                                                                                         \
        for (; i + 16 <= n; i += 16)                                                              \
            a0 = _mm512_fmadd_ps(load16(x, i, all), load16(y, i, all), a0);                       \
        if (i < n) {                                                                              \
            const __mmask16 m = tail_mask(n - i);                                                 \
            a1 = _mm512_fmadd_ps(load16(x, i, m), load16(y, i, m), a1);                           \
        }                                                                                         \
        return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3))); \
    }

FLOAT_DOT(dot_f32_impl, load16_f32)
FLOAT_DOT(dot_bf16_impl, load16_bf16)

static void vec_dot_bf16(int64_t n, float *s, const void *x, const void *y) {
    *s = dot_bf16_impl(n, x, y);
}

/* ---- multi-row BF16 dots (gemm_rows): vec_dot_bf16's bits per pair ----
 * Each (row, token) pair keeps dot_bf16_impl's four accumulators (element i of a 64-step in
 * accumulator i / 16, whole 16-blocks after the steps in the first, the masked tail in the
 * second) and its final sum; R weight rows x T tokens side by side, so each converted weight
 * vector feeds T fmas and each activation vector R, where vec_dot loaded and converted both
 * per pair (a BF16 prompt ran at 0.3x llama.cpp's, 85% of it in vec_dot_bf16). */
#define BR 2 /* weight rows per block: R x T x 4 accumulators + R + T vectors <= 32 */
#define BT 3 /* tokens per block */
/* Named accumulators (an array is kept in memory by the compiler); the ones past R or T are
 * dead code for the constant shapes. */
#define BR_STEP4(k)                                               \
    if (R > 0 && T > 0) a00##k = _mm512_fmadd_ps(w0, x0, a00##k); \
    if (R > 0 && T > 1) a01##k = _mm512_fmadd_ps(w0, x1, a01##k); \
    if (R > 0 && T > 2) a02##k = _mm512_fmadd_ps(w0, x2, a02##k); \
    if (R > 1 && T > 0) a10##k = _mm512_fmadd_ps(w1, x0, a10##k); \
    if (R > 1 && T > 1) a11##k = _mm512_fmadd_ps(w1, x1, a11##k); \
    if (R > 1 && T > 2) a12##k = _mm512_fmadd_ps(w1, x2, a12##k)
#define BR_LOAD(i, m)                                        \
    const __m512 w0 = load16_bf16(w, i, m);                  \
    const __m512 w1 = R > 1 ? load16_bf16(w + ws, i, m) : z; \
    const __m512 x0 = load16_bf16(a, i, m);                  \
    const __m512 x1 = T > 1 ? load16_bf16(a + as, i, m) : z; \
    const __m512 x2 = T > 2 ? load16_bf16(a + 2 * as, i, m) : z
#define BR_SUM(r, t)                                                                          \
    if (R > r && T > t)                                                                       \
    s[t * ld + r] = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a##r##t##0, a##r##t##1), \
                                                       _mm512_add_ps(a##r##t##2, a##r##t##3)))
static inline __attribute__((always_inline)) void brows_block(int64_t n, const uint8_t *w,
                                                              uint64_t ws, const uint8_t *a,
                                                              uint64_t as, float *s, int64_t ld,
                                                              const int R, const int T) {
    const __mmask16 all = 0xFFFF;
    const __m512 z = _mm512_setzero_ps();
    __m512 a000 = z, a001 = z, a002 = z, a003 = z, a010 = z, a011 = z, a012 = z, a013 = z, a020 = z,
           a021 = z, a022 = z, a023 = z, a100 = z, a101 = z, a102 = z, a103 = z, a110 = z, a111 = z,
           a112 = z, a113 = z, a120 = z, a121 = z, a122 = z, a123 = z;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        {
            BR_LOAD(i, all);
            BR_STEP4(0);
        }
        {
            BR_LOAD(i + 16, all);
            BR_STEP4(1);
        }
        {
            BR_LOAD(i + 32, all);
            BR_STEP4(2);
        }
        {
            BR_LOAD(i + 48, all);
            BR_STEP4(3);
        }
    }
    for (; i + 16 <= n; i += 16) {
        BR_LOAD(i, all);
        BR_STEP4(0);
    }
    if (i < n) {
        const __mmask16 m = tail_mask(n - i);
        BR_LOAD(i, m);
        BR_STEP4(1);
    }
    BR_SUM(0, 0);
    BR_SUM(0, 1);
    BR_SUM(0, 2);
    BR_SUM(1, 0);
    BR_SUM(1, 1);
    BR_SUM(1, 2);
}
#undef BR_STEP4
#undef BR_LOAD
#undef BR_SUM

#define BROWS_BLOCK(R, T, n, s, ld, w, ws, a, as) brows_block(n, w, ws, a, as, s, ld, R, T)
CPULM_ROWS_SHAPES3(CPULM_ROWS_SHAPE, brows, BROWS_BLOCK, 2)

static void gemm_rows_bf16(int64_t n, int nr, int nt, float *s, int64_t ld, const void *w,
                           uint64_t ws, const uint8_t *a, uint64_t as) {
    static const cpulm_rows_block_fn block[BT] = {brows_2x1, brows_2x2, brows_2x3},
                                     one[BT] = {brows_1x1, brows_1x2, brows_1x3};
    if (nt == 1)
        cpulm_rows_by_dot(vec_dot_bf16, n, nr, s, w, ws, a);
    else
        cpulm_rows_drive(block, one, BR, BT, n, nr, nt, s, ld, w, ws, a, as);
}
#undef BR
#undef BT

static float dot_f32(int64_t n, const float *x, const float *y) {
    return dot_f32_impl(n, x, y);
}

/* ---- f32 vector ops: whole vectors, then one masked vector for the tail ---- */

/* ---- canonical float arithmetic (bit-identical to the generic oracle; see x86.h) ---- */

static void canon_dot_f32(int64_t n, float *s, const void *vx, const void *vy) {
    const float *x = vx, *y = vy;
    if (n % 16 == 0) {
        __m512 a = _mm512_setzero_ps();
        for (int64_t i = 0; i < n; i += 16)
            a = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i), a);
        *s = x86_reduce16_512(a);
        return;
    }
    int64_t np = n & ~(int64_t)63;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t i = 0; i < np; i += 64) {
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i), a0);
        a1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(y + i + 16), a1);
        a2 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 32), _mm512_loadu_ps(y + i + 32), a2);
        a3 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 48), _mm512_loadu_ps(y + i + 48), a3);
    }
    float sum = x86_reduce16_512(_mm512_add_ps(_mm512_add_ps(a0, a2), _mm512_add_ps(a1, a3)));
    for (int64_t i = np; i < n; i++)
        sum = fmaf(x[i], y[i], sum);
    *s = sum;
}

static inline __m512 load16h(const uint16_t *p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}

/* Exact conversion, 16 halves per instruction (KV cache tiles of the tiled attention); the
 * tail masked (a head of 8 is all tail: one cache row's slice per call, element by element
 * it was ~10% of a stories260K verification). */
static void to_float_f16(const void *vx, float *y, int64_t n) {
    const uint16_t *x = vx;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, load16h(x + i));
    if (i < n) {
        const __mmask16 m = tail_mask(n - i);
        _mm512_mask_storeu_ps(y + i, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, x + i)));
    }
}

/* Exact f32 products summed in double (order-independent in practice; see generic/dot.c). */
static void canon_dot_f16(int64_t n, float *s, const void *vx, const void *vy) {
    const uint16_t *x = vx, *y = vy;
    __m512d a0 = _mm512_setzero_pd(), a1 = a0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 p = _mm512_mul_ps(load16h(x + i), load16h(y + i));
        a0 = _mm512_add_pd(a0, _mm512_cvtps_pd(_mm512_castps512_ps256(p)));
        a1 = _mm512_add_pd(
            a1, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(p), 1))));
    }
    double sum = _mm512_reduce_add_pd(_mm512_add_pd(a0, a1));
    for (; i < n; i++)
        sum += (double)(x86_fp16(x[i]) * x86_fp16(y[i]));
    *s = (float)sum;
}

static void canon_rms_norm(int64_t n, float *y, const float *x, const float *w, float eps) {
    const float scale = 1.0f / sqrtf((float)(x86_sum_squares(n, x) / (double)n) + eps);
    const __m512 vs = _mm512_set1_ps(scale);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? 0xFFFF : tail_mask(n - i);
        const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), vs);
        _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, w + i)));
    }
}

static void canon_swiglu(int64_t n, float *y, const float *g, const float *u) {
    const __m512 one = _mm512_set1_ps(1.0f);
    int64_t nv = n & ~(int64_t)15, i = 0;
    for (; i < nv; i += 16) {
        const __m512 vg = _mm512_loadu_ps(g + i);
        const __m512 e = x86_vexp_ps512(_mm512_sub_ps(_mm512_setzero_ps(), vg));
        const __m512 silu = _mm512_div_ps(vg, _mm512_add_ps(one, e));
        _mm512_storeu_ps(y + i, _mm512_mul_ps(silu, _mm512_loadu_ps(u + i)));
    }
    for (; i < n; i++)
        y[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

static void softmax(int64_t n, float *x) {
    __m512 vmax = _mm512_set1_ps(-INFINITY);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? 0xFFFF : tail_mask(n - i);
        vmax = _mm512_mask_max_ps(vmax, m, vmax, _mm512_maskz_loadu_ps(m, x + i));
    }
    const __m512 vm = _mm512_set1_ps(_mm512_reduce_max_ps(vmax));
    __m512 vsum = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? 0xFFFF : tail_mask(n - i);
        const __m512 e = x86_exp_ps512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), vm));
        _mm512_mask_storeu_ps(x + i, m, e);
        vsum = _mm512_mask_add_ps(vsum, m, vsum, e);
    }
    const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(vsum));
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? 0xFFFF : tail_mask(n - i);
        _mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), inv));
    }
}

/* kernels.h's gemm_mins: 16 rows a vector; G groups x T tokens of chains side by side (up to
 * 2 x 8: the matmul passes one group at a time on levels without x16_groups, and 8 chains
 * keep both FMA pipes busy), each loaded min vector feeding T fmas. */
#define MINS_G 2
#define MINS_T 8
static inline __attribute__((always_inline)) void mins_block(int64_t nb, const float *m,
                                                             const float *const *sj, float *o,
                                                             int64_t ld, const int G, const int T) {
    __m512 acc[MINS_G][MINS_T];
    for (int q = 0; q < G; q++)
        for (int j = 0; j < T; j++)
            acc[q][j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++)
        for (int q = 0; q < G; q++) {
            const __m512 mq = _mm512_loadu_ps(m + (q * nb + b) * 16);
            for (int j = 0; j < T; j++)
                acc[q][j] = _mm512_fmadd_ps(mq, _mm512_set1_ps(sj[j][b]), acc[q][j]);
        }
    for (int q = 0; q < G; q++)
        for (int j = 0; j < T; j++) {
            float *oj = o + j * ld + 16 * q;
            _mm512_storeu_ps(oj, _mm512_add_ps(_mm512_loadu_ps(oj), acc[q][j]));
        }
}

/* One function per shape (groups x tokens), the loops unrolled for constant sizes. */
typedef void (*mins_fn)(int64_t nb, const float *m, const float *const *sj, float *o, int64_t ld);
#define MINS_SHAPE(G, T)                                                                     \
    static void mins_##G##x##T(int64_t nb, const float *m, const float *const *sj, float *o, \
                               int64_t ld) {                                                 \
        mins_block(nb, m, sj, o, ld, G, T);                                                  \
    }
#define MINS_SHAPES(G) \
    MINS_SHAPE(G, 1)   \
    MINS_SHAPE(G, 2)   \
    MINS_SHAPE(G, 3)   \
    MINS_SHAPE(G, 4) MINS_SHAPE(G, 5) MINS_SHAPE(G, 6) MINS_SHAPE(G, 7) MINS_SHAPE(G, 8)
MINS_SHAPES(1)
MINS_SHAPES(2)
static const mins_fn mins_shapes[MINS_G][MINS_T] = {
    {mins_1x1, mins_1x2, mins_1x3, mins_1x4, mins_1x5, mins_1x6, mins_1x7, mins_1x8},
    {mins_2x1, mins_2x2, mins_2x3, mins_2x4, mins_2x5, mins_2x6, mins_2x7, mins_2x8}};

static void gemm_mins(int64_t nb, int nt, int ng, const float *m, const uint8_t *s, uint64_t ss,
                      float *out, int64_t ld) {
    for (int j0 = 0; j0 < nt; j0 += MINS_T) {
        const int tq = nt - j0 < MINS_T ? nt - j0 : MINS_T;
        const float *sj[MINS_T];
        for (int j = 0; j < tq; j++)
            sj[j] = (const float *)(s + (size_t)(j0 + j) * ss);
        for (int q0 = 0; q0 < ng; q0 += MINS_G) {
            const int gq = ng - q0 < MINS_G ? ng - q0 : MINS_G;
            mins_shapes[gq - 1][tq - 1](nb, m + (size_t)q0 * (size_t)nb * 16, sj,
                                        out + j0 * ld + 16 * q0, ld);
        }
    }
}

static void axpy(int64_t n, float *y, float a, const float *x) {
    const __m512 va = _mm512_set1_ps(a);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? 0xFFFF : tail_mask(n - i);
        const __m512 r =
            _mm512_fmadd_ps(va, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i));
        _mm512_mask_storeu_ps(y + i, m, r);
    }
}

/* ---- multi-row F16 dots (gemm_rows): R weight rows x T activation rows ----
 * Each 16-element step converts the R weight pieces to double once and fuses R x T products
 * into one 8-lane double accumulator per pair (the generic dot's exact products summed in
 * double; see kernels.h). The activation rows are converted to double once per call, a
 * chunk of columns at a time, not once per 4 weight rows: F16 decoding is bound by the
 * conversions on the two vector ports (a conversion costs ~3 times an FMA), so an
 * activation row converted per block cost a verified token 0.4 of a 1-token pass
 * (2026-12-03). A masked step takes the tail. */

/* 16 halves as two vectors of 8 doubles (exact) */
static inline __attribute__((always_inline)) void rows_cvt16(__m512d d[2], const uint16_t *p,
                                                             __mmask16 m) {
    const __m512 f = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
    d[0] = _mm512_cvtps_pd(_mm512_castps512_ps256(f));
    d[1] = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(f), 1)));
}

#define ROWS_R     4   /* weight rows per register block (R x T <= 16 accumulators) */
#define ROWS_T     4   /* activation rows per register block */
#define ROWS_GROUP 16  /* weight rows whose accumulators live across the column chunks */
#define ROWS_CHUNK 512 /* columns per chunk: 4 activation rows in double = 16 KB, in L1 */

/* Named accumulators (an array of 16 vectors is kept in memory by the compiler); the
 * entries past R or T are dead code for the constant shapes. Between chunks they rest in
 * acc[r * ROWS_T + t]: the same adds in the same order as one pass over the row. */
#define ROWS_FMA(r, t)  \
    if (R > r && T > t) \
    a##r##t = _mm512_fmadd_pd(w[1], x##t[1], _mm512_fmadd_pd(w[0], x##t[0], a##r##t))
#define ROWS_ROW(r)                                            \
    if (R > r) {                                               \
        __m512d w[2];                                          \
        rows_cvt16(w, (const uint16_t *)(wp + r * ws) + i, m); \
        ROWS_FMA(r, 0);                                        \
        ROWS_FMA(r, 1);                                        \
        ROWS_FMA(r, 2);                                        \
        ROWS_FMA(r, 3);                                        \
    }
#define ROWS_X(t)                                                   \
    if (T > t) {                                                    \
        x##t[0] = _mm512_load_pd(xd + t * ROWS_CHUNK + i - i0);     \
        x##t[1] = _mm512_load_pd(xd + t * ROWS_CHUNK + i - i0 + 8); \
    }
#define ROWS_LD(r, t) a##r##t = R > r && T > t ? acc[(r)*ROWS_T + (t)] : _mm512_setzero_pd()
#define ROWS_ST(r, t) \
    if (R > r && T > t) acc[(r)*ROWS_T + (t)] = a##r##t

/* Columns [i0, i1) of R weight rows against T activation rows (xd: their doubles from i0,
 * ROWS_CHUNK apart), accumulating into acc. */
static inline __attribute__((always_inline)) void rows_block(int R, int T, int64_t i0, int64_t i1,
                                                             int64_t n, __m512d *acc,
                                                             const uint8_t *wp, uint64_t ws,
                                                             const double *xd) {
    __m512d a00, a01, a02, a03, a10, a11, a12, a13, a20, a21, a22, a23, a30, a31, a32, a33;
    ROWS_LD(0, 0), ROWS_LD(0, 1), ROWS_LD(0, 2), ROWS_LD(0, 3);
    ROWS_LD(1, 0), ROWS_LD(1, 1), ROWS_LD(1, 2), ROWS_LD(1, 3);
    ROWS_LD(2, 0), ROWS_LD(2, 1), ROWS_LD(2, 2), ROWS_LD(2, 3);
    ROWS_LD(3, 0), ROWS_LD(3, 1), ROWS_LD(3, 2), ROWS_LD(3, 3);
    for (int64_t i = i0; i < i1; i += 16) {
        const __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : tail_mask(n - i);
        __m512d x0[2], x1[2], x2[2], x3[2];
        ROWS_X(0);
        ROWS_X(1);
        ROWS_X(2);
        ROWS_X(3);
        ROWS_ROW(0);
        ROWS_ROW(1);
        ROWS_ROW(2);
        ROWS_ROW(3);
    }
    ROWS_ST(0, 0);
    ROWS_ST(0, 1);
    ROWS_ST(0, 2);
    ROWS_ST(0, 3);
    ROWS_ST(1, 0);
    ROWS_ST(1, 1);
    ROWS_ST(1, 2);
    ROWS_ST(1, 3);
    ROWS_ST(2, 0);
    ROWS_ST(2, 1);
    ROWS_ST(2, 2);
    ROWS_ST(2, 3);
    ROWS_ST(3, 0);
    ROWS_ST(3, 1);
    ROWS_ST(3, 2);
    ROWS_ST(3, 3);
}

/* One register block per (R, T) shape, the loops unrolled for constant sizes. */
#define ROWS_SHAPE(R, T)                                                                          \
    static void rows_##R##x##T(int64_t i0, int64_t i1, int64_t n, __m512d *acc, const uint8_t *w, \
                               uint64_t ws, const double *xd) {                                   \
        rows_block(R, T, i0, i1, n, acc, w, ws, xd);                                              \
    }
ROWS_SHAPE(4, 1)
ROWS_SHAPE(4, 2)
ROWS_SHAPE(4, 3)
ROWS_SHAPE(4, 4)
ROWS_SHAPE(1, 1)
ROWS_SHAPE(1, 2)
ROWS_SHAPE(1, 3)
ROWS_SHAPE(1, 4)

typedef void (*rows_fn)(int64_t i0, int64_t i1, int64_t n, __m512d *acc, const uint8_t *w,
                        uint64_t ws, const double *xd);

/* T activation rows' columns [i0, i1) as doubles, ROWS_CHUNK apart (zeros past n, as the
 * masked weight loads). */
static void rows_cvt_chunk(double *xd, int T, int64_t i0, int64_t i1, int64_t n, const uint8_t *a,
                           uint64_t as) {
    for (int t = 0; t < T; t++)
        for (int64_t i = i0; i < i1; i += 16) {
            const __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : tail_mask(n - i);
            __m512d d[2];
            rows_cvt16(d, (const uint16_t *)(a + t * as) + i, m);
            _mm512_store_pd(xd + t * ROWS_CHUNK + i - i0, d[0]);
            _mm512_store_pd(xd + t * ROWS_CHUNK + i - i0 + 8, d[1]);
        }
}

/* Up to ROWS_GROUP weight rows x T activation rows: per column chunk, the activations are
 * converted once, then every weight row block takes the chunk. */
static void rows_group(const rows_fn four[4], const rows_fn one[4], int64_t n, int nr, int T,
                       float *s, int64_t ld, const uint8_t *w, uint64_t ws, const uint8_t *a,
                       uint64_t as) {
    _Alignas(64) double xd[ROWS_T * ROWS_CHUNK];
    __m512d acc[ROWS_GROUP * ROWS_T];
    for (int k = 0; k < nr * ROWS_T; k++)
        acc[k] = _mm512_setzero_pd();
    for (int64_t i0 = 0; i0 < n; i0 += ROWS_CHUNK) {
        const int64_t i1 = n - i0 < ROWS_CHUNK ? n : i0 + ROWS_CHUNK;
        rows_cvt_chunk(xd, T, i0, i1, n, a, as);
        int r = 0;
        for (; r + ROWS_R <= nr; r += ROWS_R)
            four[T - 1](i0, i1, n, acc + r * ROWS_T, w + r * ws, ws, xd);
        for (; r < nr; r++)
            one[T - 1](i0, i1, n, acc + r * ROWS_T, w + r * ws, ws, xd);
    }
    for (int r = 0; r < nr; r++)
        for (int t = 0; t < T; t++)
            s[t * ld + r] = (float)_mm512_reduce_add_pd(acc[r * ROWS_T + t]);
}

/* Activation rows in groups of up to 4, weight rows in groups of ROWS_GROUP (a group's
 * weight rows stay in L1/L2 for the next activation group). */
static void gemm_rows(const rows_fn four[4], const rows_fn one[4], int64_t n, int nr, int nt,
                      float *s, int64_t ld, const void *w, uint64_t ws, const uint8_t *a,
                      uint64_t as) {
    for (int j = 0; j < nt; j += ROWS_T) {
        const int T = nt - j < ROWS_T ? nt - j : ROWS_T;
        for (int r = 0; r < nr; r += ROWS_GROUP)
            rows_group(four, one, n, nr - r < ROWS_GROUP ? nr - r : ROWS_GROUP, T, s + j * ld + r,
                       ld, (const uint8_t *)w + r * ws, ws, a + j * as, as);
    }
}

static void gemm_rows_f16(int64_t n, int nr, int nt, float *s, int64_t ld, const void *w,
                          uint64_t ws, const uint8_t *a, uint64_t as) {
    static const rows_fn four[4] = {rows_4x1, rows_4x2, rows_4x3, rows_4x4};
    static const rows_fn one[4] = {rows_1x1, rows_1x2, rows_1x3, rows_1x4};
    if (nt == 1) /* the block reads 16 rows in 1 KB pieces side by side: ~14 GB/s */
        cpulm_rows_by_dot(canon_dot_f16, n, nr, s, w, ws, a);
    else
        gemm_rows(four, one, n, nr, nt, s, ld, w, ws, a, as);
}

/* ---- multi-row F32 dots (gemm_rows): 4 weight rows x 4 activation rows ----
 * Each pair keeps canon_dot_f32's 16 lanes, fused in the same order (n % 16 == 0: one
 * accumulator; otherwise the four accumulators of the 64-element steps, one pass each, then
 * (a0 + a2) + (a1 + a3)); the 16 pairs' tree sums run side by side (frows_reduce: the same
 * pairs of lanes added, 16 results in one vector), then the element tail in fmaf order. Per
 * 16 columns: 8 loads for 16 FMAs instead of 32, and one call per 16 pairs. */

/* Accumulators of the pairs of R rows x T tokens over the columns i0, i0 + step, ... < i1. */
#define FR_FMA(r, t) \
    if (R > r && T > t) a##r##t = _mm512_fmadd_ps(w##r, x##t, a##r##t)
#define FR_W(r) const __m512 w##r = R > r ? _mm512_loadu_ps(wp + r * ws + i) : _mm512_setzero_ps()
#define FR_X(t) const __m512 x##t = T > t ? _mm512_loadu_ps(xp + t * xs + i) : _mm512_setzero_ps()
static inline __attribute__((always_inline)) void frows_pass(int R, int T, int64_t i0, int64_t i1,
                                                             int64_t step, const float *wp,
                                                             int64_t ws, const float *xp,
                                                             int64_t xs, __m512 acc[16]) {
    const __m512 z = _mm512_setzero_ps();
    __m512 a00 = z, a01 = z, a02 = z, a03 = z, a10 = z, a11 = z, a12 = z, a13 = z;
    __m512 a20 = z, a21 = z, a22 = z, a23 = z, a30 = z, a31 = z, a32 = z, a33 = z;
    for (int64_t i = i0; i < i1; i += step) {
        FR_X(0);
        FR_X(1);
        FR_X(2);
        FR_X(3);
        FR_W(0);
        FR_FMA(0, 0);
        FR_FMA(0, 1);
        FR_FMA(0, 2);
        FR_FMA(0, 3);
        FR_W(1);
        FR_FMA(1, 0);
        FR_FMA(1, 1);
        FR_FMA(1, 2);
        FR_FMA(1, 3);
        FR_W(2);
        FR_FMA(2, 0);
        FR_FMA(2, 1);
        FR_FMA(2, 2);
        FR_FMA(2, 3);
        FR_W(3);
        FR_FMA(3, 0);
        FR_FMA(3, 1);
        FR_FMA(3, 2);
        FR_FMA(3, 3);
    }
    /* pair (r, t) at acc[4 * r + t] */
    acc[0] = a00, acc[1] = a01, acc[2] = a02, acc[3] = a03;
    acc[4] = a10, acc[5] = a11, acc[6] = a12, acc[7] = a13;
    acc[8] = a20, acc[9] = a21, acc[10] = a22, acc[11] = a23;
    acc[12] = a30, acc[13] = a31, acc[14] = a32, acc[15] = a33;
}
#undef FR_FMA
#undef FR_W
#undef FR_X

/* x86_reduce16_512 of a[0..15] at once: lane 4 * q + m of the result is the tree sum of
 * a[4 * m + q] (halves, quarters, then (g0 + g2) + (g1 + g3): the same additions of the
 * same lanes, which float addition's commutativity leaves bit for bit). */
static inline __m512 frows_reduce(const __m512 a[16]) {
    __m512 b[8], c[4];
    for (int k = 0; k < 8; k++) /* b[k]: h of a[2k] in lanes 0-7, of a[2k+1] in 8-15 */
        b[k] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], 0xEE),
                             _mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], 0x44));
    for (int m = 0; m < 4; m++) /* c[m]: quad q holds g of a[4m + q] */
        c[m] = _mm512_add_ps(_mm512_shuffle_f32x4(b[2 * m], b[2 * m + 1], 0xDD),
                             _mm512_shuffle_f32x4(b[2 * m], b[2 * m + 1], 0x88));
    const __m512 d0 =
        _mm512_add_ps(_mm512_shuffle_ps(c[0], c[1], 0x44), _mm512_shuffle_ps(c[0], c[1], 0xEE));
    const __m512 d1 =
        _mm512_add_ps(_mm512_shuffle_ps(c[2], c[3], 0x44), _mm512_shuffle_ps(c[2], c[3], 0xEE));
    return _mm512_add_ps(_mm512_shuffle_ps(d0, d1, 0x88), _mm512_shuffle_ps(d0, d1, 0xDD));
}

/* out[k] lane 4q + r = in[r] lane 4q + k: the 4 x 4 transposes of the four 128-bit lanes. */
static inline void frows_t4(const __m512 in[4], __m512 out[4]) {
    const __m512 t0 = _mm512_unpacklo_ps(in[0], in[1]), t1 = _mm512_unpackhi_ps(in[0], in[1]);
    const __m512 t2 = _mm512_unpacklo_ps(in[2], in[3]), t3 = _mm512_unpackhi_ps(in[2], in[3]);
    out[0] = _mm512_shuffle_ps(t0, t2, 0x44), out[1] = _mm512_shuffle_ps(t0, t2, 0xEE);
    out[2] = _mm512_shuffle_ps(t1, t3, 0x44), out[3] = _mm512_shuffle_ps(t1, t3, 0xEE);
}

/* The fmaf tail, elements np..n-1 in order, of the 16 pairs at once (v: lane 4t + r, as
 * frows_reduce leaves them): each pair's chain of fused steps, 16 chains per instruction
 * (one at a time, the tail of stories260K's 172-element rows was most of the op). Per 16
 * elements the rows and tokens are transposed (frows_t4), then element c's weights and
 * activations are spread to the pairs' lanes. */
static inline __attribute__((always_inline)) __m512 frows_tail(int R, int T, int64_t np, int64_t n,
                                                               const float *w, int64_t ws,
                                                               const float *x, int64_t xs,
                                                               __m512 v) {
    const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i wi = _mm512_and_si512(lane, _mm512_set1_epi32(3)); /* 4q + r */
    const __m512i xi = _mm512_srli_epi32(lane, 2);                   /* 4q + t */
    for (int64_t c0 = np; c0 < n; c0 += 16) {
        const __mmask16 m = n - c0 >= 16 ? (__mmask16)0xFFFF : tail_mask(n - c0);
        __m512 rw[4], rx[4], uw[4], ux[4];
        for (int k = 0; k < 4; k++) {
            rw[k] = R > k ? _mm512_maskz_loadu_ps(m, w + k * ws + c0) : _mm512_setzero_ps();
            rx[k] = T > k ? _mm512_maskz_loadu_ps(m, x + k * xs + c0) : _mm512_setzero_ps();
        }
        frows_t4(rw, uw);
        frows_t4(rx, ux);
        const int nc = n - c0 < 16 ? (int)(n - c0) : 16;
        for (int q = 0; q < 4; q++) {
            const __m512i iq = _mm512_set1_epi32(4 * q);
            const __m512i iw = _mm512_add_epi32(wi, iq), ix = _mm512_add_epi32(xi, iq);
            for (int k = 0; k < 4 && 4 * q + k < nc; k++)
                v = _mm512_fmadd_ps(_mm512_permutexvar_ps(iw, uw[k]),
                                    _mm512_permutexvar_ps(ix, ux[k]), v);
        }
    }
    return v;
}

/* R x T pairs: s[t * ld + r] = canon_dot_f32(row r, token t). */
static inline __attribute__((always_inline)) void frows_block(int R, int T, int64_t n, float *s,
                                                              int64_t ld, const float *w,
                                                              int64_t ws, const float *x,
                                                              int64_t xs) {
    __m512 acc[16];
    int64_t np = n;
    if (n % 16 == 0) {
        frows_pass(R, T, 0, n, 16, w, ws, x, xs, acc);
    } else {
        __m512 a1[16], a2[16], a3[16];
        np = n & ~(int64_t)63;
        frows_pass(R, T, 0, np, 64, w, ws, x, xs, acc);
        frows_pass(R, T, 16, np, 64, w, ws, x, xs, a1);
        frows_pass(R, T, 32, np, 64, w, ws, x, xs, a2);
        frows_pass(R, T, 48, np, 64, w, ws, x, xs, a3);
        for (int p = 0; p < 16; p++)
            acc[p] = _mm512_add_ps(_mm512_add_ps(acc[p], a2[p]), _mm512_add_ps(a1[p], a3[p]));
    }
    float sum[16]; /* pair (r, t) at lane 4 * t + r */
    _mm512_storeu_ps(sum, frows_tail(R, T, np, n, w, ws, x, xs, frows_reduce(acc)));
    for (int t = 0; t < T; t++) /* a token's R results are adjacent: one copy (16 scalar
                                 * stores were ~15% of a 4 x 4 block at n = 64) */
        memcpy(s + t * ld, sum + 4 * t, sizeof(float) * (size_t)R);
}

CPULM_ROWS_SHAPES4(CPULM_FROWS_SHAPE, frows, frows_block, 4)

static void gemm_rows_f32(int64_t n, int nr, int nt, float *s, int64_t ld, const void *w,
                          uint64_t ws, const uint8_t *a, uint64_t as) {
    static const cpulm_rows_block_fn four[4] = {frows_4x1, frows_4x2, frows_4x3, frows_4x4};
    static const cpulm_rows_block_fn one[4] = {frows_1x1, frows_1x2, frows_1x3, frows_1x4};
    cpulm_rows_drive(four, one, 4, 4, n, nr, nt, s, ld, w, ws, a, as);
}

const cpulm_kernels cpulm_kernels_avx512 = {
    .name = "avx512",
    .vec_dot =
        {
            [CPULM_DTYPE_F32] = canon_dot_f32,
            [CPULM_DTYPE_F16] = canon_dot_f16,
            [CPULM_DTYPE_BF16] = vec_dot_bf16,
            [CPULM_DTYPE_Q8_0] = vec_dot_q8_0_q8_0,
            [CPULM_DTYPE_Q4_0] = vec_dot_q4_0_q8_0,
        },
    .to_float = {[CPULM_DTYPE_F16] = to_float_f16},
    .gemm_rows = {[CPULM_DTYPE_F32] = gemm_rows_f32,
                  [CPULM_DTYPE_F16] = gemm_rows_f16,
                  [CPULM_DTYPE_BF16] = gemm_rows_bf16},
    .rms_norm = canon_rms_norm,
    .swiglu = canon_swiglu,
    .softmax = softmax,
    .axpy = axpy,
    .gemm_mins = gemm_mins,
    .dot_f32 = dot_f32,
    .dnet_step = cpulm_avx512_dnet_step,
    .dnet_mm = cpulm_avx512_dnet_mm,
    .dnet_conv = cpulm_avx512_dnet_conv,
    .silu = cpulm_avx512_silu,
    .attn_scores = cpulm_avx512_attn_scores,
    .attn_softmax_row = cpulm_avx512_attn_softmax_row,
    .attn_pv = cpulm_avx512_attn_pv,
    .attn_merge = cpulm_avx512_attn_merge,
    .attn_xscores = cpulm_avx512_attn_xscores,
    .attn_xweights = cpulm_avx512_attn_xweights,
    .attn_xpv = cpulm_avx512_attn_xpv,
    .attn_qscores = cpulm_avx512_attn_qscores,
    .attn_softmaxz = cpulm_avx512_attn_softmaxz,
    .attn_qpv = cpulm_avx512_attn_qpv,
};
#endif
