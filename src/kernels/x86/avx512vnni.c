/* avx512vnni.c: the avx512vnni kernel level (Cascade Lake, Ice Lake, Sapphire Rapids,
 * Zen 4), built with the avx512 flags plus -mavx512vnni. Extends avx512.
 *
 * VPDPBUSD multiplies unsigned bytes by signed bytes and adds groups of four straight into
 * int32 lanes: one instruction instead of maddubs + madd, and no int16 saturation. Our
 * weights are signed, so we make them unsigned: Q4_0 nibbles already are (0..15, the -8
 * comes off as 8 * sum(y)), and for Q8_0 we flip the sign bit (x + 128, 0..255) and take off
 * 128 * sum(y). sum(y) itself is one more VPDPBUSD against a constant. Every product and
 * correction is exact for the whole int8 range, -128 included, on both sides.
 */
#if defined(__x86_64__)
#include <string.h>

#include "kernels/kernels.h"
#include "x86.h"

static inline __m512i load_q8_pair(const cpulm_block_q8_0 *b) {
    return x86_join_si512(_mm256_loadu_si256((const __m256i *)b[0].qs),
                          _mm256_loadu_si256((const __m256i *)b[1].qs));
}

/* sum over each group of 4 of (u - bias) * y, with u unsigned and bias the byte in vbias */
static inline __m512i dot_biased_512(__m512i u, __m512i y, __m512i vbias) {
    const __m512i zero = _mm512_setzero_si512();
    return _mm512_sub_epi32(_mm512_dpbusd_epi32(zero, u, y), _mm512_dpbusd_epi32(zero, vbias, y));
}

static inline __m256i dot_biased_256(__m256i u, __m256i y, __m256i vbias) {
    const __m256i zero = _mm256_setzero_si256();
    return _mm256_sub_epi32(_mm256_dpbusd_epi32(zero, u, y), _mm256_dpbusd_epi32(zero, vbias, y));
}

static void vec_dot_q8_0_q8_0(int64_t n, float *s, const void *vx, const void *vy) {
    const cpulm_block_q8_0 *x = vx, *y = vy;
    const int64_t nb = n / 32;
    const __m512i bias = _mm512_set1_epi8((char)0x80);
    __m512 acc = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 1 < nb; i += 2) {
        const __m512i u = _mm512_xor_si512(load_q8_pair(x + i), bias); /* x + 128 */
        const __m512i p = dot_biased_512(u, load_q8_pair(y + i), bias);
        const __m512 d = x86_two_scales(x86_fp16(x[i].d) * x86_fp16(y[i].d),
                                        x86_fp16(x[i + 1].d) * x86_fp16(y[i + 1].d));
        acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(p), acc);
    }
    float sum = _mm512_reduce_add_ps(acc);
    if (i < nb) {
        const __m256i b256 = _mm256_set1_epi8((char)0x80);
        const __m256i u = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)x[i].qs), b256);
        const __m256i p = dot_biased_256(u, _mm256_loadu_si256((const __m256i *)y[i].qs), b256);
        sum += x86_fp16(x[i].d) * x86_fp16(y[i].d) * x86_hsum_ps256(_mm256_cvtepi32_ps(p));
    }
    *s = sum;
}

static void vec_dot_q4_0_q8_0(int64_t n, float *s, const void *vx, const void *vy) {
    const cpulm_block_q4_0 *x = vx;
    const cpulm_block_q8_0 *y = vy;
    const int64_t nb = n / 32;
    const __m512i eight = _mm512_set1_epi8(8);
    __m512 acc = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 1 < nb; i += 2) {
        const __m512i u = x86_join_si512(x86_nibbles_32(x[i].qs), x86_nibbles_32(x[i + 1].qs));
        const __m512i p = dot_biased_512(u, load_q8_pair(y + i), eight);
        const __m512 d = x86_two_scales(x86_fp16(x[i].d) * x86_fp16(y[i].d),
                                        x86_fp16(x[i + 1].d) * x86_fp16(y[i + 1].d));
        acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(p), acc);
    }
    float sum = _mm512_reduce_add_ps(acc);
    if (i < nb) {
        const __m256i p = dot_biased_256(x86_nibbles_32(x[i].qs),
                                         _mm256_loadu_si256((const __m256i *)y[i].qs),
                                         _mm256_set1_epi8(8));
        sum += x86_fp16(x[i].d) * x86_fp16(y[i].d) * x86_hsum_ps256(_mm256_cvtepi32_ps(p));
    }
    *s = sum;
}

/* ---- GEMM over repacked 16-row groups (layouts in kernels.h) ----
 * One zmm holds 4 consecutive quants of each of 16 rows, so VPDPBUSD against 4 activation
 * bytes broadcast to every lane advances 16 dot products by 4 elements. A block's 8 such
 * vectors are unpacked once and reused for up to 8 tokens, whose 8 independent chains hide
 * the instruction's latency (and blocks overlap, each starting a fresh chain). Weights
 * enter unsigned (Q4_0 nibbles u = q + 8; Q8_0 u = q + 128 by flipping the sign bit); each
 * chain starts from the bias correction (-8 or -128 times sum(x), from the activation
 * row's extras), so it ends at the exact integer dot. Per block and token:
 * acc = fma(dw, dx * float(isum), acc), in block order, the same for every tile size.
 * The constant-count loops carry unroll pragmas: at -O2 GCC keeps them rolled, which puts
 * wv[] and acc[] on the stack and halves the throughput. */

#define TILE_T 8

static inline void unpack_q4_x16(const uint8_t *q, __m512i w[8]) {
    const __m512i m = _mm512_set1_epi8(0x0F);
    _Pragma("GCC unroll 8")
    for (int t = 0; t < 4; t++) {
        const __m512i v = _mm512_loadu_si512(q + 64 * t);
        w[t] = _mm512_and_si512(v, m);
        w[t + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m);
    }
}

static inline void unpack_q8_x16(const uint8_t *q, __m512i w[8]) {
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    _Pragma("GCC unroll 8")
    for (int s = 0; s < 8; s++) w[s] = _mm512_xor_si512(_mm512_loadu_si512(q + 64 * s), flip);
}

static inline __m512i bcast4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* NT (1..TILE_T) tokens against one group; q8 selects the weight type. Inlined per NT. */
static inline __attribute__((always_inline)) void gemm_tile(int64_t n, const uint8_t *w, int q8,
                                                            const uint8_t *act,
                                                            uint64_t stride, float *s,
                                                            int64_t ld, const int NT) {
    const int64_t nb = n / 32;
    const size_t blk = q8 ? 2 * 16 + 32 * 16 : 2 * 16 + 16 * 16;
    const uint64_t xo = cpulm_pack_act_extras_offset(n);
    const int64_t corr = q8 ? 2 * nb : nb; /* offset of c8 or c4 in int32s after d */
    __m512 acc[TILE_T];
    _Pragma("GCC unroll 8")
    for (int j = 0; j < NT; j++) acc[j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *g = w + (size_t)b * blk;
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)g));
        __m512i wv[8];
        if (q8) unpack_q8_x16(g + 32, wv);
        else unpack_q4_x16(g + 32, wv);
        _Pragma("GCC unroll 8")
        for (int j = 0; j < NT; j++) {
            const uint8_t *row = act + (size_t)j * stride;
            const int8_t *xq = ((const cpulm_block_q8_0 *)row)[b].qs;
            const float *ex = (const float *)(row + xo);
            int32_t c;
            memcpy(&c, ex + corr + b, 4);
            __m512i is = _mm512_set1_epi32(c);
            _Pragma("GCC unroll 8")
            for (int k = 0; k < 8; k++) is = _mm512_dpbusd_epi32(is, wv[k], bcast4(xq + 4 * k));
            const __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(is), _mm512_set1_ps(ex[b]));
            acc[j] = _mm512_fmadd_ps(dw, f, acc[j]);
        }
    }
    _Pragma("GCC unroll 8")
    for (int j = 0; j < NT; j++) _mm512_storeu_ps(s + (size_t)j * (size_t)ld, acc[j]);
}

static inline __attribute__((always_inline)) void gemm_x16(int64_t n, int nt, float *s,
                                                           int64_t ld, const void *w,
                                                           const uint8_t *act,
                                                           uint64_t stride, int q8) {
    int j = 0;
    for (; j + TILE_T <= nt; j += TILE_T)
        gemm_tile(n, w, q8, act + j * stride, stride, s + j * ld, ld, TILE_T);
    const uint8_t *a = act + j * stride;
    float *o = s + j * ld;
    switch (nt - j) {
    case 7: gemm_tile(n, w, q8, a, stride, o, ld, 7); break;
    case 6: gemm_tile(n, w, q8, a, stride, o, ld, 6); break;
    case 5: gemm_tile(n, w, q8, a, stride, o, ld, 5); break;
    case 4: gemm_tile(n, w, q8, a, stride, o, ld, 4); break;
    case 3: gemm_tile(n, w, q8, a, stride, o, ld, 3); break;
    case 2: gemm_tile(n, w, q8, a, stride, o, ld, 2); break;
    case 1: gemm_tile(n, w, q8, a, stride, o, ld, 1); break;
    default: break;
    }
}

static void gemm_q4_0_x16(int64_t n, int nt, float *s, int64_t ld, const void *w,
                          const uint8_t *act, uint64_t stride) {
    gemm_x16(n, nt, s, ld, w, act, stride, 0);
}

static void gemm_q8_0_x16(int64_t n, int nt, float *s, int64_t ld, const void *w,
                          const uint8_t *act, uint64_t stride) {
    gemm_x16(n, nt, s, ld, w, act, stride, 1);
}

const cpulm_kernels cpulm_kernels_avx512vnni = {
    .name = "avx512vnni",
    .vec_dot =
        {
            [CPULM_DTYPE_Q8_0] = vec_dot_q8_0_q8_0,
            [CPULM_DTYPE_Q4_0] = vec_dot_q4_0_q8_0,
        },
    .gemm_x16 =
        {
            [CPULM_DTYPE_Q8_0] = gemm_q8_0_x16,
            [CPULM_DTYPE_Q4_0] = gemm_q4_0_x16,
        },
};
#endif
