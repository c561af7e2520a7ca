/* avx512bf16_gemm.c: the avx512bf16 level's BF16 weight dots (vec_dot[BF16], gemm_rows[BF16]),
 * reached through the level's table (avx512bf16_attn.c). A BF16 weight row against the
 * token's BF16 activations is pairs of bf16 products, which vdpbf16ps takes 32 at a time
 * straight from memory; the avx512 level widens both operands to f32 first (two integer ops
 * a vector each) and does 16 products an instruction. BF16's dot is each level's own float
 * sum (kernels.h), so this level's bits are vdpbf16ps's: per lane acc = z(fma(x_hi, y_hi,
 * z(acc))), then z(fma(x_lo, y_lo, acc)), subnormals flushed (docs/CORRECTNESS.md "BF16
 * weights"). gemm_rows gives vec_dot's bits pair by pair: the same two accumulators (32
 * elements each of a 64-element step; a whole 32-block after the steps in the first; the
 * masked tail in the second) and the same final sum, 2 rows x 4 tokens a block (two
 * accumulators a pair, not four: 2 x 3 blocks of four ran a Gemma-1B-shape BF16 pp512 0.85x
 * as fast, the compiler spilling).
 */
#if defined(__x86_64__)
#include <immintrin.h>

#include "kernels/rows.h"
#include "kernels/x86/x86.h"

/* bf16 vectors: the compiler's __m512bh, reached by casts; the test-only emulation
 * (tests/emu/simde_avx512.h) takes them as its integer vectors */
#if defined(CPULM_TESTS_EMU_SIMDE_AVX512_H)
#define BF16_FROM_I(x) (x)
#else
#define BF16_FROM_I(x) ((__m512bh)(x))
#endif

/* 32 bf16 from p + i, or the first rem of them and 0 (rem < 32: two masked 256-bit loads,
 * which the tests' AVX-512 emulation has) */
static inline __attribute__((always_inline)) __m512i bf32(const void *p, int64_t i, int64_t rem) {
    const uint16_t *h = (const uint16_t *)p + i;
    if (rem >= 32) return _mm512_loadu_si512((const void *)h);
    const __mmask16 lo = (__mmask16)(rem >= 16 ? 0xFFFFu : (1u << rem) - 1);
    const __mmask16 hi = (__mmask16)(rem > 16 ? (1u << (rem - 16)) - 1 : 0);
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_maskz_loadu_epi16(lo, h)),
                              _mm256_maskz_loadu_epi16(hi, h + 16), 1);
}

static inline __m512 dp(__m512 acc, __m512i x, __m512i y) {
    return _mm512_dpbf16_ps(acc, BF16_FROM_I(x), BF16_FROM_I(y));
}

static float dot_bf16(int64_t n, const void *x, const void *y) {
    const int64_t all = 32;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        a0 = dp(a0, bf32(x, i, all), bf32(y, i, all));
        a1 = dp(a1, bf32(x, i + 32, all), bf32(y, i + 32, all));
    }
    if (i + 32 <= n) a0 = dp(a0, bf32(x, i, all), bf32(y, i, all)), i += 32;
    if (i < n) a1 = dp(a1, bf32(x, i, n - i), bf32(y, i, n - i));
    return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}

void cpulm_avx512bf16_vec_dot_bf16(int64_t n, float *s, const void *x, const void *y) {
    *s = dot_bf16(n, x, y);
}

/* R weight rows x T tokens, named accumulators (an array is kept in memory by the compiler);
 * the ones past R or T are dead code for the constant shapes. */
#define BR 2
#define BT 4
#define BF_STEP(k)                                       \
    if (T > 0) a0##0##k = dp(a0##0##k, w0, x0);          \
    if (T > 1) a0##1##k = dp(a0##1##k, w0, x1);          \
    if (T > 2) a0##2##k = dp(a0##2##k, w0, x2);          \
    if (T > 3) a0##3##k = dp(a0##3##k, w0, x3);          \
    if (R > 1 && T > 0) a1##0##k = dp(a1##0##k, w1, x0); \
    if (R > 1 && T > 1) a1##1##k = dp(a1##1##k, w1, x1); \
    if (R > 1 && T > 2) a1##2##k = dp(a1##2##k, w1, x2); \
    if (R > 1 && T > 3) a1##3##k = dp(a1##3##k, w1, x3)
#define BF_LOAD(i, m)                                       \
    const __m512i w0 = bf32(w, i, m);                       \
    const __m512i w1 = R > 1 ? bf32(w + ws, i, m) : zi;     \
    const __m512i x0 = bf32(a, i, m);                       \
    const __m512i x1 = T > 1 ? bf32(a + as, i, m) : zi;     \
    const __m512i x2 = T > 2 ? bf32(a + 2 * as, i, m) : zi; \
    const __m512i x3 = T > 3 ? bf32(a + 3 * as, i, m) : zi
#define BF_SUM(r, t) \
    if (R > r && T > t) s[t * ld + r] = _mm512_reduce_add_ps(_mm512_add_ps(a##r##t##0, a##r##t##1))
static inline __attribute__((always_inline)) void brows(int64_t n, const uint8_t *w, uint64_t ws,
                                                        const uint8_t *a, uint64_t as, float *s,
                                                        int64_t ld, const int R, const int T) {
    const int64_t all = 32;
    const __m512i zi = _mm512_setzero_si512();
    const __m512 z = _mm512_setzero_ps();
    __m512 a000 = z, a001 = z, a010 = z, a011 = z, a020 = z, a021 = z, a030 = z, a031 = z;
    __m512 a100 = z, a101 = z, a110 = z, a111 = z, a120 = z, a121 = z, a130 = z, a131 = z;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        {
            BF_LOAD(i, all);
            BF_STEP(0);
        }
        {
            BF_LOAD(i + 32, all);
            BF_STEP(1);
        }
    }
    if (i + 32 <= n) {
        BF_LOAD(i, all);
        BF_STEP(0);
        i += 32;
    }
    if (i < n) {
        const int64_t m = n - i;
        BF_LOAD(i, m);
        BF_STEP(1);
    }
    BF_SUM(0, 0);
    BF_SUM(0, 1);
    BF_SUM(0, 2);
    BF_SUM(0, 3);
    BF_SUM(1, 0);
    BF_SUM(1, 1);
    BF_SUM(1, 2);
    BF_SUM(1, 3);
}

#define BROWS_BLOCK(R, T, n, s, ld, w, ws, a, as) brows(n, w, ws, a, as, s, ld, R, T)
CPULM_ROWS_SHAPES4(CPULM_ROWS_SHAPE, brows, BROWS_BLOCK, 2)

void cpulm_avx512bf16_gemm_rows_bf16(int64_t n, int nr, int nt, float *s, int64_t ld, const void *w,
                                     uint64_t ws, const uint8_t *a, uint64_t as) {
    static const cpulm_rows_block_fn block[BT] = {brows_2x1, brows_2x2, brows_2x3, brows_2x4},
                                     one[BT] = {brows_1x1, brows_1x2, brows_1x3, brows_1x4};
    if (nt == 1)
        cpulm_rows_by_dot(cpulm_avx512bf16_vec_dot_bf16, n, nr, s, w, ws, a);
    else
        cpulm_rows_drive(block, one, BR, BT, n, nr, nt, s, ld, w, ws, a, as);
}
#endif
