/* avx2_softmax.h: the online-softmax step of the avx2 level's attention, written once for
 * attn_softmax_row (avx2_attn.c, canonical vexp) and attn_softmaxz (avx2_attnq.c, underflow
 * flushed): the caller passes its 8-lane and scalar exp. Only for avx2 translation units
 * (AVX2 + FMA code, reached after dispatch). */
#ifndef CPULM_KERNELS_X86_AVX2_SOFTMAX_H
#define CPULM_KERNELS_X86_AVX2_SOFTMAX_H

#include <immintrin.h>
#include <math.h>

#include "kernels/generic/generic.h"
#include "x86.h"

/* s[j..j+8) = exp(s - mx) where j + lane < lim, else 0; returns the stored values */
typedef __m256 (*avx2_exp8_live_fn)(float *s, int j, int lim, __m256 vm);

/* All ones in the lanes l of 8 with j + l < lim (for the one group of a row that lim cuts). */
static inline __attribute__((always_inline)) __m256 avx2_live8(int j, int lim) {
    const __m256i idx =
        _mm256_add_epi32(_mm256_set1_epi32(j), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    return _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(lim), idx));
}

/* kernels.h's attn_softmax_row contract with exp8 / exp1 as the exponential: the running
 * max, the 16 lane sums (lane l adds the keys j == l mod 16 in order: lo 0-7, hi 8-15, as
 * the generic op), *L and *M updated; returns the old sum's scale. Inlined with constant
 * functions, so no call is left in the loop. */
static inline __attribute__((always_inline)) float avx2_softmax_with(int n, int lim, float *s,
                                                                     float *M, float *L,
                                                                     avx2_exp8_live_fn exp8,
                                                                     float (*exp1)(float)) {
    const float mx = x86_max_f32(s, lim, *M);
    int j;
    const __m256 vm = _mm256_set1_ps(mx);
    __m256 lo = _mm256_setzero_ps(), hi = lo;
    for (j = 0; j + 16 <= n; j += 16) {
        lo = _mm256_add_ps(lo, exp8(s, j, lim, vm));
        hi = _mm256_add_ps(hi, exp8(s, j + 8, lim, vm));
    }
    if (j + 8 <= n) {
        lo = _mm256_add_ps(lo, exp8(s, j, lim, vm));
        j += 8;
    }
    float lanes[16];
    _mm256_storeu_ps(lanes, lo);
    _mm256_storeu_ps(lanes + 8, hi);
    for (; j < n; j++) {
        s[j] = j < lim ? exp1(s[j] - mx) : 0.0f;
        lanes[j % 16] += s[j];
    }
    /* -inf (nothing seen yet) would make vexp's range reduction NaN: its weight is 0 */
    const float a = *M == -INFINITY ? 0.0f : exp1(*M - mx);
    *L = fmaf(*L, a, cpulm_generic_reduce16(lanes));
    *M = mx;
    return a;
}

#endif
