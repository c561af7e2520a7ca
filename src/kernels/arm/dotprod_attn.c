/* dotprod_attn.c: the dotprod level's attn_qscores (contract in kernels.h), built with the
 * dotprod flags and reached through cpulm_kernels_dotprod (i8mm and sve inherit it); the
 * other attn_q* ops are neon's (neon_attn.c).
 *
 * SDOT multiplies int8 by int8, as the query (attn_qquant's Q8_0 blocks) and the keys are:
 * 2 SDOT per row, key and block instead of neon's 8 SMULL / SMLAL, and no widening of the
 * keys. The float steps are neon's: one SCVTF, the scales' product and one FMLA per block in
 * block order, so the same bits.
 */
#if defined(__aarch64__)
#define ARM_MCA_LEVEL "dotprod"
#include "arm.h"
#include "kernels/attn_simd.h"
#include "neon_unroll.h"
#include "format/quant.h"

/* Scores of the 4 int8 rows (x: att_rows4's qr) x 2 keys, rows in lanes. */
ARM_INLINE void scores_4x2(int64_t d, const int Q4, const void *x, const float *dqt,
                           float32x4_t scv, const uint8_t *const kr[2], float32x4_t out[2]) {
    const int8_t *const *qrp = x;
    const int8_t *const qr[4] = {qrp[0], qrp[1], qrp[2], qrp[3]};
    float32x4_t acc[2] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
    for (int64_t b = 0; b < d / 32; b++) {
        if (!Q4) ARM_MCA_BEGIN(ARM_MCA_LEVEL "_attn_qscores");
        int8x16_t k[2][2];
        int32x4_t is[4][2];
        NEON_FOR(j, 2, 2) att_arm_block_k8(kr[j], b, Q4, k[j]);
        NEON_UNROLL
        for (int r = 0; r < 4; r++) {
            const int8x16_t q0 = vld1q_s8(qr[r] + b * 32), q1 = vld1q_s8(qr[r] + b * 32 + 16);
            NEON_FOR(j, 2, 2)
            is[r][j] = vdotq_s32(vdotq_s32(vdupq_n_s32(0), q0, k[j][0]), q1, k[j][1]);
        }
        const float32x4_t dq = vld1q_f32(dqt + 4 * b);
        NEON_FOR(j, 2, 2) {
            const int32x4_t y =
                vpaddq_s32(vpaddq_s32(is[0][j], is[1][j]), vpaddq_s32(is[2][j], is[3][j]));
            const float32x4_t w = vmulq_n_f32(dq, att_arm_key_d(kr[j], b, Q4));
            acc[j] = vfmaq_f32(acc[j], vcvtq_f32_s32(y), w);
        }
        if (!Q4) ARM_MCA_END(ARM_MCA_LEVEL "_attn_qscores");
    }
    NEON_FOR(j, 2, 2)
    out[j] = vmulq_f32(acc[j], scv);
}

ATT_ARM_KEYS2_FNS(scores_4x2)

/* Groups of 4 rows (a short group repeats its last row; only real rows are stored); the
 * first group hints the rows at next. */
void cpulm_dotprod_attn_qscores(int64_t d, cpulm_dtype kt, int m, int n, const int8_t *q8,
                                const float *qd, float sc, const uint8_t *k, uint64_t ldk, float *s,
                                int64_t lds, const uint8_t *next) {
    if (d % 32 != 0 || d > ATT_QWDIM || (kt != CPULM_DTYPE_Q8_0 && kt != CPULM_DTYPE_Q4_0)) {
        cpulm_neon_attn_qscores(d, kt, m, n, q8, qd, sc, k, ldk, s, lds, next);
        return;
    }
    const int q4 = kt == CPULM_DTYPE_Q4_0;
    float dqt[4 * (ATT_QWDIM / 32)];
    for (int i = 0; i < m; i += 4) {
        const int rows = m - i < 4 ? m - i : 4;
        const int8_t *qr[4];
        att_rows4(d, q8, qd, i, rows, qr, dqt);
        att_arm_rows(d, rows, n, qr, dqt, vdupq_n_f32(sc), q4 ? scores_4x2_q4 : scores_4x2_q8, k,
                     ldk, i == 0 ? next : NULL, (size_t)(d / 32) * att_block_bytes(q4),
                     s + (int64_t)i * lds, lds);
    }
}
#endif
