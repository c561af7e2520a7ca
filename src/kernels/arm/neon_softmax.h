/* neon_softmax.h: the neon online-softmax body shared by attn_softmax_row (with vexp)
 * and attn_softmaxz (with vexpz), both in neon_attn.c: the generic one
 * (cpulm_generic_softmax_with) on 4 lanes, the same max, the same exp per score and the
 * same 16 lane sums. Included only by the neon-level files, after arm.h; always_inline
 * with the exp functions as arguments, so each op gets its own copy with them inlined. */
#ifndef CPULM_KERNELS_ARM_NEON_SOFTMAX_H
#define CPULM_KERNELS_ARM_NEON_SOFTMAX_H

#include "arm.h"
#include "kernels/generic/generic.h"

#if defined(__clang__)
#define NEON_SOFTMAX_UNROLL _Pragma("unroll")
#else
#define NEON_SOFTMAX_UNROLL _Pragma("GCC unroll 8")
#endif

/* s[j..j+4) = vex(s - mx) where j + lane < lim, else 0; returns the stored values. Dead
 * lanes are not exponentiated (their scores may be anything). */
ARM_INLINE float32x4_t neon_exp4_live(float *s, int j, int lim, float32x4_t vm,
                                      float32x4_t (*vex)(float32x4_t)) {
    float32x4_t e;
    if (j + 4 <= lim) {
        e = vex(vsubq_f32(vld1q_f32(s + j), vm));
    } else if (j >= lim) {
        e = vdupq_n_f32(0.0f);
    } else {
        static const int32_t iota[4] = {0, 1, 2, 3};
        const uint32x4_t live =
            vcltq_s32(vaddq_s32(vdupq_n_s32(j), vld1q_s32(iota)), vdupq_n_s32(lim));
        const float32x4_t x = vbslq_f32(live, vld1q_f32(s + j), vm); /* dead: exp(0) */
        e = vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(vex(vsubq_f32(x, vm))), live));
    }
    vst1q_f32(s + j, e);
    return e;
}

/* One row's online-softmax step (kernels.h, attn_softmax_row) with vex on 4 lanes and ex,
 * its scalar twin (the same bits), for the tail and the old sum's scale. */
ARM_INLINE float neon_softmax_with(int n, int lim, float *s, float *M, float *L,
                                   float32x4_t (*vex)(float32x4_t), float (*ex)(float)) {
    float32x4_t vmax = vdupq_n_f32(*M);
    int j = 0;
    for (; j + 4 <= lim; j += 4)
        vmax = vmaxnmq_f32(vmax, vld1q_f32(s + j)); /* maxNum, as fmaxf */
    float mx = vmaxnmvq_f32(vmax);
    for (; j < lim; j++)
        mx = fmaxf(mx, s[j]);
    /* the 16 lane sums: lane l adds the keys j == l mod 16 in order (quarter t: 4t..4t+3) */
    const float32x4_t vm = vdupq_n_f32(mx);
    float32x4_t acc[4] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f),
                          vdupq_n_f32(0.0f)};
    for (j = 0; j + 16 <= n; j += 16)
        NEON_SOFTMAX_UNROLL
    for (int t = 0; t < 4; t++)
        acc[t] = vaddq_f32(acc[t], neon_exp4_live(s, j + 4 * t, lim, vm, vex));
    float lanes[16];
    NEON_SOFTMAX_UNROLL
    for (int t = 0; t < 4; t++)
        vst1q_f32(lanes + 4 * t, acc[t]);
    for (; j + 4 <= n; j += 4) {
        float *l = lanes + j % 16;
        vst1q_f32(l, vaddq_f32(vld1q_f32(l), neon_exp4_live(s, j, lim, vm, vex)));
    }
    for (; j < n; j++) {
        s[j] = j < lim ? ex(s[j] - mx) : 0.0f;
        lanes[j % 16] += s[j];
    }
    /* -inf (nothing seen yet) would make vexp's range reduction NaN: its weight is 0 */
    const float a = *M == -INFINITY ? 0.0f : ex(*M - mx);
    *L = fmaf(*L, a, cpulm_generic_reduce16(lanes));
    *M = mx;
    return a;
}

#endif
