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

/* ---- GEMM over 16-row groups in the CPULM_X16_PAIRS layout (gemm_x16; kernels.h) ----
 * SMMLA wants 8 consecutive quants of 2 rows per operand. The shared 16-row layout holds 4
 * quants of 4 rows per vector, which took 8 zips per quad and block to re-pair; this level
 * has the loader pack its Q4_0 / Q8_0 weights in row pairs instead (x16_layout below), so a
 * weight operand is one load (Q8_0) or one load and one op per two operands (Q4_0). Q4_0
 * bytes come XOR 0x88: each nibble read as a 4-bit two's complement number is q - 8, so
 * x << 4 and x & 0xF0 are the signed operands 16 (q - 8) of the low and high nibbles (as in
 * dp_q4_quad16) and no chain carries the activations' bias correction.
 * Activations: two tokens' 8-byte pieces side by side. Each chunk of MM_KC blocks is
 * interleaved once per tile into a stack buffer (with the pair's scale patterns) and reused
 * by the 4 quads of up to MM_GROUPS groups (x16_groups: matmul passes 8 groups per call), so
 * the inner loop only loads it.
 * Result lanes of SMMLA(act pair, row pair): {a r0, a r1, b r0, b r1}. Float step without
 * SCVTF (2 micro-ops on V1/V2, where every other vector op is 1): each chain starts at
 * ARM_MAGIC_BITS, so it ends holding the float M + isum (M = 1.5 * 2^23, exact while |isum| <
 * 2^22: Q8_0 |isum| <= 32 * 127 * 128 < 2^19, Q4_0's 16 isum <= 16 * 32 * 8 * 128 = 2^19),
 * and f = fma(M + isum, dx, -(M * dx)) is exactly round(dx * float(isum)) (Q4_0 takes dx / 16
 * against its 16 isum, exact: dx is 0 or at least 2^-24): dx is an fp16 value (11 significant
 * bits), so -(M * dx) = -3 * 2^22 * dx is exact and the fma's one rounding is that of isum *
 * dx. (isum = 0 gives +0 where generic may give -0: the same once added to acc, which is
 * never -0.) Then acc = fma(dw, f, acc) lane by lane, as in generic, whatever the tile.
 * An odd token count (3 and more) pairs the last token with itself and drops the copy.
 * The float step bounds the tile: 2 FMLA per 4 SMMLA, 4 / 6 = 67% of the SMMLA peak on
 * 4 vector pipes. llvm-mca-22 figures per core: docs/PERFORMANCE.md (ARM). */

/* GCC pairs adjacent q-register loads into LDP, 3 micro-ops on V2 (2 LDRs are 2) where
 * the 6-wide dispatch bounds these loops; its peephole2 pass forms the pairs. */
#if defined(__GNUC__) && !defined(__clang__)
#define MM_NO_LDP __attribute__((optimize("no-peephole2")))
/* and, as ARM_NO_PRESCHED, no scheduling before register allocation (it spilled an
 * accumulator of the Q4_0 tile) */
#define MM_GEMM_OPT __attribute__((optimize("no-peephole2", "no-schedule-insns")))
#else
#define MM_NO_LDP
#define MM_GEMM_OPT
#endif

/* Token pairs per tile: 8 (16 tokens) with GCC, whose loop keeps the 16 accumulators and 8
 * weight operands in registers; clang spilled ~20 vectors a block there, so 4 with clang.
 * The results are the same either way (per-element arithmetic). */
#if defined(__clang__)
#define MM_PAIRS        4
#define MM_UNROLL_PAIRS _Pragma("GCC unroll 4") /* clang left the loop rolled at 8 */
#else
#define MM_PAIRS        8
#define MM_UNROLL_PAIRS _Pragma("GCC unroll 8")
#endif
#define MM_KC     16 /* blocks per interleaved activation chunk: 18 KB of stack */
#define MM_GROUPS 8  /* groups sharing one interleaved chunk (x16_groups; 4 KB of accumulators) */

typedef struct mm_pair_block {
    int8x16_t x[4]; /* elements 8m..8m+7 of token a, then of token b, m = 0..3 */
    float dx[4];    /* {dx_a, dx_a, dx_b, dx_b} */
    /* Per row pair rp, two copies, so the compiler loads each where it is consumed (SMMLA
     * and FMLA overwrite it) instead of copying one load with a MOV, which takes a vector
     * pipe: init: the chain start ARM_MAGIC_BITS; nmdx: {-M dx_a, -M dx_a, -M dx_b, -M dx_b}. */
    int32_t init[2][4];
    float nmdx[2][4];
} mm_pair_block;

/* Interleaves blocks [b0, b0 + nbc) of tokens a and b (b = a for a lone last token) into
 * out[i * stride_pairs]. Out of line: inside the tile, whose accumulators fill the
 * registers, GCC spilled its constants. */
ARM_INLINE void mm_interleave(arm_x16_act ta, arm_x16_act tb, int64_t b0, int64_t nbc,
                              mm_pair_block *out, int stride_pairs, const int q8) {
    for (int64_t i = 0; i < nbc; i++) {
        X16_MCA(BEGIN, "stage");
        const int64_t b = b0 + i;
        mm_pair_block *e = out + i * stride_pairs;
        arm_rows_2x8(vld1q_s8(ta.x[b].qs), vld1q_s8(tb.x[b].qs), &e->x[0], &e->x[1]);
        arm_rows_2x8(vld1q_s8(ta.x[b].qs + 16), vld1q_s8(tb.x[b].qs + 16), &e->x[2], &e->x[3]);
        /* Q4_0: dx / 16 (exact), as the chains hold 16 isum */
        const float sc = q8 ? 1.0f : 0.0625f;
        const float32x4_t dx = vcombine_f32(vdup_n_f32(ta.d[b] * sc), vdup_n_f32(tb.d[b] * sc));
        const float32x4_t nmdx = vmulq_n_f32(dx, -ARM_MAGIC);
        vst1q_f32(e->dx, dx);
        vst1q_f32(e->nmdx[0], nmdx);
        vst1q_f32(e->nmdx[1], nmdx);
        vst1q_s32(e->init[0], vdupq_n_s32(ARM_MAGIC_BITS));
        vst1q_s32(e->init[1], vdupq_n_s32(ARM_MAGIC_BITS));
        X16_MCA(END, "stage");
    }
}

__attribute__((noinline)) static void mm_interleave_q4_0(arm_x16_act ta, arm_x16_act tb, int64_t b0,
                                                         int64_t nbc, mm_pair_block *out) {
    mm_interleave(ta, tb, b0, nbc, out, MM_PAIRS, 0);
}
__attribute__((noinline)) static void mm_interleave_q8_0(arm_x16_act ta, arm_x16_act tb, int64_t b0,
                                                         int64_t nbc, mm_pair_block *out) {
    mm_interleave(ta, tb, b0, nbc, out, MM_PAIRS, 1);
}

/* The 2x8 weight operands of row pairs rp = 0, 1 of quad `quad` of a PAIRS block g:
 * wo[rp][m] for elements 8m..8m+7. */
ARM_INLINE void mm_weights(const uint8_t *g, int q8, int quad, int8x16_t wo[2][4]) {
    if (q8) {
        const int8_t *q = (const int8_t *)g + 32 + 128 * quad;
        _Pragma("GCC unroll 2") for (int rp = 0; rp < 2; rp++)
            _Pragma("GCC unroll 4") for (int m = 0; m < 4; m++) wo[rp][m] =
                vld1q_s8(q + 64 * rp + 16 * m);
        return;
    }
    const uint8_t *q = g + 32 + 64 * quad;
    _Pragma("GCC unroll 2") for (int rp = 0; rp < 2; rp++)
        _Pragma("GCC unroll 2") for (int j = 0; j < 2; j++) {
        const uint8x16_t x = vld1q_u8(q + 32 * rp + 16 * j);
        wo[rp][j] = vreinterpretq_s8_u8(vshlq_n_u8(x, 4));
        wo[rp][j + 2] = vreinterpretq_s8_u8(vandq_u8(x, vdupq_n_u8(0xF0)));
    }
}

/* Q8_0 loops are load-bound on V1 (3 loads a cycle against 4 vector pipes): the chains of
 * row pair 0 of every other token pair start from a register (a MOV), the rest by a load */
#define MM_MOV_INIT(q8, p) ((q8) && (p) % 2 == 0)

/* One quad over a chunk of nbc blocks (w at the chunk's first block) for P token pairs;
 * acc[rp][p] holds rows {2rp, 2rp+1} of the quad x pair p. */
ARM_INLINE void mm_quad_chunk(const uint8_t *w, int q8, int quad, int64_t nbc,
                              const mm_pair_block *buf, float32x4_t acc[2][MM_PAIRS], const int P) {
    const size_t blk_bytes = q8 ? ARM_X16_Q8_BLOCK : ARM_X16_Q4_BLOCK;
    int32x4_t magic = vdupq_n_s32(ARM_MAGIC_BITS);
    __asm__("" : "+w"(magic)); /* copied by MOV, not rebuilt from a general register */
    for (int64_t i = 0; i < nbc; i++) {
        if (P == MM_PAIRS) X16_MCA(BEGIN, "gemm");
        const uint8_t *g = w + (size_t)i * blk_bytes;
        int8x16_t wo[2][4];
        mm_weights(g, q8, quad, wo);
        const float64x2_t dw = vreinterpretq_f64_f32(arm_x16_quad_scales(g, quad));
        const float32x4_t dwp[2] = {vreinterpretq_f32_f64(vdupq_laneq_f64(dw, 0)),
                                    vreinterpretq_f32_f64(vdupq_laneq_f64(dw, 1))};
        MM_UNROLL_PAIRS for (int p = 0; p < P; p++) {
            const mm_pair_block *e = buf + i * MM_PAIRS + p;
            /* the two row pairs' chains side by side, so each activation operand is live
             * for two SMMLAs only (16 accumulators and 8 weight operands stay in registers;
             * the source order is the schedule, see MM_GEMM_OPT) */
            int32x4_t is[2] = {MM_MOV_INIT(q8, p) ? magic : vld1q_s32(e->init[0]),
                               vld1q_s32(e->init[1])};
            _Pragma("GCC unroll 4") for (int m = 0; m < 4; m++) {
                const int8x16_t x = vld1q_s8((const int8_t *)&e->x[m]);
                is[0] = vmmlaq_s32(is[0], x, wo[0][m]);
                is[1] = vmmlaq_s32(is[1], x, wo[1][m]);
            }
            const float32x4_t dx = vld1q_f32(e->dx);
            _Pragma("GCC unroll 2") for (int rp = 0; rp < 2; rp++) {
                const float32x4_t f =
                    vfmaq_f32(vld1q_f32(e->nmdx[rp]), vreinterpretq_f32_s32(is[rp]), dx);
                acc[rp][p] = vfmaq_f32(acc[rp][p], dwp[rp], f);
            }
        }
        if (P == MM_PAIRS) X16_MCA(END, "gemm");
    }
}

/* NT (1..2 * MM_PAIRS) tokens against ng groups (group g at w + g * group_bytes, results at
 * s + 16 g). Each chunk of activation pairs is interleaved once for up to MM_GROUPS groups,
 * whose accumulators wait on the stack between chunks (a float store and load: the per-block
 * steps are unchanged, so any ng gives the bits of ng = 1). */
ARM_INLINE void mm_tile(int64_t n, const uint8_t *w, uint64_t group_bytes, int ng, int q8,
                        const uint8_t *act, uint64_t stride, float *s, int64_t ld, const int NT) {
    const int P = (NT + 1) / 2;
    const int64_t nb = n / 32;
    const size_t blk_bytes = q8 ? ARM_X16_Q8_BLOCK : ARM_X16_Q4_BLOCK;
    arm_x16_act a[2 * MM_PAIRS];
    _Pragma("GCC unroll 16") for (int j = 0; j < NT; j++) a[j] =
        arm_x16_act_row(act + (size_t)j * stride, n, 1);
    mm_pair_block buf[MM_KC * MM_PAIRS];
    for (int g0 = 0; g0 < ng; g0 += MM_GROUPS) {
        const int gn = ng - g0 < MM_GROUPS ? ng - g0 : MM_GROUPS;
        const uint8_t *wg = w + (size_t)g0 * group_bytes;
        float32x4_t acc[MM_GROUPS][4][2][MM_PAIRS];
        for (int g = 0; g < gn; g++)
            for (int q = 0; q < 4; q++)
                for (int rp = 0; rp < 2; rp++)
                    for (int p = 0; p < MM_PAIRS; p++)
                        acc[g][q][rp][p] = vdupq_n_f32(0.0f);
        for (int64_t b0 = 0; b0 < nb; b0 += MM_KC) {
            const int64_t nbc = nb - b0 < MM_KC ? nb - b0 : MM_KC;
            for (int p = 0; p < P; p++)
                (q8 ? mm_interleave_q8_0 : mm_interleave_q4_0)(
                    a[2 * p], a[2 * p + 1 < NT ? 2 * p + 1 : 2 * p], b0, nbc, buf + p);
            for (int g = 0; g < gn; g++)
                for (int q = 0; q < 4; q++) {
                    float32x4_t r[2][MM_PAIRS];
                    memcpy(r, acc[g][q], sizeof r);
                    mm_quad_chunk(wg + (size_t)g * group_bytes + (size_t)b0 * blk_bytes, q8, q, nbc,
                                  buf, r, P);
                    memcpy(acc[g][q], r, sizeof r);
                }
        }
        for (int g = 0; g < gn; g++)
            for (int q = 0; q < 4; q++)
                for (int p = 0; p < P; p++) {
                    float *sg = s + 16 * (size_t)(g0 + g) + 4 * q;
                    const float32x4_t lo = acc[g][q][0][p], hi = acc[g][q][1][p];
                    vst1q_f32(sg + (size_t)(2 * p) * (size_t)ld,
                              vcombine_f32(vget_low_f32(lo), vget_low_f32(hi)));
                    if (2 * p + 1 < NT)
                        vst1q_f32(sg + (size_t)(2 * p + 1) * (size_t)ld,
                                  vcombine_f32(vget_high_f32(lo), vget_high_f32(hi)));
                }
    }
}

/* A vector loaded afresh at each use: SDOT overwrites its accumulator, and a MOV of one
 * loaded copy takes a vector pipe where a load does not (the empty asm hides that the
 * address is the same; volatile, so the copies are not merged). */
ARM_INLINE int32x4_t mm_fresh_load(const void *p) {
    __asm__ volatile("" : "+r"(p));
    return vld1q_s32(p);
}

/* One token (decode) against the group: SDOT (not by element) of a row pair's vector m
 * with the token's bytes 8m..8m+7 in both halves gives lanes {r0, r0, r1, r1} of partial
 * sums; a pairwise add of the quad's two row-pair chains gives its 4 rows in order. The
 * chains start at {M, 0, M, 0} bits, so the sum holds the float M + isum and the step is
 * dp_quad's (f = (M + isum - M) * dx, acc = fma(dw, f, acc)): the token's results are those
 * of the tile bit for bit. All 16 rows per block, so the token's block is loaded once. */
ARM_INLINE void mm_gemv(int64_t n, const uint8_t *w, int q8, const uint8_t *act, float *s) {
    const size_t blk_bytes = q8 ? ARM_X16_Q8_BLOCK : ARM_X16_Q4_BLOCK;
    const arm_x16_act a = arm_x16_act_row(act, n, 1);
    static const int32_t init[4] = {ARM_MAGIC_BITS, 0, ARM_MAGIC_BITS, 0};
    float32x4_t acc[4];
    for (int q = 0; q < 4; q++)
        acc[q] = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < n / 32; b++) {
        X16_MCA(BEGIN, "gemv");
        const uint8_t *g = w + (size_t)b * blk_bytes;
        const int64x2_t xl = vreinterpretq_s64_s8(vld1q_s8(a.x[b].qs));
        const int64x2_t xh = vreinterpretq_s64_s8(vld1q_s8(a.x[b].qs + 16));
        const int8x16_t x[4] = {vreinterpretq_s8_s64(vdupq_laneq_s64(xl, 0)),
                                vreinterpretq_s8_s64(vdupq_laneq_s64(xl, 1)),
                                vreinterpretq_s8_s64(vdupq_laneq_s64(xh, 0)),
                                vreinterpretq_s8_s64(vdupq_laneq_s64(xh, 1))};
        const float dx = a.d[b] * (q8 ? 1.0f : 0.0625f); /* Q4_0: 16 isum x dx / 16 */
        const float16x8_t h0 = vreinterpretq_f16_u8(vld1q_u8(g));
        const float16x8_t h1 = vreinterpretq_f16_u8(vld1q_u8(g + 16));
        const float32x4_t dw[4] = {vcvt_f32_f16(vget_low_f16(h0)), vcvt_high_f32_f16(h0),
                                   vcvt_f32_f16(vget_low_f16(h1)), vcvt_high_f32_f16(h1)};
        _Pragma("GCC unroll 4") for (int q = 0; q < 4; q++) {
            int8x16_t wo[2][4];
            mm_weights(g, q8, q, wo);
            int32x4_t c0 = mm_fresh_load(init), c1 = mm_fresh_load(init);
            _Pragma("GCC unroll 4") for (int m = 0; m < 4; m++) {
                c0 = vdotq_s32(c0, wo[0][m], x[m]);
                c1 = vdotq_s32(c1, wo[1][m], x[m]);
            }
            const float32x4_t f = vmulq_n_f32(dp_chain_value(vpaddq_s32(c0, c1)), dx);
            acc[q] = vfmaq_f32(acc[q], dw[q], f);
            ARM_ORDER(g, acc[q]); /* next quad's weights load after this one's use */
        }
        X16_MCA(END, "gemv");
    }
    for (int q = 0; q < 4; q++)
        vst1q_f32(s + 4 * q, acc[q]);
}

/* Out of line, so the decode loop is scheduled on its own (see dp_gemv_q4_0). */
MM_GEMM_OPT __attribute__((noinline)) static void mm_gemv_q4_0(int64_t n, const uint8_t *w,
                                                               const uint8_t *act, float *s) {
    mm_gemv(n, w, 0, act, s);
}
MM_GEMM_OPT __attribute__((noinline)) static void mm_gemv_q8_0(int64_t n, const uint8_t *w,
                                                               const uint8_t *act, float *s) {
    mm_gemv(n, w, 1, act, s);
}

ARM_INLINE void mm_gemm(int64_t n, int nt, int ng, float *s, int64_t ld, const uint8_t *w,
                        uint64_t group_bytes, const uint8_t *act, uint64_t stride, int q8) {
    if (nt == 1) { /* one-token decode: SDOT, no self-pairing */
        for (int g = 0; g < ng; g++) {
            const uint8_t *wg = w + (size_t)g * group_bytes;
            if (q8)
                mm_gemv_q8_0(n, wg, act, s + 16 * g);
            else
                mm_gemv_q4_0(n, wg, act, s + 16 * g);
        }
        return;
    }
#define MM_CALL(j0, NT) \
    mm_tile(n, w, group_bytes, ng, q8, act + (size_t)(j0)*stride, stride, s + (j0)*ld, ld, NT)
    /* 16-token tiles, then at most one of 8 and the tail (1..7) */
    int j0 = 0;
    for (; j0 + 2 * MM_PAIRS <= nt; j0 += 2 * MM_PAIRS)
        MM_CALL(j0, 2 * MM_PAIRS);
    if (nt - j0 >= 8) {
        MM_CALL(j0, 8);
        j0 += 8;
    }
    const int64_t rest = nt - j0;
    nt = (int)rest; /* ARM_X16_TILES' tail switch on nt - j_ (j_ = 0) */
    act += (size_t)j0 * stride;
    s += j0 * ld;
    ARM_X16_TILES(8, MM_CALL);
#undef MM_CALL
}

MM_GEMM_OPT static void groups_q4_0_x16(int64_t n, int nt, int ng, float *s, int64_t ld,
                                        const void *w, uint64_t group_bytes, const uint8_t *act,
                                        uint64_t stride) {
    mm_gemm(n, nt, ng, s, ld, w, group_bytes, act, stride, 0);
}

MM_GEMM_OPT static void groups_q8_0_x16(int64_t n, int nt, int ng, float *s, int64_t ld,
                                        const void *w, uint64_t group_bytes, const uint8_t *act,
                                        uint64_t stride) {
    mm_gemm(n, nt, ng, s, ld, w, group_bytes, act, stride, 1);
}

/* One group: the same code at ng = 1 */
static void gemm_q4_0_x16(int64_t n, int nt, float *s, int64_t ld, const void *w,
                          const uint8_t *act, uint64_t stride) {
    groups_q4_0_x16(n, nt, 1, s, ld, w, 0, act, stride);
}

static void gemm_q8_0_x16(int64_t n, int nt, float *s, int64_t ld, const void *w,
                          const uint8_t *act, uint64_t stride) {
    groups_q8_0_x16(n, nt, 1, s, ld, w, 0, act, stride);
}

const cpulm_kernels cpulm_kernels_i8mm = {
    .name = "i8mm",
    .gemm_x16 =
        {
            [CPULM_DTYPE_Q8_0] = gemm_q8_0_x16,
            [CPULM_DTYPE_Q4_0] = gemm_q4_0_x16,
        },
    .x16_layout =
        {
            [CPULM_DTYPE_Q8_0] = CPULM_X16_PAIRS,
            [CPULM_DTYPE_Q4_0] = CPULM_X16_PAIRS,
        },
    .x16_groups =
        {
            [CPULM_DTYPE_Q8_0] = groups_q8_0_x16,
            [CPULM_DTYPE_Q4_0] = groups_q4_0_x16,
        },
};
#endif
