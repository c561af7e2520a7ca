/* avx2.c: the avx2 kernel level (Haswell / Zen 1 and later), built with -mavx2 -mfma
 * -mf16c. Reached only through cpulm_kernels_avx2 after dispatch.c verified AVX2, FMA, F16C
 * and OS support of YMM state. Entries left NULL inherit the generic ones. The tiled
 * attention tile ops (attn_scores ... attn_qpv) are in avx2_attn.c.
 *
 * The int8 dots use maddubs (u8 x s8 -> s16 pairs) with the sign trick, then madd to int32:
 * the per-block integer sums are exact, so results differ from generic only in the order
 * floats are accumulated. Two independent accumulators per loop hide FMA latency; the
 * quantized dots are memory-bound at decode time, so no more unrolling than that.
 */
#if defined(__x86_64__)
#include <string.h>

#include "kernels/generic/generic.h"
#include "kernels/kernels.h"
#include "kernels/rope_body.h"
#include "kernels/rows.h"
#include "x86_dnet.h"
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
        const __m256i p1 = x86_dot_i8_pairs(q1, _mm256_loadu_si256((const __m256i *)y[i + 1].qs));
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

/* MXFP4: the codes looked up as signed bytes (-12..12), then Q4_0's signed dot. */
static void vec_dot_mxfp4_q8_0(int64_t n, float *s, const void *vx, const void *vy) {
    const cpulm_block_mxfp4 *x = vx;
    const cpulm_block_q8_0 *y = vy;
    const int64_t nb = n / 32;
    const __m256i lut = x86_mxfp4_lut256(0);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 1 < nb; i += 2) {
        const __m256i q0 = _mm256_shuffle_epi8(lut, x86_nibbles_32(x[i].qs));
        const __m256i q1 = _mm256_shuffle_epi8(lut, x86_nibbles_32(x[i + 1].qs));
        const __m256i p0 = x86_dot_i8_pairs(q0, _mm256_loadu_si256((const __m256i *)y[i].qs));
        const __m256i p1 = x86_dot_i8_pairs(q1, _mm256_loadu_si256((const __m256i *)y[i + 1].qs));
        const float d0 = cpulm_e8m0_half(x[i].e) * x86_fp16(y[i].d);
        const float d1 = cpulm_e8m0_half(x[i + 1].e) * x86_fp16(y[i + 1].d);
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(d0), _mm256_cvtepi32_ps(p0), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(d1), _mm256_cvtepi32_ps(p1), acc1);
    }
    for (; i < nb; i++) {
        const __m256i q = _mm256_shuffle_epi8(lut, x86_nibbles_32(x[i].qs));
        const __m256i p = x86_dot_i8_pairs(q, _mm256_loadu_si256((const __m256i *)y[i].qs));
        const float d = cpulm_e8m0_half(x[i].e) * x86_fp16(y[i].d);
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(p), acc0);
    }
    *s = x86_hsum_ps256(_mm256_add_ps(acc0, acc1));
}

/* ---- K-quants against Q8_K ----
 * The quants are unsigned (Q4_K 0..15, Q5_K 0..31, Q6_K 0..63 before its -32), so maddubs
 * takes them directly; pairs stay below 2 * 63 * 127 < 32768. Sub-block scales are applied
 * in the int16 -> int32 madd, so each super-block yields exactly the generic int sums. */

/* Q4_K / Q5_K: sum_j sc_j * dot(q_j, y_j) as 8 int32 lanes, for 32-byte chunks c = 0..3
 * holding sub-blocks 2c (low nibbles) and 2c+1 (high nibbles). qh = NULL for Q4_K. */
static inline __m256i dot_k4_superblock(const uint8_t *qs, const uint8_t *qh, const int8_t *y,
                                        const uint8_t sc[8]) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), bit4 = _mm256_set1_epi8(0x10);
    __m256i hbits = qh ? _mm256_loadu_si256((const __m256i *)qh) : _mm256_setzero_si256();
    __m256i acc = _mm256_setzero_si256();
    for (int c = 0; c < 4; c++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
        __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
        /* 5th bits: bit 2c of qh[l] for the low sub-block, 2c+1 for the high one */
        lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(hbits, 4), bit4));
        hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16(hbits, 3), bit4));
        hbits = _mm256_srli_epi16(hbits, 2);
        const __m256i p_lo =
            _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)(y + 64 * c)));
        const __m256i p_hi =
            _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(y + 64 * c + 32)));
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p_lo, _mm256_set1_epi16(sc[2 * c])));
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p_hi, _mm256_set1_epi16(sc[2 * c + 1])));
    }
    return acc;
}

/* The 8 6-bit scales and mins of a Q4_K/Q5_K scales[12], branch-free on 32-bit words:
 * bytes 0..3 hold scale 0..3 (+ high bits of scale 4..7), 4..7 min 0..3 (+ high bits of
 * min 4..7), 8..11 the low nibbles of scale / min 4..7. */
static inline void k4_scales_mins(const uint8_t *q, uint8_t sc[8], uint8_t m[8]) {
    uint32_t a, b, c;
    memcpy(&a, q, 4);
    memcpy(&b, q + 4, 4);
    memcpy(&c, q + 8, 4);
    const uint32_t s_lo = a & 0x3f3f3f3fu, m_lo = b & 0x3f3f3f3fu;
    const uint32_t s_hi = (c & 0x0f0f0f0fu) | ((a >> 2) & 0x30303030u);
    const uint32_t m_hi = ((c >> 4) & 0x0f0f0f0fu) | ((b >> 2) & 0x30303030u);
    memcpy(sc, &s_lo, 4);
    memcpy(sc + 4, &s_hi, 4);
    memcpy(m, &m_lo, 4);
    memcpy(m + 4, &m_hi, 4);
}

static void vec_dot_k4(int64_t n, float *s, const void *vx, const void *vy, int has_qh) {
    const cpulm_block_q8_K *y = vy;
    const size_t stride = has_qh ? sizeof(cpulm_block_q5_K) : sizeof(cpulm_block_q4_K);
    __m256 acc = _mm256_setzero_ps(), acc_m = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / CPULM_QK_K; i++) {
        /* Q4_K and Q5_K share d, dmin, scales[12] at the start; then qh (Q5_K only), qs */
        const cpulm_block_q5_K *b5 = (const void *)((const uint8_t *)vx + (size_t)i * stride);
        const cpulm_block_q4_K *b4 = (const void *)b5;
        uint8_t sc[8], m[8];
        k4_scales_mins(b4->scales, sc, m);
        /* min term: m_j * (bsums[2j] + bsums[2j+1]) via madd with each m_j doubled */
        const __m128i m8 = _mm_loadl_epi64((const __m128i *)m);
        const __m256i m16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8));
        const __m256i summ =
            _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)y[i].bsums), m16);
        const __m256i sumi = has_qh ? dot_k4_superblock(b5->qs, b5->qh, y[i].qs, sc)
                                    : dot_k4_superblock(b4->qs, NULL, y[i].qs, sc);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(y[i].d * x86_fp16(b4->d)), _mm256_cvtepi32_ps(sumi),
                              acc);
        acc_m = _mm256_fmadd_ps(_mm256_set1_ps(y[i].d * x86_fp16(b4->dmin)),
                                _mm256_cvtepi32_ps(summ), acc_m);
    }
    *s = x86_hsum_ps256(_mm256_sub_ps(acc, acc_m));
}

static void vec_dot_q4_K_q8_K(int64_t n, float *s, const void *vx, const void *vy) {
    vec_dot_k4(n, s, vx, vy, 0);
}

static void vec_dot_q5_K_q8_K(int64_t n, float *s, const void *vx, const void *vy) {
    vec_dot_k4(n, s, vx, vy, 1);
}

/* Q6_K: q = 0..63 in 4 groups of 32 per 128-element chunk; sum((q - 32) * y) is taken as
 * sum(q * y) - 32 * sum(y), the latter from Q8_K's bsums (one per 16-element sub-block). */
static inline __m256i q6_group_dot(__m256i q, const int8_t *y, int sc_a, int sc_b) {
    const __m256i p = _mm256_maddubs_epi16(q, _mm256_loadu_si256((const __m256i *)y));
    const __m256i scv = _mm256_set_m128i(_mm_set1_epi16((short)sc_b), _mm_set1_epi16((short)sc_a));
    return _mm256_madd_epi16(p, scv);
}

static void vec_dot_q6_K_q8_K(int64_t n, float *s, const void *vx, const void *vy) {
    const cpulm_block_q6_K *x = vx;
    const cpulm_block_q8_K *y = vy;
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / CPULM_QK_K; i++) {
        const int8_t *sc = x[i].scales;
        /* 32 * sum_g sc_g * bsum_g, exact in int32 */
        const __m256i bs = _mm256_loadu_si256((const __m256i *)y[i].bsums);
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)sc));
        __m256i sumi = _mm256_sub_epi32(_mm256_setzero_si256(),
                                        _mm256_slli_epi32(_mm256_madd_epi16(bs, sc16), 5));
        for (int c = 0; c < 2; c++) {
            const uint8_t *ql = x[i].ql + 64 * c, *qh = x[i].qh + 32 * c;
            const int8_t *yq = y[i].qs + 128 * c, *scc = sc + 8 * c;
            const __m256i l0 = _mm256_loadu_si256((const __m256i *)ql);
            const __m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
            const __m256i h = _mm256_loadu_si256((const __m256i *)qh);
            const __m256i q1 = _mm256_or_si256(_mm256_and_si256(l0, m4),
                                               _mm256_and_si256(_mm256_slli_epi16(h, 4), m30));
            const __m256i q2 = _mm256_or_si256(_mm256_and_si256(l1, m4),
                                               _mm256_and_si256(_mm256_slli_epi16(h, 2), m30));
            const __m256i q3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                                               _mm256_and_si256(h, m30));
            const __m256i q4 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                               _mm256_and_si256(_mm256_srli_epi16(h, 2), m30));
            sumi = _mm256_add_epi32(sumi, q6_group_dot(q1, yq, scc[0], scc[1]));
            sumi = _mm256_add_epi32(sumi, q6_group_dot(q2, yq + 32, scc[2], scc[3]));
            sumi = _mm256_add_epi32(sumi, q6_group_dot(q3, yq + 64, scc[4], scc[5]));
            sumi = _mm256_add_epi32(sumi, q6_group_dot(q4, yq + 96, scc[6], scc[7]));
        }
        const float d = x86_fp16(x[i].d) * y[i].d;
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    *s = x86_hsum_ps256(acc);
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

static inline float load1_bf16(const void *p, int64_t i) {
    uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

#define FLOAT_DOT(name, load8, load1)                                                            \
    static float name(int64_t n, const void *x, const void *y) {                                 \
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;                              \
        int64_t i = 0;                                                                           \
        for (; i + 32 <= n; i += 32) {                                                           \
            a0 = _mm256_fmadd_ps(load8(x, i), load8(y, i), a0);                                  \
            a1 = _mm256_fmadd_ps(load8(x, i + 8), load8(y, i + 8), a1);                          \
            a2 = _mm256_fmadd_ps(load8(x, i + 16), load8(y, i + 16), a2);                        \
            a3 = _mm256_fmadd_ps(load8(x, i + 24), load8(y, i + 24), a3);                        \
        }                                                                                        \
        for (; i + 8 <= n; i += 8)                                                               \
            a0 = _mm256_fmadd_ps(load8(x, i), load8(y, i), a0);                                  \
        float sum = x86_hsum_ps256(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3))); \
        for (; i < n; i++)                                                                       \
            sum += load1(x, i) * load1(y, i);                                                    \
        return sum;                                                                              \
    }

FLOAT_DOT(dot_f32_impl, load8_f32, load1_f32)
FLOAT_DOT(dot_bf16_impl, load8_bf16, load1_bf16)

static void vec_dot_bf16(int64_t n, float *s, const void *x, const void *y) {
    *s = dot_bf16_impl(n, x, y);
}

static float dot_f32(int64_t n, const float *x, const float *y) {
    return dot_f32_impl(n, x, y);
}

/* ---- canonical float arithmetic (bit-identical to the generic oracle; see x86.h) ---- */

/* 4 x 16 lanes over steps of 64 as 8 ymm (lo/hi halves), summed (a0+a2)+(a1+a3), tree. */
#define CANON_4X16(load8)                                                                       \
    __m256 lo[4], hi[4];                                                                        \
    for (int j = 0; j < 4; j++)                                                                 \
        lo[j] = hi[j] = _mm256_setzero_ps();                                                    \
    for (int64_t i = 0; i < np; i += 64)                                                        \
        for (int j = 0; j < 4; j++) {                                                           \
            lo[j] = _mm256_fmadd_ps(load8(x, i + 16 * j), load8(y, i + 16 * j), lo[j]);         \
            hi[j] = _mm256_fmadd_ps(load8(x, i + 16 * j + 8), load8(y, i + 16 * j + 8), hi[j]); \
        }                                                                                       \
    lo[0] = _mm256_add_ps(_mm256_add_ps(lo[0], lo[2]), _mm256_add_ps(lo[1], lo[3]));            \
    hi[0] = _mm256_add_ps(_mm256_add_ps(hi[0], hi[2]), _mm256_add_ps(hi[1], hi[3]))

static void canon_dot_f32(int64_t n, float *s, const void *vx, const void *vy) {
    const float *x = vx, *y = vy;
    if (n % 16 == 0) {
        __m256 lo = _mm256_setzero_ps(), hi = lo;
        for (int64_t i = 0; i < n; i += 16) {
            lo = _mm256_fmadd_ps(load8_f32(x, i), load8_f32(y, i), lo);
            hi = _mm256_fmadd_ps(load8_f32(x, i + 8), load8_f32(y, i + 8), hi);
        }
        *s = x86_reduce16_256(lo, hi);
        return;
    }
    int64_t np = n & ~(int64_t)63;
    CANON_4X16(load8_f32);
    float sum = x86_reduce16_256(lo[0], hi[0]);
    for (int64_t i = np; i < n; i++)
        sum = fmaf(x[i], y[i], sum);
    *s = sum;
}

/* Exact f32 products summed in double (order-independent in practice; see generic/dot.c). */
static void canon_dot_f16(int64_t n, float *s, const void *vx, const void *vy) {
    const uint16_t *x = vx, *y = vy;
    __m256d a0 = _mm256_setzero_pd(), a1 = a0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 p = _mm256_mul_ps(load8_f16(x, i), load8_f16(y, i));
        a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm256_castps256_ps128(p)));
        a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm256_extractf128_ps(p, 1)));
    }
    const __m256d t = _mm256_add_pd(a0, a1);
    const __m128d h = _mm_add_pd(_mm256_castpd256_pd128(t), _mm256_extractf128_pd(t, 1));
    double sum = _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
    for (; i < n; i++)
        sum += (double)(x86_fp16(x[i]) * x86_fp16(y[i]));
    *s = (float)sum;
}

static void canon_rms_norm(int64_t n, float *y, const float *x, const float *w, float eps) {
    const float scale = 1.0f / sqrtf((float)(x86_sum_squares(n, x) / (double)n) + eps);
    const __m256 vs = _mm256_set1_ps(scale);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), vs),
                                              _mm256_loadu_ps(w + i)));
    for (; i < n; i++)
        y[i] = (x[i] * scale) * w[i];
}

/* exp(-g) in 8 lanes, the canonical polynomial (x86_canon_vexp256) */
static inline __m256 canon_exp_neg(__m256 g) {
    return x86_canon_vexp256(_mm256_sub_ps(_mm256_setzero_ps(), g));
}

static void canon_swiglu(int64_t n, float *y, const float *g, const float *u) {
    const __m256 one = _mm256_set1_ps(1.0f);
    int64_t nv = n & ~(int64_t)15, i = 0;
    for (; i < nv; i += 8) {
        const __m256 vg = _mm256_loadu_ps(g + i);
        const __m256 silu = _mm256_div_ps(vg, _mm256_add_ps(one, canon_exp_neg(vg)));
        _mm256_storeu_ps(y + i, _mm256_mul_ps(silu, _mm256_loadu_ps(u + i)));
    }
    for (; i < n; i++)
        y[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

/* swiglu_oai: only expf stays scalar (libm's, per lane); the clamps, the quotient and the
 * product run in 8 lanes. MINPS / MAXPS return their second operand when the first is NaN,
 * as fminf / fmaxf do with a number second, and -x is a sign flip: generic's bits. */
static void swiglu_oai(int64_t n, float *y, const float *g, const float *u, float alpha,
                       float limit) {
    const __m256 lim = _mm256_set1_ps(limit), nlim = _mm256_set1_ps(-limit);
    const __m256 one = _mm256_set1_ps(1.0f), a = _mm256_set1_ps(alpha);
    const __m256 sign = _mm256_set1_ps(-0.0f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        _Alignas(32) float e[8];
        const __m256 x = _mm256_min_ps(_mm256_loadu_ps(g + i), lim);
        _mm256_store_ps(e, _mm256_mul_ps(a, _mm256_xor_ps(x, sign)));
        for (int j = 0; j < 8; j++)
            e[j] = expf(e[j]);
        const __m256 v = _mm256_min_ps(_mm256_max_ps(_mm256_loadu_ps(u + i), nlim), lim);
        const __m256 q = _mm256_div_ps(x, _mm256_add_ps(one, _mm256_load_ps(e)));
        _mm256_storeu_ps(y + i, _mm256_mul_ps(q, _mm256_add_ps(v, one)));
    }
    cpulm_generic_swiglu_oai(n - i, y + i, g + i, u + i, alpha, limit);
}

/* The generic loop, its fmaf inlined (-mfma) */
static void rope(float *v, int n_heads, int head_stride, int n_rot, int neox, const float *cs,
                 const float *sn) {
    cpulm_rope_body(v, n_heads, head_stride, n_rot, neox, cs, sn);
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
        const __m256i p =
            _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
        _mm256_storeu_si256((__m256i *)y[i].qs, _mm256_permutevar8x32_epi32(p, order));
    }
}

/* Q8_K, bit-identical to the reference: the signed extreme is the first element of the
 * largest magnitude (the reference's strict > scan), iscale = -127 / max, quants by the
 * same magic-number rounding (f + 1.5 * 2^23, low mantissa bits), capped at 127. */
static float q8_K_signed_max(const float *x) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 amax = _mm256_setzero_ps();
    for (int k = 0; k < CPULM_QK_K; k += 8)
        amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + k)));
    const float m = x86_hmax_ps256(amax);
    if (m == 0.0f) return 0.0f;
    const __m256 vm = _mm256_set1_ps(m);
    for (int k = 0; k < CPULM_QK_K; k += 8) {
        const int hit = _mm256_movemask_ps(
            _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + k)), vm, _CMP_EQ_OQ));
        if (hit) return x[k + __builtin_ctz((unsigned)hit)];
    }
    return 0.0f; /* not reached for finite input */
}

static void from_float_q8_K(const float *x, void *vy, int64_t n) {
    cpulm_block_q8_K *y = vy;
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    const __m256 magic = _mm256_set1_ps(12582912.0f);
    const __m256i mant = _mm256_set1_epi32(0x007fffff), bias = _mm256_set1_epi32(0x00400000);
    for (int64_t i = 0; i < n / CPULM_QK_K; i++, x += CPULM_QK_K) {
        const float max = q8_K_signed_max(x);
        memset(&y[i], 0, sizeof y[i]);
        if (max == 0.0f) continue;
        const float iscale = -127.0f / max;
        if (!isfinite(iscale)) { /* |max| < 127 / FLT_MAX: the reference's int8 wrap-around */
            cpulm_quantize_row_q8_K_ref(x, &y[i], CPULM_QK_K);
            continue;
        }
        const __m256 vs = _mm256_set1_ps(iscale);
        __m256i gsum[16];
        for (int k = 0; k < CPULM_QK_K; k += 32) {
            __m256i q[4];
            for (int u = 0; u < 4; u++) {
                const __m256 f =
                    _mm256_add_ps(_mm256_mul_ps(vs, _mm256_loadu_ps(x + k + 8 * u)), magic);
                q[u] = _mm256_sub_epi32(_mm256_and_si256(_mm256_castps_si256(f), mant), bias);
                q[u] = _mm256_min_epi32(q[u], _mm256_set1_epi32(127));
            }
            gsum[k / 16] = _mm256_add_epi32(q[0], q[1]);
            gsum[k / 16 + 1] = _mm256_add_epi32(q[2], q[3]);
            const __m256i p =
                _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
            _mm256_storeu_si256((__m256i *)(y[i].qs + k), _mm256_permutevar8x32_epi32(p, order));
        }
        for (int g = 0; g < 16; g += 4) { /* 4 group sums of 8 lanes each */
            const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(gsum[g], gsum[g + 1]),
                                                _mm256_hadd_epi32(gsum[g + 2], gsum[g + 3]));
            const __m128i s4 =
                _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
            _mm_storel_epi64((__m128i *)(y[i].bsums + g), _mm_packs_epi32(s4, s4));
        }
        y[i].d = 1.0f / iscale;
    }
}

static void from_float_f16(const float *x, void *vy, int64_t n) {
    uint16_t *y = vy;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(y + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++)
        y[i] = _cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT);
}

static void to_float_f16(const void *vx, float *y, int64_t n) {
    const uint16_t *x = vx;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, load8_f16(x, i));
    for (; i < n; i++)
        y[i] = x86_fp16(x[i]);
}

/* to_float of Q8_0 and Q4_0 (embedding rows; attention's tile reader when it converts): each
 * element is the reference's (float)q * d: the int -> float conversion is exact and the
 * product is one rounding, so the vector lanes give the same bits. */

/* The low 8 int8 of q as f32 lanes, times d. */
static inline __m256 q8x8_scaled(__m128i q, __m256 d) {
    return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d);
}

static void to_float_q8_0(const void *vx, float *y, int64_t n) {
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

static void to_float_q4_0(const void *vx, float *y, int64_t n) {
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

/* ---- f32 vector ops ---- */

static void softmax(int64_t n, float *x) {
    const float max = x86_max_f32(x, n, -INFINITY);
    int64_t i;
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
    for (i = 0; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), inv));
    for (; i < n; i++)
        x[i] *= 1.0f / sum;
}

/* kernels.h's gemm_mins: 16 rows as 2 vectors, 4 groups' chains side by side */
static void gemm_mins(int64_t nb, int nt, int ng, const float *m, const uint8_t *s, uint64_t ss,
                      float *out, int64_t ld) {
    for (int j = 0; j < nt; j++) {
        const float *sj = (const float *)(s + (size_t)j * ss);
        for (int q0 = 0; q0 < ng; q0 += 4) {
            const int gq = ng - q0 < 4 ? ng - q0 : 4;
            __m256 acc[8];
            for (int i = 0; i < 8; i++)
                acc[i] = _mm256_setzero_ps();
            for (int64_t b = 0; b < nb; b++) {
                const __m256 sb = _mm256_broadcast_ss(sj + b);
                for (int q = 0; q < gq; q++) {
                    const float *mq = m + ((q0 + q) * nb + b) * 16;
                    acc[2 * q] = _mm256_fmadd_ps(_mm256_loadu_ps(mq), sb, acc[2 * q]);
                    acc[2 * q + 1] = _mm256_fmadd_ps(_mm256_loadu_ps(mq + 8), sb, acc[2 * q + 1]);
                }
            }
            for (int q = 0; q < gq; q++) {
                float *o = out + j * ld + 16 * (q0 + q);
                _mm256_storeu_ps(o, _mm256_add_ps(_mm256_loadu_ps(o), acc[2 * q]));
                _mm256_storeu_ps(o + 8, _mm256_add_ps(_mm256_loadu_ps(o + 8), acc[2 * q + 1]));
            }
        }
    }
}

static void axpy(int64_t n, float *y, float a, const float *x) {
    const __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i,
                         _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++)
        y[i] += a * x[i];
}

/* ---- GEMM over repacked 16-row groups (layouts in kernels.h) ----
 * Each 64-byte chunk of a group holds 4 quant bytes of each of 16 rows; a ymm takes the
 * rows of one half (0..7 or 8..15). Without VNNI the 4-byte dots are maddubs (u8 x s8 ->
 * pairs in int16) then madd with ones (-> int32). Q4_0 tiles are 16 rows x up to 4 tokens,
 * so each activation broadcast (a shuffle uop on Zen 3, like the maddubs' partners) feeds
 * two maddubs; nibbles (0..15) go in unsigned and a whole block is summed in int16 before
 * one madd (8 maddubs per lane, pairs <= 2 * 15 * 127: 8 * 3810 = 30480 < 32768); the -8
 * bias comes off through the int32 step (-8 * sum(x) from the activation extras). Q8_0
 * tiles are 8 rows x up to 4 tokens with the sign trick of x86_dot_i8_pairs (|w| x
 * sign-moved x; activations never hold -128; pairs reach 32512, so no int16 sums). A lone
 * token (decode, the MoE per-expert matvec) reads each group in one pass with a software
 * prefetch. Per block and token the float steps are those of every other level:
 * acc = fma(dw, dx * float(isum), acc). */

/* v, unchanged, as a value the compiler cannot see through: GCC's reassociation otherwise
 * flattens an int16 accumulation chain into a tree, hoists every maddubs of the block ahead
 * of the adds and spills them to the stack. */
static inline __m256i chain_256(__m256i v) {
    __asm__("" : "+x"(v));
    return v;
}

static inline __m256i bcast4_256(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* Q8_0, rows 8 * half .. + 7, NT (2..4) tokens. */
static inline __attribute__((always_inline)) void gemm_q8_0_half(int64_t n, const uint8_t *w,
                                                                 int half, const uint8_t *act,
                                                                 uint64_t stride, float *s,
                                                                 int64_t ld, const int NT) {
    const int64_t nb = n / 32;
    const uint64_t xo = cpulm_pack_act_extras_offset(n);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[4];
    _Pragma("GCC unroll 4") for (int j = 0; j < NT; j++) acc[j] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *g = w + (size_t)b * 544;
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g + 16 * half)));
        const uint8_t *q = g + 32 + 32 * half;
        __m256i is[4];
        const int8_t *xq[4];
        const float *ex[4];
        _Pragma("GCC unroll 4") for (int j = 0; j < NT; j++) {
            const uint8_t *row = act + (size_t)j * stride;
            xq[j] = ((const cpulm_block_q8_0 *)row)[b].qs;
            ex[j] = (const float *)(row + xo);
            is[j] = _mm256_setzero_si256();
        }
        _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++) {
            const __m256i wv = _mm256_loadu_si256((const __m256i *)(q + 64 * k));
            const __m256i aw = _mm256_sign_epi8(wv, wv);
            _Pragma("GCC unroll 4") for (int j = 0; j < NT; j++) {
                const __m256i sy = _mm256_sign_epi8(bcast4_256(xq[j] + 4 * k), wv);
                is[j] =
                    _mm256_add_epi32(is[j], _mm256_madd_epi16(_mm256_maddubs_epi16(aw, sy), ones));
            }
        }
        _Pragma("GCC unroll 4") for (int j = 0; j < NT; j++) {
            const __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(is[j]), _mm256_set1_ps(ex[j][b]));
            acc[j] = _mm256_fmadd_ps(dw, f, acc[j]);
        }
    }
    _Pragma("GCC unroll 4") for (int j = 0; j < NT; j++)
        _mm256_storeu_ps(s + (size_t)j * (size_t)ld + 8 * half, acc[j]);
}

/* Q4_0 with one token (decode's GEMV and the MoE per-expert matvec): all 16 rows of the group
 * in one pass, so every 64-byte chunk is read once and whole, each activation broadcast
 * serves both halves, and the weights stream with a software prefetch ahead of the
 * hardware's. Integer and float steps are those of gemm_half_tile. */
#ifndef AVX2_Q4_PREFETCH
#define AVX2_Q4_PREFETCH 1152 /* bytes ahead: 4 blocks of 288 */
#endif
static void gemv_q4_0_16(int64_t n, float *s, const uint8_t *w, const uint8_t *act) {
    const int64_t nb = n / 32;
    const cpulm_block_q8_0 *x = (const cpulm_block_q8_0 *)act;
    const float *ex = (const float *)(act + cpulm_pack_act_extras_offset(n));
    const int32_t *c4 = (const int32_t *)(ex + nb);
    const __m256i ones = _mm256_set1_epi16(1), m4 = _mm256_set1_epi8(0x0F);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *g = w + (size_t)b * 288;
        const uintptr_t pf = (uintptr_t)g + AVX2_Q4_PREFETCH; /* an integer: may pass the end */
        for (int o = 0; o < 288; o += 64)
            __builtin_prefetch((const void *)(pf + (uintptr_t)o), 0, 0);
        __m256i p0 = _mm256_setzero_si256(), p1 = p0;
        _Pragma("GCC unroll 4") for (int t = 0; t < 4; t++) {
            const __m256i v0 = _mm256_loadu_si256((const __m256i *)(g + 32 + 64 * t));
            const __m256i v1 = _mm256_loadu_si256((const __m256i *)(g + 64 + 64 * t));
            const __m256i ylo = bcast4_256(x[b].qs + 4 * t), yhi = bcast4_256(x[b].qs + 16 + 4 * t);
            const __m256i d0 = _mm256_add_epi16(
                _mm256_maddubs_epi16(_mm256_and_si256(v0, m4), ylo),
                _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(v0, 4), m4), yhi));
            const __m256i d1 = _mm256_add_epi16(
                _mm256_maddubs_epi16(_mm256_and_si256(v1, m4), ylo),
                _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(v1, 4), m4), yhi));
            p0 = chain_256(_mm256_add_epi16(p0, d0));
            p1 = chain_256(_mm256_add_epi16(p1, d1));
        }
        const __m256i c = _mm256_set1_epi32(c4[b]);
        const __m256 dx = _mm256_set1_ps(ex[b]);
        const __m256 f0 =
            _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(c, _mm256_madd_epi16(p0, ones))), dx);
        const __m256 f1 =
            _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(c, _mm256_madd_epi16(p1, ones))), dx);
        acc0 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)g)), f0, acc0);
        acc1 =
            _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g + 16))), f1, acc1);
    }
    _mm256_storeu_ps(s, acc0);
    _mm256_storeu_ps(s + 8, acc1);
}

/* Q8_0 with one token, as gemv_q4_0_16: 16 rows in one pass over the group, the broadcasts
 * shared, a prefetch ahead (blocks of 544 bytes); the int and float steps of gemm_half_tile. */
static void gemv_q8_0_16(int64_t n, float *s, const uint8_t *w, const uint8_t *act) {
    const int64_t nb = n / 32;
    const cpulm_block_q8_0 *x = (const cpulm_block_q8_0 *)act;
    const float *ex = (const float *)(act + cpulm_pack_act_extras_offset(n));
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *g = w + (size_t)b * 544;
        const uintptr_t pf = (uintptr_t)g + 2 * AVX2_Q4_PREFETCH; /* an integer: may pass the end */
        for (int o = 0; o < 544; o += 64)
            __builtin_prefetch((const void *)(pf + (uintptr_t)o), 0, 0);
        __m256i i0 = _mm256_setzero_si256(), i1 = i0;
        _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++) {
            const __m256i w0 = _mm256_loadu_si256((const __m256i *)(g + 32 + 64 * k));
            const __m256i w1 = _mm256_loadu_si256((const __m256i *)(g + 64 + 64 * k));
            const __m256i y = bcast4_256(x[b].qs + 4 * k);
            const __m256i p0 =
                _mm256_maddubs_epi16(_mm256_sign_epi8(w0, w0), _mm256_sign_epi8(y, w0));
            const __m256i p1 =
                _mm256_maddubs_epi16(_mm256_sign_epi8(w1, w1), _mm256_sign_epi8(y, w1));
            i0 = _mm256_add_epi32(i0, _mm256_madd_epi16(p0, ones));
            i1 = _mm256_add_epi32(i1, _mm256_madd_epi16(p1, ones));
        }
        const __m256 dx = _mm256_set1_ps(ex[b]);
        acc0 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)g)),
                               _mm256_mul_ps(_mm256_cvtepi32_ps(i0), dx), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g + 16))),
                               _mm256_mul_ps(_mm256_cvtepi32_ps(i1), dx), acc1);
    }
    _mm256_storeu_ps(s, acc0);
    _mm256_storeu_ps(s + 8, acc1);
}

/* Q4_0, all 16 rows x NT (2..4) tokens: each activation broadcast feeds both halves' maddubs
 * (the broadcasts are a quarter of the 8-row tile's vector ops). The accumulators live in
 * acc[] (memory: 16 ymm hold the int16 chains, weights and broadcasts); the float steps are
 * those of gemm_half_tile. */
static inline __attribute__((always_inline)) void gemm_q4_0_16(int64_t n, const uint8_t *w,
                                                               const uint8_t *act, uint64_t stride,
                                                               float *s, int64_t ld, const int NT) {
    const int64_t nb = n / 32;
    const uint64_t xo = cpulm_pack_act_extras_offset(n);
    const __m256i ones = _mm256_set1_epi16(1), m4 = _mm256_set1_epi8(0x0F);
    __m256 acc[8];
    _Pragma("GCC unroll 8") for (int j = 0; j < 2 * NT; j++) acc[j] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *g = w + (size_t)b * 288;
        __m256i p[8];
        _Pragma("GCC unroll 4") for (int t = 0; t < 4; t++) {
            const __m256i v0 = _mm256_loadu_si256((const __m256i *)(g + 32 + 64 * t));
            const __m256i v1 = _mm256_loadu_si256((const __m256i *)(g + 64 + 64 * t));
            const __m256i l0 = _mm256_and_si256(v0, m4), l1 = _mm256_and_si256(v1, m4);
            const __m256i h0 = _mm256_and_si256(_mm256_srli_epi16(v0, 4), m4),
                          h1 = _mm256_and_si256(_mm256_srli_epi16(v1, 4), m4);
            _Pragma("GCC unroll 4") for (int j = 0; j < NT; j++) {
                const int8_t *xq = ((const cpulm_block_q8_0 *)(act + (size_t)j * stride))[b].qs;
                const __m256i ylo = bcast4_256(xq + 4 * t), yhi = bcast4_256(xq + 16 + 4 * t);
                const __m256i d0 =
                    _mm256_add_epi16(_mm256_maddubs_epi16(l0, ylo), _mm256_maddubs_epi16(h0, yhi));
                const __m256i d1 =
                    _mm256_add_epi16(_mm256_maddubs_epi16(l1, ylo), _mm256_maddubs_epi16(h1, yhi));
                p[2 * j] = chain_256(t == 0 ? d0 : _mm256_add_epi16(p[2 * j], d0));
                p[2 * j + 1] = chain_256(t == 0 ? d1 : _mm256_add_epi16(p[2 * j + 1], d1));
            }
        }
        _Pragma("GCC unroll 4") for (int j = 0; j < NT; j++) {
            const float *ex = (const float *)(act + (size_t)j * stride + xo);
            int32_t c;
            memcpy(&c, ex + nb + b, 4);
            const __m256i cv = _mm256_set1_epi32(c);
            const __m256 dx = _mm256_set1_ps(ex[b]);
            _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
                const __m256i is = _mm256_add_epi32(cv, _mm256_madd_epi16(p[2 * j + h], ones));
                const __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(is), dx);
                const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g + 16 * h)));
                acc[2 * j + h] = _mm256_fmadd_ps(dw, f, acc[2 * j + h]);
            }
        }
    }
    _Pragma("GCC unroll 4") for (int j = 0; j < NT; j++) {
        _mm256_storeu_ps(s + (size_t)j * (size_t)ld, acc[2 * j]);
        _mm256_storeu_ps(s + (size_t)j * (size_t)ld + 8, acc[2 * j + 1]);
    }
}

/* MXFP4, all 16 rows x NT (1..4) tokens, Q4_0's tile with the codes looked up as their
 * doubled E2M1 values plus 12 (0..24, unsigned for maddubs): a pair reaches 2 * 24 * 127 =
 * 6096, so int16 lanes sum two chunks (4 maddubs, 24384 < 32768) before each madd, and the
 * chain starts at -12 * sum(x) = c4 + c4 / 2 (c4 = -8 * sum(x), exact). The float step is
 * every level's acc = fma(dw, dx * float(isum), acc), dw = 2^(e - 128). */
static inline __attribute__((always_inline)) void gemm_mxfp4_16(int64_t n, const uint8_t *w,
                                                                const uint8_t *act, uint64_t stride,
                                                                float *s, int64_t ld,
                                                                const int NT) {
    const int64_t nb = n / 32;
    const uint64_t xo = cpulm_pack_act_extras_offset(n);
    const __m256i ones = _mm256_set1_epi16(1), m4 = _mm256_set1_epi8(0x0F);
    const __m256i lut = x86_mxfp4_lut256(12);
    __m256 acc[8];
    _Pragma("GCC unroll 8") for (int j = 0; j < 2 * NT; j++) acc[j] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *g = w + (size_t)b * 272;
        __m256i is[8];
        _Pragma("GCC unroll 4") for (int j = 0; j < NT; j++) {
            const float *ex = (const float *)(act + (size_t)j * stride + xo);
            int32_t c;
            memcpy(&c, ex + nb + b, 4);
            is[2 * j] = is[2 * j + 1] = _mm256_set1_epi32(c + c / 2);
        }
        _Pragma("GCC unroll 2") for (int t2 = 0; t2 < 4; t2 += 2) {
            __m256i p[8];
            _Pragma("GCC unroll 2") for (int t = t2; t < t2 + 2; t++) {
                const __m256i v0 = _mm256_loadu_si256((const __m256i *)(g + 16 + 64 * t));
                const __m256i v1 = _mm256_loadu_si256((const __m256i *)(g + 48 + 64 * t));
                const __m256i l0 = _mm256_shuffle_epi8(lut, _mm256_and_si256(v0, m4));
                const __m256i l1 = _mm256_shuffle_epi8(lut, _mm256_and_si256(v1, m4));
                const __m256i h0 =
                    _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(v0, 4), m4));
                const __m256i h1 =
                    _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(v1, 4), m4));
                _Pragma("GCC unroll 4") for (int j = 0; j < NT; j++) {
                    const int8_t *xq = ((const cpulm_block_q8_0 *)(act + (size_t)j * stride))[b].qs;
                    const __m256i ylo = bcast4_256(xq + 4 * t), yhi = bcast4_256(xq + 16 + 4 * t);
                    const __m256i d0 = _mm256_add_epi16(_mm256_maddubs_epi16(l0, ylo),
                                                        _mm256_maddubs_epi16(h0, yhi));
                    const __m256i d1 = _mm256_add_epi16(_mm256_maddubs_epi16(l1, ylo),
                                                        _mm256_maddubs_epi16(h1, yhi));
                    p[2 * j] = chain_256(t == t2 ? d0 : _mm256_add_epi16(p[2 * j], d0));
                    p[2 * j + 1] = chain_256(t == t2 ? d1 : _mm256_add_epi16(p[2 * j + 1], d1));
                }
            }
            _Pragma("GCC unroll 8") for (int j = 0; j < 2 * NT; j++) is[j] =
                _mm256_add_epi32(is[j], _mm256_madd_epi16(p[j], ones));
        }
        const __m128i e16 = _mm_loadu_si128((const __m128i *)g);
        const __m256 dw0 = x86_e8m0_half256(_mm256_cvtepu8_epi32(e16));
        const __m256 dw1 = x86_e8m0_half256(_mm256_cvtepu8_epi32(_mm_srli_si128(e16, 8)));
        _Pragma("GCC unroll 4") for (int j = 0; j < NT; j++) {
            const float *ex = (const float *)(act + (size_t)j * stride + xo);
            const __m256 dx = _mm256_set1_ps(ex[b]);
            acc[2 * j] =
                _mm256_fmadd_ps(dw0, _mm256_mul_ps(_mm256_cvtepi32_ps(is[2 * j]), dx), acc[2 * j]);
            acc[2 * j + 1] = _mm256_fmadd_ps(
                dw1, _mm256_mul_ps(_mm256_cvtepi32_ps(is[2 * j + 1]), dx), acc[2 * j + 1]);
        }
    }
    _Pragma("GCC unroll 4") for (int j = 0; j < NT; j++) {
        _mm256_storeu_ps(s + (size_t)j * (size_t)ld, acc[2 * j]);
        _mm256_storeu_ps(s + (size_t)j * (size_t)ld + 8, acc[2 * j + 1]);
    }
}

static void gemm_mxfp4_x16(int64_t n, int nt, float *s, int64_t ld, const void *w,
                           const uint8_t *act, uint64_t stride) {
    for (int j = 0; j < nt; j += 4) {
        const uint8_t *a = act + j * stride;
        float *o = s + j * ld;
        switch (nt - j >= 4 ? 4 : nt - j) {
        case 4: gemm_mxfp4_16(n, w, a, stride, o, ld, 4); break;
        case 3: gemm_mxfp4_16(n, w, a, stride, o, ld, 3); break;
        case 2: gemm_mxfp4_16(n, w, a, stride, o, ld, 2); break;
        default: gemm_mxfp4_16(n, w, a, stride, o, ld, 1); break;
        }
    }
}

/* Tiles of up to 4 tokens; a lone token (decode) takes the one-pass GEMVs. */
static void gemm_q4_0_x16(int64_t n, int nt, float *s, int64_t ld, const void *w,
                          const uint8_t *act, uint64_t stride) {
    for (int j = 0; j < nt; j += 4) {
        const uint8_t *a = act + j * stride;
        float *o = s + j * ld;
        switch (nt - j >= 4 ? 4 : nt - j) {
        case 4: gemm_q4_0_16(n, w, a, stride, o, ld, 4); break;
        case 3: gemm_q4_0_16(n, w, a, stride, o, ld, 3); break;
        case 2: gemm_q4_0_16(n, w, a, stride, o, ld, 2); break;
        default: gemv_q4_0_16(n, o, w, a); break;
        }
    }
}

static void gemm_q8_0_x16(int64_t n, int nt, float *s, int64_t ld, const void *w,
                          const uint8_t *act, uint64_t stride) {
    for (int j = 0; j < nt; j += 4) {
        const uint8_t *a = act + j * stride;
        float *o = s + j * ld;
        if (nt - j == 1) {
            gemv_q8_0_16(n, o, w, a);
            continue;
        }
        for (int half = 0; half < 2; half++) {
            switch (nt - j >= 4 ? 4 : nt - j) {
            case 4: gemm_q8_0_half(n, w, half, a, stride, o, ld, 4); break;
            case 3: gemm_q8_0_half(n, w, half, a, stride, o, ld, 3); break;
            default: gemm_q8_0_half(n, w, half, a, stride, o, ld, 2); break;
            }
        }
    }
}

/* ---- K-quant GEMM over repacked 16-row groups (layouts, float steps in kernels.h) ----
 * As above, a ymm takes one half (8 rows) of a 64-byte chunk, a tile is 8 rows x up to 4
 * tokens. Without VNNI the 4-byte dots are maddubs (unsigned quants x signed Q8_K bytes ->
 * int16 pairs), summed in int16 over as many steps as cannot overflow (Q4_K: 8 steps of
 * pairs <= 2*15*127, Q5_K: 4 of <= 2*31*127, Q6_K: 2 of <= 2*63*127), then madd against
 * the sub-block scale in both int16 halves of each row's lane: int32 and exact. The Q4_K /
 * Q5_K min term and the Q6_K bias term (-32 * sum(sc * b16)) are madds of int16 pairs
 * against the activation extras. The float steps are those of every level. */

/* Tiles of 1-2 tokens stream the weights: prefetch the super-block 2 ahead in address order
 * (see the avx512vnni level). A GEMV over a 57 MB Q4_K matrix: 32 GB/s, the row dot 26. */
#define AVX2_PREFETCH_SB 2
static inline void prefetch_ahead_256(const uint8_t *g, size_t sb) {
    const uintptr_t p = (uintptr_t)g + AVX2_PREFETCH_SB * sb; /* an integer: may pass the end */
    for (size_t o = 0; o < sb; o += 64)
        __builtin_prefetch((const void *)(p + o), 0, 3);
}

/* (v, v) in both int16 halves of each 32-bit lane, v = byte i of the lane, zero- or
 * sign-extended. pshufb indexes within 128-bit lanes, so lane L takes byte 4L + i; the
 * control of lane L is base + (4L + i) * mul (mul places the index in the chosen bytes). */
static inline __m256i lane_byte_ctl(uint32_t base, uint32_t mul, int i) {
    const uint32_t c = base + (uint32_t)i * mul;
    const int c0 = (int)c, c1 = (int)(c + 4 * mul), c2 = (int)(c + 8 * mul),
              c3 = (int)(c + 12 * mul);
    return _mm256_setr_epi32(c0, c1, c2, c3, c0, c1, c2, c3);
}
static inline __m256i lane_byte_pair_u(__m256i v, int i) { /* bytes {x, 0, x, 0} */
    return _mm256_shuffle_epi8(v, lane_byte_ctl(0x80008000u, 0x00010001u, i));
}
static inline __m256i lane_byte_pair_s(__m256i v, int i) { /* bytes {0, x, 0, x} >> 8 */
    return _mm256_srai_epi16(_mm256_shuffle_epi8(v, lane_byte_ctl(0x00800080u, 0x01000100u, i)), 8);
}

/* Q4_K (q5 = 0) / Q5_K, rows 8 * half .. + 7, NT (1..4) tokens. */
static inline __attribute__((always_inline)) void gemm_k4_half(int64_t n, const uint8_t *w, int q5,
                                                               int half, const uint8_t *act,
                                                               uint64_t stride, float *s,
                                                               int64_t ld, const int NT) {
    const int64_t nsb = n / CPULM_QK_K;
    const size_t sb = q5 ? 16 * 176 : 16 * 144, qs_off = q5 ? 48 * 16 : 16 * 16;
    const uint64_t xo = cpulm_pack_actk_extras_offset(n);
    const __m256i m4 = _mm256_set1_epi8(0x0F), b4 = _mm256_set1_epi8(0x10);
    const int steps = q5 ? 4 : 8; /* k-steps summed in int16 before the scale madd */
    __m256 acc[4];
    _Pragma("GCC unroll 4") for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nsb; b++) {
        const uint8_t *g = w + (size_t)b * sb, *gh = g + 32 * half;
        if (NT <= 2 && half == 0) prefetch_ahead_256(g, sb);
        __m256i sumi[4];
        _Pragma("GCC unroll 4") for (int t = 0; t < NT; t++) sumi[t] = _mm256_setzero_si256();
        _Pragma("GCC unroll 8") /* shift counts must be immediates */
            for (int j = 0; j < 8; j++) {
            /* scale j of each row, as an int16 pair (decoded as in k4_scales_mins) */
            const __m256i a = _mm256_loadu_si256((const __m256i *)(gh + 64 * (1 + j / 4)));
            __m256i scv = _mm256_and_si256(a, _mm256_set1_epi8(0x3f));
            if (j >= 4) {
                const __m256i lo = _mm256_loadu_si256((const __m256i *)(gh + 64 * 3));
                const __m256i hi = _mm256_loadu_si256((const __m256i *)(gh + 64));
                scv = _mm256_or_si256(
                    _mm256_and_si256(lo, m4),
                    _mm256_and_si256(_mm256_srli_epi32(hi, 2), _mm256_set1_epi8(0x30)));
            }
            const __m256i sc16 = lane_byte_pair_u(scv, j % 4);
            const uint8_t *q = gh + qs_off + 512 * (j / 2);
            __m256i p[4];
            _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++) {
                const __m256i v = _mm256_loadu_si256((const __m256i *)(q + 64 * k));
                __m256i wv = _mm256_and_si256(j & 1 ? _mm256_srli_epi16(v, 4) : v, m4);
                if (q5) { /* 5th bit: bit j of the qh bytes, moved to bit 4 */
                    const __m256i h = _mm256_loadu_si256((const __m256i *)(gh + 256 + 64 * k));
                    const __m256i hs =
                        j < 4 ? _mm256_slli_epi16(h, 4 - j) : _mm256_srli_epi16(h, j - 4);
                    wv = _mm256_or_si256(wv, _mm256_and_si256(hs, b4));
                }
                _Pragma("GCC unroll 4") for (int t = 0; t < NT; t++) {
                    const int8_t *y =
                        ((const cpulm_block_q8_K *)(act + (size_t)t * stride))[b].qs + 32 * j;
                    const __m256i d16 = _mm256_maddubs_epi16(wv, bcast4_256(y + 4 * k));
                    p[t] = k % steps == 0 ? d16 : _mm256_add_epi16(p[t], d16);
                    if (k % steps == steps - 1)
                        sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(p[t], sc16));
                }
            }
        }
        /* min pairs {m0, m2}, {m1, m3}, {m4, m6}, {m5, m7}: the extras' b32 pairing */
        const __m256i bm = _mm256_loadu_si256((const __m256i *)(gh + 128));
        const __m256i c = _mm256_loadu_si256((const __m256i *)(gh + 192));
        const __m256i mlo = _mm256_and_si256(bm, _mm256_set1_epi8(0x3f));
        const __m256i mhi =
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(c, 4), m4),
                            _mm256_and_si256(_mm256_srli_epi32(bm, 2), _mm256_set1_epi8(0x30)));
        const __m256i lo8 = _mm256_set1_epi32(0x00ff00ff);
        const __m256i mp[4] = {_mm256_and_si256(mlo, lo8), _mm256_srli_epi16(mlo, 8),
                               _mm256_and_si256(mhi, lo8), _mm256_srli_epi16(mhi, 8)};
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g + 16 * half)));
        const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g + 32 + 16 * half)));
        _Pragma("GCC unroll 4") for (int t = 0; t < NT; t++) {
            const uint8_t *row = act + (size_t)t * stride;
            const int32_t *ex = (const int32_t *)(row + xo) + b * CPULM_PACK_ACTK_WORDS;
            __m256i summ = _mm256_setzero_si256();
            _Pragma("GCC unroll 4") for (int pi = 0; pi < 4; pi++) summ =
                _mm256_add_epi32(summ, _mm256_madd_epi16(mp[pi], _mm256_set1_epi32(ex[pi])));
            const __m256 dy = _mm256_set1_ps(((const cpulm_block_q8_K *)row)[b].d);
            acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(d, dy), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
            acc[t] = _mm256_fnmadd_ps(_mm256_mul_ps(dmin, dy), _mm256_cvtepi32_ps(summ), acc[t]);
        }
    }
    _Pragma("GCC unroll 4") for (int t = 0; t < NT; t++)
        _mm256_storeu_ps(s + (size_t)t * (size_t)ld + 8 * half, acc[t]);
}

/* Q6_K, rows 8 * half .. + 7, NT (1..4) tokens; element order as in the avx512vnni level. */
static inline __attribute__((always_inline)) void gemm_k6_half(int64_t n, const uint8_t *w,
                                                               int half, const uint8_t *act,
                                                               uint64_t stride, float *s,
                                                               int64_t ld, const int NT) {
    const int64_t nsb = n / CPULM_QK_K;
    const size_t sb = 16 * 210;
    const uint64_t xo = cpulm_pack_actk_extras_offset(n);
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    __m256 acc[4];
    _Pragma("GCC unroll 4") for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nsb; b++) {
        const uint8_t *g = w + (size_t)b * sb, *gh = g + 32 * half;
        if (NT <= 2 && half == 0) prefetch_ahead_256(g, sb);
        __m256i sumi[4];
        _Pragma("GCC unroll 4") for (int t = 0; t < NT; t++) sumi[t] = _mm256_setzero_si256();
        _Pragma("GCC unroll 16") /* shift counts must be immediates */
            for (int gi = 0; gi < 16; gi++) {
            const int h = gi / 8, sq = gi % 8 / 2, i0 = 4 * (gi % 2);
            const __m256i sc16 = lane_byte_pair_s(
                _mm256_loadu_si256((const __m256i *)(gh + 3072 + 64 * (gi / 4))), gi % 4);
            __m256i p[4];
            _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) {
                const __m256i l = _mm256_loadu_si256(
                    (const __m256i *)(gh + 64 * (16 * h + 8 * (sq & 1) + i0 + i)));
                const __m256i hh =
                    _mm256_loadu_si256((const __m256i *)(gh + 2048 + 64 * (8 * h + i0 + i)));
                const __m256i hs =
                    sq < 2 ? _mm256_slli_epi16(hh, 4 - 2 * sq) : _mm256_srli_epi16(hh, 2 * sq - 4);
                const __m256i lo = sq >> 1 ? _mm256_srli_epi16(l, 4) : l;
                const __m256i wv =
                    _mm256_or_si256(_mm256_and_si256(lo, m4), _mm256_and_si256(hs, m30));
                _Pragma("GCC unroll 4") for (int t = 0; t < NT; t++) {
                    const int8_t *y =
                        ((const cpulm_block_q8_K *)(act + (size_t)t * stride))[b].qs + 16 * gi;
                    const __m256i d16 = _mm256_maddubs_epi16(wv, bcast4_256(y + 4 * i));
                    p[t] = i % 2 == 0 ? d16 : _mm256_add_epi16(p[t], d16);
                    if (i % 2 == 1)
                        sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(p[t], sc16));
                }
            }
        }
        /* bias: sum(sc_g * b16_g) over pairs {sc 4c, 4c+2}, {4c+1, 4c+3} (the extras' order) */
        __m256i scp[8];
        _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(gh + 3072 + 64 * c));
            scp[2 * c] = _mm256_srai_epi16(_mm256_slli_epi16(v, 8), 8);
            scp[2 * c + 1] = _mm256_srai_epi16(v, 8);
        }
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g + 3328 + 16 * half)));
        _Pragma("GCC unroll 4") for (int t = 0; t < NT; t++) {
            const uint8_t *row = act + (size_t)t * stride;
            const int32_t *ex = (const int32_t *)(row + xo) + b * CPULM_PACK_ACTK_WORDS + 4;
            __m256i bias = _mm256_setzero_si256();
            _Pragma("GCC unroll 8") for (int pi = 0; pi < 8; pi++) bias =
                _mm256_add_epi32(bias, _mm256_madd_epi16(scp[pi], _mm256_set1_epi32(ex[pi])));
            const __m256i tot = _mm256_sub_epi32(sumi[t], _mm256_slli_epi32(bias, 5));
            const __m256 dy = _mm256_set1_ps(((const cpulm_block_q8_K *)row)[b].d);
            acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(d, dy), _mm256_cvtepi32_ps(tot), acc[t]);
        }
    }
    _Pragma("GCC unroll 4") for (int t = 0; t < NT; t++)
        _mm256_storeu_ps(s + (size_t)t * (size_t)ld + 8 * half, acc[t]);
}

/* kind: 4, 5 (Q4_K, Q5_K) or 6 (Q6_K); each tile size gets its own unrolled copy. */
static inline __attribute__((always_inline)) void k_half(int kind, int64_t n, const uint8_t *w,
                                                         int half, const uint8_t *a,
                                                         uint64_t stride, float *o, int64_t ld,
                                                         const int NT) {
    if (kind == 6)
        gemm_k6_half(n, w, half, a, stride, o, ld, NT);
    else
        gemm_k4_half(n, w, kind == 5, half, a, stride, o, ld, NT);
}

static inline __attribute__((always_inline)) void gemm_k_x16_256(int kind, int64_t n, int nt,
                                                                 float *s, int64_t ld,
                                                                 const void *w, const uint8_t *act,
                                                                 uint64_t stride) {
    for (int j = 0; j < nt; j += 4) {
        const uint8_t *a = act + j * stride;
        float *o = s + j * ld;
        for (int half = 0; half < 2; half++) {
            switch (nt - j >= 4 ? 4 : nt - j) {
            case 4: k_half(kind, n, w, half, a, stride, o, ld, 4); break;
            case 3: k_half(kind, n, w, half, a, stride, o, ld, 3); break;
            case 2: k_half(kind, n, w, half, a, stride, o, ld, 2); break;
            default: k_half(kind, n, w, half, a, stride, o, ld, 1); break;
            }
        }
    }
}

static void gemm_q4_K_x16(int64_t n, int nt, float *s, int64_t ld, const void *w,
                          const uint8_t *act, uint64_t stride) {
    gemm_k_x16_256(4, n, nt, s, ld, w, act, stride);
}

static void gemm_q5_K_x16(int64_t n, int nt, float *s, int64_t ld, const void *w,
                          const uint8_t *act, uint64_t stride) {
    gemm_k_x16_256(5, n, nt, s, ld, w, act, stride);
}

static void gemm_q6_K_x16(int64_t n, int nt, float *s, int64_t ld, const void *w,
                          const uint8_t *act, uint64_t stride) {
    gemm_k_x16_256(6, n, nt, s, ld, w, act, stride);
}

/* ---- multi-row F32 dots (gemm_rows): 2 weight rows x 2 activation rows ----
 * Each pair keeps canon_dot_f32's 16 lanes (lo, hi), fused in the same order (n % 16 == 0:
 * one accumulator pair; otherwise the four of the 64-element steps, one pass each, then
 * (a0 + a2) + (a1 + a3)), its tree sum and its fmaf tail: the same bits. 8 accumulators, 2
 * weight and 2 activation registers; per 16 columns 8 loads for 8 FMAs instead of 16. */
#define FR2_FMA(r, t)                                       \
    if (R > r && T > t)                                     \
    lo##r##t = _mm256_fmadd_ps(w##r[0], x##t[0], lo##r##t), \
    hi##r##t = _mm256_fmadd_ps(w##r[1], x##t[1], hi##r##t)
#define FR2_LD(v, p, k, K)                                    \
    __m256 v[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()}; \
    if (K > k) v[0] = load8_f32(p + k * ps_##p, i), v[1] = load8_f32(p + k * ps_##p, i + 8)
static inline __attribute__((always_inline)) void frows2_pass(int R, int T, int64_t i0, int64_t i1,
                                                              int64_t step, const float *w,
                                                              int64_t ps_w, const float *x,
                                                              int64_t ps_x, __m256 acc[8][2]) {
    const __m256 z = _mm256_setzero_ps();
    __m256 lo00 = z, hi00 = z, lo01 = z, hi01 = z, lo10 = z, hi10 = z, lo11 = z, hi11 = z;
    for (int64_t i = i0; i < i1; i += step) {
        FR2_LD(x0, x, 0, T);
        FR2_LD(x1, x, 1, T);
        FR2_LD(w0, w, 0, R);
        FR2_LD(w1, w, 1, R);
        FR2_FMA(0, 0);
        FR2_FMA(0, 1);
        FR2_FMA(1, 0);
        FR2_FMA(1, 1);
    }
    acc[0][0] = lo00, acc[0][1] = hi00, acc[1][0] = lo01, acc[1][1] = hi01; /* 2r + t */
    acc[2][0] = lo10, acc[2][1] = hi10, acc[3][0] = lo11, acc[3][1] = hi11;
}
#undef FR2_FMA
#undef FR2_LD

/* R x T pairs: s[t * ld + r] = canon_dot_f32(row r, token t). */
static inline __attribute__((always_inline)) void frows2_block(int R, int T, int64_t n, float *s,
                                                               int64_t ld, const float *w,
                                                               int64_t ws, const float *x,
                                                               int64_t xs) {
    __m256 acc[8][2];
    int64_t np = n;
    if (n % 16 == 0) {
        frows2_pass(R, T, 0, n, 16, w, ws, x, xs, acc);
    } else {
        __m256 a1[8][2], a2[8][2], a3[8][2];
        np = n & ~(int64_t)63;
        frows2_pass(R, T, 0, np, 64, w, ws, x, xs, acc);
        frows2_pass(R, T, 16, np, 64, w, ws, x, xs, a1);
        frows2_pass(R, T, 32, np, 64, w, ws, x, xs, a2);
        frows2_pass(R, T, 48, np, 64, w, ws, x, xs, a3);
        for (int p = 0; p < 4; p++)
            for (int h = 0; h < 2; h++)
                acc[p][h] = _mm256_add_ps(_mm256_add_ps(acc[p][h], a2[p][h]),
                                          _mm256_add_ps(a1[p][h], a3[p][h]));
    }
    float v[4] = {0}; /* pair (r, t) at 2r + t */
    for (int t = 0; t < T; t++)
        for (int r = 0; r < R; r++)
            v[2 * r + t] = x86_reduce16_256(acc[2 * r + t][0], acc[2 * r + t][1]);
    cpulm_frows2_end(R, T, np, n, v, w, ws, x, xs, s, ld);
}

CPULM_FROWS_SHAPE(frows2, frows2_block, 2, 1)
CPULM_FROWS_SHAPE(frows2, frows2_block, 2, 2)
CPULM_FROWS_SHAPE(frows2, frows2_block, 1, 1)
CPULM_FROWS_SHAPE(frows2, frows2_block, 1, 2)

static void gemm_rows_f32(int64_t n, int nr, int nt, float *s, int64_t ld, const void *w,
                          uint64_t ws, const uint8_t *a, uint64_t as) {
    static const cpulm_rows_block_fn two[2] = {frows2_2x1, frows2_2x2};
    static const cpulm_rows_block_fn one[2] = {frows2_1x1, frows2_1x2};
    cpulm_rows_drive(two, one, 2, 2, n, nr, nt, s, ld, w, ws, a, as);
}

/* ---- multi-row F16 dots (gemm_rows): 2 weight rows x 4 activation rows ----
 * Per 8-element step the R weight pieces are converted to double once (kept in registers)
 * and each activation piece once, fused into one 4-lane double accumulator per pair (the
 * generic dot's exact products summed in double; see kernels.h). The tail (n % 8) goes
 * through zero-padded copies. 16 ymm registers: 8 accumulators, 4 weight, 2 activation. */

static inline __attribute__((always_inline)) void rows_cvt8(__m256d d[2], const uint16_t *p) {
    const __m256 f = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
    d[0] = _mm256_cvtps_pd(_mm256_castps256_ps128(f));
    d[1] = _mm256_cvtps_pd(_mm256_extractf128_ps(f, 1));
}

#define ROWS2_FMA(r, t) \
    if (R > r && T > t) \
    a##r##t = _mm256_fmadd_pd(w##r[1], x[1], _mm256_fmadd_pd(w##r[0], x[0], a##r##t))
#define ROWS2_TOK(t)                            \
    if (T > t) {                                \
        __m256d x[2];                           \
        rows_cvt8(x, tail ? tx[t] : xp[t] + i); \
        ROWS2_FMA(0, t);                        \
        ROWS2_FMA(1, t);                        \
    }
#define ROWS2_OUT(r)                                       \
    for (int t_ = 0; t_ < T && R > r; t_++)                \
    s[t_ * ld + r] = (float)rows2_hsum(t_ == 0   ? a##r##0 \
                                       : t_ == 1 ? a##r##1 \
                                       : t_ == 2 ? a##r##2 \
                                                 : a##r##3)

static inline double rows2_hsum(__m256d v) {
    const __m128d h = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    return _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
}

static inline __attribute__((always_inline)) void rows2_block(int R, int T, int64_t n, float *s,
                                                              int64_t ld, const uint8_t *wp,
                                                              uint64_t ws, const uint8_t *ap,
                                                              uint64_t as) {
    const __m256d z = _mm256_setzero_pd();
    __m256d a00 = z, a01 = z, a02 = z, a03 = z, a10 = z, a11 = z, a12 = z, a13 = z;
    const uint16_t *w[2], *xp[4];
    uint16_t tw[2][8], tx[4][8]; /* the zero-padded tails */
    const int64_t nv = n & ~(int64_t)7;
    for (int r = 0; r < R; r++) {
        w[r] = (const uint16_t *)(wp + r * ws);
        memset(tw[r], 0, sizeof tw[r]);
        memcpy(tw[r], w[r] + nv, (size_t)(n - nv) * 2);
    }
    for (int t = 0; t < T; t++) {
        xp[t] = (const uint16_t *)(ap + t * as);
        memset(tx[t], 0, sizeof tx[t]);
        memcpy(tx[t], xp[t] + nv, (size_t)(n - nv) * 2);
    }
    for (int64_t i = 0; i < n; i += 8) {
        const int tail = i == nv; /* the last step reads the padded copies */
        __m256d w0[2], w1[2];
        rows_cvt8(w0, tail ? tw[0] : w[0] + i);
        if (R > 1) rows_cvt8(w1, tail ? tw[1] : w[1] + i);
        ROWS2_TOK(0);
        ROWS2_TOK(1);
        ROWS2_TOK(2);
        ROWS2_TOK(3);
    }
    ROWS2_OUT(0);
    ROWS2_OUT(1);
}

CPULM_ROWS_SHAPES4(CPULM_ROWS_SHAPE, rows2, rows2_block, 2)

static void gemm_rows_f16(int64_t n, int nr, int nt, float *s, int64_t ld, const void *w,
                          uint64_t ws, const uint8_t *a, uint64_t as) {
    static const cpulm_rows_block_fn two[4] = {rows2_2x1, rows2_2x2, rows2_2x3, rows2_2x4};
    static const cpulm_rows_block_fn one[4] = {rows2_1x1, rows2_1x2, rows2_1x3, rows2_1x4};
    if (nt == 1) /* the row dot (f32 products, then double) also converts less */
        cpulm_rows_by_dot(canon_dot_f16, n, nr, s, w, ws, a);
    else
        cpulm_rows_drive(two, one, 2, 4, n, nr, nt, s, ld, w, ws, a, as);
}

const cpulm_kernels cpulm_kernels_avx2 = {
    .name = "avx2",
    .vec_dot =
        {
            [CPULM_DTYPE_F32] = canon_dot_f32,
            [CPULM_DTYPE_F16] = canon_dot_f16,
            [CPULM_DTYPE_BF16] = vec_dot_bf16,
            [CPULM_DTYPE_Q8_0] = vec_dot_q8_0_q8_0,
            [CPULM_DTYPE_Q4_0] = vec_dot_q4_0_q8_0,
            [CPULM_DTYPE_Q4_K] = vec_dot_q4_K_q8_K,
            [CPULM_DTYPE_Q5_K] = vec_dot_q5_K_q8_K,
            [CPULM_DTYPE_Q6_K] = vec_dot_q6_K_q8_K,
            [CPULM_DTYPE_MXFP4] = vec_dot_mxfp4_q8_0,
        },
    .from_float = {[CPULM_DTYPE_Q8_0] = from_float_q8_0,
                   [CPULM_DTYPE_F16] = from_float_f16,
                   [CPULM_DTYPE_Q8_K] = from_float_q8_K},
    .to_float = {[CPULM_DTYPE_F16] = to_float_f16,
                 [CPULM_DTYPE_Q8_0] = to_float_q8_0,
                 [CPULM_DTYPE_Q4_0] = to_float_q4_0},
    .gemm_rows = {[CPULM_DTYPE_F32] = gemm_rows_f32, [CPULM_DTYPE_F16] = gemm_rows_f16},
    .rms_norm = canon_rms_norm,
    .swiglu = canon_swiglu,
    .swiglu_oai = swiglu_oai,
    .rope = rope,
    .softmax = softmax,
    .axpy = axpy,
    .gemm_mins = gemm_mins,
    .dot_f32 = dot_f32,
    .dnet_step = cpulm_avx2_dnet_step,
    .dnet_mm = cpulm_avx2_dnet_mm,
    .dnet_conv = cpulm_avx2_dnet_conv,
    .silu = cpulm_avx2_silu,
    .attn_scores = cpulm_avx2_attn_scores,
    .attn_softmax_row = cpulm_avx2_attn_softmax_row,
    .attn_pv = cpulm_avx2_attn_pv,
    .attn_merge = cpulm_avx2_attn_merge,
    .attn_xscores = cpulm_avx2_attn_xscores,
    .attn_xweights = cpulm_avx2_attn_xweights,
    .attn_xpv = cpulm_avx2_attn_xpv,
    .attn_qquant = cpulm_avx2_attn_qquant,
    .attn_qscores = cpulm_avx2_attn_qscores,
    .attn_softmaxz = cpulm_avx2_attn_softmaxz,
    .attn_qpv = cpulm_avx2_attn_qpv,
    .gemm_x16 = {[CPULM_DTYPE_Q4_0] = gemm_q4_0_x16,
                 [CPULM_DTYPE_Q8_0] = gemm_q8_0_x16,
                 [CPULM_DTYPE_Q4_K] = gemm_q4_K_x16,
                 [CPULM_DTYPE_Q5_K] = gemm_q5_K_x16,
                 [CPULM_DTYPE_Q6_K] = gemm_q6_K_x16,
                 [CPULM_DTYPE_MXFP4] = gemm_mxfp4_x16},
};
#endif
