/* neon.c: the neon kernel level (armv8.0-a Advanced SIMD: Cortex-A53 / A72 and every
 * later aarch64 core), built with -march=armv8-a. Reached only through cpulm_kernels_neon
 * after dispatch.c saw HWCAP_ASIMD. Entries left NULL inherit the generic ones.
 *
 * Quantized dots use widening multiplies (smull) and pairwise adds into int32, exact for
 * all int8 inputs; the dotprod level replaces them with SDOT. Activation quantizers are
 * bit-identical to the reference: FCVTAS rounds half away from zero exactly like roundf,
 * FCVTNS to nearest-even like the reference's magic-number nearest_int, and FCVTN (f32 ->
 * f16) rounds to nearest-even under the default FPCR, like cpulm_f32_to_fp16. The
 * attention tile ops (attn_scores ... attn_qpv) are in neon_attn.c.
 */
#if defined(__aarch64__)
#include "arm.h"
#include "neon_dnet.h"
#include "kernels/rows.h"

/* ---- quantized dots ---- */

static void vec_dot_q8_0_q8_0(int64_t n, float *s, const void *x, const void *y) {
    arm_vec_dot_q8_0(n, s, x, y, arm_dot16_mull);
}

static void vec_dot_q4_0_q8_0(int64_t n, float *s, const void *x, const void *y) {
    arm_vec_dot_q4_0(n, s, x, y, arm_dot16_mull);
}

static void vec_dot_mxfp4_q8_0(int64_t n, float *s, const void *x, const void *y) {
    arm_vec_dot_mxfp4(n, s, x, y, arm_dot16_mull);
}

static void vec_dot_q4_K_q8_K(int64_t n, float *s, const void *x, const void *y) {
    arm_vec_dot_k4(n, s, x, y, 0, arm_dot16_mull);
}

static void vec_dot_q5_K_q8_K(int64_t n, float *s, const void *x, const void *y) {
    arm_vec_dot_k4(n, s, x, y, 1, arm_dot16_mull);
}

static void vec_dot_q6_K_q8_K(int64_t n, float *s, const void *x, const void *y) {
    arm_vec_dot_q6_K(n, s, x, y, arm_dot16_mull);
}

/* ---- GEMM over repacked 16-row groups (gemm_x16) ----
 * Without SDOT the int8 products come from SMULL / SMLAL (8 per instruction, widening to
 * int16). A 4x4 transpose of 32-bit lanes turns a quad's vectors for elements 0..15 (and
 * 16..31) into one vector per row holding its 16 consecutive quants, so they multiply the
 * token's plainly loaded bytes lane by lane (low halves by SMULL, high by SMULL2): 16
 * shuffles per quad and block, shared by the tile's tokens, none per token. Q4_0 nibbles
 * (0..15) let int16 lanes sum 4 products, then two pairwise adds (16 products, |sum| <=
 * 16 * 15 * 128 < 2^15) and one widening pairwise add onto the bias correction give the 4
 * rows' exact dots. Q8_0 products (up to 2^14) widen into int32 at every step. The float
 * step is generic's acc = fma(dw, dx * float(isum), acc), whatever the tile.
 * Per block and quad of an 8-token tile (32 outputs; objdump, GCC 12 -O2, pre-allocation
 * scheduling off, see ARM_NO_PRESCHED) the loop is 265 instructions for Q4_0 (128
 * multiplies, 16 shuffles, no stack traffic; about 7 vector ops per output) and 371 for
 * Q8_0 (about 10); the row-by-row vec_dot takes 27 and 24 instructions (19 and 15 vector
 * ops) per output. */

#define NEON_TILE 8

/* 4x4 transpose of 32-bit lanes: r[i] = lane i of v[0], v[1], v[2], v[3]. */
ARM_INLINE void neon_transpose4(const int8x16_t v[4], int8x16_t r[4]) {
    const int32x4_t a = vreinterpretq_s32_s8(v[0]), b = vreinterpretq_s32_s8(v[1]);
    const int32x4_t c = vreinterpretq_s32_s8(v[2]), d = vreinterpretq_s32_s8(v[3]);
    const int64x2_t t0 = vreinterpretq_s64_s32(vtrn1q_s32(a, b));
    const int64x2_t t1 = vreinterpretq_s64_s32(vtrn2q_s32(a, b));
    const int64x2_t t2 = vreinterpretq_s64_s32(vtrn1q_s32(c, d));
    const int64x2_t t3 = vreinterpretq_s64_s32(vtrn2q_s32(c, d));
    r[0] = vreinterpretq_s8_s64(vtrn1q_s64(t0, t2));
    r[1] = vreinterpretq_s8_s64(vtrn1q_s64(t1, t3));
    r[2] = vreinterpretq_s8_s64(vtrn2q_s64(t0, t2));
    r[3] = vreinterpretq_s8_s64(vtrn2q_s64(t1, t3));
}

/* Exact dots of the quad's 4 rows (w[h][r]: row r, elements 16h..16h+15) with one token's
 * block (x[h]: elements 16h..16h+15); Q4_0 nibble weights get the bias correction corr. */
ARM_INLINE int32x4_t neon_quad_dot(const int8x16_t w[2][4], const int8x16_t x[2], int q8,
                                   int32x4_t corr) {
    if (!q8) {
        int16x8_t p[4];
        _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++) {
            p[r] = vmull_s8(vget_low_s8(w[0][r]), vget_low_s8(x[0]));
            p[r] = vmlal_high_s8(p[r], w[0][r], x[0]);
            p[r] = vmlal_s8(p[r], vget_low_s8(w[1][r]), vget_low_s8(x[1]));
            p[r] = vmlal_high_s8(p[r], w[1][r], x[1]);
        }
        return vpadalq_s16(corr, vpaddq_s16(vpaddq_s16(p[0], p[1]), vpaddq_s16(p[2], p[3])));
    }
    int32x4_t a[4];
    _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++) {
        a[r] = vpaddlq_s16(vmull_s8(vget_low_s8(w[0][r]), vget_low_s8(x[0])));
        a[r] = vpadalq_s16(a[r], vmull_high_s8(w[0][r], x[0]));
        a[r] = vpadalq_s16(a[r], vmull_s8(vget_low_s8(w[1][r]), vget_low_s8(x[1])));
        a[r] = vpadalq_s16(a[r], vmull_high_s8(w[1][r], x[1]));
    }
    return vpaddq_s32(vpaddq_s32(a[0], a[1]), vpaddq_s32(a[2], a[3]));
}

ARM_INLINE void neon_quad(int64_t n, const uint8_t *w, int q8, int quad, const arm_x16_act *a,
                          float *s, int64_t ld, const int NT) {
    const size_t blk_bytes = q8 ? ARM_X16_Q8_BLOCK : ARM_X16_Q4_BLOCK;
    float32x4_t acc[NEON_TILE];
    _Pragma("GCC unroll 8") for (int j = 0; j < NT; j++) acc[j] = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < n / 32; b++) {
        const uint8_t *g = w + (size_t)b * blk_bytes;
        int8x16_t v[8], wr[2][4];
        arm_x16_quad(g, q8, quad, v);
        neon_transpose4(v, wr[0]);
        neon_transpose4(v + 4, wr[1]);
        const float32x4_t dw = arm_x16_quad_scales(g, quad);
        _Pragma("GCC unroll 8") for (int j = 0; j < NT; j++) {
            const int8x16_t x[2] = {vld1q_s8(a[j].x[b].qs), vld1q_s8(a[j].x[b].qs + 16)};
            const int32x4_t corr = q8 ? vdupq_n_s32(0) : vld1q_dup_s32(a[j].corr + b);
            const int32x4_t is = neon_quad_dot((const int8x16_t(*)[4])wr, x, q8, corr);
            const float32x4_t f = vmulq_n_f32(vcvtq_f32_s32(is), a[j].d[b]);
            acc[j] = vfmaq_f32(acc[j], dw, f);
        }
    }
    _Pragma("GCC unroll 8") for (int j = 0; j < NT; j++)
        vst1q_f32(s + (size_t)j * (size_t)ld + 4 * quad, acc[j]);
}

ARM_INLINE void neon_tile(int64_t n, const uint8_t *w, int q8, const uint8_t *act, uint64_t stride,
                          float *s, int64_t ld, const int NT) {
    arm_x16_act a[NEON_TILE];
    _Pragma("GCC unroll 8") for (int j = 0; j < NT; j++) a[j] =
        arm_x16_act_row(act + (size_t)j * stride, n, q8);
    for (int quad = 0; quad < 4; quad++)
        neon_quad(n, w, q8, quad, a, s, ld, NT);
}

ARM_INLINE void neon_gemm(int64_t n, int nt, float *s, int64_t ld, const void *w,
                          const uint8_t *act, uint64_t stride, int q8) {
#define NEON_CALL(j0, NT) \
    neon_tile(n, w, q8, act + (size_t)(j0)*stride, stride, s + (j0)*ld, ld, NT)
    ARM_X16_TILES(NEON_TILE, NEON_CALL);
#undef NEON_CALL
}

ARM_NO_PRESCHED static void gemm_q4_0_x16(int64_t n, int nt, float *s, int64_t ld, const void *w,
                                          const uint8_t *act, uint64_t stride) {
    neon_gemm(n, nt, s, ld, w, act, stride, 0);
}

ARM_NO_PRESCHED static void gemm_q8_0_x16(int64_t n, int nt, float *s, int64_t ld, const void *w,
                                          const uint8_t *act, uint64_t stride) {
    neon_gemm(n, nt, s, ld, w, act, stride, 1);
}

/* MXFP4 (layout in kernels.h: e[16], then Q4_0's chunks): the quad's codes looked up as
 * their doubled E2M1 values (-12..12), then Q4_0's int16 quad dot with no correction
 * (16 products per row, |sum| <= 16 * 12 * 127 < 2^15), then the same float step with
 * dw = 2^(e - 128) built from the exponent bits (cpulm_e8m0_half's). */
ARM_INLINE void neon_mxfp4_quad_codes(const uint8_t *blk, int i, int8x16_t v[8]) {
    const int8x16_t lut = vld1q_s8(cpulm_mxfp4_values2);
    const uint8_t *q = blk + 16 + 16 * i;
    _Pragma("GCC unroll 4") for (int t = 0; t < 4; t++) {
        const uint8x16_t u = vld1q_u8(q + 64 * t);
        v[t] = vqtbl1q_s8(lut, vandq_u8(u, vdupq_n_u8(0x0F)));
        v[t + 4] = vqtbl1q_s8(lut, vshrq_n_u8(u, 4));
    }
}

ARM_INLINE float32x4_t neon_mxfp4_quad_scales(const uint8_t *blk, int i) {
    uint32_t e4;
    memcpy(&e4, blk + 4 * i, 4);
    const uint32x4_t e = vmovl_u16(vget_low_u16(vmovl_u8(vcreate_u8(e4))));
    const uint32x4_t one = vdupq_n_u32(1);
    const uint32x4_t norm = vshlq_n_u32(vsubq_u32(e, one), 23);
    const uint32x4_t sub = vshlq_u32(vdupq_n_u32(0x00200000), vreinterpretq_s32_u32(e));
    return vreinterpretq_f32_u32(vbslq_u32(vcgtq_u32(e, one), norm, sub));
}

ARM_INLINE void neon_mxfp4_quad(int64_t n, const uint8_t *w, int quad, const arm_x16_act *a,
                                float *s, int64_t ld, const int NT) {
    float32x4_t acc[NEON_TILE];
    _Pragma("GCC unroll 8") for (int j = 0; j < NT; j++) acc[j] = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < n / 32; b++) {
        const uint8_t *g = w + (size_t)b * 272;
        int8x16_t v[8], wr[2][4];
        neon_mxfp4_quad_codes(g, quad, v);
        neon_transpose4(v, wr[0]);
        neon_transpose4(v + 4, wr[1]);
        const float32x4_t dw = neon_mxfp4_quad_scales(g, quad);
        _Pragma("GCC unroll 8") for (int j = 0; j < NT; j++) {
            const int8x16_t x[2] = {vld1q_s8(a[j].x[b].qs), vld1q_s8(a[j].x[b].qs + 16)};
            const int32x4_t is = neon_quad_dot((const int8x16_t(*)[4])wr, x, 0, vdupq_n_s32(0));
            const float32x4_t f = vmulq_n_f32(vcvtq_f32_s32(is), a[j].d[b]);
            acc[j] = vfmaq_f32(acc[j], dw, f);
        }
    }
    _Pragma("GCC unroll 8") for (int j = 0; j < NT; j++)
        vst1q_f32(s + (size_t)j * (size_t)ld + 4 * quad, acc[j]);
}

ARM_INLINE void neon_mxfp4_tile(int64_t n, const uint8_t *w, const uint8_t *act, uint64_t stride,
                                float *s, int64_t ld, const int NT) {
    arm_x16_act a[NEON_TILE];
    _Pragma("GCC unroll 8") for (int j = 0; j < NT; j++) a[j] =
        arm_x16_act_row(act + (size_t)j * stride, n, 1);
    for (int quad = 0; quad < 4; quad++)
        neon_mxfp4_quad(n, w, quad, a, s, ld, NT);
}

ARM_NO_PRESCHED static void gemm_mxfp4_x16(int64_t n, int nt, float *s, int64_t ld, const void *w,
                                           const uint8_t *act, uint64_t stride) {
#define NEON_CALL(j0, NT) \
    neon_mxfp4_tile(n, w, act + (size_t)(j0)*stride, stride, s + (j0)*ld, ld, NT)
    ARM_X16_TILES(NEON_TILE, NEON_CALL);
#undef NEON_CALL
}

/* ---- bf16 and attention-score dots: 16 elements per step in 4 accumulators, then 4-wide,
 * then scalar (not canonical: their order is free) ---- */

typedef float32x4_t (*load4_fn)(const void *p, int64_t i);
typedef float (*load1_fn)(const void *p, int64_t i);

ARM_INLINE float32x4_t load4_f32(const void *p, int64_t i) {
    return vld1q_f32((const float *)p + i);
}
ARM_INLINE float32x4_t load4_bf16(const void *p, int64_t i) {
    return arm_load4_bf16((const uint16_t *)p + i);
}
ARM_INLINE float load1_f32(const void *p, int64_t i) {
    return ((const float *)p)[i];
}
ARM_INLINE float load1_bf16(const void *p, int64_t i) {
    return arm_bf16(((const uint16_t *)p)[i]);
}

ARM_INLINE float float_dot(int64_t n, const void *x, const void *y, load4_fn load4,
                           load1_fn load1) {
    float32x4_t a0 = vdupq_n_f32(0.0f), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 = vfmaq_f32(a0, load4(x, i), load4(y, i));
        a1 = vfmaq_f32(a1, load4(x, i + 4), load4(y, i + 4));
        a2 = vfmaq_f32(a2, load4(x, i + 8), load4(y, i + 8));
        a3 = vfmaq_f32(a3, load4(x, i + 12), load4(y, i + 12));
    }
    for (; i + 4 <= n; i += 4)
        a0 = vfmaq_f32(a0, load4(x, i), load4(y, i));
    float sum = vaddvq_f32(vaddq_f32(vaddq_f32(a0, a1), vaddq_f32(a2, a3)));
    for (; i < n; i++)
        sum += load1(x, i) * load1(y, i);
    return sum;
}

static void vec_dot_bf16(int64_t n, float *s, const void *x, const void *y) {
    *s = float_dot(n, x, y, load4_bf16, load1_bf16);
}

static float dot_f32(int64_t n, const float *x, const float *y) {
    return float_dot(n, x, y, load4_f32, load1_f32);
}

/* ---- activation quantizers (bit-identical to quant.c) ---- */

/* 4 x 4 int32 (already in -127..127) -> 16 int8, in order */
ARM_INLINE int8x16_t narrow16(int32x4_t a, int32x4_t b, int32x4_t c, int32x4_t d) {
    const int16x8_t lo = vcombine_s16(vqmovn_s32(a), vqmovn_s32(b));
    const int16x8_t hi = vcombine_s16(vqmovn_s32(c), vqmovn_s32(d));
    return vcombine_s8(vqmovn_s16(lo), vqmovn_s16(hi));
}

/* Same amax (maxnm ignores NaN like fmaxf), same d = amax / 127 and id = 1 / d, same
 * x * id, and roundf reproduced by FCVTAS. */
static void from_float_q8_0(const float *x, void *vy, int64_t n) {
    cpulm_block_q8_0 *y = vy;
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        float32x4_t v[8], amax = vdupq_n_f32(0.0f);
        for (int k = 0; k < 8; k++) {
            v[k] = vld1q_f32(x + 4 * k);
            amax = vmaxnmq_f32(amax, vabsq_f32(v[k]));
        }
        const float d = vmaxnmvq_f32(amax) / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = arm_to_fp16(d);
        int32x4_t q[8];
        for (int k = 0; k < 8; k++)
            q[k] = vcvtaq_s32_f32(vmulq_n_f32(v[k], id));
        vst1q_s8(y[i].qs, narrow16(q[0], q[1], q[2], q[3]));
        vst1q_s8(y[i].qs + 16, narrow16(q[4], q[5], q[6], q[7]));
    }
}

/* The element of largest magnitude with its sign; on a +a / -a tie the first one wins,
 * as in the reference's strict > scan. */
static float signed_absmax_256(const float *x) {
    float32x4_t mx = vld1q_f32(x), mn = mx;
    for (int j = 4; j < CPULM_QK_K; j += 4) {
        const float32x4_t v = vld1q_f32(x + j);
        mx = vmaxq_f32(mx, v);
        mn = vminq_f32(mn, v);
    }
    const float hi = vmaxvq_f32(mx), lo = -vminvq_f32(mn);
    if (hi != lo) return hi > lo ? hi : -lo;
    for (int j = 0; j < CPULM_QK_K; j++)
        if (fabsf(x[j]) == hi) return x[j];
    return 0.0f;
}

/* Q8_K: iscale = -127 / max (max signed), q = min(nearest_even(iscale * x), 127), bsums
 * of 16, d = 1 / iscale; an all-zero block is all zeros. */
static void from_float_q8_K(const float *x, void *vy, int64_t n) {
    cpulm_block_q8_K *y = vy;
    const int32x4_t top = vdupq_n_s32(127);
    for (int64_t i = 0; i < n / CPULM_QK_K; i++, x += CPULM_QK_K) {
        const float max = signed_absmax_256(x);
        if (max == 0.0f) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        const float iscale = -127.0f / max;
        if (!isfinite(iscale)) { /* a subnormal extreme: the reference's overflow behaviour */
            cpulm_quantize_row_q8_K_ref(x, &y[i], CPULM_QK_K);
            continue;
        }
        for (int g = 0; g < 16; g++) {
            int32x4_t q[4];
            for (int k = 0; k < 4; k++)
                q[k] = vminq_s32(vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(x + 16 * g + 4 * k), iscale)),
                                 top);
            const int8x16_t q8 = narrow16(q[0], q[1], q[2], q[3]);
            vst1q_s8(y[i].qs + 16 * g, q8);
            y[i].bsums[g] = vaddlvq_s8(q8);
        }
        y[i].d = 1.0f / iscale;
    }
}

static void from_float_f16(const float *x, void *vy, int64_t n) {
    uint16_t *y = vy;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        vst1_u16(y + i, vreinterpret_u16_f16(vcvt_f16_f32(vld1q_f32(x + i))));
    for (; i < n; i++)
        y[i] = arm_to_fp16(x[i]);
}

static void to_float_f16(const void *vx, float *y, int64_t n) {
    const uint16_t *x = vx;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        vst1q_f32(y + i, arm_load4_f16(x + i));
    for (; i < n; i++)
        y[i] = arm_fp16(x[i]);
}

/* Round to nearest even on the bit pattern (add 0x7fff plus the lowest kept bit, keep the
 * top half); NaNs keep their top half with the quiet bit set, as the reference does. */
static void from_float_bf16(const float *x, void *vy, int64_t n) {
    uint16_t *y = vy;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const float32x4_t v = vld1q_f32(x + i);
        const uint32x4_t u = vreinterpretq_u32_f32(v);
        const uint32x4_t odd = vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(1));
        const uint32x4_t r = vaddq_u32(u, vaddq_u32(odd, vdupq_n_u32(0x7fff)));
        const uint32x4_t nan = vorrq_u32(u, vdupq_n_u32(64u << 16));
        const uint32x4_t out = vbslq_u32(vceqq_f32(v, v), r, nan);
        vst1_u16(y + i, vshrn_n_u32(out, 16));
    }
    if (i < n) cpulm_quantize_row_bf16_ref(x + i, y + i, n - i);
}

static void to_float_bf16(const void *vx, float *y, int64_t n) {
    const uint16_t *x = vx;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        vst1q_f32(y + i, arm_load4_bf16(x + i));
    for (; i < n; i++)
        y[i] = arm_bf16(x[i]);
}

/* ---- canonical float arithmetic ----
 * F32/F16 dots, rms_norm, swiglu and the f16 accumulators compute exactly what the generic
 * oracle computes (generic/dot.c, generic/vec.c), operation for operation, so float models
 * give the same logits at every level. The dotprod, i8mm and sve levels inherit these: a
 * canonical F32 dot has 16 lanes whatever the vector length, which 4 NEON registers hold. */

/* acc += x[i..i+15] * y[i..i+15], fused lane by lane */
ARM_INLINE void fma16(float32x4_t acc[4], const float *x, const float *y) {
    for (int q = 0; q < 4; q++)
        acc[q] = vfmaq_f32(acc[q], vld1q_f32(x + 4 * q), vld1q_f32(y + 4 * q));
}

static void canon_dot_f32(int64_t n, float *s, const void *vx, const void *vy) {
    const float *x = vx, *y = vy;
    float32x4_t a[4][4];
    for (int j = 0; j < 4; j++)
        for (int q = 0; q < 4; q++)
            a[j][q] = vdupq_n_f32(0.0f);
    if (n % 16 == 0) {
        for (int64_t i = 0; i < n; i += 16)
            fma16(a[0], x + i, y + i);
        *s = arm_reduce16(a[0]);
        return;
    }
    const int64_t np = n & ~(int64_t)63;
    for (int64_t i = 0; i < np; i += 64)
        for (int j = 0; j < 4; j++)
            fma16(a[j], x + i + 16 * j, y + i + 16 * j);
    for (int q = 0; q < 4; q++) /* (a0 + a2) + (a1 + a3), lane-wise */
        a[0][q] = vaddq_f32(vaddq_f32(a[0][q], a[2][q]), vaddq_f32(a[1][q], a[3][q]));
    float sum = arm_reduce16(a[0]);
    for (int64_t i = np; i < n; i++)
        sum = fmaf(x[i], y[i], sum);
    *s = sum;
}

/* Exact f32 products summed in double: order-independent in practice (see generic/dot.c),
 * so four double accumulators may take them. */
static void canon_dot_f16(int64_t n, float *s, const void *vx, const void *vy) {
    const uint16_t *x = vx, *y = vy;
    float64x2_t d0 = vdupq_n_f64(0.0), d1 = d0, d2 = d0, d3 = d0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const float32x4_t p0 = vmulq_f32(arm_load4_f16(x + i), arm_load4_f16(y + i));
        const float32x4_t p1 = vmulq_f32(arm_load4_f16(x + i + 4), arm_load4_f16(y + i + 4));
        d0 = vaddq_f64(d0, vcvt_f64_f32(vget_low_f32(p0)));
        d1 = vaddq_f64(d1, vcvt_high_f64_f32(p0));
        d2 = vaddq_f64(d2, vcvt_f64_f32(vget_low_f32(p1)));
        d3 = vaddq_f64(d3, vcvt_high_f64_f32(p1));
    }
    double sum = vaddvq_f64(vaddq_f64(vaddq_f64(d0, d1), vaddq_f64(d2, d3)));
    for (; i < n; i++)
        sum += (double)(arm_fp16(x[i]) * arm_fp16(y[i]));
    *s = (float)sum;
}

/* ---- multi-row F32 dots (gemm_rows): 2 weight rows x 2 activation rows ----
 * Each pair keeps canon_dot_f32's 16 lanes (four quarters), fused in the same order (n % 16
 * == 0: one accumulator; otherwise the four of the 64-element steps, one pass each, then
 * (a0 + a2) + (a1 + a3)), its tree sum and its fmaf tail: the same bits. Per 16 columns 16
 * loads for 16 FMAs instead of 32, and one call per 4 pairs. */
ARM_INLINE void frows_pass(int R, int T, int64_t i0, int64_t i1, int64_t step, const float *w,
                           int64_t ws, const float *x, int64_t xs, float32x4_t acc[4][4]) {
    for (int p = 0; p < 4; p++)
        for (int q = 0; q < 4; q++)
            acc[p][q] = vdupq_n_f32(0.0f);
    for (int64_t i = i0; i < i1; i += step)
        for (int q = 0; q < 4; q++) {
            float32x4_t xv[2] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)}, wv[2] = {xv[0], xv[0]};
            for (int t = 0; t < 2; t++)
                if (T > t) xv[t] = vld1q_f32(x + t * xs + i + 4 * q);
            for (int r = 0; r < 2; r++)
                if (R > r) wv[r] = vld1q_f32(w + r * ws + i + 4 * q);
            for (int r = 0; r < 2; r++)
                for (int t = 0; t < 2; t++)
                    if (R > r && T > t)
                        acc[2 * r + t][q] = vfmaq_f32(acc[2 * r + t][q], wv[r], xv[t]);
        }
}

/* R x T pairs: s[t * ld + r] = canon_dot_f32(row r, token t). */
ARM_INLINE void frows_block(int R, int T, int64_t n, float *s, int64_t ld, const float *w,
                            int64_t ws, const float *x, int64_t xs) {
    float32x4_t acc[4][4];
    int64_t np = n;
    if (n % 16 == 0) {
        frows_pass(R, T, 0, n, 16, w, ws, x, xs, acc);
    } else {
        float32x4_t a1[4][4], a2[4][4], a3[4][4];
        np = n & ~(int64_t)63;
        frows_pass(R, T, 0, np, 64, w, ws, x, xs, acc);
        frows_pass(R, T, 16, np, 64, w, ws, x, xs, a1);
        frows_pass(R, T, 32, np, 64, w, ws, x, xs, a2);
        frows_pass(R, T, 48, np, 64, w, ws, x, xs, a3);
        for (int p = 0; p < 4; p++)
            for (int q = 0; q < 4; q++)
                acc[p][q] =
                    vaddq_f32(vaddq_f32(acc[p][q], a2[p][q]), vaddq_f32(a1[p][q], a3[p][q]));
    }
    float v[4] = {0}; /* pair (r, t) at 2r + t */
    for (int t = 0; t < T; t++)
        for (int r = 0; r < R; r++)
            v[2 * r + t] = arm_reduce16(acc[2 * r + t]);
    cpulm_frows2_end(R, T, np, n, v, w, ws, x, xs, s, ld);
}

CPULM_FROWS_SHAPE(frows, frows_block, 2, 1)
CPULM_FROWS_SHAPE(frows, frows_block, 2, 2)
CPULM_FROWS_SHAPE(frows, frows_block, 1, 1)
CPULM_FROWS_SHAPE(frows, frows_block, 1, 2)

static void gemm_rows_f32(int64_t n, int nr, int nt, float *s, int64_t ld, const void *w,
                          uint64_t ws, const uint8_t *a, uint64_t as) {
    static const cpulm_rows_block_fn two[2] = {frows_2x1, frows_2x2};
    static const cpulm_rows_block_fn one[2] = {frows_1x1, frows_1x2};
    cpulm_rows_drive(two, one, 2, 2, n, nr, nt, s, ld, w, ws, a, as);
}

/* ---- multi-row F16 dots (gemm_rows): 4 weight rows x 4 activation rows ----
 * Per 4-element step each weight and activation piece is converted to double once and
 * fused into one 2-lane double accumulator per pair (the generic dot's exact products
 * summed in double; see kernels.h). The tail (n % 4) reads zero-padded copies. */

ARM_INLINE void rows_cvt4(float64x2_t d[2], const uint16_t *p) {
    const float32x4_t f = arm_load4_f16(p);
    d[0] = vcvt_f64_f32(vget_low_f32(f));
    d[1] = vcvt_high_f64_f32(f);
}

#define NROWS_FMA(r, t) \
    if (R > r && T > t) a##r##t = vfmaq_f64(vfmaq_f64(a##r##t, w[0], x##t[0]), w[1], x##t[1])
#define NROWS_ROW(r)                            \
    if (R > r) {                                \
        float64x2_t w[2];                       \
        rows_cvt4(w, tail ? tw[r] : wr[r] + i); \
        NROWS_FMA(r, 0);                        \
        NROWS_FMA(r, 1);                        \
        NROWS_FMA(r, 2);                        \
        NROWS_FMA(r, 3);                        \
    }
#define NROWS_X(t) \
    if (T > t) rows_cvt4(x##t, tail ? tx[t] : xr[t] + i)
#define NROWS_OUT(r)                                       \
    for (int t_ = 0; t_ < T && R > r; t_++)                \
    s[t_ * ld + r] = (float)vaddvq_f64(t_ == 0   ? a##r##0 \
                                       : t_ == 1 ? a##r##1 \
                                       : t_ == 2 ? a##r##2 \
                                                 : a##r##3)

ARM_INLINE void rows_block(int R, int T, int64_t n, float *s, int64_t ld, const uint8_t *wp,
                           uint64_t ws, const uint8_t *ap, uint64_t as) {
    const float64x2_t z = vdupq_n_f64(0.0);
    float64x2_t a00 = z, a01 = z, a02 = z, a03 = z, a10 = z, a11 = z, a12 = z, a13 = z;
    float64x2_t a20 = z, a21 = z, a22 = z, a23 = z, a30 = z, a31 = z, a32 = z, a33 = z;
    const uint16_t *wr[4], *xr[4];
    uint16_t tw[4][4], tx[4][4]; /* the zero-padded tails */
    const int64_t nv = n & ~(int64_t)3;
    for (int r = 0; r < R; r++) {
        wr[r] = (const uint16_t *)(wp + r * ws);
        memset(tw[r], 0, sizeof tw[r]);
        memcpy(tw[r], wr[r] + nv, (size_t)(n - nv) * 2);
    }
    for (int t = 0; t < T; t++) {
        xr[t] = (const uint16_t *)(ap + t * as);
        memset(tx[t], 0, sizeof tx[t]);
        memcpy(tx[t], xr[t] + nv, (size_t)(n - nv) * 2);
    }
    for (int64_t i = 0; i < n; i += 4) {
        const int tail = i == nv; /* the last step reads the padded copies */
        float64x2_t x0[2], x1[2], x2[2], x3[2];
        NROWS_X(0);
        NROWS_X(1);
        NROWS_X(2);
        NROWS_X(3);
        NROWS_ROW(0);
        NROWS_ROW(1);
        NROWS_ROW(2);
        NROWS_ROW(3);
    }
    NROWS_OUT(0);
    NROWS_OUT(1);
    NROWS_OUT(2);
    NROWS_OUT(3);
}

CPULM_ROWS_SHAPES4(CPULM_ROWS_SHAPE, rows, rows_block, 4)

static void gemm_rows_f16(int64_t n, int nr, int nt, float *s, int64_t ld, const void *w,
                          uint64_t ws, const uint8_t *a, uint64_t as) {
    static const cpulm_rows_block_fn four[4] = {rows_4x1, rows_4x2, rows_4x3, rows_4x4};
    static const cpulm_rows_block_fn one[4] = {rows_1x1, rows_1x2, rows_1x3, rows_1x4};
    cpulm_rows_drive(four, one, 4, 4, n, nr, nt, s, ld, w, ws, a, as);
}

/* The sum of squares stays sequential in double (canonical); only the scaling is vector. */
static void canon_rms_norm(int64_t n, float *y, const float *x, const float *w, float eps) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)(x[i] * x[i]);
    const float scale = 1.0f / sqrtf((float)(sum / (double)n) + eps);
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        vst1q_f32(y + i, vmulq_f32(vmulq_n_f32(vld1q_f32(x + i), scale), vld1q_f32(w + i)));
    for (; i < n; i++)
        y[i] = (x[i] * scale) * w[i];
}

/* Elements in whole groups of 16 take the polynomial exp, the rest libm's expf (canonical). */
static void canon_swiglu(int64_t n, float *y, const float *g, const float *u) {
    const float32x4_t one = vdupq_n_f32(1.0f);
    const int64_t nv = n & ~(int64_t)15;
    int64_t i = 0;
    for (; i < nv; i += 4) {
        const float32x4_t vg = vld1q_f32(g + i);
        const float32x4_t silu = vdivq_f32(vg, vaddq_f32(one, arm_canon_vexp(vnegq_f32(vg))));
        vst1q_f32(y + i, vmulq_f32(silu, vld1q_f32(u + i)));
    }
    for (; i < n; i++)
        y[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

/* ---- other f32 vector ops (order free) ---- */

static void softmax(int64_t n, float *x) {
    float32x4_t vmax = vdupq_n_f32(-INFINITY);
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        vmax = vmaxq_f32(vmax, vld1q_f32(x + i));
    float max = vmaxvq_f32(vmax);
    for (; i < n; i++)
        max = fmaxf(max, x[i]);
    float32x4_t vsum = vdupq_n_f32(0.0f);
    for (i = 0; i + 4 <= n; i += 4) {
        const float32x4_t e = arm_exp_f32x4(vsubq_f32(vld1q_f32(x + i), vdupq_n_f32(max)));
        vst1q_f32(x + i, e);
        vsum = vaddq_f32(vsum, e);
    }
    float sum = vaddvq_f32(vsum);
    for (; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += x[i];
    }
    const float inv = 1.0f / sum;
    for (i = 0; i + 4 <= n; i += 4)
        vst1q_f32(x + i, vmulq_n_f32(vld1q_f32(x + i), inv));
    for (; i < n; i++)
        x[i] *= inv;
}

/* kernels.h's gemm_mins: 16 rows as 4 vectors, 2 groups' chains side by side */
static void gemm_mins(int64_t nb, int nt, int ng, const float *m, const uint8_t *s, uint64_t ss,
                      float *out, int64_t ld) {
    for (int j = 0; j < nt; j++) {
        const float *sj = (const float *)(s + (size_t)j * ss);
        for (int q0 = 0; q0 < ng; q0 += 2) {
            const int gq = ng - q0 < 2 ? ng - q0 : 2;
            float32x4_t acc[8];
            for (int i = 0; i < 8; i++)
                acc[i] = vdupq_n_f32(0.0f);
            for (int64_t b = 0; b < nb; b++)
                for (int q = 0; q < gq; q++) {
                    const float *mq = m + ((q0 + q) * nb + b) * 16;
                    for (int v = 0; v < 4; v++)
                        acc[4 * q + v] = vfmaq_n_f32(acc[4 * q + v], vld1q_f32(mq + 4 * v), sj[b]);
                }
            for (int q = 0; q < gq; q++)
                for (int v = 0; v < 4; v++) {
                    float *o = out + j * ld + 16 * (q0 + q) + 4 * v;
                    vst1q_f32(o, vaddq_f32(vld1q_f32(o), acc[4 * q + v]));
                }
        }
    }
}

static void axpy(int64_t n, float *y, float a, const float *x) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        vst1q_f32(y + i, vfmaq_n_f32(vld1q_f32(y + i), vld1q_f32(x + i), a));
    for (; i < n; i++)
        y[i] += a * x[i];
}

const cpulm_kernels cpulm_kernels_neon = {
    .name = "neon",
    .vec_dot =
        {
            [CPULM_DTYPE_F32] = canon_dot_f32,
            [CPULM_DTYPE_F16] = canon_dot_f16,
            [CPULM_DTYPE_BF16] = vec_dot_bf16,
            [CPULM_DTYPE_Q8_0] = vec_dot_q8_0_q8_0,
            [CPULM_DTYPE_Q4_0] = vec_dot_q4_0_q8_0,
            [CPULM_DTYPE_MXFP4] = vec_dot_mxfp4_q8_0,
            [CPULM_DTYPE_Q4_K] = vec_dot_q4_K_q8_K,
            [CPULM_DTYPE_Q5_K] = vec_dot_q5_K_q8_K,
            [CPULM_DTYPE_Q6_K] = vec_dot_q6_K_q8_K,
        },
    .from_float =
        {
            [CPULM_DTYPE_F16] = from_float_f16,
            [CPULM_DTYPE_BF16] = from_float_bf16,
            [CPULM_DTYPE_Q8_0] = from_float_q8_0,
            [CPULM_DTYPE_Q8_K] = from_float_q8_K,
        },
    .to_float = {[CPULM_DTYPE_F16] = to_float_f16, [CPULM_DTYPE_BF16] = to_float_bf16},
    .gemm_rows = {[CPULM_DTYPE_F32] = gemm_rows_f32, [CPULM_DTYPE_F16] = gemm_rows_f16},
    .rms_norm = canon_rms_norm,
    .swiglu = canon_swiglu,
    .softmax = softmax,
    .axpy = axpy,
    .gemm_mins = gemm_mins,
    .dot_f32 = dot_f32,
    .dnet_step = cpulm_neon_dnet_step,
    .dnet_mm = cpulm_neon_dnet_mm,
    .dnet_conv = cpulm_neon_dnet_conv,
    .silu = cpulm_neon_silu,
    .attn_scores = cpulm_neon_attn_scores,
    .attn_softmax_row = cpulm_neon_attn_softmax_row,
    .attn_pv = cpulm_neon_attn_pv,
    .attn_merge = cpulm_neon_attn_merge,
    .attn_xscores = cpulm_neon_attn_xscores,
    .attn_xweights = cpulm_neon_attn_xweights,
    .attn_xpv = cpulm_neon_attn_xpv,
    .attn_qquant = cpulm_neon_attn_qquant,
    .attn_qscores = cpulm_neon_attn_qscores,
    .attn_softmaxz = cpulm_neon_attn_softmaxz,
    .attn_qpv = cpulm_neon_attn_qpv,
    .gemm_x16 =
        {
            [CPULM_DTYPE_Q8_0] = gemm_q8_0_x16,
            [CPULM_DTYPE_Q4_0] = gemm_q4_0_x16,
            [CPULM_DTYPE_MXFP4] = gemm_mxfp4_x16,
        },
};
#endif
