/* i8mm.c: the i8mm kernel level (armv8.2-a + DotProd + I8MM: Neoverse V1 / Graviton3,
 * N2, V2 / Graviton4, Cortex-A710 / X2, Apple M2), built with
 * -march=armv8.2-a+dotprod+i8mm. Reached only after dispatch.c saw HWCAP2_I8MM.
 *
 * SMMLA computes a 2x2 block of int8 dot products. For one weight row x one activation
 * row (the table's vec_dot) only its diagonal is useful, which is no more work per
 * instruction than SDOT, so every vec_dot inherits dotprod. It pays off on 2 x 2 tiles:
 * the gemm_x16 entries (prompt processing over repacked weights, below) and the 2x2 tile
 * dots exported in i8mm.h. sve inherits the gemm_x16 entries. One token (decode) takes
 * the SDOT path of x16_sdot.h instead of pairing the token with itself.
 */
#if defined(__aarch64__)
#define ARM_MCA_LEVEL "i8mm"
#include "arm.h"
#include "i8mm.h"
#include "x16_sdot.h"

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

/* ---- GEMM over repacked 16-row groups (gemm_x16) ----
 * SMMLA wants 8 consecutive quants of 2 rows per operand; the 16-row layout holds 4
 * consecutive quants of 4 rows per vector, so zipping the 32-bit lanes of the vectors of
 * elements 8m..8m+3 and 8m+4..8m+7 gives rows {0,1} (zip1) and {2,3} (zip2) of a quad:
 * 8 zips per quad and block, shared by every token of the tile. No layout change needed.
 * Activations: two tokens' 8-byte pieces side by side. Zipping them in the block loop
 * would cost 4 shuffles per token pair, quad and block; instead each chunk of MM_KC
 * blocks is interleaved once per tile into a stack buffer (with the pair's scale and
 * bias-correction patterns) and reused by the 4 quads, so the inner loop only loads it.
 * Result lanes of SMMLA(act pair, row pair): {a r0, a r1, b r0, b r1}. Float step without
 * SCVTF (2 micro-ops on V1/V2, where every other vector op is 1): each chain starts at
 * ARM_MAGIC_BITS plus the bias correction, so it ends holding the float M + isum
 * (M = 1.5 * 2^23, exact while |isum| < 2^22: Q8_0 |isum| <= 32 * 127 * 128 < 2^19,
 * Q4_0 <= 32 * 8 * 128 = 2^15), and f = fma(M + isum, dx, -(M * dx)) is exactly generic's
 * round(dx * float(isum)): dx is an fp16 value (11 significant bits), so -(M * dx) = -3 *
 * 2^22 * dx is exact and the fma's one rounding is that of isum * dx. (isum = 0 gives +0
 * where generic may give -0: the same once added to acc, which is never -0.) Then acc =
 * fma(dw, f, acc) lane by lane, as in generic, whatever the tile.
 * An odd token count (3 and more) pairs the last token with itself and drops the copy.
 * Per block and quad of an 8-token tile, llvm-mca-22 (scripts/arm-perf.sh, GCC 12 -O2):
 * Q4_0 69 vector micro-ops (32 SMMLA, 8 zips, 8 unpack, 16 FMLA, scales) and 44 loads,
 * 17.4 cycles on V1 (vector-bound) and 20 on V2 (dispatch-bound: 6 wide); the interleave
 * adds 4.5 cycles per token pair and block. With one rounding per block and 4 outputs,
 * the float step alone (2 FMLA per 4 SMMLA) caps a tile at 4 / 6 = 67% of the SMMLA peak.
 * A layout with rows paired at 8-byte granularity would save the 8 weight zips per quad
 * and block (~12% of the vector ops); the shared 16-row layout costs that much, no more. */

#define MM_PAIRS 4  /* token pairs per tile */
#define MM_KC    32 /* blocks per interleaved activation chunk: 12 KB of stack */

typedef struct mm_pair_block {
    int8x16_t x[4]; /* elements 8m..8m+7 of token a, then of token b, m = 0..3 */
    float dx[4];    /* {dx_a, dx_a, dx_b, dx_b} */
    /* Per row pair rp (two copies, so the compiler loads each where it is consumed instead
     * of copying one load with a MOV, as SMMLA and FMLA overwrite it):
     * init: chain starts {i_a, i_a, i_b, i_b}, ARM_MAGIC_BITS + the bias correction (-8 *
     * sum(x) for Q4_0, 0 for Q8_0); nmdx: {-M dx_a, -M dx_a, -M dx_b, -M dx_b}. */
    int32_t init[2][4];
    float nmdx[2][4];
} mm_pair_block;

/* Interleaves blocks [b0, b0 + nbc) of tokens a and b (b = a for a lone last token) into
 * out[i * stride_pairs]. Scalar stores for the patterns: no vector shuffles needed. */
ARM_INLINE void mm_interleave(arm_x16_act ta, arm_x16_act tb, int64_t b0, int64_t nbc,
                              mm_pair_block *out, int stride_pairs, int q8) {
    for (int64_t i = 0; i < nbc; i++) {
        X16_MCA(BEGIN, "stage");
        const int64_t b = b0 + i;
        mm_pair_block *e = out + i * stride_pairs;
        arm_rows_2x8(vld1q_s8(ta.x[b].qs), vld1q_s8(tb.x[b].qs), &e->x[0], &e->x[1]);
        arm_rows_2x8(vld1q_s8(ta.x[b].qs + 16), vld1q_s8(tb.x[b].qs + 16), &e->x[2], &e->x[3]);
        const float da = ta.d[b], db = tb.d[b];
        e->dx[0] = e->dx[1] = da;
        e->dx[2] = e->dx[3] = db;
        const int32_t ca = ARM_MAGIC_BITS + (q8 ? 0 : ta.corr[b]);
        const int32_t cb = ARM_MAGIC_BITS + (q8 ? 0 : tb.corr[b]);
        const float na = -ARM_MAGIC * da, nb = -ARM_MAGIC * db;
        for (int rp = 0; rp < 2; rp++) {
            e->init[rp][0] = e->init[rp][1] = ca;
            e->init[rp][2] = e->init[rp][3] = cb;
            e->nmdx[rp][0] = e->nmdx[rp][1] = na;
            e->nmdx[rp][2] = e->nmdx[rp][3] = nb;
        }
        X16_MCA(END, "stage");
    }
}

/* One quad over a chunk of nbc blocks (w at the chunk's first block) for P token pairs;
 * acc[rp][p] holds rows {2rp, 2rp+1} of the quad x pair p. */
ARM_INLINE void mm_quad_chunk(const uint8_t *w, int q8, int quad, int64_t nbc,
                              const mm_pair_block *buf, float32x4_t acc[2][MM_PAIRS], const int P) {
    const size_t blk_bytes = q8 ? ARM_X16_Q8_BLOCK : ARM_X16_Q4_BLOCK;
    for (int64_t i = 0; i < nbc; i++) {
        if (P == MM_PAIRS) X16_MCA(BEGIN, "gemm");
        const uint8_t *g = w + (size_t)i * blk_bytes;
        int8x16_t v[8], wo[2][4];
        arm_x16_quad(g, q8, quad, v);
        _Pragma("GCC unroll 4") for (int m = 0; m < 4; m++) {
            const int32x4_t lo = vreinterpretq_s32_s8(v[2 * m]);
            const int32x4_t hi = vreinterpretq_s32_s8(v[2 * m + 1]);
            wo[0][m] = vreinterpretq_s8_s32(vzip1q_s32(lo, hi));
            wo[1][m] = vreinterpretq_s8_s32(vzip2q_s32(lo, hi));
        }
        const float64x2_t dw = vreinterpretq_f64_f32(arm_x16_quad_scales(g, quad));
        const float32x4_t dwp[2] = {vreinterpretq_f32_f64(vdupq_laneq_f64(dw, 0)),
                                    vreinterpretq_f32_f64(vdupq_laneq_f64(dw, 1))};
        _Pragma("GCC unroll 4") for (int p = 0; p < P; p++) {
            const mm_pair_block *e = buf + i * MM_PAIRS + p;
            _Pragma("GCC unroll 2") for (int rp = 0; rp < 2; rp++) {
                int32x4_t is = vld1q_s32(e->init[rp]);
                _Pragma("GCC unroll 4") for (int m = 0; m < 4; m++) is =
                    vmmlaq_s32(is, e->x[m], wo[rp][m]);
                const float32x4_t f =
                    vfmaq_f32(vld1q_f32(e->nmdx[rp]), vreinterpretq_f32_s32(is), vld1q_f32(e->dx));
                acc[rp][p] = vfmaq_f32(acc[rp][p], dwp[rp], f);
            }
        }
        if (P == MM_PAIRS) X16_MCA(END, "gemm");
    }
}

/* NT (1..2 * MM_PAIRS) tokens against the whole group. */
ARM_INLINE void mm_tile(int64_t n, const uint8_t *w, int q8, const uint8_t *act, uint64_t stride,
                        float *s, int64_t ld, const int NT) {
    const int P = (NT + 1) / 2;
    const int64_t nb = n / 32;
    const size_t blk_bytes = q8 ? ARM_X16_Q8_BLOCK : ARM_X16_Q4_BLOCK;
    arm_x16_act a[2 * MM_PAIRS];
    _Pragma("GCC unroll 8") for (int j = 0; j < NT; j++) a[j] =
        arm_x16_act_row(act + (size_t)j * stride, n, q8);
    mm_pair_block buf[MM_KC * MM_PAIRS];
    float32x4_t acc[4][2][MM_PAIRS];
    for (int q = 0; q < 4; q++)
        for (int rp = 0; rp < 2; rp++)
            for (int p = 0; p < MM_PAIRS; p++)
                acc[q][rp][p] = vdupq_n_f32(0.0f);
    for (int64_t b0 = 0; b0 < nb; b0 += MM_KC) {
        const int64_t nbc = nb - b0 < MM_KC ? nb - b0 : MM_KC;
        for (int p = 0; p < P; p++)
            mm_interleave(a[2 * p], a[2 * p + 1 < NT ? 2 * p + 1 : 2 * p], b0, nbc, buf + p,
                          MM_PAIRS, q8);
        for (int q = 0; q < 4; q++) {
            float32x4_t r[2][MM_PAIRS];
            memcpy(r, acc[q], sizeof r);
            mm_quad_chunk(w + (size_t)b0 * blk_bytes, q8, q, nbc, buf, r, P);
            memcpy(acc[q], r, sizeof r);
        }
    }
    for (int q = 0; q < 4; q++)
        for (int p = 0; p < P; p++) {
            const float32x4_t lo = acc[q][0][p], hi = acc[q][1][p];
            vst1q_f32(s + (size_t)(2 * p) * (size_t)ld + 4 * q,
                      vcombine_f32(vget_low_f32(lo), vget_low_f32(hi)));
            if (2 * p + 1 < NT)
                vst1q_f32(s + (size_t)(2 * p + 1) * (size_t)ld + 4 * q,
                          vcombine_f32(vget_high_f32(lo), vget_high_f32(hi)));
        }
}

ARM_INLINE void mm_gemm(int64_t n, int nt, float *s, int64_t ld, const void *w, const uint8_t *act,
                        uint64_t stride, int q8) {
    if (nt == 1) { /* one-token decode: SDOT by element, no self-pairing (x16_sdot.h) */
        dp_gemv_call(n, w, q8, act, s);
        return;
    }
#define MM_CALL(j0, NT) mm_tile(n, w, q8, act + (size_t)(j0)*stride, stride, s + (j0)*ld, ld, NT)
    ARM_X16_TILES(2 * MM_PAIRS, MM_CALL);
#undef MM_CALL
}

static void gemm_q4_0_x16(int64_t n, int nt, float *s, int64_t ld, const void *w,
                          const uint8_t *act, uint64_t stride) {
    mm_gemm(n, nt, s, ld, w, act, stride, 0);
}

static void gemm_q8_0_x16(int64_t n, int nt, float *s, int64_t ld, const void *w,
                          const uint8_t *act, uint64_t stride) {
    mm_gemm(n, nt, s, ld, w, act, stride, 1);
}

const cpulm_kernels cpulm_kernels_i8mm = {
    .name = "i8mm",
    .gemm_x16 =
        {
            [CPULM_DTYPE_Q8_0] = gemm_q8_0_x16,
            [CPULM_DTYPE_Q4_0] = gemm_q4_0_x16,
        },
};
#endif
