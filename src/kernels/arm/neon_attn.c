/* neon_attn.c: the neon level's attention kernels (contracts in kernels.h: the tiled attn_*
 * steps), built with the neon flags (-march=armv8-a) and reached through
 * cpulm_kernels_neon (neon.c's table); dotprod, i8mm and sve inherit them.
 *
 * Bit-identical to the generic ones (generic/attn.c). The canonical
 * F32 dot of a score has 16 lanes: four 4-lane accumulators (quarters), fused multiply-adds
 * (vfmaq_f32 = fmaf) in the same order, and the same reduce16 tree, done for four dots at
 * once (reduce16x4). Softmax takes the canonical polynomial exp (arm_canon_vexp) and the
 * same 16 lane sums; P.V and the merge are per element fmas in key order, so any register
 * blocking gives the same bits.
 */
#if defined(__aarch64__)
#define ARM_MCA_LEVEL "neon"
#include "kernels/blocks.h"
#include "neon_attn.h"

#include "arm.h"
#include "kernels/generic/generic.h"
#include "neon_softmax.h"
#include "neon_unroll.h"

/* ---- scores ---- */

/* The reduce16 sums of four 16-lane accumulators (a[i][t]: lanes 4t..4t+3), in order. Each
 * stage adds the lane pairs cpulm_generic_reduce16 adds: h = a[8..15] + a[0..7] and
 * g = h[4..7] + h[0..3] per accumulator, then (g0 + g2) + (g1 + g3) for four at once. */
ARM_INLINE float32x4_t reduce16x4(const float32x4_t *a0, const float32x4_t *a1,
                                  const float32x4_t *a2, const float32x4_t *a3) {
    const float32x4_t *a[4] = {a0, a1, a2, a3};
    float64x2_t g[4];
    NEON_UNROLL
    for (int i = 0; i < 4; i++)
        g[i] = vreinterpretq_f64_f32(
            vaddq_f32(vaddq_f32(a[i][3], a[i][1]), vaddq_f32(a[i][2], a[i][0])));
    /* {g0 + g2, g1 + g3} of accumulators 0, 1 and of 2, 3 */
    const float32x4_t u01 = vaddq_f32(vreinterpretq_f32_f64(vzip1q_f64(g[0], g[1])),
                                      vreinterpretq_f32_f64(vzip2q_f64(g[0], g[1])));
    const float32x4_t u23 = vaddq_f32(vreinterpretq_f32_f64(vzip1q_f64(g[2], g[3])),
                                      vreinterpretq_f32_f64(vzip2q_f64(g[2], g[3])));
    return vpaddq_f32(u01, u23);
}

/* R query rows x K keys of the score tile (R * K = 4 or 6), d a multiple of 16. Per quarter
 * of 16 elements the R query and K key vectors are loaded once each and feed R * K fmas.
 * Row pairs take 2 x 2 (16 accumulators): 2 x 3 (24 accumulators, 20 loads per 24 FMLA
 * instead of 16 per 16) spilled 2 registers per iteration with gcc 12. No arm-perf.sh
 * markers here: they changed this function's code by 3.5%
 * (docs/perf-log/2026-11-30-avx2-arm-attn-twins.md has the one-off llvm-mca figures of the loop).
 */
ARM_INLINE void scores_block(int64_t d, const float *q, int64_t ldq, const float *k, int64_t ldk,
                             float scale, float *s, int64_t lds, const int R, const int K) {
    float32x4_t acc[6][4];
    NEON_FOR(i, R * K, 6) NEON_UNROLL for (int t = 0; t < 4; t++) acc[i][t] = vdupq_n_f32(0.0f);
    for (int64_t c = 0; c < d; c += 16) {
        NEON_UNROLL
        for (int t = 0; t < 4; t++) {
            float32x4_t qv[2], kv[4];
            NEON_FOR(r, R, 2) qv[r] = vld1q_f32(q + r * ldq + c + 4 * t);
            NEON_FOR(j, K, 4) kv[j] = vld1q_f32(k + j * ldk + c + 4 * t);
            NEON_FOR(r, R, 2)
            NEON_FOR(j, K, 4) acc[r * K + j][t] = vfmaq_f32(acc[r * K + j][t], qv[r], kv[j]);
        }
    }
    const float32x4_t s0 = vmulq_n_f32(reduce16x4(acc[0], acc[1], acc[2], acc[3]), scale);
    if (R == 1) { /* 1 x 4 */
        vst1q_f32(s, s0);
    } else if (K == 2) { /* {s00, s01, s10, s11} */
        vst1_f32(s, vget_low_f32(s0));
        vst1_f32(s + lds, vget_high_f32(s0));
    } else { /* {s00, s01, s02, s10}, {s11, s12, ...} */
        const float32x4_t s1 = vmulq_n_f32(reduce16x4(acc[4], acc[5], acc[4], acc[5]), scale);
        vst1_f32(s, vget_low_f32(s0));
        vst1q_lane_f32(s + 2, s0, 2);
        vst1q_lane_f32(s + lds, s0, 3);
        vst1_f32(s + lds + 1, vget_low_f32(s1));
    }
}

/* One score by the canonical dot (d a multiple of 16): for the keys left over by the blocks. */
static float score_one(int64_t d, const float *q, const float *k, float scale) {
    float32x4_t a[4] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
    for (int64_t c = 0; c < d; c += 16)
        NEON_UNROLL
    for (int t = 0; t < 4; t++)
        a[t] = vfmaq_f32(a[t], vld1q_f32(q + c + 4 * t), vld1q_f32(k + c + 4 * t));
    const float32x4_t g = vaddq_f32(vaddq_f32(a[3], a[1]), vaddq_f32(a[2], a[0]));
    return vpadds_f32(vadd_f32(vget_low_f32(g), vget_high_f32(g))) * scale;
}

void cpulm_neon_attn_scores(int64_t d, int m, int n, const float *q, int64_t ldq, const float *k,
                            int64_t ldk, float scale, float *s, int64_t lds) {
    if (d % 16 != 0) { /* the canonical dot of such rows has a scalar tail */
        cpulm_generic_attn_scores(d, m, n, q, ldq, k, ldk, scale, s, lds);
        return;
    }
    int i = 0;
    for (; i + 2 <= m; i += 2) { /* row pairs x key pairs */
        const float *qi = q + (int64_t)i * ldq;
        float *si = s + (int64_t)i * lds;
        int j = 0;
        for (; j + 2 <= n; j += 2)
            scores_block(d, qi, ldq, k + (int64_t)j * ldk, ldk, scale, si + j, lds, 2, 2);
        if (j < n) {
            si[j] = score_one(d, qi, k + (int64_t)j * ldk, scale);
            si[lds + j] = score_one(d, qi + ldq, k + (int64_t)j * ldk, scale);
        }
    }
    if (i < m) { /* the last row x key quads */
        const float *qi = q + (int64_t)i * ldq;
        float *si = s + (int64_t)i * lds;
        int j = 0;
        for (; j + 4 <= n; j += 4)
            scores_block(d, qi, ldq, k + (int64_t)j * ldk, ldk, scale, si + j, lds, 1, 4);
        for (; j < n; j++)
            si[j] = score_one(d, qi, k + (int64_t)j * ldk, scale);
    }
}

/* ---- online softmax ---- */

float cpulm_neon_attn_softmax_row(int n, int lim, float *s, float *M, float *L) {
    return neon_softmax_with(n, lim, s, M, L, arm_canon_vexp, cpulm_generic_vexpf);
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

#define PV_CASE(R, V) pv_block(n, p, ldp, v, ldv, a, o, ldo, R, V)
static void pv_rows(int rows, int vecs, int n, const float *p, int64_t ldp, const float *v,
                    int64_t ldv, const float *a, float *o, int64_t ldo) {
    CPULM_BLOCKS_SWITCH(rows, vecs,
                        CPULM_BLOCKS_UPTO4(4, PV_CASE) CPULM_BLOCKS_UPTO4(3, PV_CASE)
                            CPULM_BLOCKS_UPTO4(2, PV_CASE) CPULM_BLOCKS_UPTO4(1, PV_CASE))
}
#undef PV_CASE

void cpulm_neon_attn_pv(int64_t d, int m, int n, const float *p, int64_t ldp, const float *v,
                        int64_t ldv, const float *a, float *o, int64_t ldo) {
    if (d % 4 != 0) {
        cpulm_generic_attn_pv(d, m, n, p, ldp, v, ldv, a, o, ldo);
        return;
    }
    for (int i = 0; i < m; i += 4) {
        const int rows = m - i < 4 ? m - i : 4;
        for (int64_t c = 0; c < d; c += 16) {
            const int vecs = d - c < 16 ? (int)((d - c) / 4) : 4;
            pv_rows(rows, vecs, n, p + (int64_t)i * ldp, ldp, v + c, ldv, a + i,
                    o + (int64_t)i * ldo + c, ldo);
        }
    }
}

/* ---- merge of chunk partials ---- */

void cpulm_neon_attn_merge(int64_t d, int m, const float *mc, const float *lc, const float *oc,
                           int64_t ldoc, float *M, float *L, float *o, int64_t ldo) {
    for (int i = 0; i < m; i++) {
        if (mc[i] == -INFINITY) continue;
        float a, b;
        cpulm_attn_merge_row(&M[i], &L[i], mc[i], lc[i], &a, &b);
        float *oi = o + (int64_t)i * ldo;
        const float *ci = oc + (int64_t)i * ldoc;
        int64_t c = 0;
        for (; c + 4 <= d; c += 4)
            vst1q_f32(oi + c, vfmaq_n_f32(vmulq_n_f32(vld1q_f32(oi + c), a), vld1q_f32(ci + c), b));
        for (; c < d; c++)
            oi[c] = fmaf(ci[c], b, oi[c] * a);
    }
}
#endif
