/* rows.h: what every SIMD level's gemm_rows (kernels.h) shares, written once: the register
 * block's signature, the driver that walks a call's weight rows x activation rows block by
 * block, and the F32 two-row blocks' end (canon_dot_f32's fmaf tail and the stores).
 * Included by the level files, built with the level's flags; all static inline. */
#ifndef CPULM_KERNELS_ROWS_H
#define CPULM_KERNELS_ROWS_H

#include <math.h>
#include <stdint.h>

/* One register block: s[t * ld + r] = dot(weight row r, activation row t) for the block's
 * R rows and T tokens; strides in bytes (an F32 block converts them to floats). */
typedef void (*cpulm_rows_block_fn)(int64_t n, float *s, int64_t ld, const uint8_t *w, uint64_t ws,
                                    const uint8_t *a, uint64_t as);

/* Activation rows in groups of up to tmax, each group against the weight rows rb at a time
 * (block[T - 1]), the rows left over one at a time (one[T - 1]). */
static inline void cpulm_rows_drive(const cpulm_rows_block_fn *block,
                                    const cpulm_rows_block_fn *one, int rb, int tmax, int64_t n,
                                    int nr, int nt, float *s, int64_t ld, const void *w,
                                    uint64_t ws, const uint8_t *a, uint64_t as) {
    for (int j = 0; j < nt; j += tmax) {
        const int T = nt - j < tmax ? nt - j : tmax;
        int r = 0;
        for (; r + rb <= nr; r += rb)
            block[T - 1](n, s + j * ld + r, ld, (const uint8_t *)w + r * ws, ws, a + j * as, as);
        for (; r < nr; r++)
            one[T - 1](n, s + j * ld + r, ld, (const uint8_t *)w + r * ws, ws, a + j * as, as);
    }
}

/* One token, a weight row at a time by the level's row dot (vec_dot's signature, the same bits
 * per pair as its blocks): one weight stream at a time reads memory fastest (F16 generation
 * 3.3x, BF16 1.4x the multi-row blocks on Zen 5). */
static inline void cpulm_rows_by_dot(void (*dot)(int64_t, float *, const void *, const void *),
                                     int64_t n, int nr, float *s, const void *w, uint64_t ws,
                                     const uint8_t *a) {
    for (int r = 0; r < nr; r++)
        dot(n, s + r, (const uint8_t *)w + r * ws, a);
}

/* The end of an F32 block of up to 2 x 2 pairs: v[2r + t] holds pair (r, t)'s 16-lane tree
 * sum; the elements from np on continue each pair's fmaf chain in canon_dot_f32's order
 * (the chains side by side), then the pairs are stored. Strides in floats. */
static inline __attribute__((always_inline)) void
cpulm_frows2_end(int R, int T, int64_t np, int64_t n, float v[4], const float *w, int64_t ws,
                 const float *x, int64_t xs, float *s, int64_t ld) {
    for (int64_t i = np; i < n; i++)
        for (int t = 0; t < T; t++)
            for (int r = 0; r < R; r++)
                v[2 * r + t] = fmaf(w[r * ws + i], x[t * xs + i], v[2 * r + t]);
    for (int t = 0; t < T; t++)
        for (int r = 0; r < R; r++)
            s[t * ld + r] = v[2 * r + t];
}

/* An F32 block entry of shape R x T over BLOCK (R, T, n, s, ld, w, ws, x, xs: float rows and
 * strides in floats; F32 rows are 4-byte aligned, in gguf and in the activations). */
#define CPULM_FROWS_SHAPE(NAME, BLOCK, R, T)                                                     \
    static void NAME##_##R##x##T(int64_t n, float *s, int64_t ld, const uint8_t *w, uint64_t ws, \
                                 const uint8_t *a, uint64_t as) {                                \
        BLOCK(R, T, n, s, ld, (const float *)(const void *)w, (int64_t)(ws / sizeof(float)),     \
              (const float *)(const void *)a, (int64_t)(as / sizeof(float)));                    \
    }

/* A block entry whose BLOCK takes the byte strides as they come. */
#define CPULM_ROWS_SHAPE(NAME, BLOCK, R, T)                                                      \
    static void NAME##_##R##x##T(int64_t n, float *s, int64_t ld, const uint8_t *w, uint64_t ws, \
                                 const uint8_t *a, uint64_t as) {                                \
        BLOCK(R, T, n, s, ld, w, ws, a, as);                                                     \
    }

/* The entries a driver with tmax 4 takes: R x 1..4 and 1 x 1..4 (SHAPE: one of the above). */
/* clang-format off */
#define CPULM_ROWS_SHAPES4(SHAPE, NAME, BLOCK, R)                                        \
    SHAPE(NAME, BLOCK, R, 1) SHAPE(NAME, BLOCK, R, 2)                                    \
    SHAPE(NAME, BLOCK, R, 3) SHAPE(NAME, BLOCK, R, 4)                                    \
    SHAPE(NAME, BLOCK, 1, 1) SHAPE(NAME, BLOCK, 1, 2)                                    \
    SHAPE(NAME, BLOCK, 1, 3) SHAPE(NAME, BLOCK, 1, 4)
/* The entries a driver with tmax 3 takes: R x 1..3 and 1 x 1..3. */
#define CPULM_ROWS_SHAPES3(SHAPE, NAME, BLOCK, R)                                        \
    SHAPE(NAME, BLOCK, R, 1) SHAPE(NAME, BLOCK, R, 2) SHAPE(NAME, BLOCK, R, 3)           \
    SHAPE(NAME, BLOCK, 1, 1) SHAPE(NAME, BLOCK, 1, 2) SHAPE(NAME, BLOCK, 1, 3)
/* clang-format on */

#endif
