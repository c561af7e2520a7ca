/* i8mm.c: the i8mm kernel level (armv8.2-a + DotProd + I8MM: Neoverse V1 / Graviton3,
 * N2, V2 / Graviton4, Cortex-A710 / X2, Apple M2), built with
 * -march=armv8.2-a+dotprod+i8mm. Reached only after dispatch.c saw HWCAP2_I8MM.
 *
 * Its table adds nothing: SMMLA computes a 2x2 block of int8 dot products, and for one
 * weight row x one activation row (the table's vec_dot) only its diagonal is useful,
 * which is no more work per instruction than SDOT, so every vec_dot inherits dotprod.
 * The level exists because SMMLA pays off on 2 x 2 tiles (prompt processing) and because
 * sve builds on it; those tiles are exported below (i8mm.h) for the tiled matmul.
 */
#if defined(__aarch64__)
#include "arm.h"
#include "i8mm.h"

/* ---- 2x2 tiles: two weight rows x two activation rows, per block ----
 * With A = the two weight rows' next 8 bytes (2x8) and B = the two activation rows' (2x8),
 * SMMLA adds A * B^T to {r0.c0, r0.c1, r1.c0, r1.c1}: 32 useful multiply-adds in one
 * instruction, where SDOT does 16. */

/* The block's 4 exact int dots, from the weight rows' 32 quants as 4 x 16 signed bytes
 * (w[0..1] = row 0, w[2..3] = row 1). */
ARM_INLINE int32x4_t tile_block(const int8x16_t w[4], const cpulm_block_q8_0 *y0,
                                const cpulm_block_q8_0 *y1) {
    int32x4_t acc = vdupq_n_s32(0);
    for (int h = 0; h < 2; h++) {
        int8x16_t a_lo, a_hi, b_lo, b_hi;
        arm_rows_2x8(w[h], w[2 + h], &a_lo, &a_hi);
        arm_rows_2x8(vld1q_s8(y0->qs + 16 * h), vld1q_s8(y1->qs + 16 * h), &b_lo, &b_hi);
        acc = vmmlaq_s32(acc, a_lo, b_lo);
        acc = vmmlaq_s32(acc, a_hi, b_hi);
    }
    return acc;
}

/* {dx0 dy0, dx0 dy1, dx1 dy0, dx1 dy1}, in the lane order of the SMMLA result */
ARM_INLINE float32x4_t tile_scales(uint16_t dx0, uint16_t dx1, uint16_t dy0, uint16_t dy1) {
    const float32x4_t dx = {arm_fp16(dx0), arm_fp16(dx0), arm_fp16(dx1), arm_fp16(dx1)};
    const float32x4_t dy = {arm_fp16(dy0), arm_fp16(dy1), arm_fp16(dy0), arm_fp16(dy1)};
    return vmulq_f32(dx, dy);
}

ARM_INLINE void tile_store(float *s, size_t bs, float32x4_t acc) {
    s[0] = vgetq_lane_f32(acc, 0);
    s[1] = vgetq_lane_f32(acc, 1);
    s[bs] = vgetq_lane_f32(acc, 2);
    s[bs + 1] = vgetq_lane_f32(acc, 3);
}

void cpulm_i8mm_vec_dot_2x2_q8_0_q8_0(int64_t n, float *s, size_t bs, const void *vx, size_t bx,
                                      const void *vy, size_t by) {
    const cpulm_block_q8_0 *x0 = vx, *x1 = (const void *)((const uint8_t *)vx + bx);
    const cpulm_block_q8_0 *y0 = vy, *y1 = (const void *)((const uint8_t *)vy + by);
    float32x4_t acc = vdupq_n_f32(0.0f);
    for (int64_t i = 0; i < n / 32; i++) {
        const int8x16_t w[4] = {vld1q_s8(x0[i].qs), vld1q_s8(x0[i].qs + 16), vld1q_s8(x1[i].qs),
                                vld1q_s8(x1[i].qs + 16)};
        const int32x4_t p = tile_block(w, &y0[i], &y1[i]);
        acc = vfmaq_f32(acc, vcvtq_f32_s32(p), tile_scales(x0[i].d, x1[i].d, y0[i].d, y1[i].d));
    }
    tile_store(s, bs, acc);
}

void cpulm_i8mm_vec_dot_2x2_q4_0_q8_0(int64_t n, float *s, size_t bs, const void *vx, size_t bx,
                                      const void *vy, size_t by) {
    const cpulm_block_q4_0 *x0 = vx, *x1 = (const void *)((const uint8_t *)vx + bx);
    const cpulm_block_q8_0 *y0 = vy, *y1 = (const void *)((const uint8_t *)vy + by);
    float32x4_t acc = vdupq_n_f32(0.0f);
    for (int64_t i = 0; i < n / 32; i++) {
        int8x16_t w[4];
        arm_q4_0_unpack(x0[i].qs, &w[0], &w[1]);
        arm_q4_0_unpack(x1[i].qs, &w[2], &w[3]);
        const int32x4_t p = tile_block(w, &y0[i], &y1[i]);
        acc = vfmaq_f32(acc, vcvtq_f32_s32(p), tile_scales(x0[i].d, x1[i].d, y0[i].d, y1[i].d));
    }
    tile_store(s, bs, acc);
}

const cpulm_kernels cpulm_kernels_i8mm = {
    .name = "i8mm",
};
#endif
