/* neon_attn.c: the neon level's attention tile ops (contracts in kernels.h: attn_*, attn_x*,
 * attn_q*), built with the neon flags (-march=armv8-a) and reached through
 * cpulm_kernels_neon (neon.c's table); dotprod, i8mm and sve inherit them (dotprod overrides
 * attn_qscores, dotprod_attn.c). attn_scores, attn_pv, attn_merge, attn_xpv, attn_qquant,
 * attn_qpv and the two softmax ops are attn_simd.h's over the 4-lane layer below. Every op is
 * bit-identical to generic/attn.c, by the arguments of docs/CORRECTNESS.md "Default attention
 * numerics and the tiled path": per element the generic order, integer block dots exact in any
 * order (SMULL / SMLAL on the query widened to int16: 32 products of at most 128 * 128); the exact
 * scores put 2 query rows in the lanes of a float64x2, the exact weights evaluate glibc's aarch64
 * expf in float64x2 lanes, the f16 rounding is FCVTN / FCVTL (nearest even under the default FPCR).
 */
#if defined(__aarch64__)
#define ARM_MCA_LEVEL "neon"
#include "arm.h"
#include "kernels/attn_simd.h"
#include "neon_unroll.h"
#include "format/quant.h"

/* ======== f32 tiles (attn_scores' keys, attn_pv's block; the ops are attn_simd.h's) ======== */

/* kt[c * ATT_SK_KEYS + j] = k_j[c] for j < nk (lanes past nk repeat key nk - 1, never stored),
 * c < dc (a multiple of 4), by 4 x 4 register transposes. */
static void asv_transpose_keys(const float *k, int64_t ldk, int nk, int dc, float *kt) {
    for (int j0 = 0; j0 < nk; j0 += 4)
        for (int c = 0; c < dc; c += 4) {
            float32x4_t r[4];
            NEON_UNROLL
            for (int x = 0; x < 4; x++)
                r[x] = vld1q_f32(k + (int64_t)(j0 + x < nk ? j0 + x : nk - 1) * ldk + c);
            const float32x4x2_t p01 = vtrnq_f32(r[0], r[1]), p23 = vtrnq_f32(r[2], r[3]);
            float *o = kt + (int64_t)c * ATT_SK_KEYS + j0;
            vst1q_f32(o, vcombine_f32(vget_low_f32(p01.val[0]), vget_low_f32(p23.val[0])));
            vst1q_f32(o + ATT_SK_KEYS,
                      vcombine_f32(vget_low_f32(p01.val[1]), vget_low_f32(p23.val[1])));
            vst1q_f32(o + 2 * ATT_SK_KEYS,
                      vcombine_f32(vget_high_f32(p01.val[0]), vget_high_f32(p23.val[0])));
            vst1q_f32(o + 3 * ATT_SK_KEYS,
                      vcombine_f32(vget_high_f32(p01.val[1]), vget_high_f32(p23.val[1])));
        }
}

/* The first nl (1..4) lanes at p; the others 0. */
ARM_INLINE float32x4_t ld_lanes(const float *p, int nl) {
    if (nl == 4) return vld1q_f32(p);
    float b[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int l = 0; l < nl; l++)
        b[l] = p[l];
    return vld1q_f32(b);
}

ARM_INLINE void st_lanes(float *p, float32x4_t x, int nl) {
    if (nl == 4) {
        vst1q_f32(p, x);
        return;
    }
    float b[4];
    vst1q_f32(b, x);
    for (int l = 0; l < nl; l++)
        p[l] = b[l];
}

/* Every lane the f16 block scale at p (2 bytes, any alignment). */
ARM_INLINE float32x4_t neon_scale_at(const uint8_t *p) {
    __fp16 h;
    memcpy(&h, p, 2);
    return vdupq_n_f32((float)h); /* FCVT of the scalar: the multiplies take it by element */
}

/* asv_store_q8: x[0..8)'s 32 lanes to int8 at p (FCVTNS: nearest even, as the generic
 * nearbyintf; |x| < 127.5, so the narrowing keeps every value) */
ARM_INLINE void neon_store_q8(int8_t *p, const float32x4_t x[8]) {
    int16x8_t h[4];
    for (int t = 0; t < 4; t++)
        h[t] = vcombine_s16(vmovn_s32(vcvtnq_s32_f32(x[2 * t])),
                            vmovn_s32(vcvtnq_s32_f32(x[2 * t + 1])));
    vst1q_s8(p, vcombine_s8(vmovn_s16(h[0]), vmovn_s16(h[1])));
    vst1q_s8(p + 16, vcombine_s8(vmovn_s16(h[2]), vmovn_s16(h[3])));
}

/* 16 values of a key as floats (asv_qvals). Every int8 converts exactly. */
ARM_INLINE void neon_qvals(const int MODE, const void *q, float32x4_t v[4]) {
    int8x16_t x;
    if (MODE != ATT_VQ8) {
        const uint8x16_t u = vld1q_u8(q);
        x = vsubq_s8(vreinterpretq_s8_u8(MODE == ATT_VQ4H ? vshrq_n_u8(u, 4)
                                                          : vandq_u8(u, vdupq_n_u8(0x0f))),
                     vdupq_n_s8(8));
    } else {
        x = vld1q_s8(q);
    }
    const int16x8_t lo = vmovl_s8(vget_low_s8(x)), hi = vmovl_high_s8(x);
    v[0] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo)));
    v[1] = vcvtq_f32_s32(vmovl_high_s16(lo));
    v[2] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi)));
    v[3] = vcvtq_f32_s32(vmovl_high_s16(hi));
}

/* ---- P.V ---- */

/* The key loop's body is already 4 keys x R x V FMLAs: clang would unroll it once more
 * (twice the code for no gain, and differently with the arm-perf markers in it). */
#if defined(__clang__)
#define PV_KEEP_LOOP _Pragma("clang loop unroll(disable)")
#else
#define PV_KEEP_LOOP
#endif

/* Key L of a step of 4: every row's fma by lane L of its 4 weights (FMLA by element). */
#define PV_KEY(L)                                                                  \
    do {                                                                           \
        const float *vj = v + (int64_t)(j + (L)) * ldv;                            \
        float32x4_t vv[4];                                                         \
        NEON_FOR(c, V, 4) vv[c] = vld1q_f32(vj + 4 * c);                           \
        NEON_FOR(r, R, 4)                                                          \
        NEON_FOR(c, V, 4) acc[r][c] = vfmaq_laneq_f32(acc[r][c], vv[c], pw[r], L); \
    } while (0)

/* R rows x V vectors of 4 dims (at most 4 x 4: 16 accumulators, 4 weight and 4 value
 * registers): o = o * a, then o = fma(p_j, v_j, o) over the keys in order. */
ARM_INLINE void pv_block(int n, const float *p, int64_t ldp, const float *v, int64_t ldv,
                         const float *a, float *o, int64_t ldo, const int R, const int V) {
    float32x4_t acc[4][4];
    NEON_FOR(r, R, 4)
    NEON_FOR(c, V, 4) acc[r][c] = vmulq_n_f32(vld1q_f32(o + r * ldo + 4 * c), a[r]);
    int j = 0;
    PV_KEEP_LOOP
    for (; j < (n & ~3); j += 4) {
        if (R == 4 && V == 4) ARM_MCA_BEGIN(ARM_MCA_LEVEL "_attn_pv");
        float32x4_t pw[4];
        NEON_FOR(r, R, 4) pw[r] = vld1q_f32(p + r * ldp + j);
        PV_KEY(0);
        PV_KEY(1);
        PV_KEY(2);
        PV_KEY(3);
        if (R == 4 && V == 4) ARM_MCA_END(ARM_MCA_LEVEL "_attn_pv");
    }
    for (; j < n; j++) {
        const float *vj = v + (int64_t)j * ldv;
        NEON_FOR(r, R, 4)
        NEON_FOR(c, V, 4) acc[r][c] = vfmaq_n_f32(acc[r][c], vld1q_f32(vj + 4 * c), p[r * ldp + j]);
    }
    NEON_FOR(r, R, 4) NEON_FOR(c, V, 4) vst1q_f32(o + r * ldo + 4 * c, acc[r][c]);
}
#undef PV_KEY
#undef PV_KEEP_LOOP

/* ======== the exact numerics (attn_x*) ======== */

/* Full unrolling of the exact ops' small constant loops (up to 16 trips). */
#if defined(__clang__)
#define NEON_XUNROLL _Pragma("unroll")
#else
#define NEON_XUNROLL _Pragma("GCC unroll 16")
#endif

/* ---- scores ---- */

/* Rows 2v, 2v + 1 of the block at element c; the odd last row alone (lane 1 = 0: reading
 * past the block's last row could leave the buffer). */
ARM_INLINE float64x2_t xq_load(const double *p, int pair) {
    return pair ? vld1q_f64(p) : vcombine_f64(vld1_f64(p), vdup_n_f64(0.0));
}

/* `rows` (<= 2 NV) rows x KJ keys into s. Key elements come two at a time (c, c + 1) as
 * doubles, each lane used by one fused multiply-add per row pair, in c order. */
ARM_INLINE void xscores_keys(int64_t d, const double *qt, int64_t ldqt, int rows, const float *k,
                             int64_t ldk, float scale, float *s, int64_t lds, const int NV,
                             const int KJ) {
    float64x2_t acc[16];
    const int pair = rows - 2 * (NV - 1) == 2;
    NEON_XUNROLL
    for (int u = 0; u < NV * KJ; u++)
        acc[u] = vdupq_n_f64(0.0);
    int64_t c = 0;
    for (; c + 2 <= d; c += 2) {
        float64x2_t q0[4], q1[4], kv[8];
        NEON_XUNROLL
        for (int v = 0; v < NV; v++) {
            q0[v] = xq_load(qt + c * ldqt + 2 * v, v < NV - 1 || pair);
            q1[v] = xq_load(qt + (c + 1) * ldqt + 2 * v, v < NV - 1 || pair);
        }
        NEON_XUNROLL
        for (int kk = 0; kk < KJ; kk++)
            kv[kk] = vcvt_f64_f32(vld1_f32(k + kk * ldk + c));
        NEON_XUNROLL
        for (int v = 0; v < NV; v++) {
            NEON_XUNROLL
            for (int kk = 0; kk < KJ; kk++)
                acc[v * KJ + kk] = vfmaq_laneq_f64(acc[v * KJ + kk], q0[v], kv[kk], 0);
        }
        NEON_XUNROLL
        for (int v = 0; v < NV; v++) {
            NEON_XUNROLL
            for (int kk = 0; kk < KJ; kk++)
                acc[v * KJ + kk] = vfmaq_laneq_f64(acc[v * KJ + kk], q1[v], kv[kk], 1);
        }
    }
    if (c < d) { /* odd d: the last element */
        NEON_XUNROLL
        for (int v = 0; v < NV; v++) {
            const float64x2_t q0 = xq_load(qt + c * ldqt + 2 * v, v < NV - 1 || pair);
            NEON_XUNROLL
            for (int kk = 0; kk < KJ; kk++)
                acc[v * KJ + kk] = vfmaq_n_f64(acc[v * KJ + kk], q0, (double)k[kk * ldk + c]);
        }
    }
    NEON_XUNROLL
    for (int v = 0; v < NV; v++) {
        NEON_XUNROLL
        for (int kk = 0; kk < KJ; kk++) {
            const float32x2_t f = vmul_n_f32(vcvt_f32_f64(acc[v * KJ + kk]), scale);
            s[2 * v * lds + kk] = vget_lane_f32(f, 0);
            if (2 * v + 1 < rows) s[(2 * v + 1) * lds + kk] = vget_lane_f32(f, 1);
        }
    }
}

/* Up to 2 NV rows x every key, KJ keys at a time (the last ones one by one). */
ARM_INLINE void xscores_pass(int64_t d, int rows, const double *qt, int64_t ldqt, int n,
                             const float *k, int64_t ldk, float scale, float *s, int64_t lds,
                             const int NV, const int KJ) {
    int j = 0;
    for (; j + KJ <= n; j += KJ)
        xscores_keys(d, qt, ldqt, rows, k + j * ldk, ldk, scale, s + j, lds, NV, KJ);
    for (; j < n; j++)
        xscores_keys(d, qt, ldqt, rows, k + j * ldk, ldk, scale, s + j, lds, NV, 1);
}

void cpulm_neon_attn_xscores(int64_t d, int m, int n, const double *qt, int64_t ldqt,
                             const float *k, int64_t ldk, float scale, float *s, int64_t lds) {
    for (int i0 = 0; i0 < m; i0 += 8) {
        const int rows = m - i0 < 8 ? m - i0 : 8;
        const double *q = qt + i0;
        float *si = s + (int64_t)i0 * lds;
        switch ((rows + 1) / 2) { /* >= 8 accumulators: enough in flight for the latency */
        case 1: xscores_pass(d, rows, q, ldqt, n, k, ldk, scale, si, lds, 1, 8); break;
        case 2: xscores_pass(d, rows, q, ldqt, n, k, ldk, scale, si, lds, 2, 4); break;
        case 3: xscores_pass(d, rows, q, ldqt, n, k, ldk, scale, si, lds, 3, 4); break;
        default: xscores_pass(d, rows, q, ldqt, n, k, ldk, scale, si, lds, 4, 4); break;
        }
    }
}

/* ---- weights ---- */

/* expf of 4 floats, the same bits as glibc's expf (2.27 and later; e_expf.c as the aarch64
 * libm is built, disassembled: z = x * 32/ln2 rounded, k = round-half-away(z) by FRINTA and
 * FCVTAS, r = z - k, 2^(k/32) from the table of 2^(i/32) bits less i << 47 (glibc's
 * __exp2f_data) plus k << 47, y = fma(fma(C0, r, C1), r*r, fma(C2, r, 1)) * 2^(k/32)
 * rounded to float; its special cases below). attn_xweights_expf_is_libms compares it
 * (through attn_xweights) with this process's libm over floats in [-104, 0], the arguments
 * attention passes; the level uses it only when built against glibc. */
static const uint64_t xexp_tab[32] = {
    0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51,
    0x3fef72b83c7d517b, 0x3fef54873168b9aa, 0x3fef387a6e756238, 0x3fef1e9df51fdee1,
    0x3fef06fe0a31b715, 0x3feef1a7373aa9cb, 0x3feedea64c123422, 0x3feece086061892d,
    0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429, 0x3feea47eb03a5585,
    0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74, 0x3feea11473eb0187, 0x3feea589994cce13,
    0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d,
    0x3feee89f995ad3ad, 0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069,
    0x3fef5818dcfba487, 0x3fef7c97337b9b5f, 0x3fefa4afa2a490da, 0x3fefd0765b6e4540,
};

ARM_INLINE float64x2_t xexp2(float64x2_t xd) {
    const float64x2_t z = vmulq_f64(xd, vdupq_n_f64(0x1.71547652b82fep+5));
    const int64x2_t ki = vcvtaq_s64_f64(z);
    const float64x2_t r = vsubq_f64(z, vrndaq_f64(z));
    const uint64x2_t ku = vreinterpretq_u64_s64(ki);
    const uint64x2_t t = {xexp_tab[vgetq_lane_u64(ku, 0) & 31],
                          xexp_tab[vgetq_lane_u64(ku, 1) & 31]};
    const float64x2_t sc = vreinterpretq_f64_u64(vaddq_u64(t, vshlq_n_u64(ku, 47)));
    const float64x2_t p =
        vfmaq_f64(vdupq_n_f64(0x1.ebfce50fac4f3p-13), vdupq_n_f64(0x1.c6af84b912394p-20), r);
    const float64x2_t y = vfmaq_f64(vdupq_n_f64(1.0), vdupq_n_f64(0x1.62e42ff0c52d6p-6), r);
    return vmulq_f64(vfmaq_f64(y, p, vmulq_f64(r, r)), sc);
}

#if defined(__GLIBC__)
#define XEXP_EXACT 1
#else
#define XEXP_EXACT 0
#endif

ARM_INLINE float32x4_t xexpf4(float32x4_t x) {
    if (!XEXP_EXACT) {
        float a[4];
        vst1q_f32(a, x);
        for (int l = 0; l < 4; l++)
            a[l] = expf(a[l]);
        return vld1q_f32(a);
    }
    float32x4_t f = vcombine_f32(vcvt_f32_f64(xexp2(vcvt_f64_f32(vget_low_f32(x)))),
                                 vcvt_f32_f64(xexp2(vcvt_high_f64_f32(x))));
    /* glibc's cases for |x| >= 88: overflow to inf, underflow to 0, and between
     * log(2^-150) and log(2^-149) the smallest subnormal; NaN gives x + x */
    f = vbslq_f32(vcltq_f32(x, vdupq_n_f32(-0x1.9d1d9ep6f)), vdupq_n_f32(0x1p-149f), f);
    f = vbslq_f32(vcltq_f32(x, vdupq_n_f32(-0x1.9fe368p6f)), vdupq_n_f32(0.0f), f);
    f = vbslq_f32(vcgtq_f32(x, vdupq_n_f32(0x1.62e42ep6f)), vdupq_n_f32(INFINITY), f);
    return vbslq_f32(vceqq_f32(x, x), f, vaddq_f32(x, x));
}

/* ======== attn_simd.h's ops (f32 tiles, softmax family, attn_xweights, attn_xpv) ======== */

/* vexpz on 4 lanes: lanes below -87 are 0 (as cpulm_generic_vexpzf tests them), the others
 * the canonical vexp; their input is clamped at -87 first, so the flushed lanes never take
 * arm_canon_vexp's ldexpf path (2^n stays a normal float). */
ARM_INLINE float32x4_t vexpz4(float32x4_t x) {
    const float32x4_t lo = vdupq_n_f32(-87.0f);
    const uint32x4_t below = vcltq_f32(x, lo);
    const float32x4_t e = arm_canon_vexp(vmaxq_f32(x, lo));
    return vreinterpretq_f32_u32(vbicq_u32(vreinterpretq_u32_f32(e), below));
}

#define ASV_LEVEL             neon
#define ASV                   float32x4_t
#define ASV_W                 4
#define asv_load(p)           vld1q_f32(p)
#define asv_store(p, x)       vst1q_f32(p, x)
#define asv_set1(x)           vdupq_n_f32(x)
#define asv_mul(a, b)         vmulq_f32(a, b)
#define asv_fma(a, b, c)      vfmaq_f32(c, a, b)
#define asv_load_n(p, nl)     ld_lanes(p, nl)
#define asv_store_n(p, x, nl) st_lanes(p, x, nl)
#define asv_round_f16(x)      vcvt_f32_f16(vcvt_f16_f32(x)) /* FCVTN / FCVTL: nearest even */
#define asv_add(a, b)         vaddq_f32(a, b)
#define asv_sub(a, b)         vsubq_f32(a, b)
#define asv_max(a, b)         vmaxnmq_f32(a, b) /* maxNum, as fmaxf */
#define asv_hmax(x)           vmaxnmvq_f32(x)
#define asv_exp(x)            arm_canon_vexp(x)
#define asv_expz(x)           vexpz4(x)
#define ASV_MASK              uint32x4_t
#define asv_live(nl)          vcltq_u32((uint32x4_t){0, 1, 2, 3}, vdupq_n_u32((uint32_t)(nl)))
#define asv_select(k, a, b)   vbslq_f32(k, a, b)
#define asv_keep(x, k)        vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(x), k))
#define ASV_REDUCE16(acc)     arm_reduce16(acc)
#define asv_gt(a, b)          vcgtq_f32(a, b)
#define asv_ord(x)            vceqq_f32(x, x)
#define asv_any(k)            vmaxvq_u32(k)
#define asv_keep_max(a, b)    vbslq_f32(vcgtq_f32(b, a), b, a)
#define asv_lanes_up(x, k, f) vextq_f32(f, x, 4 - (k))
#define asv_last(x)           vgetq_lane_f32(x, 3)
#define asv_expf(x)           xexpf4(x)
/* scores: 4 rows x 4 vectors of keys; xpv: 4 x 4 (16 accumulators), the sums after them */
#define ASV_SC_ROWS        4
#define ASV_SC_CASES(X)    CPULM_BLOCKS_4X4(X)
#define ASV_XPV_VECS(rows) 4
#define ASV_XPV_SUM_MAX    0
#define ASV_XPV_CASES(X)   ASV_SC_CASES(X)
#define ASV_XPV_NARROW     cpulm_generic_attn_xpv
/* P.V: pv_block above, 4 x 4, rows outer */
#define ASV_PV_BLOCK      pv_block
#define ASV_PV_ROWS       4
#define ASV_PV_VECS(rows) 4
#define ASV_PV_DIMS_OUTER 0
#define ASV_PV_CASES(X)   ASV_SC_CASES(X)
/* attn_qpv: more than 4 rows take attn_pv on dequantized values (llvm-mca-22, gcc: its loop
 * 82% / 90% / 90% of the FMLA peak on N1 / V1 / V2, the 4-row pass 43% / 41% / 42% with its
 * block scales) */
#define ASV_QPV_F32           1
#define ASV_QPV_BLOCKS        1
#define ASV_QPV_HALVES        1
#define asv_qvals(MODE, q, v) neon_qvals(MODE, q, v)
#define asv_scale(p)          neon_scale_at(p)
/* attn_qquant */
#define asv_absmax(m, x)   vmaxq_f32(m, vabsq_f32(x))
#define asv_store_q8(p, x) neon_store_q8(p, x)
#include "kernels/attn_simd.h"

/* ======== Q8_0 / Q4_0 rows in place (attn_q*) ======== */

/* ---- scores ---- */

/* Block b of a cache row: its 32 quants as four int16 vectors (elements 0-7 ... 24-31). Q4
 * is a constant at every call (each op is built once per cache type). */
ARM_INLINE void block_k16(const uint8_t *row, int64_t b, const int Q4, int16x8_t k[4]) {
    int8x16_t x[2];
    att_arm_block_k8(row, b, Q4, x);
    k[0] = vmovl_s8(vget_low_s8(x[0]));
    k[1] = vmovl_high_s8(x[0]);
    k[2] = vmovl_s8(vget_low_s8(x[1]));
    k[3] = vmovl_high_s8(x[1]);
}

/* The exact int32 dot of 32 query elements with a key block, in 4 lanes to be added. */
ARM_INLINE int32x4_t qdot(const int16x8_t qv[4], const int16x8_t k[4]) {
    int32x4_t a = vmull_s16(vget_low_s16(qv[0]), vget_low_s16(k[0]));
    a = vmlal_high_s16(a, qv[0], k[0]);
    NEON_UNROLL
    for (int t = 1; t < 4; t++) {
        a = vmlal_s16(a, vget_low_s16(qv[t]), vget_low_s16(k[t]));
        a = vmlal_high_s16(a, qv[t], k[t]);
    }
    return a;
}

/* Scores of 4 rows (x: their int16 rows, widened by att_rows4_w) x 2 keys (rows in lanes,
 * one vector per key), times scv. */
ARM_INLINE void scores_4x2(int64_t d, const int Q4, const void *x, const float *dqt,
                           float32x4_t scv, const uint8_t *const krp[2], float32x4_t out[2]) {
    /* the pointers as locals: read through x / krp in the loop, clang reloads them every
     * block once the mca markers are in (its code then differs by 5%) */
    const int16_t *const *qrp = x;
    const int16_t *const qr[4] = {qrp[0], qrp[1], qrp[2], qrp[3]};
    const uint8_t *const kr[2] = {krp[0], krp[1]};
    float32x4_t acc[2] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
    for (int64_t b = 0; b < d / 32; b++) {
        if (!Q4) ARM_MCA_BEGIN(ARM_MCA_LEVEL "_attn_qscores");
        int16x8_t k[2][4];
        NEON_FOR(j, 2, 2) block_k16(kr[j], b, Q4, k[j]);
        int32x4_t is[4][2];
        NEON_UNROLL
        for (int r = 0; r < 4; r++) {
            int16x8_t qv[4];
            NEON_UNROLL
            for (int t = 0; t < 4; t++)
                qv[t] = vld1q_s16(qr[r] + b * 32 + 8 * t);
            NEON_FOR(j, 2, 2) is[r][j] = qdot(qv, k[j]);
        }
        NEON_FOR(j, 2, 2) {
            /* [r0 r1 r2 r3]: the lane sums of the 4 rows' partial sums */
            const int32x4_t y =
                vpaddq_s32(vpaddq_s32(is[0][j], is[1][j]), vpaddq_s32(is[2][j], is[3][j]));
            const float32x4_t w = vmulq_n_f32(vld1q_f32(dqt + 4 * b), att_arm_key_d(kr[j], b, Q4));
            acc[j] = vfmaq_f32(acc[j], vcvtq_f32_s32(y), w);
        }
        if (!Q4) ARM_MCA_END(ARM_MCA_LEVEL "_attn_qscores");
    }
    NEON_FOR(j, 2, 2) out[j] = vmulq_f32(acc[j], scv);
}

ATT_ARM_KEYS2_FNS(scores_4x2)

/* Groups of 4 rows (a short group repeats its last row; only real rows are stored); the
 * first group hints the rows at next. */
void cpulm_neon_attn_qscores(int64_t d, cpulm_dtype kt, int m, int n, const int8_t *q8,
                             const float *qd, float sc, const uint8_t *k, uint64_t ldk, float *s,
                             int64_t lds, const uint8_t *next) {
    if (d % 32 != 0 || d > ATT_QWDIM || (kt != CPULM_DTYPE_Q8_0 && kt != CPULM_DTYPE_Q4_0)) {
        cpulm_generic_attn_qscores(d, kt, m, n, q8, qd, sc, k, ldk, s, lds, next);
        return;
    }
    const int q4 = kt == CPULM_DTYPE_Q4_0;
    int16_t w[4 * ATT_QWDIM];
    float dqt[4 * (ATT_QWDIM / 32)];
    for (int i = 0; i < m; i += 4) {
        const int rows = m - i < 4 ? m - i : 4;
        const int16_t *qr[4];
        att_rows4_w(d, q8, qd, i, rows, w, qr, dqt);
        att_arm_rows(d, rows, n, qr, dqt, vdupq_n_f32(sc), q4 ? scores_4x2_q4 : scores_4x2_q8, k,
                     ldk, i == 0 ? next : NULL, (size_t)(d / 32) * att_block_bytes(q4),
                     s + (int64_t)i * lds, lds);
    }
}
#endif
