/* dotprod_attn.c: the dotprod level's attn_qscores (contract in kernels.h), built with the
 * dotprod flags and reached through cpulm_kernels_dotprod (i8mm and sve inherit it); the
 * other attn_q* ops are neon's (neon_attn.c).
 *
 * SDOT multiplies int8 by int8, the query is int16: each query row is split once per call
 * into two int8 rows, hi = q >> 8 (its high byte) and lo = (q & 255) - 128, so that
 * q = 256 hi + lo + 128 and a block's dot is 256 dot(hi, k) + dot(lo, k) + 128 sum(k), the
 * same int32 as the neon SMULL / SMLAL sum (|256 dot(hi, k)| <= 256 * 32 * 128 * 128 < 2^31:
 * exact), with 4 SDOT per row, key and block instead of 8 SMULL / SMLAL and no widening of
 * the keys; sum(k) (2 SDOT by ones) serves the 4 rows. The float steps are neon's: one SCVTF
 * and one FMLA by the key's block scale per block in block order, so the same bits.
 */
#if defined(__aarch64__)
#define ARM_MCA_LEVEL "dotprod"
#include "arm.h"
#include "kernels/attn_simd.h"
#include "neon_unroll.h"
#include "format/quant.h"

#define WDIM 256 /* the largest head size split here; larger ones go to neon's */

/* Scores of the 4 split rows (x: hi, row r at r * d, then lo at 4 d + r * d) x 2 keys, rows
 * in lanes. */
ARM_INLINE void scores_4x2(int64_t d, const int Q4, const void *x, float32x4_t qsv,
                           const uint8_t *const kr[2], float32x4_t out[2]) {
    const int8_t *hi = x, *lo = hi + 4 * d;
    const int8x16_t ones = vdupq_n_s8(1);
    float32x4_t acc[2] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
    for (int64_t b = 0; b < d / 32; b++) {
        if (!Q4) ARM_MCA_BEGIN(ARM_MCA_LEVEL "_attn_qscores");
        int8x16_t k[2][2];
        int32x4_t ks[2], is[4][2];
        NEON_FOR(j, 2, 2) {
            att_arm_block_k8(kr[j], b, Q4, k[j]);
            ks[j] = vdotq_s32(vdotq_s32(vdupq_n_s32(0), k[j][0], ones), k[j][1], ones);
        }
        NEON_UNROLL
        for (int r = 0; r < 4; r++) {
            const int8_t *h = hi + r * d + b * 32, *l = lo + r * d + b * 32;
            const int8x16_t h0 = vld1q_s8(h), h1 = vld1q_s8(h + 16);
            const int8x16_t l0 = vld1q_s8(l), l1 = vld1q_s8(l + 16);
            NEON_FOR(j, 2, 2) {
                int32x4_t a = vdotq_s32(vdotq_s32(vdupq_n_s32(0), h0, k[j][0]), h1, k[j][1]);
                a = vshlq_n_s32(a, 8);
                is[r][j] = vdotq_s32(vdotq_s32(a, l0, k[j][0]), l1, k[j][1]);
            }
        }
        /* [k0 sums, k1 sums] -> lane j: sum(k_j), times 128 */
        const int32x4_t kp = vpaddq_s32(ks[0], ks[1]);
        const int32x4_t k128 = vshlq_n_s32(vpaddq_s32(kp, kp), 7);
        NEON_FOR(j, 2, 2) {
            int32x4_t y =
                vpaddq_s32(vpaddq_s32(is[0][j], is[1][j]), vpaddq_s32(is[2][j], is[3][j]));
            y = vaddq_s32(y, j == 0 ? vdupq_laneq_s32(k128, 0) : vdupq_laneq_s32(k128, 1));
            acc[j] = vfmaq_n_f32(acc[j], vcvtq_f32_s32(y), att_arm_key_d(kr[j], b, Q4));
        }
        if (!Q4) ARM_MCA_END(ARM_MCA_LEVEL "_attn_qscores");
    }
    NEON_FOR(j, 2, 2)
    out[j] = vmulq_f32(acc[j], qsv);
}

ATT_ARM_KEYS2_FNS(scores_4x2)

/* hl = the 4 rows qr split: hi (row r at r * d) then lo (at 4 d + r * d). */
static void split_rows(int64_t d, const int16_t *const qr[4], int8_t *hl) {
    for (int r = 0; r < 4; r++)
        for (int64_t e = 0; e < d; e += 8) {
            const int16x8_t x = vld1q_s16(qr[r] + e);
            vst1_s8(hl + r * d + e, vshrn_n_s16(x, 8)); /* the high byte: floor(q / 256) */
            vst1_s8(hl + 4 * d + r * d + e,
                    vreinterpret_s8_u8(veor_u8(vreinterpret_u8_s8(vmovn_s16(x)), vdup_n_u8(0x80))));
        }
}

/* Groups of 4 rows (a short group repeats its last row; only real rows are stored), each
 * split once; the first group hints the rows at next. */
void cpulm_dotprod_attn_qscores(int64_t d, cpulm_dtype kt, int m, int n, const int16_t *q16,
                                int64_t ldq, const float *qs, const uint8_t *k, uint64_t ldk,
                                float *s, int64_t lds, const uint8_t *next) {
    if (d % 32 != 0 || d > WDIM || (kt != CPULM_DTYPE_Q8_0 && kt != CPULM_DTYPE_Q4_0)) {
        cpulm_neon_attn_qscores(d, kt, m, n, q16, ldq, qs, k, ldk, s, lds, next);
        return;
    }
    const int q4 = kt == CPULM_DTYPE_Q4_0;
    int8_t hl[8 * WDIM] __attribute__((aligned(16)));
    for (int i = 0; i < m; i += 4) {
        const int rows = m - i < 4 ? m - i : 4;
        const int16_t *qr[4];
        float qsr[4];
        att_rows4(q16, ldq, qs, i, rows, qr, qsr);
        split_rows(d, qr, hl);
        att_arm_rows(d, rows, n, hl, vld1q_f32(qsr), q4 ? scores_4x2_q4 : scores_4x2_q8, k, ldk,
                     i == 0 ? next : NULL, (size_t)(d / 32) * att_block_bytes(q4),
                     s + (int64_t)i * lds, lds);
    }
}
#endif
