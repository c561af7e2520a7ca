/* neon_attnq.c: the neon level's attention steps straight from Q8_0 / Q4_0 cache rows
 * (contracts in kernels.h, attn_q*), built with the neon flags (-march=armv8-a) and reached
 * through cpulm_kernels_neon (neon.c's table); dotprod, i8mm and sve inherit them.
 *
 * Bit-identical to generic/attn_q.c. Scores: a block's int32 dot is exact in any order
 * (SMULL / SMLAL of the int16 query against the quants widened to int16: a product is at
 * most 32767 * 128 and 32 of them stay below 2^31), so only the per-block float steps have
 * an order: the 4 rows of a group share one float32x4 per key (rows in lanes), one SCVTF
 * and one FMLA by the key's block scale per block, in block order as the generic loop.
 * P.V: per element fmas in key order with the weight p * d of a key and block rounded once
 * beforehand, so any register blocking gives the same bits. Softmax: the canonical
 * polynomial exp on 4 lanes (arm_canon_vexp) with the lanes below -87 flushed to 0.
 */
#if defined(__aarch64__)
#define ARM_MCA_LEVEL "neon"
#include "neon_attn.h"

#include "arm.h"
#include "kernels/generic/generic.h"
#include "neon_softmax.h"
#include "neon_unroll.h"
#include "quant.h"

#define KT   64  /* keys per pass of attn_qpv (its weight and scale buffers) */
#define WDIM 256 /* the largest head size taken here; larger ones go to generic */

/* A hint for the bytes [p, p + n) (no fault, no effect on results): the ops hint the rows
 * their caller reads next a few lines per key while they compute, not in bursts. */
ARM_INLINE void hint_row(const uint8_t *p, size_t n) {
    for (size_t o = 0; o < n; o += 64)
        __builtin_prefetch(p + o, 0, 3);
    __builtin_prefetch(p + n - 1, 0, 3);
}

ARM_INLINE size_t block_bytes(const int Q4) {
    return Q4 ? sizeof(cpulm_block_q4_0) : sizeof(cpulm_block_q8_0);
}

/* ---- query rows to int16 ---- */

void cpulm_neon_attn_qquant(int64_t d, int m, const float *q, int64_t ldq, float scale,
                            int16_t *q16, float *qs) {
    if (d % 8 != 0) {
        cpulm_generic_attn_qquant(d, m, q, ldq, scale, q16, qs);
        return;
    }
    const float32x4_t lim = vdupq_n_f32(32767.0f), nlim = vdupq_n_f32(-32767.0f);
    for (int i = 0; i < m; i++) {
        const float *qi = q + (int64_t)i * ldq;
        float32x4_t vmax = vdupq_n_f32(0.0f);
        for (int64_t e = 0; e < d; e += 4)
            vmax = vmaxq_f32(vmax, vabsq_f32(vld1q_f32(qi + e)));
        const float amax = vmaxvq_f32(vmax), id = amax > 0.0f ? 32767.0f / amax : 0.0f;
        for (int64_t e = 0; e < d; e += 8) {
            int32x4_t r[2];
            for (int h = 0; h < 2; h++) {
                float32x4_t x = vmulq_n_f32(vld1q_f32(qi + e + 4 * h), id);
                x = vmaxq_f32(vminq_f32(x, lim), nlim);
                /* x + (x >= 0 ? 0.5 : -0.5), truncated (FCVTZS): the generic rounding */
                const float32x4_t half = vbslq_f32(vcgeq_f32(x, vdupq_n_f32(0.0f)),
                                                   vdupq_n_f32(0.5f), vdupq_n_f32(-0.5f));
                r[h] = vcvtq_s32_f32(vaddq_f32(x, half));
            }
            vst1q_s16(q16 + (int64_t)i * d + e, vcombine_s16(vmovn_s32(r[0]), vmovn_s32(r[1])));
        }
        qs[i] = amax / 32767.0f * scale;
    }
}

/* ---- scores ---- */

/* Block b of a cache row: its 32 quants as four int16 vectors (elements 0-7 ... 24-31). Q4
 * is a constant at every call (each op is built once per cache type). */
ARM_INLINE void block_k16(const uint8_t *row, int64_t b, const int Q4, int16x8_t k[4]) {
    int8x16_t lo, hi;
    if (Q4) {
        arm_q4_0_unpack(row + b * (int64_t)sizeof(cpulm_block_q4_0) + 2, &lo, &hi);
    } else {
        const int8_t *qs = (const int8_t *)(row + b * (int64_t)sizeof(cpulm_block_q8_0) + 2);
        lo = vld1q_s8(qs);
        hi = vld1q_s8(qs + 16);
    }
    k[0] = vmovl_s8(vget_low_s8(lo));
    k[1] = vmovl_high_s8(lo);
    k[2] = vmovl_s8(vget_low_s8(hi));
    k[3] = vmovl_high_s8(hi);
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

/* The scale of block b of a cache row as f32 (exact). */
ARM_INLINE float key_d(const uint8_t *row, int64_t b, const int Q4) {
    uint16_t h;
    memcpy(&h, row + (size_t)b * block_bytes(Q4), 2);
    return arm_fp16(h);
}

/* Scores of 4 rows (qr) x K keys (1 or 2; rows in lanes, one vector per key), times qsv. */
ARM_INLINE void scores_4xk(int64_t d, const int Q4, const int K, const int16_t *const qrp[4],
                           float32x4_t qsv, const uint8_t *const krp[2], float32x4_t out[2]) {
    /* the pointers as locals: read through qrp / krp in the loop, clang reloads them every
     * block once the mca markers are in (its code then differs by 5%) */
    const int16_t *const qr[4] = {qrp[0], qrp[1], qrp[2], qrp[3]};
    const uint8_t *const kr[2] = {krp[0], krp[K - 1]};
    float32x4_t acc[2] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
    for (int64_t b = 0; b < d / 32; b++) {
        if (K == 2 && !Q4) ARM_MCA_BEGIN(ARM_MCA_LEVEL "_attn_qscores");
        int16x8_t k[2][4];
        NEON_FOR(j, K, 2) block_k16(kr[j], b, Q4, k[j]);
        int32x4_t is[4][2];
        NEON_UNROLL
        for (int r = 0; r < 4; r++) {
            int16x8_t qv[4];
            NEON_UNROLL
            for (int t = 0; t < 4; t++)
                qv[t] = vld1q_s16(qr[r] + b * 32 + 8 * t);
            NEON_FOR(j, K, 2) is[r][j] = qdot(qv, k[j]);
        }
        NEON_FOR(j, K, 2) {
            /* [r0 r1 r2 r3]: the lane sums of the 4 rows' partial sums */
            const int32x4_t x =
                vpaddq_s32(vpaddq_s32(is[0][j], is[1][j]), vpaddq_s32(is[2][j], is[3][j]));
            acc[j] = vfmaq_n_f32(acc[j], vcvtq_f32_s32(x), key_d(kr[j], b, Q4));
        }
        if (K == 2 && !Q4) ARM_MCA_END(ARM_MCA_LEVEL "_attn_qscores");
    }
    NEON_FOR(j, K, 2) out[j] = vmulq_f32(acc[j], qsv);
}

/* scores_4xk of 2 keys as a function of its own per cache type: its loop then holds only
 * its own pointers in general registers (inlined into scores_rows, gcc kept two of the row
 * pointers on the stack, and the mca markers moved its code by 7%). */
static __attribute__((noinline)) void scores_4x2_q8(int64_t d, const int16_t *const qr[4],
                                                    float32x4_t qsv, const uint8_t *const kr[2],
                                                    float32x4_t out[2]) {
    scores_4xk(d, 0, 2, qr, qsv, kr, out);
}
static __attribute__((noinline)) void scores_4x2_q4(int64_t d, const int16_t *const qr[4],
                                                    float32x4_t qsv, const uint8_t *const kr[2],
                                                    float32x4_t out[2]) {
    scores_4xk(d, 1, 2, qr, qsv, kr, out);
}

/* Rows i.. (rows <= 4 of them) x keys 0..n-1, 2 keys at a time. A short group repeats its
 * last row; only real rows are stored. The first group hints the rows at next. */
ARM_INLINE void scores_rows(int64_t d, const int Q4, int i, int rows, int n, const int16_t *q16,
                            int64_t ldq, const float *qs, const uint8_t *k, uint64_t ldk, float *s,
                            int64_t lds, const uint8_t *next) {
    const int16_t *qr[4];
    float qsr[4];
    for (int r = 0; r < 4; r++) {
        const int ri = i + (r < rows ? r : rows - 1);
        qr[r] = q16 + (int64_t)ri * ldq;
        qsr[r] = qs[ri];
    }
    const float32x4_t qsv = vld1q_f32(qsr);
    const size_t rb = (size_t)(d / 32) * block_bytes(Q4);
    const uint8_t *hint = i == 0 ? next : NULL;
    int j = 0;
    for (; j + 2 <= n; j += 2) {
        if (hint) {
            hint_row(hint + (uint64_t)j * ldk, rb);
            hint_row(hint + (uint64_t)(j + 1) * ldk, rb);
        }
        const uint8_t *kr[2] = {k + (uint64_t)j * ldk, k + (uint64_t)(j + 1) * ldk};
        float32x4_t x[2];
        if (Q4)
            scores_4x2_q4(d, qr, qsv, kr, x);
        else
            scores_4x2_q8(d, qr, qsv, kr, x);
        /* [a0 b0 a1 b1], [a2 b2 a3 b3]: row r's two scores */
        const float32x4_t lo = vzip1q_f32(x[0], x[1]), hi = vzip2q_f32(x[0], x[1]);
        const float32x2_t rr[4] = {vget_low_f32(lo), vget_high_f32(lo), vget_low_f32(hi),
                                   vget_high_f32(hi)};
        for (int r = 0; r < rows; r++)
            vst1_f32(s + (int64_t)(i + r) * lds + j, rr[r]);
    }
    if (j < n) {
        if (hint) hint_row(hint + (uint64_t)j * ldk, rb);
        const uint8_t *kr[2] = {k + (uint64_t)j * ldk, NULL};
        float32x4_t x[2];
        scores_4xk(d, Q4, 1, qr, qsv, kr, x);
        float t[4];
        vst1q_f32(t, x[0]);
        for (int r = 0; r < rows; r++)
            s[(int64_t)(i + r) * lds + j] = t[r];
    }
}

ARM_INLINE void qscores_type(int64_t d, const int Q4, int m, int n, const int16_t *q16, int64_t ldq,
                             const float *qs, const uint8_t *k, uint64_t ldk, float *s, int64_t lds,
                             const uint8_t *next) {
    for (int i = 0; i < m; i += 4)
        scores_rows(d, Q4, i, m - i < 4 ? m - i : 4, n, q16, ldq, qs, k, ldk, s, lds, next);
}

void cpulm_neon_attn_qscores(int64_t d, cpulm_dtype kt, int m, int n, const int16_t *q16,
                             int64_t ldq, const float *qs, const uint8_t *k, uint64_t ldk, float *s,
                             int64_t lds, const uint8_t *next) {
    if (d % 32 != 0 || (kt != CPULM_DTYPE_Q8_0 && kt != CPULM_DTYPE_Q4_0)) {
        cpulm_generic_attn_qscores(d, kt, m, n, q16, ldq, qs, k, ldk, s, lds, next);
        return;
    }
    if (kt == CPULM_DTYPE_Q4_0)
        qscores_type(d, 1, m, n, q16, ldq, qs, k, ldk, s, lds, next);
    else
        qscores_type(d, 0, m, n, q16, ldq, qs, k, ldk, s, lds, next);
}
/* ---- online softmax, underflow flushed ---- */

/* vexpz on 4 lanes: lanes below -87 are 0 (as cpulm_generic_vexpzf tests them), the others
 * the canonical vexp; their input is clamped at -87 first, so the flushed lanes never take
 * arm_canon_vexp's ldexpf path (2^n stays a normal float). */
ARM_INLINE float32x4_t vexpz4(float32x4_t x) {
    const float32x4_t lo = vdupq_n_f32(-87.0f);
    const uint32x4_t below = vcltq_f32(x, lo);
    const float32x4_t e = arm_canon_vexp(vmaxq_f32(x, lo));
    return vreinterpretq_f32_u32(vbicq_u32(vreinterpretq_u32_f32(e), below));
}

float cpulm_neon_attn_softmaxz(int n, int lim, float *s, float *M, float *L) {
    return neon_softmax_with(n, lim, s, M, L, vexpz4, cpulm_generic_vexpzf);
}

/* ---- P.V ---- */

/* The block scales of n <= KT cache rows as f32, block-major: ds[b * KT + j] (the halves
 * gathered, then converted 4 at a time). */
ARM_INLINE void block_scales(int64_t d, const uint8_t *x, uint64_t ld, int n, size_t bs,
                             float *ds) {
    uint16_t h[KT];
    for (int64_t b = 0; b < d / 32; b++) {
        int j = 0;
        for (; j < n; j++)
            memcpy(&h[j], x + (uint64_t)j * ld + (size_t)b * bs, 2);
        for (; j % 4; j++)
            h[j] = 0;
        for (int e = 0; e < j; e += 4)
            vst1q_f32(ds + b * KT + e, arm_load4_f16(h + e));
    }
}

/* 16 values of a key as f32: Q8 (16 int8 at q) or Q4 (the low or, HI, high nibbles of the
 * 16 bytes at q, minus 8). Every int8 converts exactly. */
ARM_INLINE void pv_vals(const uint8_t *q, const int Q4, const int HI, float32x4_t v[4]) {
    int8x16_t x;
    if (Q4) {
        const uint8x16_t u = vld1q_u8(q);
        x = vsubq_s8(vreinterpretq_s8_u8(HI ? vshrq_n_u8(u, 4) : vandq_u8(u, vdupq_n_u8(0x0f))),
                     vdupq_n_s8(8));
    } else {
        x = vld1q_s8((const int8_t *)q);
    }
    const int16x8_t lo = vmovl_s8(vget_low_s8(x)), hi = vmovl_high_s8(x);
    v[0] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo)));
    v[1] = vcvtq_f32_s32(vmovl_high_s16(lo));
    v[2] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi)));
    v[3] = vcvtq_f32_s32(vmovl_high_s16(hi));
}

/* One pass: R rows x 16 dims (column c of orow[r]) over n keys, o = fma(w_rj, v_j, o) in
 * key order; row r's weights at w[r * KT + j], key j's 16 values at vq + j * ldv. R, Q4,
 * HI and PF are constants at every call (pv_pass_any), so the key loop has no test; PF
 * hints the rows pf + j * ldv (pfn bytes) as it goes. */
ARM_INLINE void pv_pass(int n, const uint8_t *vq, uint64_t ldv, const float *w,
                        float *const orow[4], int64_t c, const uint8_t *pf, size_t pfn, const int R,
                        const int Q4, const int HI, const int PF) {
    float32x4_t acc[4][4];
    NEON_FOR(r, R, 4)
    NEON_UNROLL for (int t = 0; t < 4; t++) acc[r][t] = vld1q_f32(orow[r] + c + 4 * t);
    for (int j = 0; j < n; j++) {
        if (R == 4 && !Q4 && !PF) ARM_MCA_BEGIN(ARM_MCA_LEVEL "_attn_qpv");
        if (PF) hint_row(pf + (uint64_t)j * ldv, pfn);
        float32x4_t v[4];
        pv_vals(vq + (uint64_t)j * ldv, Q4, HI, v);
        NEON_FOR(r, R, 4) {
            const float wr = w[r * KT + j];
            NEON_UNROLL
            for (int t = 0; t < 4; t++)
                acc[r][t] = vfmaq_n_f32(acc[r][t], v[t], wr);
        }
        if (R == 4 && !Q4 && !PF) ARM_MCA_END(ARM_MCA_LEVEL "_attn_qpv");
    }
    NEON_FOR(r, R, 4)
    NEON_UNROLL for (int t = 0; t < 4; t++) vst1q_f32(orow[r] + c + 4 * t, acc[r][t]);
}

#define PV_R(R, Q4, HI, PF) pv_pass(n, vq, ldv, w, orow, c, pf, pfn, R, Q4, HI, PF)
#define PV_RS(Q4, HI, PF)                \
    switch (R) {                         \
    case 4: PV_R(4, Q4, HI, PF); break;  \
    case 3: PV_R(3, Q4, HI, PF); break;  \
    case 2: PV_R(2, Q4, HI, PF); break;  \
    default: PV_R(1, Q4, HI, PF); break; \
    }

/* pv_pass with its constants chosen here, once per pass (mode: 0 Q8, 1 Q4 low nibbles,
 * 2 Q4 high nibbles). */
static void pv_pass_any(int R, int mode, int n, const uint8_t *vq, uint64_t ldv, const float *w,
                        float *const orow[4], int64_t c, const uint8_t *pf, size_t pfn) {
    if (pf) {
        if (mode == 0) PV_RS(0, 0, 1) else if (mode == 1) PV_RS(1, 0, 1) else PV_RS(1, 1, 1)
    } else {
        if (mode == 0) PV_RS(0, 0, 0) else if (mode == 1) PV_RS(1, 0, 0) else PV_RS(1, 1, 0)
    }
}
#undef PV_RS
#undef PV_R

void cpulm_neon_attn_qpv(int64_t d, cpulm_dtype vt, int m, int n, const float *p, int64_t ldp,
                         const uint8_t *v, uint64_t ldv, const float *a, float *o, int64_t ldo,
                         const uint8_t *next) {
    if (d % 32 != 0 || d > WDIM || (vt != CPULM_DTYPE_Q8_0 && vt != CPULM_DTYPE_Q4_0)) {
        cpulm_generic_attn_qpv(d, vt, m, n, p, ldp, v, ldv, a, o, ldo, next);
        return;
    }
    const int q4 = vt == CPULM_DTYPE_Q4_0;
    const size_t bs = block_bytes(q4);
    for (int i = 0; i < m; i++) { /* o *= a first: the per-key fmas follow */
        float *oi = o + (int64_t)i * ldo;
        for (int64_t c = 0; c < d; c += 4)
            vst1q_f32(oi + c, vmulq_n_f32(vld1q_f32(oi + c), a[i]));
    }
    float dv[WDIM / 32 * KT], w[4 * KT];
    for (int j0 = 0; j0 < n; j0 += KT) {
        const int nk = n - j0 < KT ? n - j0 : KT;
        const uint8_t *vj0 = v + (uint64_t)j0 * ldv;
        block_scales(d, vj0, ldv, nk, bs, dv);
        for (int64_t b = 0; b < d / 32; b++) {
            const uint8_t *vb = vj0 + (size_t)b * bs + 2; /* block b's quants in key 0 */
            const float *db = dv + b * KT;
            for (int i = 0; i < m; i += 4) {
                const int R = m - i < 4 ? m - i : 4;
                float *orow[4];
                for (int r = 0; r < R; r++) { /* w = p * d: one rounding per key and block */
                    const float *pr = p + (int64_t)(i + r) * ldp + j0;
                    int j = 0;
                    for (; j + 4 <= nk; j += 4)
                        vst1q_f32(w + r * KT + j, vmulq_f32(vld1q_f32(pr + j), vld1q_f32(db + j)));
                    for (; j < nk; j++)
                        w[r * KT + j] = pr[j] * db[j];
                    orow[r] = o + (int64_t)(i + r) * ldo;
                }
                for (int h = 0; h < 2; h++) {
                    /* the first pass over the keys hints the next rows */
                    const uint8_t *pf =
                        next && b == 0 && h == 0 && i == 0 ? next + (uint64_t)j0 * ldv : NULL;
                    const int mode = q4 ? 1 + h : 0;
                    pv_pass_any(R, mode, nk, vb + (q4 ? 0 : 16 * h), ldv, w, orow, b * 32 + h * 16,
                                pf, (size_t)(d / 32) * bs);
                }
            }
        }
    }
}
#endif
