/* arm.h: static inline helpers shared by the aarch64 kernel files (neon.c, dotprod.c,
 * i8mm.c, sve.c). Included only by the .c files of src/kernels/arm/, each compiled with
 * its own -march flags.
 *
 * Everything here must stay static inline: an out-of-line copy emitted by the dotprod TU
 * could be picked by the linker for a baseline caller and fault on a Cortex-A53.
 *
 * The quantized dot bodies are written once, over a 16-lane int8 dot primitive passed as
 * an argument (arm_dot16_mull on baseline NEON, vdotq_s32 where the TU has dotprod). They
 * are always_inline, so each TU gets its own copy with the primitive inlined; objdump of
 * neon.o / dotprod.o shows no indirect calls. Integer block sums are exact at every level,
 * so results differ from generic only in float accumulation order.
 */
#ifndef CPULM_KERNELS_ARM_H
#define CPULM_KERNELS_ARM_H

#include <arm_neon.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/kernels.h"

#define ARM_INLINE static inline __attribute__((always_inline))

/* cpulm_neon_<op> and cpulm_dotprod_<op> for every op of kernels.h: the names by which a
 * level's table (neon.c, dotprod.c; i8mm and sve inherit) reaches the ops its part files
 * (neon_attn.c, dotprod_attn.c, ...) define; declared for every op, referenced only for those
 * a part file has. */
#define ARM_DECLARE_NEON(ID, name, ret, params, group)    ret cpulm_neon_##name params;
#define ARM_DECLARE_DOTPROD(ID, name, ret, params, group) ret cpulm_dotprod_##name params;
CPULM_KERNEL_OPS(ARM_DECLARE_NEON)
CPULM_KERNEL_OPS(ARM_DECLARE_DOTPROD)

/* For kernels whose unrolled tile fills the 32 vector registers: GCC's scheduling before
 * register allocation hoists the tile's loads and then spills (seen on the neon
 * gemm_x16: 29 stack accesses per block with it, none without). Clang has no such pass
 * switch and does not need one. */
#if defined(__GNUC__) && !defined(__clang__)
#define ARM_NO_PRESCHED __attribute__((optimize("no-schedule-insns")))
#else
#define ARM_NO_PRESCHED
#endif

/* Hot-loop markers for scripts/arm-perf.sh (llvm-mca-22 on the Neoverse models). Empty
 * unless the file is built with -DCPULM_MCA_MARKERS, so shipped code is unchanged; with it,
 * an asm comment line starts / ends the loop body (an empty volatile asm: it emits no
 * instruction, and the script checks that the marked loops keep the unmarked build's
 * instruction count). NAME must be a string literal; the script reads the first region of
 * each name. */
#ifdef CPULM_MCA_MARKERS
#define ARM_MCA_BEGIN(NAME) __asm__ volatile("# LLVM-MCA-BEGIN " NAME)
#define ARM_MCA_END(NAME)   __asm__ volatile("# LLVM-MCA-END " NAME)
#else
#define ARM_MCA_BEGIN(NAME) ((void)0)
#define ARM_MCA_END(NAME)   ((void)0)
#endif
/* The level a file's markers are named after (defined by the file before including arm.h) */
#ifndef ARM_MCA_LEVEL
#define ARM_MCA_LEVEL "arm"
#endif

/* The float M = 1.5 * 2^23 and its bits: an int32 chain started at ARM_MAGIC_BITS holds,
 * once it has added an integer s with |s| < 2^22, the bits of the float M + s, so one
 * floating subtraction (or fma, see x16_sdot.h) of M converts it exactly. */
#define ARM_MAGIC      12582912.0f
#define ARM_MAGIC_BITS 0x4B400000

/* Keeps the compiler from hoisting loads through PTR above this point: an empty asm that
 * "reads" VAL (a result of the previous step) and "writes" PTR. No instruction is emitted
 * and the hardware sees no dependency; it only bounds how many loaded vectors the compiler
 * keeps live at once. Clang otherwise hoists every unrolled step's loads to the top of the
 * loop body and spills what does not fit in 32 registers (arm-perf.sh counts the stack
 * accesses). */
#define ARM_ORDER(PTR, VAL) __asm__("" : "+r"(PTR) : "w"(VAL))
#if defined(__clang__)
#define ARM_IS_CLANG 1
#else
#define ARM_IS_CLANG 0
#endif

/* ---- scalar conversions (FCVT: IEEE round-to-nearest-even under the default FPCR) ---- */

ARM_INLINE float arm_fp16(uint16_t h) {
    return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0);
}

ARM_INLINE uint16_t arm_to_fp16(float f) {
    return vget_lane_u16(vreinterpret_u16_f16(vcvt_f16_f32(vdupq_n_f32(f))), 0);
}

ARM_INLINE float arm_bf16(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ---- 4 / 8 lane float loads of the float weight types ---- */

ARM_INLINE float32x4_t arm_load4_f16(const uint16_t *p) {
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p)));
}

/* bf16 is the top half of an f32: widen with a 16-bit left shift */
ARM_INLINE float32x4_t arm_load4_bf16(const uint16_t *p) {
    return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16));
}

/* ---- int8 dot primitive: acc lanes += sums of 4 products each ---- */

typedef int32x4_t (*arm_dot16_fn)(int32x4_t acc, int8x16_t a, int8x16_t b);

/* Baseline (armv8.0): widening multiplies, then pairwise-add into int32. A product of
 * two int8 is at most 128 * 128 = 16384, so the int16 step is exact for any inputs. */
ARM_INLINE int32x4_t arm_dot16_mull(int32x4_t acc, int8x16_t a, int8x16_t b) {
    const int16x8_t lo = vmull_s8(vget_low_s8(a), vget_low_s8(b));
    const int16x8_t hi = vmull_high_s8(a, b);
    return vpadalq_s16(vpadalq_s16(acc, lo), hi);
}

/* 16 packed bytes of a Q4_0 block as two signed vectors: elements 0..15 (low nibbles) and
 * 16..31 (high nibbles), each minus 8. */
ARM_INLINE void arm_q4_0_unpack(const uint8_t *qs, int8x16_t *lo, int8x16_t *hi) {
    const uint8x16_t q = vld1q_u8(qs);
    const int8x16_t eight = vdupq_n_s8(8);
    *lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0F))), eight);
    *hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(q, 4)), eight);
}

/* Interleaves 16 bytes of row 0 and 16 of row 1 into the 2x8 operands of a matrix
 * multiply-accumulate: lo = {a[0..7], b[0..7]}, hi = {a[8..15], b[8..15]}. */
ARM_INLINE void arm_rows_2x8(int8x16_t a, int8x16_t b, int8x16_t *lo, int8x16_t *hi) {
    const int64x2_t a64 = vreinterpretq_s64_s8(a), b64 = vreinterpretq_s64_s8(b);
    *lo = vreinterpretq_s8_s64(vzip1q_s64(a64, b64));
    *hi = vreinterpretq_s8_s64(vzip2q_s64(a64, b64));
}

/* ---- Q8_0 / Q4_0 against Q8_0 ---- */

ARM_INLINE int32x4_t arm_block_q8_0(const cpulm_block_q8_0 *x, const cpulm_block_q8_0 *y,
                                    arm_dot16_fn dot16) {
    int32x4_t p = dot16(vdupq_n_s32(0), vld1q_s8(x->qs), vld1q_s8(y->qs));
    return dot16(p, vld1q_s8(x->qs + 16), vld1q_s8(y->qs + 16));
}

ARM_INLINE int32x4_t arm_block_q4_0(const cpulm_block_q4_0 *x, const cpulm_block_q8_0 *y,
                                    arm_dot16_fn dot16) {
    int8x16_t lo, hi;
    arm_q4_0_unpack(x->qs, &lo, &hi);
    int32x4_t p = dot16(vdupq_n_s32(0), lo, vld1q_s8(y->qs));
    return dot16(p, hi, vld1q_s8(y->qs + 16));
}

/* MXFP4 codes (16 bytes of nibbles) as their doubled E2M1 values (-12..12): elements
 * 0..15 (low nibbles) and 16..31 (high), by a table lookup. */
ARM_INLINE void arm_mxfp4_unpack(const uint8_t *qs, int8x16_t *lo, int8x16_t *hi) {
    const int8x16_t lut = vld1q_s8(cpulm_mxfp4_values2);
    const uint8x16_t q = vld1q_u8(qs);
    *lo = vqtbl1q_s8(lut, vandq_u8(q, vdupq_n_u8(0x0F)));
    *hi = vqtbl1q_s8(lut, vshrq_n_u8(q, 4));
}

ARM_INLINE int32x4_t arm_block_mxfp4(const cpulm_block_mxfp4 *x, const cpulm_block_q8_0 *y,
                                     arm_dot16_fn dot16) {
    int8x16_t lo, hi;
    arm_mxfp4_unpack(x->qs, &lo, &hi);
    int32x4_t p = dot16(vdupq_n_s32(0), lo, vld1q_s8(y->qs));
    return dot16(p, hi, vld1q_s8(y->qs + 16));
}

ARM_INLINE void arm_vec_dot_mxfp4(int64_t n, float *s, const void *vx, const void *vy,
                                  arm_dot16_fn dot16) {
    const cpulm_block_mxfp4 *x = vx;
    const cpulm_block_q8_0 *y = vy;
    const int64_t nb = n / 32;
    float32x4_t acc0 = vdupq_n_f32(0.0f), acc1 = acc0;
    int64_t i = 0;
    for (; i + 1 < nb; i += 2) {
        const int32x4_t p0 = arm_block_mxfp4(&x[i], &y[i], dot16);
        const int32x4_t p1 = arm_block_mxfp4(&x[i + 1], &y[i + 1], dot16);
        acc0 = vfmaq_n_f32(acc0, vcvtq_f32_s32(p0), cpulm_e8m0_half(x[i].e) * arm_fp16(y[i].d));
        acc1 = vfmaq_n_f32(acc1, vcvtq_f32_s32(p1),
                           cpulm_e8m0_half(x[i + 1].e) * arm_fp16(y[i + 1].d));
    }
    if (i < nb) {
        const int32x4_t p = arm_block_mxfp4(&x[i], &y[i], dot16);
        acc0 = vfmaq_n_f32(acc0, vcvtq_f32_s32(p), cpulm_e8m0_half(x[i].e) * arm_fp16(y[i].d));
    }
    *s = vaddvq_f32(vaddq_f32(acc0, acc1));
}

/* Two blocks per step into two accumulators: independent FMA chains hide the latency. */
ARM_INLINE void arm_vec_dot_q8_0(int64_t n, float *s, const void *vx, const void *vy,
                                 arm_dot16_fn dot16) {
    const cpulm_block_q8_0 *x = vx, *y = vy;
    const int64_t nb = n / 32;
    float32x4_t acc0 = vdupq_n_f32(0.0f), acc1 = acc0;
    int64_t i = 0;
    for (; i + 1 < nb; i += 2) {
        const int32x4_t p0 = arm_block_q8_0(&x[i], &y[i], dot16);
        const int32x4_t p1 = arm_block_q8_0(&x[i + 1], &y[i + 1], dot16);
        acc0 = vfmaq_n_f32(acc0, vcvtq_f32_s32(p0), arm_fp16(x[i].d) * arm_fp16(y[i].d));
        acc1 = vfmaq_n_f32(acc1, vcvtq_f32_s32(p1), arm_fp16(x[i + 1].d) * arm_fp16(y[i + 1].d));
    }
    if (i < nb) {
        const int32x4_t p = arm_block_q8_0(&x[i], &y[i], dot16);
        acc0 = vfmaq_n_f32(acc0, vcvtq_f32_s32(p), arm_fp16(x[i].d) * arm_fp16(y[i].d));
    }
    *s = vaddvq_f32(vaddq_f32(acc0, acc1));
}

ARM_INLINE void arm_vec_dot_q4_0(int64_t n, float *s, const void *vx, const void *vy,
                                 arm_dot16_fn dot16) {
    const cpulm_block_q4_0 *x = vx;
    const cpulm_block_q8_0 *y = vy;
    const int64_t nb = n / 32;
    float32x4_t acc0 = vdupq_n_f32(0.0f), acc1 = acc0;
    int64_t i = 0;
    for (; i + 1 < nb; i += 2) {
        const int32x4_t p0 = arm_block_q4_0(&x[i], &y[i], dot16);
        const int32x4_t p1 = arm_block_q4_0(&x[i + 1], &y[i + 1], dot16);
        acc0 = vfmaq_n_f32(acc0, vcvtq_f32_s32(p0), arm_fp16(x[i].d) * arm_fp16(y[i].d));
        acc1 = vfmaq_n_f32(acc1, vcvtq_f32_s32(p1), arm_fp16(x[i + 1].d) * arm_fp16(y[i + 1].d));
    }
    if (i < nb) {
        const int32x4_t p = arm_block_q4_0(&x[i], &y[i], dot16);
        acc0 = vfmaq_n_f32(acc0, vcvtq_f32_s32(p), arm_fp16(x[i].d) * arm_fp16(y[i].d));
    }
    *s = vaddvq_f32(vaddq_f32(acc0, acc1));
}

/* ---- K-quants against Q8_K ----
 * Per super-block an exact int32 sum (|sum| < 256 * 63 * 127 * 127 < 2^31), then the same
 * float formula as generic. */

/* The 8 6-bit scales and mins of a Q4_K / Q5_K scales[12], on 32-bit words: bytes 0..3
 * hold scales 0..3 in their low 6 bits (top 2 bits: high bits of scales 4..7), bytes
 * 4..7 the same for mins, bytes 8..11 the low nibbles of scale (low) / min (high) 4..7. */
ARM_INLINE void arm_k4_scales_mins(const uint8_t *q, uint8_t sc[8], uint8_t m[8]) {
    uint32_t w[3], out[4];
    memcpy(w, q, 12);
    out[0] = w[0] & 0x3f3f3f3fu;
    out[1] = (w[2] & 0x0f0f0f0fu) | ((w[0] >> 2) & 0x30303030u);
    out[2] = w[1] & 0x3f3f3f3fu;
    out[3] = ((w[2] >> 4) & 0x0f0f0f0fu) | ((w[1] >> 2) & 0x30303030u);
    memcpy(sc, out, 8);
    memcpy(m, out + 2, 8);
}

/* 16 quants 0..15 (or 0..31 with the 5th bit taken from bit `bit` of each qh byte). */
ARM_INLINE int8x16_t arm_k4_quants(uint8x16_t nib, const uint8x16_t *qh, int bit) {
    if (qh) {
        const uint8x16_t set = vtstq_u8(*qh, vdupq_n_u8((uint8_t)(1u << bit)));
        nib = vorrq_u8(nib, vandq_u8(set, vdupq_n_u8(0x10)));
    }
    return vreinterpretq_s8_u8(nib);
}

/* sum_j sc_j * dot(q_j, y_j) over one super-block; sub-blocks 2c and 2c+1 are the low and
 * high nibbles of qs[32c .. 32c+31]. qh = NULL for Q4_K. */
ARM_INLINE int32_t arm_k4_superblock(const uint8_t *qs, const uint8_t *qh, const int8_t *y,
                                     const uint8_t sc[8], arm_dot16_fn dot16) {
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    uint8x16_t h[2] = {vdupq_n_u8(0), vdupq_n_u8(0)};
    if (qh) {
        h[0] = vld1q_u8(qh);
        h[1] = vld1q_u8(qh + 16);
    }
    int32x4_t acc = vdupq_n_s32(0);
    _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) {
        const int8_t *yc = y + 64 * c;
        int32x4_t plo = vdupq_n_s32(0), phi = vdupq_n_s32(0);
        _Pragma("GCC unroll 2") for (int k = 0; k < 2; k++) {
            const uint8x16_t q = vld1q_u8(qs + 32 * c + 16 * k);
            const uint8x16_t *hk = qh ? &h[k] : NULL;
            plo = dot16(plo, arm_k4_quants(vandq_u8(q, m4), hk, 2 * c), vld1q_s8(yc + 16 * k));
            phi = dot16(phi, arm_k4_quants(vshrq_n_u8(q, 4), hk, 2 * c + 1),
                        vld1q_s8(yc + 32 + 16 * k));
        }
        acc = vmlaq_n_s32(acc, plo, sc[2 * c]);
        acc = vmlaq_n_s32(acc, phi, sc[2 * c + 1]);
    }
    return vaddvq_s32(acc);
}

/* sum_j m_j * (bsums[2j] + bsums[2j + 1]): the min term of a Q4_K / Q5_K super-block. */
ARM_INLINE int32_t arm_k4_min_term(const int16_t bsums[16], const uint8_t m[8]) {
    const int32x4_t b0 = vpaddlq_s16(vld1q_s16(bsums)), b1 = vpaddlq_s16(vld1q_s16(bsums + 8));
    const uint16x8_t m16 = vmovl_u8(vld1_u8(m));
    const int32x4_t m0 = vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(m16)));
    const int32x4_t m1 = vreinterpretq_s32_u32(vmovl_high_u16(m16));
    return vaddvq_s32(vmlaq_s32(vmulq_s32(b0, m0), b1, m1));
}

/* Q4_K and Q5_K share d, dmin, scales[12] at the start; then qh (Q5_K only), qs. */
ARM_INLINE void arm_vec_dot_k4(int64_t n, float *s, const void *vx, const void *vy, int has_qh,
                               arm_dot16_fn dot16) {
    const cpulm_block_q8_K *y = vy;
    const size_t stride = has_qh ? sizeof(cpulm_block_q5_K) : sizeof(cpulm_block_q4_K);
    float sum = 0.0f;
    for (int64_t i = 0; i < n / CPULM_QK_K; i++) {
        if (!has_qh) ARM_MCA_BEGIN(ARM_MCA_LEVEL "_dot_q4_K");
        const cpulm_block_q5_K *b5 = (const void *)((const uint8_t *)vx + (size_t)i * stride);
        const cpulm_block_q4_K *b4 = (const void *)b5;
        uint8_t sc[8], m[8];
        arm_k4_scales_mins(b4->scales, sc, m);
        const int32_t sumi = has_qh ? arm_k4_superblock(b5->qs, b5->qh, y[i].qs, sc, dot16)
                                    : arm_k4_superblock(b4->qs, NULL, y[i].qs, sc, dot16);
        const int32_t summ = arm_k4_min_term(y[i].bsums, m);
        sum += y[i].d * arm_fp16(b4->d) * (float)sumi - y[i].d * arm_fp16(b4->dmin) * (float)summ;
        if (!has_qh) ARM_MCA_END(ARM_MCA_LEVEL "_dot_q4_K");
    }
    *s = sum;
}

/* Q6_K: per 128-element half c, 4 groups of 32 quants built from ql (low 4 bits) and qh
 * (2 high bits), minus 32; group g of 16 elements has its own int8 scale. */
ARM_INLINE int32_t arm_q6_superblock(const cpulm_block_q6_K *x, const int8_t *y,
                                     arm_dot16_fn dot16) {
    const uint8x16_t m4 = vdupq_n_u8(0x0F), m3 = vdupq_n_u8(0x03);
    const int8x16_t bias = vdupq_n_s8(32);
    int32x4_t acc = vdupq_n_s32(0);
    _Pragma("GCC unroll 2") for (int c = 0; c < 2; c++) {
        _Pragma("GCC unroll 2") for (int k = 0; k < 2;
                                     k++) { /* lanes l = 16k .. 16k + 15 of the half */
            const uint8x16_t l0 = vld1q_u8(x->ql + 64 * c + 16 * k);
            const uint8x16_t l1 = vld1q_u8(x->ql + 64 * c + 32 + 16 * k);
            const uint8x16_t h = vld1q_u8(x->qh + 32 * c + 16 * k);
            const uint8x16_t q[4] = {
                vorrq_u8(vandq_u8(l0, m4), vshlq_n_u8(vandq_u8(h, m3), 4)),
                vorrq_u8(vandq_u8(l1, m4), vshlq_n_u8(vandq_u8(vshrq_n_u8(h, 2), m3), 4)),
                vorrq_u8(vshrq_n_u8(l0, 4), vshlq_n_u8(vandq_u8(vshrq_n_u8(h, 4), m3), 4)),
                vorrq_u8(vshrq_n_u8(l1, 4), vshlq_n_u8(vshrq_n_u8(h, 6), 4)),
            };
            _Pragma("GCC unroll 4") for (int r = 0; r < 4;
                                         r++) { /* elements 128c + 32r + 16k .. + 15 */
                const int off = 128 * c + 32 * r + 16 * k;
                const int8x16_t qs = vsubq_s8(vreinterpretq_s8_u8(q[r]), bias);
                const int32x4_t p = dot16(vdupq_n_s32(0), qs, vld1q_s8(y + off));
                acc = vmlaq_n_s32(acc, p, x->scales[off / 16]);
            }
        }
    }
    return vaddvq_s32(acc);
}

ARM_INLINE void arm_vec_dot_q6_K(int64_t n, float *s, const void *vx, const void *vy,
                                 arm_dot16_fn dot16) {
    const cpulm_block_q6_K *x = vx;
    const cpulm_block_q8_K *y = vy;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / CPULM_QK_K; i++) {
        ARM_MCA_BEGIN(ARM_MCA_LEVEL "_dot_q6_K");
        sum += arm_fp16(x[i].d) * y[i].d * (float)arm_q6_superblock(&x[i], y[i].qs, dot16);
        ARM_MCA_END(ARM_MCA_LEVEL "_dot_q6_K");
    }
    *s = sum;
}

/* ---- repacked 16-row groups (gemm_x16; layouts in kernels.h) ----
 * Block b of a group is 16 fp16 scales, then chunks of 64 bytes: Q4_0 has 4 chunks of
 * nibbles, Q8_0 8 chunks of quants. Within a chunk, 16 bytes = one q register = 4 bytes of
 * each of 4 consecutive rows (a "quad"), so register i of chunk k holds elements 4k..4k+3
 * of rows 4i..4i+3. That is the operand layout of SDOT by element, and two of them zipped
 * on 32-bit lanes give the 2x8 row operands of SMMLA. */

#define ARM_X16_Q4_BLOCK (2 * 16 + 16 * 16)
#define ARM_X16_Q8_BLOCK (2 * 16 + 32 * 16)

/* The quants of quad i of a block as 8 vectors: v[k] = elements 4k..4k+3 of its 4 rows.
 * Q4_0 comes out as the unsigned nibbles 0..15 (elements 4t.. from the low nibbles of
 * chunk t, 16 + 4t.. from the high ones); the kernels add the activation row's -8 * sum(x)
 * bias correction instead of subtracting 8 from every weight. */
ARM_INLINE void arm_x16_quad(const uint8_t *blk, int q8, int i, int8x16_t v[8]) {
    const uint8_t *q = blk + 2 * 16 + 16 * i;
    if (q8) {
        _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++) v[k] =
            vld1q_s8((const int8_t *)q + 64 * k);
        return;
    }
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    _Pragma("GCC unroll 8") for (int t = 0; t < 4; t++) {
        const uint8x16_t u = vld1q_u8(q + 64 * t);
        v[t] = vreinterpretq_s8_u8(vandq_u8(u, m4));
        v[t + 4] = vreinterpretq_s8_u8(vshrq_n_u8(u, 4));
    }
}

/* The 4 scales of quad i of a block, as floats. */
ARM_INLINE float32x4_t arm_x16_quad_scales(const uint8_t *blk, int i) {
    return vcvt_f32_f16(vreinterpret_f16_u8(vld1_u8(blk + 8 * i)));
}

/* One activation row of a gemm_x16 call: its Q8_0 blocks and the extras. */
typedef struct arm_x16_act {
    const cpulm_block_q8_0 *x;
    const float *d;      /* block scales as floats */
    const int32_t *corr; /* -8 * sum(qs) for Q4_0 weights, NULL (no correction) for Q8_0 */
} arm_x16_act;

ARM_INLINE arm_x16_act arm_x16_act_row(const uint8_t *row, int64_t n, int q8) {
    const float *d = (const float *)(row + cpulm_pack_act_extras_offset(n));
    const arm_x16_act a = {(const cpulm_block_q8_0 *)row, d,
                           q8 ? NULL : (const int32_t *)(d + n / 32)};
    return a;
}

/* Splits nt tokens into tiles of TILE (<= 8) and one tail tile, calling call_tile(j0, NT)
 * with a constant NT, so each tile size is its own fully unrolled copy (the guards drop the
 * tail sizes TILE can never leave). A macro because NT must reach the always_inline tile
 * body as a compile-time constant. */
#define ARM_X16_TILES(TILE, call_tile)          \
    do {                                        \
        int j_ = 0;                             \
        for (; j_ + (TILE) <= nt; j_ += (TILE)) \
            call_tile(j_, TILE);                \
        switch (nt - j_) {                      \
        case 7:                                 \
            if (7 < (TILE)) call_tile(j_, 7);   \
            break;                              \
        case 6:                                 \
            if (6 < (TILE)) call_tile(j_, 6);   \
            break;                              \
        case 5:                                 \
            if (5 < (TILE)) call_tile(j_, 5);   \
            break;                              \
        case 4:                                 \
            if (4 < (TILE)) call_tile(j_, 4);   \
            break;                              \
        case 3:                                 \
            if (3 < (TILE)) call_tile(j_, 3);   \
            break;                              \
        case 2:                                 \
            if (2 < (TILE)) call_tile(j_, 2);   \
            break;                              \
        case 1:                                 \
            if (1 < (TILE)) call_tile(j_, 1);   \
            break;                              \
        default: break;                         \
        }                                       \
    } while (0)

/* The generic tree sum of 16 lanes held as quarters q[0..3] (lanes 0-3, 4-7, 8-11, 12-15):
 * h = a[8..15] + a[0..7], g = h[4..7] + h[0..3], then (g0 + g2) + (g1 + g3). */
ARM_INLINE float arm_reduce16(const float32x4_t q[4]) {
    const float32x4_t g = vaddq_f32(vaddq_f32(q[3], q[1]), vaddq_f32(q[2], q[0]));
    return vpadds_f32(vadd_f32(vget_low_f32(g), vget_high_f32(g)));
}

/* ---- exp ---- */

/* e^x on 4 floats: x = k ln2 + r with |r| <= ln2/2 (ln2 split so k * ln2_hi is exact),
 * e^r by its degree-7 Taylor polynomial (relative truncation error < 1e-8, so the result
 * is within about 1 ulp), times 2^k put together in the exponent field.
 * x < -87.3 gives exactly 0 (so -inf masks vanish), x > 88 gives +inf. */
ARM_INLINE float32x4_t arm_exp_f32x4(float32x4_t x) {
    const float32x4_t hi = vdupq_n_f32(88.0f), lo = vdupq_n_f32(-87.3f);
    const float32x4_t xc = vmaxq_f32(vminq_f32(x, hi), lo);
    const int32x4_t k = vcvtnq_s32_f32(vmulq_n_f32(xc, 1.44269504f));
    const float32x4_t kf = vcvtq_f32_s32(k);
    float32x4_t r = vfmsq_n_f32(xc, kf, 0.693145752f);
    r = vfmsq_n_f32(r, kf, 1.42860677e-6f);
    float32x4_t p = vfmaq_f32(vdupq_n_f32(1.0f / 720), vdupq_n_f32(1.0f / 5040), r);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 120), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 24), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 6), p, r);
    p = vfmaq_f32(vdupq_n_f32(0.5f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
    const int32x4_t e = vshlq_n_s32(vaddq_s32(k, vdupq_n_s32(127)), 23);
    float32x4_t y = vmulq_f32(p, vreinterpretq_f32_s32(e));
    y = vbslq_f32(vcltq_f32(x, lo), vdupq_n_f32(0.0f), y);
    return vbslq_f32(vcgtq_f32(x, hi), vdupq_n_f32(INFINITY), y);
}

/* cpulm_generic_vexpf on 4 lanes, the same fused operations in the same order; 2^n is
 * applied as ldexpf does: one rounding of j * 2^n. For |n| <= 126, 2^n is a normal float and
 * one multiply is that rounding (subnormal results included); other lanes (|x| > ~87, inf)
 * go through ldexpf itself. NaN lanes convert n to 0 and stay NaN. */
ARM_INLINE float32x4_t arm_canon_vexp(float32x4_t x) {
    const float32x4_t r = vdupq_n_f32(0x1.8p23f);
    const float32x4_t z = vfmaq_f32(r, x, vdupq_n_f32(0x1.715476p+0f));
    const float32x4_t n = vsubq_f32(z, r);
    const float32x4_t b =
        vfmsq_f32(vfmsq_f32(x, n, vdupq_n_f32(0x1.62e4p-1f)), n, vdupq_n_f32(0x1.7f7d1cp-20f));
    const float32x4_t u = vmulq_f32(b, b);
    const float32x4_t c65 = vfmaq_f32(vdupq_n_f32(0x1.573e2ep-5f), vdupq_n_f32(0x1.0e4020p-7f), b);
    const float32x4_t c32 = vfmaq_f32(vdupq_n_f32(0x1.fffdb6p-2f), vdupq_n_f32(0x1.555e66p-3f), b);
    const float32x4_t c10 = vfmaq_f32(vdupq_n_f32(1.0f), vdupq_n_f32(0x1.ffffecp-1f), b);
    const float32x4_t j = vfmaq_f32(c10, vfmaq_f32(c32, c65, u), u);
    const int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
    float32x4_t res = vmulq_f32(j, vreinterpretq_f32_s32(e));
    const uint32x4_t big = vcagtq_f32(n, vdupq_n_f32(126.0f)); /* false for NaN */
    if (vmaxvq_u32(big)) {
        float jv[4], nv[4], rv[4];
        vst1q_f32(jv, j);
        vst1q_f32(nv, n);
        vst1q_f32(rv, res);
        for (int l = 0; l < 4; l++)
            if (fabsf(nv[l]) > 126.0f) rv[l] = ldexpf(jv[l], (int)nv[l]);
        res = vld1q_f32(rv);
    }
    return res;
}

#endif
