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

const cpulm_kernels cpulm_kernels_avx512vnni = {
    .name = "avx512vnni",
    .vec_dot =
        {
            [CPULM_DTYPE_Q8_0] = vec_dot_q8_0_q8_0,
            [CPULM_DTYPE_Q4_0] = vec_dot_q4_0_q8_0,
        },
};
#endif
