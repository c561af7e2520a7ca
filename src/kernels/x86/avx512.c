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
#include "kernels/attn_simd.h"
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

static void axpy(int64_t n, float *y, float a, const float *x) {
    const __m512 va = _mm512_set1_ps(a);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? 0xFFFF : tail_mask(n - i);
        const __m512 r =
            _mm512_fmadd_ps(va, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i));
        _mm512_mask_storeu_ps(y + i, m, r);
    }
}

/* ---- tiled attention (numerics in kernels.h: attn_*; attn_scores, attn_pv, attn_merge,
 * attn_xpv and the softmax ops are attn_simd.h's over this vector layer) ---- */

/* kt[c * ATT_SK_KEYS + j] = k_j[c] for j < nk (lanes past nk repeat key nk - 1 and are never
 * stored), c < dc (a multiple of 16), by 16 x 16 register transposes. */
static void asv_transpose_keys(const float *k, int64_t ldk, int nk, int dc, float *kt) {
    for (int j0 = 0; j0 < nk; j0 += 16)
        for (int c = 0; c < dc; c += 16) {
            __m512 r[16], t[16];
            _Pragma("GCC unroll 16") for (int x = 0; x < 16; x++) r[x] =
                _mm512_loadu_ps(k + (int64_t)(j0 + x < nk ? j0 + x : nk - 1) * ldk + c);
            x86_transpose16_ps(r, t);
            float *o = kt + (int64_t)c * ATT_SK_KEYS + j0;
            _Pragma("GCC unroll 16") for (int x = 0; x < 16; x++)
                _mm512_storeu_ps(o + x * ATT_SK_KEYS, t[x]);
        }
}

/* ---- attn_xpv at head size 8: two rows per register ----
 * attn_xpv's recurrence per row and key (scale and round when the max moved, fused
 * multiply-add and round, the weight sum's fmaf), rows 2p and 2p + 1 in the halves of one
 * vector and up to 8 rows per pass: a row's chain of f16 roundings is ~15 cycles per key,
 * and the 256-bit op took 4 rows per pass (stories260K's verification batches were
 * latency-bound there, 2026-12-03). A pair scales when either row's max moved: the other's
 * factor is 1, and an f16 value times 1 rounds to itself. */
#define XPV8_ROUND(x) \
    _mm512_cvtph_ps(_mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC))
static inline __attribute__((always_inline)) __m512 xpv8_pair(float lo, float hi) {
    return _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(lo), _mm512_set1_ps(hi));
}

/* Up to 8 rows as P pairs (row 2p in the low half of a[p], 2p + 1 in the high half) and their
 * weight sums: loaded, stepped key by key, stored. */
typedef struct xpv8_pairs {
    __m512 a[4];
    float sum[8];
} xpv8_pairs;

static inline __attribute__((always_inline)) void xpv8_pairs_load(xpv8_pairs *b, int rows,
                                                                  const float *acc, int64_t lda,
                                                                  const float *S, const int P) {
    for (int r = 0; r < 8; r++)
        b->sum[r] = r < rows ? S[r] : 0.0f;
    ASV_FOR(p, P, 4) {
        const __m256 lo = _mm256_loadu_ps(acc + 2 * p * lda);
        const __m256 hi =
            2 * p + 1 < rows ? _mm256_loadu_ps(acc + (2 * p + 1) * lda) : _mm256_setzero_ps();
        b->a[p] = _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(lo)),
                                                      _mm256_castps_pd(hi), 1));
    }
}

/* Key j (its value row in both halves of vv). */
static inline __attribute__((always_inline)) void xpv8_pairs_key(xpv8_pairs *b, int rows, int j,
                                                                 const float *ms, const float *vs,
                                                                 int64_t ldw, __m512 vv,
                                                                 const int P) {
    ASV_FOR(p, P, 4) {
        const int r0 = 2 * p, r1 = 2 * p + 1 < rows ? 2 * p + 1 : 2 * p;
        const float m0 = ms[r0 * ldw + j], m1 = ms[r1 * ldw + j];
        const float w0 = vs[r0 * ldw + j], w1 = vs[r1 * ldw + j];
        b->sum[r0] = fmaf(b->sum[r0], m0, w0);
        b->sum[r0 + 1] = fmaf(b->sum[r0 + 1], m1, w1); /* r1 == r0: a dead lane's sum */
        if (m0 != 1.0f || m1 != 1.0f)
            b->a[p] = XPV8_ROUND(_mm512_mul_ps(b->a[p], xpv8_pair(m0, m1)));
        b->a[p] = XPV8_ROUND(_mm512_fmadd_ps(vv, xpv8_pair(w0, w1), b->a[p]));
    }
}

static inline __attribute__((always_inline)) void
xpv8_pairs_store(const xpv8_pairs *b, int rows, float *acc, int64_t lda, float *S, const int P) {
    ASV_FOR(p, P, 4) {
        _mm256_storeu_ps(acc + 2 * p * lda, _mm512_castps512_ps256(b->a[p]));
        if (2 * p + 1 < rows)
            _mm256_storeu_ps(acc + (2 * p + 1) * lda, _mm256_castpd_ps(_mm512_extractf64x4_pd(
                                                          _mm512_castps_pd(b->a[p]), 1)));
    }
    for (int r = 0; r < rows; r++)
        S[r] = b->sum[r];
}

/* v_j in both halves */
static inline __m512 xpv8_value(const float *v, int64_t ldv, int j) {
    return _mm512_castpd_ps(
        _mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_loadu_ps(v + (int64_t)j * ldv))));
}

static inline __attribute__((always_inline)) void
xpv8_block(int rows, int n, const float *ms, const float *vs, int64_t ldw, const float *v,
           int64_t ldv, float *acc, int64_t lda, float *S, const int P) {
    xpv8_pairs b;
    xpv8_pairs_load(&b, rows, acc, lda, S, P);
    for (int j = 0; j < n; j++)
        xpv8_pairs_key(&b, rows, j, ms, vs, ldw, xpv8_value(v, ldv, j), P);
    xpv8_pairs_store(&b, rows, acc, lda, S, P);
}
#undef XPV8_ROUND

/* ---- attn_xpv at head size 8, many rows (a verification's tokens): rows in the lanes ----
 * Up to 16 rows per pass, the accumulators transposed to 8 vectors (dim c; lane = row), so a
 * key is 8 fused steps (its value element broadcast), each rounded, and one vector sum for
 * the 16 weight sums: no per-row scalar work, 8 chains in flight. Per 16 keys the rows'
 * weights are transposed to one vector per key, and the factors only when some row's max
 * moved on one of those keys (a row that did not move has factor 1: an f16 value times 1
 * rounds to itself). */
#define XPV_LANES_MIN 16 /* fewer rows: the pairs above (at 9-15 rows they were as fast) */

/* rows (<= 16) rows of 16 floats at p + r * ld (keys: the columns read) transposed: out[x]
 * lane r = row r's column x (0 for rows past rows and masked columns). */
static inline void xpv_t16(const float *p, int64_t ld, int rows, __mmask16 keys, __m512 out[16]) {
    __m512 in[16];
    for (int r = 0; r < 16; r++)
        in[r] = r < rows ? _mm512_maskz_loadu_ps(keys, p + r * ld) : _mm512_setzero_ps();
    x86_transpose16_ps(in, out);
}

#define XPV8_ROUND16(x) \
    _mm512_cvtph_ps(_mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC))
static inline __attribute__((always_inline)) void
xpv8_lanes(int rows, int n, const float *ms, const float *vs, int64_t ldw, const float *v,
           int64_t ldv, float *acc, int64_t lda, float *S, int extra, const int P) {
    const __mmask16 live = rows >= 16 ? 0xFFFF : tail_mask(rows);
    __m512 t[16], a[8], w[16], f[16];
    for (int r = 0; r < 16; r++)
        t[r] = r < rows ? _mm512_maskz_loadu_ps(0x00FF, acc + r * lda) : _mm512_setzero_ps();
    x86_transpose16_ps(t, w); /* w as scratch: the dims in w[0..7] */
    for (int c = 0; c < 8; c++)
        a[c] = w[c];
    __m512 sum = _mm512_maskz_loadu_ps(live, S);
    const __m512 one = _mm512_set1_ps(1.0f);
    xpv8_pairs b; /* rows 16.. (extra of them): pairs stepped in the same key loop, so their
                   * latency chains overlap the lanes' (one pass after another, the pairs
                   * of a verification's last 2-8 rows were latency-bound) */
    const float *mx = ms + 16 * ldw, *vx = vs + 16 * ldw;
    if (P) xpv8_pairs_load(&b, extra, acc + 16 * lda, lda, S + 16, P);
    for (int j0 = 0; j0 < n; j0 += 16) {
        const __mmask16 keys = n - j0 >= 16 ? 0xFFFF : tail_mask(n - j0);
        __mmask16 moved = 0;
        for (int r = 0; r < rows; r++)
            moved |= _mm512_cmp_ps_mask(_mm512_maskz_loadu_ps(keys, ms + r * ldw + j0), one,
                                        _CMP_NEQ_UQ);
        moved &= keys;
        xpv_t16(vs + j0, ldw, rows, keys, w);
        if (moved) xpv_t16(ms + j0, ldw, rows, keys, f);
        const int nk = n - j0 < 16 ? n - j0 : 16;
        for (int jj = 0; jj < nk; jj++) {
            const float *vj = v + (int64_t)(j0 + jj) * ldv;
            if (moved >> jj & 1) {
                _Pragma("GCC unroll 8") for (int c = 0; c < 8; c++) a[c] =
                    XPV8_ROUND16(_mm512_mul_ps(a[c], f[jj]));
                sum = _mm512_fmadd_ps(sum, f[jj], w[jj]);
            } else {
                sum = _mm512_add_ps(sum, w[jj]); /* fmaf(S, 1, w) */
            }
            _Pragma("GCC unroll 8") for (int c = 0; c < 8; c++) a[c] =
                XPV8_ROUND16(_mm512_fmadd_ps(_mm512_set1_ps(vj[c]), w[jj], a[c]));
            if (P) xpv8_pairs_key(&b, extra, j0 + jj, mx, vx, ldw, xpv8_value(v, ldv, j0 + jj), P);
        }
    }
    if (P) xpv8_pairs_store(&b, extra, acc + 16 * lda, lda, S + 16, P);
    for (int c = 0; c < 16; c++)
        t[c] = c < 8 ? a[c] : _mm512_setzero_ps();
    x86_transpose16_ps(t, w);
    for (int r = 0; r < rows; r++)
        _mm256_storeu_ps(acc + r * lda, _mm512_castps512_ps256(w[r]));
    _mm512_mask_storeu_ps(S, live, sum);
}
#undef XPV8_ROUND16

static void xpv_narrow(int64_t d, int m, int n, const float *ms, const float *vs, int64_t ldw,
                       const float *v, int64_t ldv, float *acc, int64_t lda, float *S) {
    if (d != 8) {
        cpulm_avx2_attn_xpv(d, m, n, ms, vs, ldw, v, ldv, acc, lda, S);
        return;
    }
    int i = 0;
    while (m - i >= XPV_LANES_MIN) {
        const int rows = m - i < 16 ? m - i : 16, e = m - i - rows;
        const int extra = e >= XPV_LANES_MIN ? 0 : e < 8 ? e : 8; /* rows riding along */
        const float *mi = ms + (int64_t)i * ldw, *vi = vs + (int64_t)i * ldw;
        float *ai = acc + (int64_t)i * lda;
        switch ((extra + 1) / 2) {
        case 0: xpv8_lanes(rows, n, mi, vi, ldw, v, ldv, ai, lda, S + i, 0, 0); break;
        case 1: xpv8_lanes(rows, n, mi, vi, ldw, v, ldv, ai, lda, S + i, extra, 1); break;
        case 2: xpv8_lanes(rows, n, mi, vi, ldw, v, ldv, ai, lda, S + i, extra, 2); break;
        case 3: xpv8_lanes(rows, n, mi, vi, ldw, v, ldv, ai, lda, S + i, extra, 3); break;
        default: xpv8_lanes(rows, n, mi, vi, ldw, v, ldv, ai, lda, S + i, extra, 4); break;
        }
        i += rows + extra;
    }
    for (; i < m; i += 8) {
        const int rows = m - i < 8 ? m - i : 8;
        const float *mi = ms + (int64_t)i * ldw, *vi = vs + (int64_t)i * ldw;
        float *ai = acc + (int64_t)i * lda;
        switch ((rows + 1) / 2) {
        case 1: xpv8_block(rows, n, mi, vi, ldw, v, ldv, ai, lda, S + i, 1); break;
        case 2: xpv8_block(rows, n, mi, vi, ldw, v, ldv, ai, lda, S + i, 2); break;
        case 3: xpv8_block(rows, n, mi, vi, ldw, v, ldv, ai, lda, S + i, 3); break;
        default: xpv8_block(rows, n, mi, vi, ldw, v, ldv, ai, lda, S + i, 4); break;
        }
    }
}

/* expf of 8 floats, the same bits as glibc's expf (2.28 and later, the x86_64 FMA variant
 * that glibc selects on CPUs with FMA): x * 32/ln2 = k + r by one fused multiply-add with
 * the 1.5 * 2^52 shift, r by a fused multiply-subtract, 2^(k/32) from the table of
 * 2^(i/32) rounded to double, y = fma(fma(C0, r, C1), r*r, fma(C2, r, 1)) * 2^(k/32),
 * rounded to float; its special cases below. attn_xweights_expf_is_libms compares it (through
 * attn_xweights) with this process's libm over floats in [-104, 0], the arguments attention
 * passes; the level uses it only when built against glibc (otherwise libm's expf per key). */
static inline __m256 xexpf8(__m256 x) {
    const __m512d invln2n = _mm512_set1_pd(0x1.71547652b82fep+0 * 32);
    const __m512d shift = _mm512_set1_pd(0x1.8p52);
    const __m512d xd = _mm512_cvtps_pd(x);
    const __m512d kd = _mm512_fmadd_pd(invln2n, xd, shift);
    const __m512i ki = _mm512_castpd_si512(kd);
    const __m512d r = _mm512_fmsub_pd(invln2n, xd, _mm512_sub_pd(kd, shift));
    const __m512i i = _mm512_and_si512(ki, _mm512_set1_epi64(31));
    const double *tab = cpulm_x86_exp2_tab32;
    const __m512d t0 = _mm512_permutex2var_pd(_mm512_load_pd(tab), i, _mm512_load_pd(tab + 8));
    const __m512d t1 =
        _mm512_permutex2var_pd(_mm512_load_pd(tab + 16), i, _mm512_load_pd(tab + 24));
    const __m512d t =
        _mm512_mask_blend_pd(_mm512_test_epi64_mask(i, _mm512_set1_epi64(16)), t0, t1);
    /* 2^(k/32) = 2^(i/32) * 2^((k - i)/32): add (k - i)/32 to the exponent field */
    const __m512i e = _mm512_slli_epi64(_mm512_andnot_si512(_mm512_set1_epi64(31), ki), 47);
    const __m512d sc = _mm512_castsi512_pd(_mm512_add_epi64(_mm512_castpd_si512(t), e));
    const __m512d z = _mm512_fmadd_pd(r, _mm512_set1_pd(0x1.c6af84b912394p-5 / 32 / 32 / 32),
                                      _mm512_set1_pd(0x1.ebfce50fac4f3p-3 / 32 / 32));
    const __m512d r2 = _mm512_mul_pd(r, r);
    const __m512d y0 =
        _mm512_fmadd_pd(r, _mm512_set1_pd(0x1.62e42ff0c52d6p-1 / 32), _mm512_set1_pd(1.0));
    const __m512d y = _mm512_mul_pd(_mm512_fmadd_pd(z, r2, y0), sc);
    __m256 f = _mm512_cvtpd_ps(y);
    /* no lane in a special range (nor NaN): the usual case, one branch (the four fixups
     * below were ~a quarter of attn_xweights) */
    const __mmask8 sp = _mm256_cmp_ps_mask(x, _mm256_set1_ps(-0x1.9d1d9ep6f), _CMP_NGE_UQ) |
                        _mm256_cmp_ps_mask(x, _mm256_set1_ps(0x1.62e42ep6f), _CMP_GT_OQ);
    if (!sp) return f;
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

#if defined(__GLIBC__)
#define XEXP_EXACT 1
#else
#define XEXP_EXACT 0
#endif

static inline __m512 xexpf16(__m512 x) {
    if (!XEXP_EXACT) {
        float a[16];
        _mm512_storeu_ps(a, x);
        for (int l = 0; l < 16; l++)
            a[l] = expf(a[l]);
        return _mm512_loadu_ps(a);
    }
    const __m256 lo = xexpf8(_mm512_castps512_ps256(x));
    const __m256 hi = xexpf8(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
    return _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
}

/* Lane l takes lane l - k of p (lanes below k take fill); k a constant at every call. */
static inline __attribute__((always_inline)) __m512 lanes_up(__m512 p, int k, __m512 fill) {
    const __m512i idx =
        _mm512_sub_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(k));
    return _mm512_mask_permutexvar_ps(fill, (__mmask16)(0xFFFFu << k), idx, p);
}

/* cpulm_generic_vexpf(x) in one lane: the same bits, without ldexpf's libm call per row */
static inline float vexp1(float x) {
    return _mm512_cvtss_f32(x86_vexp_ps512(_mm512_set1_ps(x)));
}
/* vexpz on 16 lanes: vexp's scalef, lanes below -87 flushed to 0 */
static inline __m512 vexpz16(__m512 x) {
    const __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.0f), _CMP_GE_OQ);
    return _mm512_maskz_mov_ps(keep, x86_vexp_ps512(x));
}
#define ASV_EXP1              vexp1
#define ASV_LEVEL             avx512
#define ASV                   __m512
#define ASV_W                 16
#define asv_load(p)           _mm512_loadu_ps(p)
#define asv_store(p, x)       _mm512_storeu_ps(p, x)
#define asv_set1(x)           _mm512_set1_ps(x)
#define asv_mul(a, b)         _mm512_mul_ps(a, b)
#define asv_fma(a, b, c)      _mm512_fmadd_ps(a, b, c)
#define asv_load_n(p, nl)     _mm512_maskz_loadu_ps(tail_mask(nl), p)
#define asv_store_n(p, x, nl) _mm512_mask_storeu_ps(p, tail_mask(nl), x)
#define asv_round_f16(x) \
    _mm512_cvtph_ps(_mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC))
#define asv_add(a, b)       _mm512_add_ps(a, b)
#define asv_sub(a, b)       _mm512_sub_ps(a, b)
#define asv_max(a, b)       _mm512_max_ps(a, b)
#define asv_hmax(x)         _mm512_reduce_max_ps(x)
#define asv_exp(x)          x86_vexp_ps512(x)
#define asv_expz(x)         vexpz16(x)
#define ASV_MASK            __mmask16
#define asv_live(nl)        tail_mask(nl)
#define asv_select(k, a, b) _mm512_mask_mov_ps(b, k, a)
#define asv_keep(x, k)      _mm512_maskz_mov_ps(k, x)
#define ASV_REDUCE16(acc)   x86_reduce16_512(acc[0])
#define asv_gt(a, b)        _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ)
#define asv_ord(x)          _mm512_cmp_ps_mask(x, x, _CMP_ORD_Q)
#define asv_any(k)          (k)
#define asv_keep_max(a, b)  _mm512_max_ps(b, a) /* vmaxps: the second operand on ties */
#define asv_lanes_up        lanes_up
#define asv_last(x)         _mm512_cvtss_f32(_mm512_permutexvar_ps(_mm512_set1_epi32(15), x))
#define asv_expf(x)         xexpf16(x)
/* scores: 6 rows x 4 vectors (no reduction tree per score: the canonical 16-lane dot spent
 * ~45 shuffles and adds per 16 scores, on the FMA ports); xpv: 4 x 4, the sums riding */
#define ASV_SC_ROWS        6
#define ASV_SC_CASES(X)    CPULM_BLOCKS_UPTO4(6, X) CPULM_BLOCKS_UPTO4(5, X) CPULM_BLOCKS_4X4(X)
#define ASV_XPV_VECS(rows) 4
#define ASV_XPV_SUM_MAX    16
#define ASV_XPV_CASES(X)   CPULM_BLOCKS_4X4(X)
#define ASV_XPV_NARROW     xpv_narrow /* head_dim 8 above; others (40) the 256-bit op's */
/* P.V: 6 rows x 4 vectors (6 rows were 1.25x faster than 4 at head 64), dims outer */
#define ASV_PV_ROWS       6
#define ASV_PV_VECS(rows) 4
#define ASV_PV_DIMS_OUTER 1
#define ASV_PV_CASES(X)   CPULM_BLOCKS_UPTO4(6, X) CPULM_BLOCKS_UPTO4(5, X) CPULM_BLOCKS_4X4(X)
#include "kernels/attn_simd.h"

/* ---- exact tiled attention (numerics in kernels.h: attn_x*) ---- */

/* Scores with query rows in the lanes: 8 rows per vector of doubles, each key's elements
 * broadcast, so every (row, key) lane adds its exact products in c order, as the generic
 * double sum does (one fused multiply-add of an exact product = one rounded addition). */

/* Rows i0.. (NV vectors, the last one masked to the rows left) x KJ keys (kd: [KJ][d]
 * doubles) into s. The loops unroll fully, so the NV * KJ accumulators live in registers. */
static inline __attribute__((always_inline)) void
xscores_keys(int64_t d, const double *qt, int64_t ldqt, int rows, const double *kd, float scale,
             float *s, int64_t lds, const int NV, const int KJ) {
    __m512d acc[12];
    const __mmask8 last =
        rows - 8 * (NV - 1) >= 8 ? 0xFF : (__mmask8)((1u << (rows - 8 * (NV - 1))) - 1);
    _Pragma("GCC unroll 12") for (int u = 0; u < NV * KJ; u++) acc[u] = _mm512_setzero_pd();
    for (int64_t c = 0; c < d; c++) {
        _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) {
            const __m512d qv =
                _mm512_maskz_loadu_pd(v == NV - 1 ? last : 0xFF, qt + c * ldqt + 8 * v);
            _Pragma("GCC unroll 8") for (int kk = 0; kk < KJ; kk++) acc[v * KJ + kk] =
                _mm512_fmadd_pd(qv, _mm512_set1_pd(kd[kk * d + c]), acc[v * KJ + kk]);
        }
    }
    const __m256 vs = _mm256_set1_ps(scale);
    _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) {
        _Pragma("GCC unroll 8") for (int kk = 0; kk < KJ; kk++) {
            float out[8];
            _mm256_storeu_ps(out, _mm256_mul_ps(_mm512_cvtpd_ps(acc[v * KJ + kk]), vs));
            for (int l = 0; l < 8 && 8 * v + l < rows; l++)
                s[(8 * v + l) * lds + kk] = out[l];
        }
    }
}

/* K rows (KJ of them, f32) as doubles into kd [KJ][d]. */
static inline __attribute__((always_inline)) void xscores_kd(int64_t d, const float *k, int64_t ldk,
                                                             double *kd, const int KJ) {
    for (int kk = 0; kk < KJ; kk++)
        for (int64_t c = 0; c < d; c += 8)
            _mm512_storeu_pd(kd + kk * d + c, _mm512_cvtps_pd(_mm256_loadu_ps(k + kk * ldk + c)));
}

/* Up to 8 * NV rows x every key, KJ keys at a time (the last ones one by one). */
static inline __attribute__((always_inline)) void
xscores_pass(int64_t d, int rows, const double *qt, int64_t ldqt, int n, const float *k,
             int64_t ldk, float scale, float *s, int64_t lds, const int NV, const int KJ) {
    double kd[8 * 256];
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

/* Head size 8 (stories260K): keys in the lanes instead, 16 per step. With rows in the lanes
 * a score was a scalar store and a generation's 2 rows left 6 of 8 lanes idle; here each
 * row's 16 scores are 16 fused steps (2 vectors x 8 dims, the query element broadcast) and
 * one store, the key tile transposed once for all rows. Each lane still adds its exact
 * products in c order from 0, so the same double sums. */

/* Key x of the tile (8 floats), or zeros past the n keys. */
static inline __m256 xkey8(const float *k, int64_t ldk, int x, int n) {
    return x < n ? _mm256_loadu_ps(k + x * ldk) : _mm256_setzero_ps();
}

/* Keys j..j+15 (those below n) as kt[c] (c < 8): dim c of keys 0-7 in kt[c][0], of keys 8-15
 * in kt[c][1], as doubles. Register r holds keys a and a + 4 (a = r, then r + 4), so that
 * the 8x8 transposes of the two 256-bit halves (unpacks and shuffles within 128-bit lanes)
 * end, after one 128-bit lane shuffle, with the 16 keys in order. */
static inline __attribute__((always_inline)) void xscores_kt8(const float *k, int64_t ldk, int n,
                                                              __m512d kt[8][2]) {
    __m512 in[8], t[8], u[8];
    for (int r = 0; r < 8; r++) {
        const int a = r < 4 ? r : r + 4;
        in[r] = _mm512_insertf32x8(_mm512_castps256_ps512(xkey8(k, ldk, a, n)),
                                   xkey8(k, ldk, a + 4, n), 1);
    }
    for (int h = 0; h < 8; h += 4) {
        t[h] = _mm512_unpacklo_ps(in[h], in[h + 1]);
        t[h + 1] = _mm512_unpackhi_ps(in[h], in[h + 1]);
        t[h + 2] = _mm512_unpacklo_ps(in[h + 2], in[h + 3]);
        t[h + 3] = _mm512_unpackhi_ps(in[h + 2], in[h + 3]);
        u[h] = _mm512_shuffle_ps(t[h], t[h + 2], 0x44);     /* 128-bit lane L: dims 0 (L even), 4 */
        u[h + 1] = _mm512_shuffle_ps(t[h], t[h + 2], 0xEE); /* dims 1, 5 */
        u[h + 2] = _mm512_shuffle_ps(t[h + 1], t[h + 3], 0x44); /* dims 2, 6 */
        u[h + 3] = _mm512_shuffle_ps(t[h + 1], t[h + 3], 0xEE); /* dims 3, 7 */
    }
    for (int c = 0; c < 4; c++)
        for (int hi = 0; hi < 2; hi++) { /* dim c: lanes 0 and 2; dim c + 4: lanes 1 and 3 */
            const __m512 z = hi ? _mm512_shuffle_f32x4(u[c], u[c + 4], 0xDD)
                                : _mm512_shuffle_f32x4(u[c], u[c + 4], 0x88);
            kt[c + 4 * hi][0] = _mm512_cvtps_pd(_mm512_castps512_ps256(z));
            kt[c + 4 * hi][1] =
                _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(z), 1)));
        }
}

static void xscores_d8(int m, int n, const double *qt, int64_t ldqt, const float *k, int64_t ldk,
                       float scale, float *s, int64_t lds) {
    const __m512 vs = _mm512_set1_ps(scale);
    for (int j = 0; j < n; j += 16) {
        const __mmask16 keys = n - j >= 16 ? 0xFFFF : tail_mask(n - j);
        __m512d kt[8][2];
        xscores_kt8(k + j * ldk, ldk, n - j, kt);
        for (int i = 0; i < m; i++) {
            __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd();
            _Pragma("GCC unroll 8") for (int c = 0; c < 8; c++) {
                const __m512d q = _mm512_set1_pd(qt[c * ldqt + i]);
                a0 = _mm512_fmadd_pd(q, kt[c][0], a0);
                a1 = _mm512_fmadd_pd(q, kt[c][1], a1);
            }
            const __m512 f = _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(a0)),
                                                _mm512_cvtpd_ps(a1), 1);
            _mm512_mask_storeu_ps(s + i * lds + j, keys, _mm512_mul_ps(f, vs));
        }
    }
}

static void attn_xscores(int64_t d, int m, int n, const double *qt, int64_t ldqt, const float *k,
                         int64_t ldk, float scale, float *s, int64_t lds) {
    if (d == 8) {
        xscores_d8(m, n, qt, ldqt, k, ldk, scale, s, lds);
        return;
    }
    if (d % 8 != 0 || d > 256) { /* the 256-bit version takes any d up to 256 */
        cpulm_avx2_attn_xscores(d, m, n, qt, ldqt, k, ldk, scale, s, lds);
        return;
    }
    for (int i0 = 0; i0 < m; i0 += 32) {
        const int rows = m - i0 < 32 ? m - i0 : 32;
        const double *q = qt + i0;
        float *si = s + (int64_t)i0 * lds;
        switch ((rows + 7) / 8) { /* >= 8 accumulators: enough in flight for the latency */
        case 1: xscores_pass(d, rows, q, ldqt, n, k, ldk, scale, si, lds, 1, 8); break;
        case 2: xscores_pass(d, rows, q, ldqt, n, k, ldk, scale, si, lds, 2, 4); break;
        case 3: xscores_pass(d, rows, q, ldqt, n, k, ldk, scale, si, lds, 3, 3); break;
        default: xscores_pass(d, rows, q, ldqt, n, k, ldk, scale, si, lds, 4, 3); break;
        }
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
    .gemm_rows = {[CPULM_DTYPE_F32] = gemm_rows_f32, [CPULM_DTYPE_F16] = gemm_rows_f16},
    .rms_norm = canon_rms_norm,
    .swiglu = canon_swiglu,
    .softmax = softmax,
    .axpy = axpy,
    .dot_f32 = dot_f32,
    .dnet_step = cpulm_avx512_dnet_step,
    .dnet_mm = cpulm_avx512_dnet_mm,
    .dnet_conv = cpulm_avx512_dnet_conv,
    .silu = cpulm_avx512_silu,
    .attn_scores = cpulm_avx512_attn_scores,
    .attn_softmax_row = cpulm_avx512_attn_softmax_row,
    .attn_pv = cpulm_avx512_attn_pv,
    .attn_merge = cpulm_avx512_attn_merge,
    .attn_xscores = attn_xscores,
    .attn_xweights = cpulm_avx512_attn_xweights,
    .attn_xpv = cpulm_avx512_attn_xpv,
    .attn_qscores = cpulm_avx512_attn_qscores,
    .attn_softmaxz = cpulm_avx512_attn_softmaxz,
    .attn_qpv = cpulm_avx512_attn_qpv,
};
#endif
