/* avx512bf16_attn.c: the avx512bf16 level (Cooper Lake, Sapphire Rapids and later, Zen 4 and
 * later): its table and its attention tiles with bf16 products (attn_bpack, attn_bscores,
 * attn_bpv; contracts in kernels.h), built with the level's flags and reached only through
 * cpulm_kernels_avx512bf16; its BF16 weight dots are avx512bf16_gemm.c's. Everything else is
 * the avx512vnni level's.
 *
 * Why: prompt attention on an F16 cache is two f32 micro-GEMMs at the FMA rate (16 products
 * an instruction); vdpbf16ps takes 32 (pairs of bf16, accumulated in f32), so the same
 * register blocking does twice the products per cycle, under CPULM_ATTN_BF16 only (the
 * operands lose 8 bits of mantissa: docs/CORRECTNESS.md). The products are exact in f32 and
 * vdpbf16ps rounds after each of a lane's two (the high pair element's first, subnormals
 * flushed): kernels.h's step, which the generic ops compute with fmaf.
 *
 * Blocking: scores 4 rows x 64 keys (16 accumulators; per key pair 4 loads of keys and 4
 * broadcast query pairs), values 6 rows x 64 dims (per key pair 4 loads of values and 6
 * broadcast weight pairs); the weights of the 6 rows are made bf16 pairs once per block.
 */
#if defined(__x86_64__)
#include <immintrin.h>
#include <string.h>

#include "kernels/generic/generic.h"
#include "kernels/x86/x86.h"

/* Register blocks (rows x 16-lane vectors), by a microbenchmark of 256 x 256 keys x d 64 in
 * L1 on Zen 5 (GFLOP/s of one thread; vdpbf16ps peak ~530): scores 4 x 4 492, 8 x 3 483,
 * 6 x 4 354 (gcc spilled its key vectors), 12 x 2 199; values 8 x 2 452, 6 x 4 439-445,
 * 4 x 4 448. f32 attn_scores / attn_pv: 240-258. */
#define SR 4   /* scores: rows */
#define SV 4   /* scores: 16-key vectors */
#define PR 6   /* values: rows */
#define PV 4   /* values: 16-dim vectors */
#define PT 128 /* key pairs of a tile (CPULM_ATTN_TILE / 2) */

_Static_assert(CPULM_ATTN_TILE == 2 * PT, "attn_bpv's pair buffer holds one tile");

/* bf16 vectors: the compiler's __m512bh, reached by casts; the test-only emulation
 * (tests/emu/simde_avx512.h) takes them as its integer vectors */
#if defined(CPULM_TESTS_EMU_SIMDE_AVX512_H)
typedef __m512i bf16v;
#define BF16_FROM_I(x) (x)
#define BF16_TO_I(x)   (x)
#else
typedef __m512bh bf16v;
#define BF16_FROM_I(x) ((__m512bh)(x))
#define BF16_TO_I(x)   ((__m512i)(x))
#endif

static inline __mmask16 lanes(int n) {
    return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1);
}

/* 16 bf16 pairs from 32 floats at x (the first element of each pair in the low half), the
 * floats from n on taken as 0. */
static inline __m512i pairs32(const float *x, int n) {
    const __m512 lo = _mm512_maskz_loadu_ps(lanes(n), x);
    const __m512 hi = _mm512_maskz_loadu_ps(lanes(n - 16 > 0 ? n - 16 : 0), x + 16);
    return BF16_TO_I(_mm512_cvtne2ps_pbh(hi, lo));
}

/* 16 f32 from 16 halves at h */
static inline __m512 f16x16(const uint16_t *h) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)h));
}

/* kp for keys j0..j0+15 (rows from n on are 0): 16 keys x 16 pairs, transposed by 16 x 16. */
static void pack_keys16(int64_t d, int j0, int n, const uint16_t *k, int64_t ldk, uint32_t *kp,
                        int nk) {
    for (int64_t p0 = 0; p0 < d / 2; p0 += 16) {
        __m512 in[16], out[16];
        for (int r = 0; r < 16; r++) {
            const uint16_t *x = k + (j0 + r) * ldk + 2 * p0;
            in[r] =
                j0 + r < n
                    ? _mm512_castsi512_ps(BF16_TO_I(_mm512_cvtne2ps_pbh(f16x16(x + 16), f16x16(x))))
                    : _mm512_setzero_ps();
        }
        x86_transpose16_ps(in, out);
        for (int r = 0; r < 16; r++)
            _mm512_storeu_ps((float *)(kp + (p0 + r) * nk + j0), out[r]);
    }
}

/* F16 rows read in place: the tile is converted once, never stored as f32 (an f32 tile and
 * its packing cost ~2x the work and the cache traffic of packing the halves themselves). */
static void cpulm_avx512bf16_attn_bpack(int64_t d, int n, const uint16_t *k, int64_t ldk,
                                        const uint16_t *v, int64_t ldv, uint32_t *kp,
                                        uint32_t *vp) {
    const int nk = (n + 15) / 16 * 16;
    if (d % 32) { /* a pair block of 16 needs 32 elements a row */
        cpulm_generic_attn_bpack(d, n, k, ldk, v, ldv, kp, vp);
        return;
    }
    for (int j0 = 0; j0 < nk; j0 += 16)
        pack_keys16(d, j0, n, k, ldk, kp, nk);
    /* pair t at c: bf16 of v_2t[c] low, v_2t+1[c] high: vcvtne2ps2bf16 puts the 16 of each
     * row in one half, the permutation interleaves the halves */
    const __m512i inter =
        _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                         21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    for (int t = 0; 2 * t < n; t++) {
        const uint16_t *v0 = v + 2 * t * ldv, *v1 = v0 + ldv;
        const int odd = 2 * t + 1 >= n;
        for (int64_t c = 0; c < d; c += 16) {
            const __m512 hi = odd ? _mm512_setzero_ps() : f16x16(v1 + c);
            const __m512i b = BF16_TO_I(_mm512_cvtne2ps_pbh(hi, f16x16(v0 + c)));
            _mm512_storeu_si512(vp + t * d + c, _mm512_permutexvar_epi16(inter, b));
        }
    }
}

#define AR 6 /* rows of a register block at most (SR, PR) */
#define AV 4 /* vectors of a register block at most (SV, PV) */

/* acc[r][x] += the steps t < nt of a's pair (r, t) (a + r * lda + t, broadcast) with b's 16
 * pairs at b + t * ldb + 16 x: the outer-product loop of both ops, R x V accumulators. LOW:
 * b's high halves read as 0 (attn_bpv's last pair of an odd key count). */
static inline __attribute__((always_inline)) void dp_steps(int R, int V, __m512 acc[AR][AV],
                                                           int64_t nt, const uint32_t *a,
                                                           int64_t lda, const uint32_t *b,
                                                           int64_t ldb, const int LOW) {
    for (int64_t t = 0; t < nt; t++) {
        bf16v bv[AV];
#pragma GCC unroll 4
        for (int x = 0; x < V; x++) {
            const __m512i y = _mm512_loadu_si512(b + t * ldb + 16 * x);
            bv[x] = BF16_FROM_I(LOW ? _mm512_maskz_mov_epi16(0x55555555u, y) : y);
        }
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            const bf16v w = BF16_FROM_I(_mm512_set1_epi32((int)a[r * lda + t]));
#pragma GCC unroll 4
            for (int x = 0; x < V; x++)
                acc[r][x] = _mm512_dpbf16_ps(acc[r][x], w, bv[x]);
        }
    }
}

/* Scores of R rows x V vectors of keys from j0 (nv: keys left from j0). */
static inline __attribute__((always_inline)) void
bscores_block(int R, int V, int64_t d, const uint32_t *qp, int64_t ldq, const uint32_t *kp, int nk,
              int j0, int nv, float scale, float *s, int64_t lds) {
    __m512 acc[AR][AV];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int x = 0; x < V; x++)
            acc[r][x] = _mm512_setzero_ps();
    dp_steps(R, V, acc, d / 2, qp, ldq, kp + j0, nk, 0);
    const __m512 sc = _mm512_set1_ps(scale);
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int x = 0; x < V; x++)
            _mm512_mask_storeu_ps(s + r * lds + j0 + 16 * x, lanes(nv - 16 * x),
                                  _mm512_mul_ps(acc[r][x], sc));
}

/* R rows (a constant per call site) over every key. */
static inline __attribute__((always_inline)) void bscores_rows(int R, int64_t d, int n,
                                                               const uint32_t *qp, int64_t ldq,
                                                               const uint32_t *kp, int nk,
                                                               float scale, float *s, int64_t lds) {
    const int n16 = (n + 15) / 16 * 16; /* <= nk: the keys' vectors, the last masked */
    int j0 = 0;
    for (; j0 + 16 * SV <= n16; j0 += 16 * SV)
        bscores_block(R, SV, d, qp, ldq, kp, nk, j0, n - j0, scale, s, lds);
    for (; j0 < n16; j0 += 16)
        bscores_block(R, 1, d, qp, ldq, kp, nk, j0, n - j0, scale, s, lds);
}

static void cpulm_avx512bf16_attn_bscores(int64_t d, int m, int n, const uint32_t *qp, int64_t ldq,
                                          const uint32_t *kp, int nk, float scale, float *s,
                                          int64_t lds) {
    int i = 0;
    for (; i + SR <= m; i += SR)
        bscores_rows(SR, d, n, qp + i * ldq, ldq, kp, nk, scale, s + i * lds, lds);
    for (; i < m; i++)
        bscores_rows(1, d, n, qp + i * ldq, ldq, kp, nk, scale, s + i * lds, lds);
}

/* Dims c0..c0 + 16 V - 1 of R rows over np key pairs (pp: the rows' weight pairs, PT apart;
 * odd: the last pair's values high halves read as 0). */
static inline __attribute__((always_inline)) void bpv_block(int R, int V, int64_t d, int np,
                                                            int odd, const uint32_t *pp,
                                                            const uint32_t *vp, const float *a,
                                                            float *o, int64_t ldo, int64_t c0) {
    __m512 acc[AR][AV];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int x = 0; x < V; x++)
            acc[r][x] =
                _mm512_mul_ps(_mm512_loadu_ps(o + r * ldo + c0 + 16 * x), _mm512_set1_ps(a[r]));
    dp_steps(R, V, acc, np - odd, pp, PT, vp + c0, d, 0);
    if (odd) dp_steps(R, V, acc, 1, pp + np - 1, PT, vp + (np - 1) * d + c0, d, 1);
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int x = 0; x < V; x++)
            _mm512_storeu_ps(o + r * ldo + c0 + 16 * x, acc[r][x]);
}

static inline __attribute__((always_inline)) void bpv_rows(int R, int64_t d, int n, const float *p,
                                                           int64_t ldp, const uint32_t *vp,
                                                           const float *a, float *o, int64_t ldo) {
    uint32_t pp[PR * PT];
    const int np = (n + 1) / 2;
    for (int r = 0; r < R; r++)
        for (int j = 0; j < n; j += 32)
            _mm512_storeu_si512(pp + r * PT + j / 2, pairs32(p + r * ldp + j, n - j));
    int64_t c0 = 0;
    for (; c0 + 16 * PV <= d; c0 += 16 * PV)
        bpv_block(R, PV, d, np, n % 2, pp, vp, a, o, ldo, c0);
    for (; c0 < d; c0 += 16)
        bpv_block(R, 1, d, np, n % 2, pp, vp, a, o, ldo, c0);
}

static void cpulm_avx512bf16_attn_bpv(int64_t d, int m, int n, const float *p, int64_t ldp,
                                      const uint32_t *vp, const float *a, float *o, int64_t ldo) {
    if (n > 2 * PT) { /* longer than a tile: the pair buffer would not hold a row */
        cpulm_generic_attn_bpv(d, m, n, p, ldp, vp, a, o, ldo);
        return;
    }
    int i = 0;
    for (; i + PR <= m; i += PR)
        bpv_rows(PR, d, n, p + i * ldp, ldp, vp, a + i, o + i * ldo, ldo);
    for (; i < m; i++)
        bpv_rows(1, d, n, p + i * ldp, ldp, vp, a + i, o + i * ldo, ldo);
}

const cpulm_kernels cpulm_kernels_avx512bf16 = {
    .name = "avx512bf16",
    .vec_dot = {[CPULM_DTYPE_BF16] = cpulm_avx512bf16_vec_dot_bf16},
    .gemm_rows = {[CPULM_DTYPE_BF16] = cpulm_avx512bf16_gemm_rows_bf16},
    .attn_bpack = cpulm_avx512bf16_attn_bpack,
    .attn_bscores = cpulm_avx512bf16_attn_bscores,
    .attn_bpv = cpulm_avx512bf16_attn_bpv,
};
#endif
