/* x16_sdot.h: the SDOT-by-element GEMM over repacked 16-row groups (gemm_x16 for Q4_0 and
 * Q8_0): dotprod.c's gemm_x16, and i8mm.c's one-token case (decode), where pairing the
 * token with itself for SMMLA would waste half the multiplies (llvm-mca: 1.8x the cycles
 * per weight byte on Neoverse V1/V2, see docs/perf-log/2026-11-30-arm-llvm-mca.md). Included only
 * by files built with +dotprod, after arm.h with ARM_MCA_LEVEL set (the arm-perf.sh marker names);
 * everything is static inline (see arm.h).
 *
 * SDOT by element: acc lane r += dot(4 quants of row r, 4 activation bytes picked by lane
 * index), so one instruction advances 4 rows x 1 token by 4 elements, and a quad's 8
 * weight vectors (arm_x16_quad) take 8 SDOTs per token and block, with no shuffles. The
 * tile is one quad x NT tokens; per block and token the int chain starts from the float
 * bits of M = 1.5 * 2^23 and ends at the bits of M + isum (M + 16 isum for the tile's Q4_0,
 * |16 isum| <= 2^19), then acc = fma(dw, dx * float(isum), acc) as in generic (float(isum)
 * by one FSUB of M, see dp_chain_start), bit for bit the same for every tile shape.
 * Registers (32): NT accumulators, 8 weight vectors, the activation vectors and chains in
 * flight; 8 tokens fit once GCC's pre-allocation scheduling is off (ARM_NO_PRESCHED: with
 * it, the Q4_0 tile spills 16 times per block) and clang's load hoisting is bounded
 * (ARM_ORDER). Q4_0 weights enter as 16 (q - 8) (dp_q4_quad16), so no chain carries the
 * activations' bias correction: on N1 that is 3 micro-ops less per token and block (a
 * scalar load, an add, a DUP) for 4 more per quad and block (EOR, and the factor 16 taken
 * out of dw). Per block and quad of an 8-token tile, llvm-mca-22 (scripts/arm-perf.sh,
 * GCC 12 -O2): Q4_0 is 57 cycles on N1 (dispatch-bound: 3 micro-ops a cycle and 162
 * micro-ops, 64 of them SDOT) and 28 on V1/V2, i.e. 56% and 57% of the SDOT peak; Q8_0
 * 57% and 65%. The dotprod level runs on N1-class cores only (V1/V2 take i8mm / sve), so
 * its choices are N1's. Why a wider tile (16 rows x 4 tokens) does not reach N1's 70%:
 * docs/perf-log/2026-12-01-arm-llvm-mca-n1-dotprod.md.
 * The step with the FMA of i8mm.c (f = fma(M + isum, dx, -(M * dx)), chain starts and
 * -M dx pre-broadcast per call) was measured here too: V1 Q8_0 68% but N1 43% (the
 * staging's stores and extra loads cost more micro-ops than they save on a 3-wide core).
 * Decode (dp_gemv) loops all 16 rows per block, so the token's block is loaded once. */

#ifndef CPULM_KERNELS_ARM_X16_SDOT_H
#define CPULM_KERNELS_ARM_X16_SDOT_H

#include "arm.h"

/* arm-perf.sh markers for a loop of a Q4_0 / Q8_0 kernel (q8 a constant after inlining) */
#define X16_MCA(WHAT, NAME)                                 \
    do {                                                    \
        if (q8)                                             \
            ARM_MCA_##WHAT(ARM_MCA_LEVEL "_" NAME "_q8_0"); \
        else                                                \
            ARM_MCA_##WHAT(ARM_MCA_LEVEL "_" NAME "_q4_0"); \
    } while (0)

#define DP_TILE 8

/* The block loop of the full tile, for scripts/arm-perf.sh. */
#define DP_MCA(WHAT)                                                          \
    do {                                                                      \
        if (NT == DP_TILE && q8) ARM_MCA_##WHAT(ARM_MCA_LEVEL "_gemm_q8_0");  \
        if (NT == DP_TILE && !q8) ARM_MCA_##WHAT(ARM_MCA_LEVEL "_gemm_q4_0"); \
    } while (0)

/* A block's int chain starts at the bits of M = 1.5 * 2^23 plus the bias correction (Q4_0
 * in decode) or 0: after the 8 SDOTs it holds the bits of the float M + isum, exact since
 * |isum| < 2^22 (Q8_0: <= 32 * 128 * 128 = 2^19; Q4_0: <= 32 * 8 * 128 = 2^15), and one FSUB
 * of M gives float(isum) exactly, the value SCVTF gives. SCVTF is 2 micro-ops on one vector
 * pipe of N1 and V1/V2 (llvm-mca-22), FSUB 1 on any, so the float step costs one micro-op
 * less per 4 outputs and block; results are unchanged bit for bit. */
ARM_INLINE int32x4_t dp_chain_start(int q8, const int32_t *cq) {
    const int32x4_t m = vdupq_n_s32(ARM_MAGIC_BITS);
    return q8 ? m : vaddq_s32(vld1q_dup_s32(cq), m);
}

ARM_INLINE float32x4_t dp_chain_value(int32x4_t is) {
    return vsubq_f32(vreinterpretq_f32_s32(is), vdupq_n_f32(ARM_MAGIC));
}

/* Quad i of a Q4_0 block as 16 (q - 8), signed bytes: q ^ 8 read as a 4-bit two's
 * complement number is q - 8, so with x = u ^ 0x88 the low nibbles are x << 4 and the high
 * ones x & 0xF0, both 16 (q - 8) in [-128, 112]: 3 ops per 2 vectors, and the chain needs no
 * bias correction (the one the staged activations carry for unsigned nibbles). */
ARM_INLINE void dp_q4_quad16(const uint8_t *blk, int i, int8x16_t v[8]) {
    const uint8_t *q = blk + 2 * 16 + 16 * i;
    _Pragma("GCC unroll 4") for (int t = 0; t < 4; t++) {
        const uint8x16_t x = veorq_u8(vld1q_u8(q + 64 * t), vdupq_n_u8(0x88));
        v[t] = vreinterpretq_s8_u8(vshlq_n_u8(x, 4));
        v[t + 4] = vreinterpretq_s8_u8(vandq_u8(x, vdupq_n_u8(0xF0)));
    }
}

ARM_INLINE void dp_quad(int64_t n, const uint8_t *w, int q8, int quad, const arm_x16_act *a,
                        float *s, int64_t ld, const int NT) {
    const size_t blk_bytes = q8 ? ARM_X16_Q8_BLOCK : ARM_X16_Q4_BLOCK;
    float32x4_t acc[DP_TILE];
    _Pragma("GCC unroll 8") for (int j = 0; j < NT; j++) acc[j] = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < n / 32; b++) {
        DP_MCA(BEGIN);
        const uint8_t *g = w + (size_t)b * blk_bytes;
        int8x16_t v[8];
        if (q8)
            arm_x16_quad(g, q8, quad, v);
        else
            dp_q4_quad16(g, quad, v);
        /* Q4_0: the chain holds 16 isum and f = 16 round(dx isum) (exact scalings by 16),
         * so dw / 16 (exact) gives the fma of generic's dw and dx * float(isum) bit for bit */
        const float32x4_t dw =
            q8 ? arm_x16_quad_scales(g, quad) : vmulq_n_f32(arm_x16_quad_scales(g, quad), 0.0625f);
        _Pragma("GCC unroll 8") for (int j = 0; j < NT; j++) {
            const int8_t *xq = a[j].x[b].qs;
            if (ARM_IS_CLANG && j > 0) ARM_ORDER(xq, acc[j - 1]); /* after token j - 1 */
            const int8x16x2_t x2 = vld1q_s8_x2(xq);
            const int8x16_t xl = x2.val[0], xh = x2.val[1];
            int32x4_t is = vdupq_n_s32(ARM_MAGIC_BITS);
            is = vdotq_laneq_s32(is, v[0], xl, 0);
            is = vdotq_laneq_s32(is, v[1], xl, 1);
            is = vdotq_laneq_s32(is, v[2], xl, 2);
            is = vdotq_laneq_s32(is, v[3], xl, 3);
            is = vdotq_laneq_s32(is, v[4], xh, 0);
            is = vdotq_laneq_s32(is, v[5], xh, 1);
            is = vdotq_laneq_s32(is, v[6], xh, 2);
            is = vdotq_laneq_s32(is, v[7], xh, 3);
            const float32x4_t f = vmulq_n_f32(dp_chain_value(is), a[j].d[b]);
            acc[j] = vfmaq_f32(acc[j], dw, f);
        }
        DP_MCA(END);
    }
    _Pragma("GCC unroll 8") for (int j = 0; j < NT; j++)
        vst1q_f32(s + (size_t)j * (size_t)ld + 4 * quad, acc[j]);
}

/* NT tokens against the whole group, a quad at a time: the tile's activation rows stay
 * in L1 while the group is read four times (16 of every 64 bytes per pass). */
ARM_INLINE void dp_tile(int64_t n, const uint8_t *w, int q8, const uint8_t *act, uint64_t stride,
                        float *s, int64_t ld, const int NT) {
    arm_x16_act a[DP_TILE];
    _Pragma("GCC unroll 8") for (int j = 0; j < NT; j++) a[j] =
        arm_x16_act_row(act + (size_t)j * stride, n, q8);
    for (int quad = 0; quad < 4; quad++)
        dp_quad(n, w, q8, quad, a, s, ld, NT);
}

/* One token (decode) against the whole group: the 4 quads in one block loop, so the
 * token's block (quants, bias, scale) is loaded once per block instead of once per quad
 * pass, and the 16 rows' scales convert with 4 instructions. Each output gets the same
 * arithmetic as in dp_quad (so a token's result does not depend on the tile it is in). */
ARM_INLINE void dp_gemv(int64_t n, const uint8_t *w, int q8, const uint8_t *act, float *s) {
    const size_t blk_bytes = q8 ? ARM_X16_Q8_BLOCK : ARM_X16_Q4_BLOCK;
    const arm_x16_act a = arm_x16_act_row(act, n, q8);
    float32x4_t acc[4];
    for (int q = 0; q < 4; q++)
        acc[q] = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < n / 32; b++) {
        X16_MCA(BEGIN, "gemv");
        const uint8_t *g = w + (size_t)b * blk_bytes;
        const int8x16_t xl = vld1q_s8(a.x[b].qs), xh = vld1q_s8(a.x[b].qs + 16);
        const int32x4_t init = dp_chain_start(q8, q8 ? NULL : a.corr + b);
        const float dx = a.d[b];
        const float16x8_t h0 = vreinterpretq_f16_u8(vld1q_u8(g));
        const float16x8_t h1 = vreinterpretq_f16_u8(vld1q_u8(g + 16));
        const float32x4_t dw[4] = {vcvt_f32_f16(vget_low_f16(h0)), vcvt_high_f32_f16(h0),
                                   vcvt_f32_f16(vget_low_f16(h1)), vcvt_high_f32_f16(h1)};
        _Pragma("GCC unroll 4") for (int q = 0; q < 4; q++) {
            int8x16_t v[8];
            arm_x16_quad(g, q8, q, v);
            int32x4_t is = init;
            is = vdotq_laneq_s32(is, v[0], xl, 0);
            is = vdotq_laneq_s32(is, v[1], xl, 1);
            is = vdotq_laneq_s32(is, v[2], xl, 2);
            is = vdotq_laneq_s32(is, v[3], xl, 3);
            is = vdotq_laneq_s32(is, v[4], xh, 0);
            is = vdotq_laneq_s32(is, v[5], xh, 1);
            is = vdotq_laneq_s32(is, v[6], xh, 2);
            is = vdotq_laneq_s32(is, v[7], xh, 3);
            const float32x4_t f = vmulq_n_f32(dp_chain_value(is), dx);
            acc[q] = vfmaq_f32(acc[q], dw[q], f);
            ARM_ORDER(g, acc[q]); /* next quad's weights load after this one's use */
        }
        X16_MCA(END, "gemv");
    }
    for (int q = 0; q < 4; q++)
        vst1q_f32(s + 4 * q, acc[q]);
}

/* Out of line, so the decode loop is scheduled normally even when the caller is built
 * with ARM_NO_PRESCHED (for GCC that costs this loop 3-4%, llvm-mca). Static: each
 * including file gets its own copy, built with its own -march. */
__attribute__((noinline)) static void dp_gemv_q4_0(int64_t n, const uint8_t *w, const uint8_t *act,
                                                   float *s) {
    dp_gemv(n, w, 0, act, s);
}
__attribute__((noinline)) static void dp_gemv_q8_0(int64_t n, const uint8_t *w, const uint8_t *act,
                                                   float *s) {
    dp_gemv(n, w, 1, act, s);
}

ARM_INLINE void dp_gemv_call(int64_t n, const uint8_t *w, int q8, const uint8_t *act, float *s) {
    if (q8)
        dp_gemv_q8_0(n, w, act, s);
    else
        dp_gemv_q4_0(n, w, act, s);
}

ARM_INLINE void dp_gemm(int64_t n, int nt, float *s, int64_t ld, const void *w, const uint8_t *act,
                        uint64_t stride, int q8) {
#define DP_CALL(j0, NT)                                                                \
    do {                                                                               \
        if ((NT) == 1)                                                                 \
            dp_gemv_call(n, w, q8, act + (size_t)(j0)*stride, s + (j0)*ld);            \
        else                                                                           \
            dp_tile(n, w, q8, act + (size_t)(j0)*stride, stride, s + (j0)*ld, ld, NT); \
    } while (0)
    ARM_X16_TILES(DP_TILE, DP_CALL);
#undef DP_CALL
}

#endif
