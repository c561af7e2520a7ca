/* neon_attnx.c: the neon level's exact tiled-attention steps (contracts in kernels.h: attn_x*),
 * built with the neon flags (-march=armv8-a) and reached through cpulm_kernels_neon (neon.c's
 * table); dotprod, i8mm and sve inherit them.
 *
 * Bit-identical to generic/attn.c (attn_x*):
 * - xscores puts query rows in the lanes of float64x2 vectors (two rows per vector), one key
 *   element per fused multiply-add: each (row, key) lane adds its exact products in c order,
 *   as the generic double sum does (fma of an exact product = one rounded addition).
 * - xpv rounds every accumulator through FCVTN / FCVTL (round to nearest even under the
 *   default FPCR, like cpulm_f32_to_fp16) and uses FMLA, fused like fmaf.
 * - xweights takes the running max before each key as a prefix max, so every key's exponent
 *   is known before any expf, and evaluates glibc's aarch64 expf in float64x2 lanes.
 */
#if defined(__aarch64__)
#define ARM_MCA_LEVEL "neon"
#include "kernels/blocks.h"
#include "neon_attn.h"

#include "arm.h"
#include "kernels/generic/generic.h"

#if defined(__clang__)
#define NEON_UNROLL _Pragma("unroll")
#else
#define NEON_UNROLL _Pragma("GCC unroll 16")
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
    NEON_UNROLL
    for (int u = 0; u < NV * KJ; u++)
        acc[u] = vdupq_n_f64(0.0);
    int64_t c = 0;
    for (; c + 2 <= d; c += 2) {
        float64x2_t q0[4], q1[4], kv[8];
        NEON_UNROLL
        for (int v = 0; v < NV; v++) {
            q0[v] = xq_load(qt + c * ldqt + 2 * v, v < NV - 1 || pair);
            q1[v] = xq_load(qt + (c + 1) * ldqt + 2 * v, v < NV - 1 || pair);
        }
        NEON_UNROLL
        for (int kk = 0; kk < KJ; kk++)
            kv[kk] = vcvt_f64_f32(vld1_f32(k + kk * ldk + c));
        NEON_UNROLL
        for (int v = 0; v < NV; v++) {
            NEON_UNROLL
            for (int kk = 0; kk < KJ; kk++)
                acc[v * KJ + kk] = vfmaq_laneq_f64(acc[v * KJ + kk], q0[v], kv[kk], 0);
        }
        NEON_UNROLL
        for (int v = 0; v < NV; v++) {
            NEON_UNROLL
            for (int kk = 0; kk < KJ; kk++)
                acc[v * KJ + kk] = vfmaq_laneq_f64(acc[v * KJ + kk], q1[v], kv[kk], 1);
        }
    }
    if (c < d) { /* odd d: the last element */
        NEON_UNROLL
        for (int v = 0; v < NV; v++) {
            const float64x2_t q0 = xq_load(qt + c * ldqt + 2 * v, v < NV - 1 || pair);
            NEON_UNROLL
            for (int kk = 0; kk < KJ; kk++)
                acc[v * KJ + kk] = vfmaq_n_f64(acc[v * KJ + kk], q0, (double)k[kk * ldk + c]);
        }
    }
    NEON_UNROLL
    for (int v = 0; v < NV; v++) {
        NEON_UNROLL
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

/* The running max of "x > M": a later value replaces an earlier one only when greater. */
ARM_INLINE float32x4_t xkeep_max(float32x4_t earlier, float32x4_t later) {
    return vbslq_f32(vcgtq_f32(later, earlier), later, earlier);
}

/* 4 keys at once: the running max before each key is a prefix max, so every key's exponent
 * is known before any expf. */
void cpulm_neon_attn_xweights(int n, float *s, float *ms, float *M) {
    const float32x4_t ninf = vdupq_n_f32(-INFINITY), one = vdupq_n_f32(1.0f);
    float m = *M;
    for (int j = 0; j < n; j += 4) {
        const int cnt = n - j < 4 ? n - j : 4;
        float xb[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
        memcpy(xb, s + j, sizeof(float) * (size_t)cnt);
        const float32x4_t x = vld1q_f32(xb);
        /* a NaN score never becomes the max ("x > M" is false): -inf in the scan */
        float32x4_t p = vbslq_f32(vceqq_f32(x, x), x, ninf);
        p = xkeep_max(vextq_f32(ninf, p, 3), p);
        p = xkeep_max(vextq_f32(ninf, p, 2), p);
        const float32x4_t vm = vdupq_n_f32(m);
        const float32x4_t incl = xkeep_max(vm, p);
        const float32x4_t prev = vextq_f32(vm, incl, 3);
        const uint32x4_t up = vcgtq_f32(x, prev);
        const float32x4_t e = xexpf4(vbslq_f32(up, vsubq_f32(prev, x), vsubq_f32(x, prev)));
        float wb[4], sb[4];
        vst1q_f32(wb, vbslq_f32(up, e, one));
        vst1q_f32(sb, vbslq_f32(up, one, e));
        memcpy(ms + j, wb, sizeof(float) * (size_t)cnt);
        memcpy(s + j, sb, sizeof(float) * (size_t)cnt);
        m = vgetq_lane_f32(incl, 3);
    }
    *M = m;
}

/* ---- P.V ---- */

ARM_INLINE float32x4_t xround_f16(float32x4_t x) {
    return vcvt_f32_f16(vcvt_f16_f32(x));
}

/* R rows x V vectors of 4 dims, the f16 accumulators in registers (values exactly f16). */
ARM_INLINE void xpv_block(int n, const float *ms, const float *vs, int64_t ldw, const float *v,
                          int64_t ldv, float *acc, int64_t lda, const int R, const int V) {
    float32x4_t a[4][4];
    NEON_UNROLL
    for (int r = 0; r < R; r++) {
        NEON_UNROLL
        for (int c = 0; c < V; c++)
            a[r][c] = vld1q_f32(acc + r * lda + 4 * c);
    }
    for (int j = 0; j < n; j++) {
        float32x4_t vv[4];
        NEON_UNROLL
        for (int c = 0; c < V; c++)
            vv[c] = vld1q_f32(v + (int64_t)j * ldv + 4 * c);
        NEON_UNROLL
        for (int r = 0; r < R; r++) {
            const float mij = ms[r * ldw + j], vij = vs[r * ldw + j];
            if (mij != 1.0f) {
                NEON_UNROLL
                for (int c = 0; c < V; c++)
                    a[r][c] = xround_f16(vmulq_n_f32(a[r][c], mij));
            }
            NEON_UNROLL
            for (int c = 0; c < V; c++)
                a[r][c] = xround_f16(vfmaq_n_f32(a[r][c], vv[c], vij));
        }
    }
    NEON_UNROLL
    for (int r = 0; r < R; r++) {
        NEON_UNROLL
        for (int c = 0; c < V; c++)
            vst1q_f32(acc + r * lda + 4 * c, a[r][c]);
    }
}

#define XPV_CASE(R, V) xpv_block(n, ms, vs, ldw, v, ldv, acc, lda, R, V)
static void xpv_rows(int rows, int vecs, int n, const float *ms, const float *vs, int64_t ldw,
                     const float *v, int64_t ldv, float *acc, int64_t lda) {
    CPULM_BLOCKS_SWITCH(rows, vecs,
                        CPULM_BLOCKS_UPTO4(4, XPV_CASE) CPULM_BLOCKS_UPTO4(3, XPV_CASE)
                            CPULM_BLOCKS_UPTO4(2, XPV_CASE) CPULM_BLOCKS_UPTO4(1, XPV_CASE))
}
#undef XPV_CASE

/* Columns are independent, so blocks of 4 rows x 16 dims (16 accumulators) in any order
 * give the generic bits; d % 4 != 0 (no such head size in practice) stays generic. */
void cpulm_neon_attn_xpv(int64_t d, int m, int n, const float *ms, const float *vs, int64_t ldw,
                         const float *v, int64_t ldv, float *acc, int64_t lda, float *S) {
    if (d % 4 != 0) {
        cpulm_generic_attn_xpv(d, m, n, ms, vs, ldw, v, ldv, acc, lda, S);
        return;
    }
    for (int i = 0; i < m; i += 4) {
        const int rows = m - i < 4 ? m - i : 4;
        for (int64_t c = 0; c < d; c += 16) {
            const int vecs = d - c < 16 ? (int)((d - c) / 4) : 4;
            xpv_rows(rows, vecs, n, ms + (int64_t)i * ldw, vs + (int64_t)i * ldw, ldw, v + c, ldv,
                     acc + (int64_t)i * lda + c, lda);
        }
    }
    for (int i = 0; i < m; i++) {
        float si = S[i];
        for (int j = 0; j < n; j++)
            si = fmaf(si, ms[(int64_t)i * ldw + j], vs[(int64_t)i * ldw + j]); /* FMADD */
        S[i] = si;
    }
}
#endif
