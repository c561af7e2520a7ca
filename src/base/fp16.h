/* fp16.h: scalar IEEE half and bfloat16 <-> float conversions (static inline, no ISA).
 * Rounding is round-to-nearest-even, matching what llama.cpp writes into files. */
#ifndef CPULM_BASE_FP16_H
#define CPULM_BASE_FP16_H

#include <stdint.h>
#include <string.h>

static inline uint32_t cpulm_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float cpulm_bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline float cpulm_fp16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    if (exp == 0) {
        if (mant == 0) return cpulm_bits_f32(sign);
        /* subnormal: value = mant * 2^-24 */
        float v = (float)mant * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    if (exp == 31) return cpulm_bits_f32(sign | 0x7f800000u | (mant << 13));
    return cpulm_bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

static inline uint16_t cpulm_f32_to_fp16(float f) {
    uint32_t x = cpulm_f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return (uint16_t)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* rounds to >= 65520: inf */
    if (ax < 0x38800000u) {                                  /* below 2^-14: subnormal or 0 */
        /* add 0.5 to shift the value into the subnormal range; FP rounding does RNE */
        float v = cpulm_bits_f32(ax) + 0.5f;
        return (uint16_t)(sign | (cpulm_f32_bits(v) - 0x3f000000u));
    }
    uint32_t mant_odd = (ax >> 13) & 1;
    ax += 0xc8000fffu + mant_odd; /* rebias exponent (-112 << 23) and round to nearest even */
    return (uint16_t)(sign | (ax >> 13));
}

static inline float cpulm_bf16_to_f32(uint16_t h) {
    return cpulm_bits_f32((uint32_t)h << 16);
}

static inline uint16_t cpulm_f32_to_bf16(float f) {
    uint32_t u = cpulm_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 64); /* quiet NaN */
    return (uint16_t)((u + (0x7fff + ((u >> 16) & 1))) >> 16);
}

/* AVX512-BF16's conversion (vcvtneps2bf16) for finite f: nearest even, with an input of
 * exponent field 0 (zero, subnormal) taken as a zero of its sign (DAZ). */
static inline uint16_t cpulm_f32_to_bf16_daz(float f) {
    uint32_t u = cpulm_f32_bits(f);
    if ((u & 0x7f800000u) == 0) u &= 0x80000000u;
    return (uint16_t)((u + (0x7fff + ((u >> 16) & 1))) >> 16);
}

/* Two floats as a bf16 pair (cpulm_f32_to_bf16_daz each), lo in the low half: the operand
 * layout of vdpbf16ps and of the attn_b* ops. */
static inline uint32_t cpulm_bf16_pair(float lo, float hi) {
    return (uint32_t)cpulm_f32_to_bf16_daz(lo) | (uint32_t)cpulm_f32_to_bf16_daz(hi) << 16;
}

#endif
