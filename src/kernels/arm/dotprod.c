/* dotprod.c: the dotprod kernel level (armv8.2-a + DotProd: Cortex-A55 / A76, Neoverse
 * N1 / Graviton2, Apple M1), built with -march=armv8.2-a+dotprod. Reached only through
 * cpulm_kernels_dotprod after dispatch.c saw HWCAP_ASIMDDP; NULL entries inherit neon.
 *
 * The quantized dots are the shared bodies of arm.h with SDOT as the int8 primitive: one
 * instruction per 16 byte pairs instead of smull + smull2 + 2 sadalp.
 */
#if defined(__aarch64__)
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

static void vec_dot_q4_K_q8_K(int64_t n, float *s, const void *x, const void *y) {
    arm_vec_dot_k4(n, s, x, y, 0, dot16_sdot);
}

static void vec_dot_q5_K_q8_K(int64_t n, float *s, const void *x, const void *y) {
    arm_vec_dot_k4(n, s, x, y, 1, dot16_sdot);
}

static void vec_dot_q6_K_q8_K(int64_t n, float *s, const void *x, const void *y) {
    arm_vec_dot_q6_K(n, s, x, y, dot16_sdot);
}

const cpulm_kernels cpulm_kernels_dotprod = {
    .name = "dotprod",
    .vec_dot =
        {
            [CPULM_DTYPE_Q8_0] = vec_dot_q8_0_q8_0,
            [CPULM_DTYPE_Q4_0] = vec_dot_q4_0_q8_0,
            [CPULM_DTYPE_Q4_K] = vec_dot_q4_K_q8_K,
            [CPULM_DTYPE_Q5_K] = vec_dot_q5_K_q8_K,
            [CPULM_DTYPE_Q6_K] = vec_dot_q6_K_q8_K,
        },
};
#endif
