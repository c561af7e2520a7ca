/* dotprod.c: the dotprod kernel level (armv8.2-a + DotProd: Cortex-A55 / A76, Neoverse
 * N1 / Graviton2, Apple M1), built with -march=armv8.2-a+dotprod. Reached only through
 * cpulm_kernels_dotprod after dispatch.c saw HWCAP_ASIMDDP; NULL entries inherit neon.
 *
 * The quantized dots are the shared bodies of arm.h with SDOT as the int8 primitive: one
 * instruction per 16 byte pairs instead of smull + smull2 + 2 sadalp. The gemm_x16 entries
 * (prompt processing over repacked weights) use SDOT by element, the form the 16-row
 * layout was made for; i8mm and sve inherit them. attn_qscores (dotprod_attn.c) is SDOT on
 * the int8 query (attn_qquant's Q8_0) and the keys' quants.
 */
#if defined(__aarch64__)
#define ARM_MCA_LEVEL "dotprod"
#include "arm.h"

/* SDOT: each int32 lane += the sum of 4 adjacent int8 products, exact for any inputs. */
ARM_INLINE int32x4_t dot16_sdot(int32x4_t acc, int8x16_t a, int8x16_t b) {
    return vdotq_s32(acc, a, b);
}

static void vec_dot_q8_0_q8_0(int64_t n, float *s, const void *x, const void *y) {
    arm_vec_dot_q8_0(n, s, x, y, dot16_sdot);
}

static void vec_dot_q4_0_q8_0(int64_t n, float *s, const void *x, const void *y) {
    arm_vec_dot_q4_0(n, s, x, y, dot16_sdot);
}

static void vec_dot_mxfp4_q8_0(int64_t n, float *s, const void *x, const void *y) {
    arm_vec_dot_mxfp4(n, s, x, y, dot16_sdot);
}

static void vec_dot_q4_K_q8_K(int64_t n, float *s, const void *x, const void *y) {
    arm_vec_dot_k4(n, s, x, y, 0, dot16_sdot);
}

static void vec_dot_q5_K_q8_K(int64_t n, float *s, const void *x, const void *y) {
    arm_vec_dot_k4(n, s, x, y, 1, dot16_sdot);
}

static void vec_dot_q6_K_q8_K(int64_t n, float *s, const void *x, const void *y) {
    arm_vec_dot_q6_K(n, s, x, y, dot16_sdot);
}

/* ---- GEMM over repacked 16-row groups (gemm_x16): SDOT by element, x16_sdot.h ---- */
#include "x16_sdot.h"

ARM_NO_PRESCHED static void gemm_q4_0_x16(int64_t n, int nt, float *s, int64_t ld, const void *w,
                                          const uint8_t *act, uint64_t stride) {
    dp_gemm(n, nt, s, ld, w, act, stride, 0);
}

ARM_NO_PRESCHED static void gemm_q8_0_x16(int64_t n, int nt, float *s, int64_t ld, const void *w,
                                          const uint8_t *act, uint64_t stride) {
    dp_gemm(n, nt, s, ld, w, act, stride, 1);
}

/* ---- K-quant GEMM over repacked 16-row groups: SDOT by element, x16_ksdot.h ---- */
#include "x16_ksdot.h"

ARM_NO_PRESCHED static void gemm_q4_K_x16(int64_t n, int nt, float *s, int64_t ld, const void *w,
                                          const uint8_t *act, uint64_t stride) {
    ks_gemm(4, n, nt, s, ld, w, act, stride);
}

ARM_NO_PRESCHED static void gemm_q5_K_x16(int64_t n, int nt, float *s, int64_t ld, const void *w,
                                          const uint8_t *act, uint64_t stride) {
    ks_gemm(5, n, nt, s, ld, w, act, stride);
}

ARM_NO_PRESCHED static void gemm_q6_K_x16(int64_t n, int nt, float *s, int64_t ld, const void *w,
                                          const uint8_t *act, uint64_t stride) {
    ks_gemm(6, n, nt, s, ld, w, act, stride);
}

const cpulm_kernels cpulm_kernels_dotprod = {
    .name = "dotprod",
    .vec_dot =
        {
            [CPULM_DTYPE_Q8_0] = vec_dot_q8_0_q8_0,
            [CPULM_DTYPE_Q4_0] = vec_dot_q4_0_q8_0,
            [CPULM_DTYPE_MXFP4] = vec_dot_mxfp4_q8_0,
            [CPULM_DTYPE_Q4_K] = vec_dot_q4_K_q8_K,
            [CPULM_DTYPE_Q5_K] = vec_dot_q5_K_q8_K,
            [CPULM_DTYPE_Q6_K] = vec_dot_q6_K_q8_K,
        },
    .attn_qscores = cpulm_dotprod_attn_qscores,
    .gemm_x16 =
        {
            [CPULM_DTYPE_Q8_0] = gemm_q8_0_x16,
            [CPULM_DTYPE_Q4_0] = gemm_q4_0_x16,
            [CPULM_DTYPE_Q4_K] = gemm_q4_K_x16,
            [CPULM_DTYPE_Q5_K] = gemm_q5_K_x16,
            [CPULM_DTYPE_Q6_K] = gemm_q6_K_x16,
        },
};
#endif
