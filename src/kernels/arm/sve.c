/* sve.c: the sve kernel level (Neoverse V1 / Graviton3 at 256 bits, V2 / Graviton4 and
 * N2 at 128 bits, A64FX at 512), built with -march=armv8.2-a+dotprod+i8mm+sve. Reached
 * only after dispatch.c saw HWCAP_SVE (and the dotprod and i8mm it builds on); NULL
 * entries inherit i8mm, i.e. the NEON K-quant dots and the NEON canonical float ops, which
 * SVE cores run at full speed.
 *
 * Vector-length agnostic: nothing assumes a width; svcntb() is read at run time and the
 * code is tested at 128, 256 and 512 bits (QEMU_CPU=max,sve-default-vector-length=N).
 * Float loops are predicated (svwhilelt), so there are no scalar tails. Quantized dots use
 * SDOT on whole blocks: a 32-quant block is two vectors at 128 bits, one at 256, and from
 * 512 bits two blocks share a vector (svsplice), so fewer lanes idle.
 */
#if defined(__aarch64__)
#include <arm_sve.h>

#include "arm.h"

/* ---- quantized dots ---- */

/* One block's 32 int8 products as int32 partial sums; lanes past the block are 0. */
ARM_INLINE svint32_t q8_block(const int8_t *xq, const int8_t *yq, uint64_t vb) {
    svint32_t acc = svdup_n_s32(0);
    for (uint64_t o = 0; o < 32; o += vb) {
        const svbool_t pg = svwhilelt_b8_u64(o, 32);
        acc = svdot_s32(acc, svld1_s8(pg, xq + o), svld1_s8(pg, yq + o));
    }
    return acc;
}

/* Per-lane nibble shift for a Q4_0 block replicated per 128-bit segment (svld1rq):
 * element e of the block is the low nibble of qs[e % 16] for e < 16, else the high one,
 * so lane l (element o + l, period 32) shifts by 4 * (((o + l) >> 4) & 1). */
ARM_INLINE svuint8_t nibble_shift(uint64_t o) {
    const svbool_t all = svptrue_b8();
    const svuint8_t idx = svindex_u8((uint8_t)o, 1);
    return svlsl_n_u8_x(all, svand_n_u8_x(all, svlsr_n_u8_x(all, idx, 4), 1), 2);
}

ARM_INLINE svint8_t q4_unpack(svuint8_t rep, svuint8_t shift) {
    const svbool_t all = svptrue_b8();
    const svuint8_t q = svand_n_u8_x(all, svlsr_u8_x(all, rep, shift), 0x0F);
    return svsub_n_s8_x(all, svreinterpret_s8_u8(q), 8);
}

ARM_INLINE svint32_t q4_block(const uint8_t *qs, const int8_t *yq, uint64_t vb) {
    const svuint8_t rep = svld1rq_u8(svptrue_b8(), qs);
    svint32_t acc = svdup_n_s32(0);
    for (uint64_t o = 0; o < 32; o += vb) { /* x lanes past the block meet zeroed y */
        const svbool_t pg = svwhilelt_b8_u64(o, 32);
        acc = svdot_s32(acc, q4_unpack(rep, nibble_shift(o)), svld1_s8(pg, yq + o));
    }
    return acc;
}

/* Blocks a and b's 32 bytes in lanes 0..31 and 32..63 (vectors of 512 bits and more;
 * lanes past 64 are 0). */
ARM_INLINE svint8_t pair_s8(const int8_t *a, const int8_t *b) {
    const svbool_t p32 = svwhilelt_b8_u64(0, 32);
    return svsplice_s8(p32, svld1_s8(p32, a), svld1_s8(p32, b));
}

/* d0 in the int32 lanes of the first block (0..7), d1 elsewhere */
ARM_INLINE svfloat32_t pair_scales(float d0, float d1) {
    return svsel_f32(svwhilelt_b32_u64(0, 8), svdup_n_f32(d0), svdup_n_f32(d1));
}

ARM_INLINE float dxy(uint16_t dx, uint16_t dy) {
    return arm_fp16(dx) * arm_fp16(dy);
}

static void vec_dot_q8_0_q8_0(int64_t n, float *s, const void *vx, const void *vy) {
    const cpulm_block_q8_0 *x = vx, *y = vy;
    const int64_t nb = n / 32;
    const uint64_t vb = svcntb();
    const svbool_t all = svptrue_b32();
    svfloat32_t acc = svdup_n_f32(0.0f);
    int64_t i = 0;
    if (vb >= 64) {
        for (; i + 1 < nb; i += 2) {
            const svint32_t p = svdot_s32(svdup_n_s32(0), pair_s8(x[i].qs, x[i + 1].qs),
                                          pair_s8(y[i].qs, y[i + 1].qs));
            const svfloat32_t d = pair_scales(dxy(x[i].d, y[i].d), dxy(x[i + 1].d, y[i + 1].d));
            acc = svmla_f32_x(all, acc, svcvt_f32_s32_x(all, p), d);
        }
    }
    for (; i < nb; i++) {
        const svint32_t p = q8_block(x[i].qs, y[i].qs, vb);
        acc = svmla_n_f32_x(all, acc, svcvt_f32_s32_x(all, p), dxy(x[i].d, y[i].d));
    }
    *s = svaddv_f32(all, acc);
}

static void vec_dot_q4_0_q8_0(int64_t n, float *s, const void *vx, const void *vy) {
    const cpulm_block_q4_0 *x = vx;
    const cpulm_block_q8_0 *y = vy;
    const int64_t nb = n / 32;
    const uint64_t vb = svcntb();
    const svbool_t all = svptrue_b32();
    svfloat32_t acc = svdup_n_f32(0.0f);
    int64_t i = 0;
    if (vb >= 64) {
        const svbool_t all8 = svptrue_b8(), p32 = svwhilelt_b8_u64(0, 32);
        const svuint8_t shift = nibble_shift(0);
        for (; i + 1 < nb; i += 2) {
            const svuint8_t rep =
                svsel_u8(p32, svld1rq_u8(all8, x[i].qs), svld1rq_u8(all8, x[i + 1].qs));
            const svint32_t p =
                svdot_s32(svdup_n_s32(0), q4_unpack(rep, shift), pair_s8(y[i].qs, y[i + 1].qs));
            const svfloat32_t d = pair_scales(dxy(x[i].d, y[i].d), dxy(x[i + 1].d, y[i + 1].d));
            acc = svmla_f32_x(all, acc, svcvt_f32_s32_x(all, p), d);
        }
    }
    for (; i < nb; i++) {
        const svint32_t p = q4_block(x[i].qs, y[i].qs, vb);
        acc = svmla_n_f32_x(all, acc, svcvt_f32_s32_x(all, p), dxy(x[i].d, y[i].d));
    }
    *s = svaddv_f32(all, acc);
}

/* ---- bf16 and attention-score dots: two accumulators of svcntw() lanes, a predicated
 * last step. The canonical F32 / F16 dots, rms_norm and swiglu are inherited from neon:
 * the canonical order has 16 lanes whatever the vector length, and the 128- and 256-bit
 * SVE cores run NEON with the same float throughput. ---- */

typedef svfloat32_t (*load_fn)(svbool_t pg, const void *p, int64_t i);

ARM_INLINE svfloat32_t load_f32(svbool_t pg, const void *p, int64_t i) {
    return svld1_f32(pg, (const float *)p + i);
}

ARM_INLINE svfloat32_t load_bf16(svbool_t pg, const void *p, int64_t i) {
    const svuint32_t h = svld1uh_u32(pg, (const uint16_t *)p + i);
    return svreinterpret_f32_u32(svlsl_n_u32_x(pg, h, 16));
}

ARM_INLINE float float_dot(int64_t n, const void *x, const void *y, load_fn load) {
    const int64_t vl = (int64_t)svcntw();
    const svbool_t all = svptrue_b32();
    svfloat32_t a0 = svdup_n_f32(0.0f), a1 = a0;
    int64_t i = 0;
    for (; i + 2 * vl <= n; i += 2 * vl) {
        a0 = svmla_f32_x(all, a0, load(all, x, i), load(all, y, i));
        a1 = svmla_f32_x(all, a1, load(all, x, i + vl), load(all, y, i + vl));
    }
    for (; i < n; i += vl) { /* merging: inactive lanes keep a0 */
        const svbool_t pg = svwhilelt_b32_s64(i, n);
        a0 = svmla_f32_m(pg, a0, load(pg, x, i), load(pg, y, i));
    }
    return svaddv_f32(all, svadd_f32_x(all, a0, a1));
}

static void vec_dot_bf16(int64_t n, float *s, const void *x, const void *y) {
    *s = float_dot(n, x, y, load_bf16);
}

static float dot_f32(int64_t n, const float *x, const float *y) {
    return float_dot(n, x, y, load_f32);
}

/* ---- f32 vector ops ---- */

/* e^x, as arm_exp_f32x4 (same reduction and polynomial); FSCALE applies 2^k. x < -87.3
 * gives exactly 0, x > 88 gives +inf. */
ARM_INLINE svfloat32_t sve_exp(svbool_t pg, svfloat32_t x) {
    const svfloat32_t xc = svmax_n_f32_x(pg, svmin_n_f32_x(pg, x, 88.0f), -87.3f);
    const svfloat32_t k = svrintn_f32_x(pg, svmul_n_f32_x(pg, xc, 1.44269504f));
    svfloat32_t r = svmls_n_f32_x(pg, xc, k, 0.693145752f);
    r = svmls_n_f32_x(pg, r, k, 1.42860677e-6f);
    svfloat32_t p = svmla_f32_x(pg, svdup_n_f32(1.0f / 720), svdup_n_f32(1.0f / 5040), r);
    p = svmla_f32_x(pg, svdup_n_f32(1.0f / 120), p, r);
    p = svmla_f32_x(pg, svdup_n_f32(1.0f / 24), p, r);
    p = svmla_f32_x(pg, svdup_n_f32(1.0f / 6), p, r);
    p = svmla_f32_x(pg, svdup_n_f32(0.5f), p, r);
    p = svmla_f32_x(pg, svdup_n_f32(1.0f), p, r);
    p = svmla_f32_x(pg, svdup_n_f32(1.0f), p, r);
    svfloat32_t y = svscale_f32_x(pg, p, svcvt_s32_f32_x(pg, k));
    y = svsel_f32(svcmplt_n_f32(pg, x, -87.3f), svdup_n_f32(0.0f), y);
    return svsel_f32(svcmpgt_n_f32(pg, x, 88.0f), svdup_n_f32(INFINITY), y);
}

static void softmax(int64_t n, float *x) {
    const svbool_t all = svptrue_b32();
    const int64_t vl = (int64_t)svcntw();
    svfloat32_t vmax = svdup_n_f32(-INFINITY);
    for (int64_t i = 0; i < n; i += vl) {
        const svbool_t pg = svwhilelt_b32_s64(i, n);
        vmax = svmax_f32_m(pg, vmax, svld1_f32(pg, x + i));
    }
    const float max = svmaxv_f32(all, vmax);
    svfloat32_t vsum = svdup_n_f32(0.0f);
    for (int64_t i = 0; i < n; i += vl) {
        const svbool_t pg = svwhilelt_b32_s64(i, n);
        const svfloat32_t e = sve_exp(pg, svsub_n_f32_x(pg, svld1_f32(pg, x + i), max));
        svst1_f32(pg, x + i, e);
        vsum = svadd_f32_m(pg, vsum, e);
    }
    const float inv = 1.0f / svaddv_f32(all, vsum);
    for (int64_t i = 0; i < n; i += vl) {
        const svbool_t pg = svwhilelt_b32_s64(i, n);
        svst1_f32(pg, x + i, svmul_n_f32_x(pg, svld1_f32(pg, x + i), inv));
    }
}

static void axpy(int64_t n, float *y, float a, const float *x) {
    for (int64_t i = 0; i < n; i += (int64_t)svcntw()) {
        const svbool_t pg = svwhilelt_b32_s64(i, n);
        const svfloat32_t r = svmla_n_f32_x(pg, svld1_f32(pg, y + i), svld1_f32(pg, x + i), a);
        svst1_f32(pg, y + i, r);
    }
}

const cpulm_kernels cpulm_kernels_sve = {
    .name = "sve",
    .vec_dot =
        {
            [CPULM_DTYPE_BF16] = vec_dot_bf16,
            [CPULM_DTYPE_Q8_0] = vec_dot_q8_0_q8_0,
            [CPULM_DTYPE_Q4_0] = vec_dot_q4_0_q8_0,
        },
    .softmax = softmax,
    .axpy = axpy,
    .dot_f32 = dot_f32,
};
#endif
