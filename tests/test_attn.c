/* test_attn.c: tiled attention (issue #11).
 * Kernel level: every attn_* entry at every ISA level this CPU offers is bit-identical to
 * the generic one on odd shapes; the whole tiled algorithm (chunks, tiles, online softmax,
 * fold) run with each level's entries matches a float64 softmax attention at 1k-16k keys.
 * Model level: prompt (block) and generation (split) paths give the same bits past several
 * chunks, whatever the thread count; quantized KV caches stay close to f16; a quantized
 * cache on a head size that is not a multiple of 32 is an error, not an assertion.
 * The exact path (attn_x*, the F16 default): its entries match the generic ones at every
 * level, a level's own expf is libm's, the tiled algorithm gives attn_f16's bits for
 * prompts and generation (GQA 1/4/8, head sizes 64/128), and so does the model's default
 * path against the per-(token, head) walk (also with 4 KV heads, several sequences). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpulm.h"
#include "base/fp16.h"
#include "runtime/context.h"
#include "kernels/kernels.h"
#include "model/attention.h"
#include "model/kvrot.h"
#include "attn_oracle.h"
#include "levels.h"
#include "refcase.h"
#include "toolkit/synth.h"
#include "test.h"

static uint64_t rng(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void fill(float *x, int64_t n, uint64_t seed, float scale) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 7;
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)((double)(rng(&s) >> 11) / 9007199254740992.0 - 0.5) * 2 * scale;
}

/* every level this CPU runs, plus the avx512 levels emulated where it lacks them */
static int levels(const cpulm_kernels **lv) {
    return test_kernel_levels(lv, 16);
}

/* ---- kernel entries against the generic ones, bit for bit ---- */

/* Every shape's generic results are computed once and each level's compared with them (the
 * generic ops were most of the time, once per level, under ASan and qemu). */
TEST(attn_entries_bit_identical_at_every_level) {
    const cpulm_kernels *lv[16];
    int nl = levels(lv);
    /* rows past a level's register block and key tails; odd n also strides the rows */
    const int ds[] = {8, 48, 64, 80, 128, 256}, ms[] = {1, 3, 4, 5, 9, 16, 30, 64},
              ns[] = {1, 7, 16, 17, 33, 64};
    const int64_t cap = 64 * (256 + 16);
    float *q = malloc(sizeof(float) * cap), *k = malloc(sizeof(float) * cap);
    float *v = malloc(sizeof(float) * cap), *s0 = malloc(sizeof(float) * 64 * 64);
    float *s1 = malloc(sizeof(float) * 64 * 64), *p = malloc(sizeof(float) * 64 * 64);
    float *oin = malloc(sizeof(float) * cap), *opv = malloc(sizeof(float) * cap);
    float *om = malloc(sizeof(float) * cap), *o1 = malloc(sizeof(float) * cap), a[64];
    REQUIRE(t, q && k && v && s0 && s1 && p && oin && opv && om && o1);
    for (size_t di = 0; di < sizeof ds / sizeof ds[0]; di++)
        for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++)
            for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
                int d = ds[di], m = ms[mi], n = ns[ni];
                int64_t ld = d + (n & 1) * 16; /* rows of q, k, v, o */
                const size_t ob = sizeof(float) * (size_t)m * (size_t)ld;
                uint64_t seed = (uint64_t)(d * 1000 + m * 100 + n);
                fill(q, (int64_t)m * ld, seed, 2.0f);
                fill(k, (int64_t)n * ld, seed + 1, 2.0f);
                fill(v, (int64_t)n * ld, seed + 2, 1.0f);
                cpulm_kernels_generic.attn_scores(d, m, n, q, ld, k, ld, 0.125f, s0, 64);
                const float M_in = m > 2 ? 0.5f : -INFINITY;
                float srow[64], sg[64], sr[64], M0 = M_in, L0 = 3.0f;
                int lim = n > 3 ? n - 3 : n;
                memcpy(srow, s0, sizeof srow), memcpy(sg, s0, sizeof sg);
                float a0 = cpulm_kernels_generic.attn_softmax_row(n, lim, sg, &M0, &L0);
                for (int i = 0; i < m; i++)
                    a[i] = 0.25f * (float)(i + 1);
                fill(p, (int64_t)m * 64, seed + 3, 1.0f);
                fill(oin, (int64_t)m * ld, seed + 4, 1.0f);
                memcpy(opv, oin, ob);
                cpulm_kernels_generic.attn_pv(d, m, n, p, 64, v, ld, a, opv, ld);
                float mc[64], lc[64], Ma[64], La[64], Mb[64], Lb[64];
                for (int i = 0; i < m; i++) {
                    mc[i] = i % 7 == 1 ? -INFINITY : 0.3f * (float)(i % 9);
                    lc[i] = 1.0f + (float)i;
                    Ma[i] = i % 5 == 2 ? -INFINITY : 1.0f - 0.2f * (float)(i % 11);
                    La[i] = 2.0f;
                }
                memcpy(Mb, Ma, sizeof Ma), memcpy(Lb, La, sizeof La);
                memcpy(om, opv, ob);
                cpulm_kernels_generic.attn_merge(d, m, mc, lc, q, ld, Ma, La, om, ld);
                for (int li = 1; li < nl; li++) {
                    lv[li]->attn_scores(d, m, n, q, ld, k, ld, 0.125f, s1, 64);
                    for (int i = 0; i < m; i++)
                        CHECK(t, memcmp(s0 + i * 64, s1 + i * 64, sizeof(float) * (size_t)n) == 0);
                    float M1 = M_in, L1 = 3.0f;
                    memcpy(sr, srow, sizeof sr);
                    float a1 = lv[li]->attn_softmax_row(n, lim, sr, &M1, &L1);
                    CHECK(t, a0 == a1 && M0 == M1 && L0 == L1 &&
                                 memcmp(sg, sr, sizeof(float) * (size_t)n) == 0);
                    memcpy(o1, oin, ob);
                    lv[li]->attn_pv(d, m, n, p, 64, v, ld, a, o1, ld);
                    CHECK(t, memcmp(opv, o1, ob) == 0);
                    float Mc[64], Lc[64];
                    memcpy(Mc, Mb, sizeof Mc), memcpy(Lc, Lb, sizeof Lc);
                    memcpy(o1, opv, ob);
                    lv[li]->attn_merge(d, m, mc, lc, q, ld, Mc, Lc, o1, ld);
                    CHECK(t, memcmp(om, o1, ob) == 0 &&
                                 memcmp(Ma, Mc, sizeof(float) * (size_t)m) == 0 &&
                                 memcmp(La, Lc, sizeof(float) * (size_t)m) == 0);
                }
            }
    free(q), free(k), free(v), free(s0), free(s1), free(p);
    free(oin), free(opv), free(om), free(o1);
}

/* attn_scores is one fma chain per score (kernels.h), whatever the level's micro-GEMM: every
 * level equals the chain computed here (not through the generic op) at the shapes a
 * prompt block gives (GQA 1 / 4 / 8 x tokens: 1-64 rows), head sizes 64 / 128 / 256 and 320
 * (several transposed dim blocks chained through s), key counts with tails of every vector
 * width and past one 64-key block, strided rows, the padding past n left alone. */
TEST(attn_scores_one_chain_per_score_at_every_level) {
    const cpulm_kernels *lv[16];
    int nl = levels(lv);
    const int ds[] = {64, 128, 256, 320}, ms[] = {1, 4, 8, 13, 64}, ns[] = {3, 17, 63, 64, 100};
    enum { LDS = 104, MAXM = 64, MAXN = 100, MAXD = 320 };
    const int64_t ldq = MAXD + 4, ldk = MAXD + 12;
    float *q = malloc(sizeof(float) * MAXM * ldq), *k = malloc(sizeof(float) * MAXN * ldk);
    float *want = malloc(sizeof(float) * MAXM * LDS), *got = malloc(sizeof(float) * MAXM * LDS);
    REQUIRE(t, q && k && want && got);
    const int reps = test_emulated() || test_sanitized() ? 2 : 5; /* shapes per head size */
    for (size_t di = 0; di < sizeof ds / sizeof ds[0]; di++)
        for (int x = 0; x < reps; x++) {
            const int d = ds[di], m = ms[(di + (size_t)x) % 5], n = ns[(2 * di + (size_t)x) % 5];
            fill(q, MAXM * ldq, (uint64_t)(d + 31 * x), 2.0f);
            fill(k, MAXN * ldk, (uint64_t)(d + 31 * x + 7), 2.0f);
            fill(want, MAXM * LDS, 99, 5.0f); /* padding: the same junk in both */
            for (int i = 0; i < m; i++)
                for (int j = 0; j < n; j++) {
                    float c = 0.0f;
                    for (int e = 0; e < d; e++)
                        c = fmaf(q[i * ldq + e], k[j * ldk + e], c);
                    want[i * LDS + j] = c * 0.0625f;
                }
            for (int li = 0; li < nl; li++) {
                fill(got, MAXM * LDS, 99, 5.0f);
                lv[li]->attn_scores(d, m, n, q, ldq, k, ldk, 0.0625f, got, LDS);
                CHECK(t, memcmp(want, got, sizeof(float) * MAXM * LDS) == 0);
            }
        }
    free(q), free(k), free(want), free(got);
}

/* Strided rows (every leading dimension wider than the row, as a tile cut from a cache or
 * a batch), head sizes outside the SIMD fast paths (36: not a multiple of 16 or 8; 18: of 4)
 * and the padding between rows left alone: whole buffers, padding included, match generic. */
TEST(attn_entries_bit_identical_with_strides) {
    const cpulm_kernels *lv[16];
    int nl = levels(lv);
    const int ds[] = {16, 18, 36, 64, 128}, ms[] = {2, 7}, ns[] = {5, 64};
    enum { LDS = 70, MAXM = 7, MAXN = 64, MAXD = 128 };
    const size_t qf = MAXM * (MAXD + 8), kf = MAXN * (MAXD + 12), of = MAXM * (MAXD + 4);
    float *q = malloc(sizeof(float) * qf), *k = malloc(sizeof(float) * kf);
    float *v = malloc(sizeof(float) * kf), *p = malloc(sizeof(float) * MAXM * LDS);
    float *s0 = malloc(sizeof(float) * MAXM * LDS), *s1 = malloc(sizeof(float) * MAXM * LDS);
    float *o0 = malloc(sizeof(float) * of), *o1 = malloc(sizeof(float) * of);
    float *oc = malloc(sizeof(float) * of), a[MAXM];
    REQUIRE(t, q && k && v && p && s0 && s1 && o0 && o1 && oc);
    for (int li = 1; li < nl; li++)
        for (size_t di = 0; di < sizeof ds / sizeof ds[0]; di++)
            for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++)
                for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
                    const int d = ds[di], m = ms[mi], n = ns[ni];
                    const int64_t ldq = d + 8, ldk = d + 12, ldo = d + 4;
                    uint64_t seed = (uint64_t)(d * 977 + m * 31 + n);
                    fill(q, (int64_t)qf, seed, 2.0f);
                    fill(k, (int64_t)kf, seed + 1, 2.0f);
                    fill(v, (int64_t)kf, seed + 2, 1.0f);
                    fill(s0, MAXM * LDS, seed + 3, 7.0f); /* padding: same junk in both */
                    memcpy(s1, s0, sizeof(float) * MAXM * LDS);
                    cpulm_kernels_generic.attn_scores(d, m, n, q, ldq, k, ldk, 0.3f, s0, LDS);
                    lv[li]->attn_scores(d, m, n, q, ldq, k, ldk, 0.3f, s1, LDS);
                    CHECK(t, memcmp(s0, s1, sizeof(float) * MAXM * LDS) == 0);
                    fill(p, MAXM * LDS, seed + 4, 1.0f);
                    fill(o0, (int64_t)of, seed + 5, 1.0f);
                    memcpy(o1, o0, sizeof(float) * of);
                    for (int i = 0; i < m; i++)
                        a[i] = i == 3 ? 0.0f : 1.0f / (float)(i + 2);
                    cpulm_kernels_generic.attn_pv(d, m, n, p, LDS, v, ldk, a, o0, ldo);
                    lv[li]->attn_pv(d, m, n, p, LDS, v, ldk, a, o1, ldo);
                    CHECK(t, memcmp(o0, o1, sizeof(float) * of) == 0);
                    float mc[MAXM], lc[MAXM], Ma[MAXM], La[MAXM], Mb[MAXM], Lb[MAXM];
                    for (int i = 0; i < m; i++) {
                        mc[i] = i == 1 ? -INFINITY : 0.7f * (float)i - 2.0f;
                        lc[i] = 1.5f + (float)i;
                        Ma[i] = Mb[i] = i == 2 ? -INFINITY : 2.0f - 0.5f * (float)i;
                        La[i] = Lb[i] = 3.0f;
                    }
                    fill(oc, (int64_t)of, seed + 6, 1.0f);
                    memcpy(o1, o0, sizeof(float) * of);
                    cpulm_kernels_generic.attn_merge(d, m, mc, lc, oc, ldo, Ma, La, o0, ldo);
                    lv[li]->attn_merge(d, m, mc, lc, oc, ldo, Mb, Lb, o1, ldo);
                    CHECK(t, memcmp(o0, o1, sizeof(float) * of) == 0 &&
                                 memcmp(Ma, Mb, sizeof(float) * (size_t)m) == 0 &&
                                 memcmp(La, Lb, sizeof(float) * (size_t)m) == 0);
                }
    free(q), free(k), free(v), free(p), free(s0), free(s1), free(o0), free(o1), free(oc);
}

/* attn_softmax_row on scores spread over a wide range (exp of differences below -87, where
 * the polynomial's 2^n is not a normal float and results underflow to subnormals or 0),
 * every live count from 1 to n (whole vectors of dead keys included), junk scores past
 * lim (never exponentiated into the result), and a running max that is -inf or above
 * every score: bit-identical to generic at every level. */
TEST(attn_softmax_row_bit_identical_on_wide_ranges) {
    const cpulm_kernels *lv[16];
    int nl = levels(lv);
    const int ns[] = {1, 5, 8, 13, 16, 31, 40, 64};
    const float Ms[] = {-INFINITY, 3.0f, 150.0f};
    float base[64], s0[64], s1[64];
    for (int li = 1; li < nl; li++)
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
            for (int lim = 1; lim <= ns[ni]; lim++)
                for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++) {
                    const int n = ns[ni];
                    fill(base, 64, (uint64_t)(n * 100 + lim), 60.0f);
                    base[0] = 40.0f; /* differences down to -100 (-190 from M = 150) */
                    for (int j = lim; j < n; j++)
                        base[j] = j % 3 ? NAN : INFINITY; /* dead: must not leak */
                    memcpy(s0, base, sizeof base);
                    memcpy(s1, base, sizeof base);
                    float M0 = Ms[mi], L0 = 2.5f, M1 = M0, L1 = L0;
                    float a0 = cpulm_kernels_generic.attn_softmax_row(n, lim, s0, &M0, &L0);
                    float a1 = lv[li]->attn_softmax_row(n, lim, s1, &M1, &L1);
                    CHECK(t, memcmp(&a0, &a1, 4) == 0 && memcmp(&M0, &M1, 4) == 0 &&
                                 memcmp(&L0, &L1, 4) == 0 &&
                                 memcmp(s0, s1, sizeof(float) * (size_t)n) == 0);
                }
}

/* to_float of q8_0 / q4_0 rows (once the tiles of such caches, now the embedding lookup's):
 * every level gives the reference dequantizer's bits, for every quant value and scales from
 * subnormal halves to inf and NaN. */
TEST(attn_kv_tile_to_float_bit_identical_at_every_level) {
    const cpulm_kernels *lv[16];
    int nl = levels(lv);
    const cpulm_dtype types[] = {CPULM_DTYPE_Q8_0, CPULM_DTYPE_Q4_0};
    const uint16_t scales[] = {0x0001, 0x03ff, 0x0400, 0x2e66, 0x3c00, 0xbc00,
                               0x7bff, 0x7c00, 0x7e00, 0x8000, 0x0000, 0xfbff};
    const int64_t n = 32 * 64; /* 64 blocks, a tile row of two 1024-element heads */
    uint64_t s = 99;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const size_t bytes = cpulm_dtype_row_bytes(types[ti], n), bb = bytes / (size_t)(n / 32);
        uint8_t *x = malloc(bytes + 2);
        float *ref = malloc(sizeof(float) * (size_t)n), *got = malloc(sizeof(float) * (size_t)n);
        /* blocks at addresses that are only 2-aligned too (the fp16 scale's alignment, all
         * the block structs promise: cache rows are whole blocks, 34 or 18 bytes) */
        for (int off = 0; off <= 2; off += 2) {
            uint8_t *q = x + off;
            for (size_t i = 0; i < bytes; i++)
                q[i] = (uint8_t)(i / bb % 4 == 3 ? i : rng(&s)); /* every quant byte value */
            for (int64_t b = 0; b < n / 32; b++) {
                const uint16_t h = scales[(size_t)b % (sizeof scales / sizeof scales[0])];
                memcpy(q + (size_t)b * bb, &h, sizeof h);
            }
            cpulm_kernels_generic.to_float[types[ti]](q, ref, n);
            for (int li = 1; li < nl; li++) {
                memset(got, 0xa5, sizeof(float) * (size_t)n);
                lv[li]->to_float[types[ti]](q, got, n);
                CHECK(t, memcmp(ref, got, sizeof(float) * (size_t)n) == 0);
            }
        }
        free(x);
        free(ref);
        free(got);
    }
}

/* ---- the whole algorithm against float64 ---- */

/* out[r] = attention of query row r (position pos[r]) over keys 0..pos[r], by the canonical
 * tiled algorithm (as src/model/attention.c runs it) with level lv's entries. */
static void tiled_attention(const cpulm_kernels *lv, int d, int m, const float *q, const int *pos,
                            const float *k, const float *v, float *out) {
    float *s = malloc(sizeof(float) * CPULM_ATTN_TILE), *o = malloc(sizeof(float) * (size_t)d);
    float *oc = malloc(sizeof(float) * (size_t)d);
    const float scale = 1.0f / sqrtf((float)d);
    for (int r = 0; r < m; r++) {
        float M = -INFINITY, L = 0.0f;
        memset(o, 0, sizeof(float) * (size_t)d);
        for (int j0 = 0; j0 <= pos[r]; j0 += CPULM_ATTN_CHUNK) {
            float mc = -INFINITY, lc = 0.0f;
            memset(oc, 0, sizeof(float) * (size_t)d);
            int jend = pos[r] + 1 < j0 + CPULM_ATTN_CHUNK ? pos[r] + 1 : j0 + CPULM_ATTN_CHUNK;
            for (int j = j0; j < jend; j += CPULM_ATTN_TILE) {
                int n = jend - j < CPULM_ATTN_TILE ? jend - j : CPULM_ATTN_TILE;
                lv->attn_scores(d, 1, n, q + (int64_t)r * d, d, k + (int64_t)j * d, d, scale, s, n);
                float a = lv->attn_softmax_row(n, n, s, &mc, &lc);
                lv->attn_pv(d, 1, n, s, n, v + (int64_t)j * d, d, &a, oc, d);
            }
            lv->attn_merge(d, 1, &mc, &lc, oc, d, &M, &L, o, d);
        }
        for (int c = 0; c < d; c++)
            out[(int64_t)r * d + c] = o[c] * (1.0f / L);
    }
    free(s), free(o), free(oc);
}

double test_attn_oracle_err(int d, int m, const float *q, const int *pos, const float *k,
                            const float *v, const float *out) {
    double worst = 0, *w = malloc(sizeof(double) * (size_t)(pos[m - 1] + 1));
    for (int r = 0; r < m; r++) {
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j <= pos[r]; j++) {
            double x = 0;
            for (int c = 0; c < d; c++)
                x += (double)q[(int64_t)r * d + c] * k[(int64_t)j * d + c];
            w[j] = x / sqrt((double)d);
            if (w[j] > mx) mx = w[j];
        }
        for (int j = 0; j <= pos[r]; j++)
            sum += (w[j] = exp(w[j] - mx));
        for (int c = 0; c < d; c++) {
            double acc = 0;
            for (int j = 0; j <= pos[r]; j++)
                acc += w[j] * v[(int64_t)j * d + c];
            double e = fabs(acc / sum - out[(int64_t)r * d + c]);
            if (e > worst) worst = e;
        }
    }
    free(w);
    return worst;
}

/* The key counts of the float64 comparisons: 1k, 4k and 16k; under qemu 1k and 4k (4 and 16
 * chunks of 256 keys: the same chunk loop and fold, every level still against generic bit for bit;
 * the 16k rows run natively). */
#define N_LENS (test_emulated() ? 2 : 3)

/* Keys spread so that softmax weights vary over several orders of magnitude (sharp rows),
 * values of unit scale; rows at positions from the first key to the last. */
TEST(attn_tiled_matches_float64_at_1k_to_16k) {
    const cpulm_kernels *lv[16];
    int nl = levels(lv);
    const int lens[] = {1024, 4096, 16384};
    for (int li = 0; li < N_LENS; li++)
        for (int d = 64; d <= 128; d += 64) {
            int n = lens[li], m = 4, pos[4] = {0, 300, n / 2 + 7, n - 1};
            float *q = malloc(sizeof(float) * (size_t)m * d),
                  *k = malloc(sizeof(float) * (size_t)n * d);
            float *v = malloc(sizeof(float) * (size_t)n * d),
                  *out = malloc(sizeof(float) * (size_t)m * d);
            float *ref = malloc(sizeof(float) * (size_t)m * d);
            REQUIRE(t, q && k && v && out && ref);
            fill(q, (int64_t)m * d, (uint64_t)n + (uint64_t)d, 3.0f);
            fill(k, (int64_t)n * d, (uint64_t)n * 3 + (uint64_t)d, 3.0f);
            fill(v, (int64_t)n * d, (uint64_t)n * 5 + (uint64_t)d, 1.0f);
            /* f16-representable K and V, as an F16 cache holds them */
            for (int64_t i = 0; i < (int64_t)n * d; i++) {
                k[i] = cpulm_fp16_to_f32(cpulm_f32_to_fp16(k[i]));
                v[i] = cpulm_fp16_to_f32(cpulm_f32_to_fp16(v[i]));
            }
            tiled_attention(lv[0], d, m, q, pos, k, v, ref);
            double e = test_attn_oracle_err(d, m, q, pos, k, v, ref);
            if (!(e < 2e-5)) fprintf(stderr, "  generic n=%d d=%d: |err| %.3g\n", n, d, e);
            CHECK(t, e < 2e-5);
            for (int l = 1; l < nl; l++) {
                tiled_attention(lv[l], d, m, q, pos, k, v, out);
                CHECK(t, memcmp(out, ref, sizeof(float) * (size_t)m * d) == 0);
            }
            free(q), free(k), free(v), free(out), free(ref);
        }
}

/* ---- the exact path (attn_x*): attn_f16's bits by tiles ---- */

static float h16(float x) {
    return cpulm_fp16_to_f32(cpulm_f32_to_fp16(x));
}

/* One attn_x* case at level lv: d x m rows x n keys, every stride padded by pad elements
 * whose contents (NaN) must neither reach a result nor be overwritten. */
typedef struct xcase {
    float *q, *k, *v, *s0, *s1, *w0, *w1, *o0, *o1;
    double *qt;
} xcase;

static void xcase_check(test_ctx *t, const cpulm_kernels *lv, const xcase *x, int d, int m, int n,
                        int pad) {
    const int64_t ldq = m + pad, ldk = d + pad, lda = d + pad, ldw = 64;
    const uint64_t seed = (uint64_t)(d * 1000 + m * 100 + n + pad);
    fill(x->q, (int64_t)m * d, seed, 2.0f);
    fill(x->k, (int64_t)n * ldk, seed + 1, 2.0f);
    fill(x->v, (int64_t)n * ldk, seed + 2, 1.0f);
    for (int64_t i = 0; i < (int64_t)n * ldk; i++)
        x->k[i] = i % ldk < d ? h16(x->k[i]) : NAN, x->v[i] = i % ldk < d ? h16(x->v[i]) : NAN;
    for (int64_t i = 0; i < (int64_t)d * ldq; i++)
        x->qt[i] = i % ldq < m ? h16(x->q[(i % ldq) * d + i / ldq]) : NAN;
    for (int64_t i = 0; i < (int64_t)m * ldw; i++)
        x->s0[i] = x->s1[i] = -7.0f;
    cpulm_kernels_generic.attn_xscores(d, m, n, x->qt, ldq, x->k, ldk, 0.125f, x->s0, ldw);
    lv->attn_xscores(d, m, n, x->qt, ldq, x->k, ldk, 0.125f, x->s1, ldw);
    CHECK(t, memcmp(x->s0, x->s1, sizeof(float) * (size_t)(m * ldw)) == 0);
    for (int i = 0; i < m; i++) { /* from nothing seen, and from a running max */
        float M0 = i % 2 ? -INFINITY : 0.5f * (float)i - 1.0f, M1 = M0;
        memcpy(x->s1 + i * ldw, x->s0 + i * ldw, sizeof(float) * (size_t)n);
        cpulm_kernels_generic.attn_xweights(n, x->s0 + i * ldw, x->w0 + i * ldw, &M0);
        lv->attn_xweights(n, x->s1 + i * ldw, x->w1 + i * ldw, &M1);
        CHECK(t, M0 == M1 && memcmp(x->s0 + i * ldw, x->s1 + i * ldw, 4 * (size_t)n) == 0 &&
                     memcmp(x->w0 + i * ldw, x->w1 + i * ldw, 4 * (size_t)n) == 0);
    }
    float S0[33], S1[33];
    for (int i = 0; i < m; i++)
        S0[i] = S1[i] = 1.5f + (float)i;
    fill(x->o0, (int64_t)m * lda, seed + 4, 3.0f);
    for (int64_t i = 0; i < (int64_t)m * lda; i++)
        x->o0[i] = i % lda < d ? h16(x->o0[i]) : NAN;
    memcpy(x->o1, x->o0, sizeof(float) * (size_t)(m * lda));
    cpulm_kernels_generic.attn_xpv(d, m, n, x->w0, x->s0, ldw, x->v, ldk, x->o0, lda, S0);
    lv->attn_xpv(d, m, n, x->w0, x->s0, ldw, x->v, ldk, x->o1, lda, S1);
    CHECK(t, memcmp(x->o0, x->o1, sizeof(float) * (size_t)(m * lda)) == 0 &&
                 memcmp(S0, S1, sizeof(float) * (size_t)m) == 0);
}

/* Every attn_x* entry at every level against the generic one, bit for bit, on odd shapes
 * (d: odd, % 8 == 4, % 16 == 8 and the usual sizes; m, n: every vector tail) and padded
 * strides; xpv's scale factors mix 1 (the max did not move) with moves. */
TEST(attn_xentries_bit_identical_at_every_level) {
    const cpulm_kernels *lv[16];
    int nl = levels(lv);
    /* m 16-33: head size 8's 16-row lanes with 0-8 rows riding along as pairs */
    const int ds[] = {7, 8, 12, 40, 48, 64, 80, 128, 256},
              ms[] = {1, 2, 3, 4, 5, 7, 8, 9, 16, 18, 21, 24, 33}, ns[] = {1, 7, 16, 17, 33, 64};
    const size_t big = 64 * (256 + 5);
    xcase x = {malloc(sizeof(float) * big),     malloc(sizeof(float) * big),
               malloc(sizeof(float) * big),     malloc(sizeof(float) * 33 * 64),
               malloc(sizeof(float) * 33 * 64), malloc(sizeof(float) * 33 * 64),
               malloc(sizeof(float) * 33 * 64), malloc(sizeof(float) * big),
               malloc(sizeof(float) * big),     malloc(sizeof(double) * 256 * (33 + 5))};
    REQUIRE(t, x.q && x.k && x.v && x.s0 && x.s1 && x.w0 && x.w1 && x.o0 && x.o1 && x.qt);
    for (int li = 1; li < nl; li++)
        for (size_t di = 0; di < sizeof ds / sizeof ds[0]; di++)
            for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++)
                for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
                    xcase_check(t, lv[li], &x, ds[di], ms[mi], ns[ni],
                                (int)((di + mi + ni) % 3) * 5 / 2); /* pad 0, 2 or 5 */
    free(x.q), free(x.k), free(x.v), free(x.s0), free(x.s1), free(x.w0), free(x.w1);
    free(x.o0), free(x.o1), free(x.qt);
}

/* k's attn_xweights on scores s[0..n) from the running max M gives the generic op's
 * scores, weights and new max, bit for bit (n <= 40). */
static int xweights_like_generic(const cpulm_kernels *k, int n, const float *s, float M) {
    float s0[40], s1[40], w0[40], w1[40], M0 = M, M1 = M;
    memcpy(s0, s, sizeof(float) * (size_t)n);
    memcpy(s1, s, sizeof(float) * (size_t)n);
    cpulm_kernels_generic.attn_xweights(n, s0, w0, &M0);
    k->attn_xweights(n, s1, w1, &M1);
    return memcmp(&M0, &M1, 4) == 0 && memcmp(s0, s1, 4 * (size_t)n) == 0 &&
           memcmp(w0, w1, 4 * (size_t)n) == 0;
}

/* attn_xweights' key order on ties and special scores: equal maxima (the earlier one stays,
 * as "x > M" keeps it: +0 after -0 leaves M = -0), NaN (never the max), infinities and
 * scores past expf's special ranges, from several running maxima, every lane tail. */
TEST(attn_xweights_ties_and_specials_bit_identical) {
    const cpulm_kernels *lv[16];
    int nl = levels(lv);
    const float pool[] = {0.0f,     -0.0f, 1.0f,    -1.0f, 1.0f,  NAN,   -INFINITY,
                          INFINITY, 88.5f, -100.0f, 3.25f, -0.0f, 3.25f, -90.0f};
    const float starts[] = {-INFINITY, 0.0f, -0.0f, 1.0f};
    const int np = (int)(sizeof pool / sizeof pool[0]);
    float sc[24];
    uint64_t r = 12345;
    for (int l = 1; l < nl; l++)
        for (int n = 1; n <= 19; n++)
            for (int rep = 0; rep < 16; rep++) {
                for (int j = 0; j < n; j++)
                    sc[j] = pool[rng(&r) % (uint64_t)np];
                CHECK(t, xweights_like_generic(lv[l], n, sc, starts[rep % 4]));
            }
}

/* A level's attn_xweights may use its own expf only if it is libm's, bit for bit: with
 * M = 0 and s[j] = x <= 0 it returns expf(x - 0) = expf(x). Floats of [-104, 0] (every
 * stride-th; the exhaustive run, stride 1, is CPULM_XEXP_STRIDE=1), -0, -inf, the ends of
 * glibc's special ranges and a NaN. */
TEST(attn_xweights_expf_is_libms) {
    const cpulm_kernels *lv[16];
    int nl = levels(lv);
    const char *env = getenv("CPULM_XEXP_STRIDE");
    /* qemu and the sanitizers: a sparser sweep (the values are the native stage's to cover) */
    const uint32_t dflt = test_emulated() || test_sanitized() ? 241 : 61;
    const uint32_t stride = env && atoi(env) > 0 ? (uint32_t)atoi(env) : dflt, end = 0xC2D00000u;
    enum { B = 4096 };
    float *x = malloc(sizeof(float) * B), *s = malloc(sizeof(float) * B);
    float *ms = malloc(sizeof(float) * B);
    REQUIRE(t, x && s && ms);
    const float special[] = {-0.0f,          -INFINITY,      -0x1.9fe368p6f, -0x1.9fe36ap6f,
                             -0x1.9d1d9ep6f, -0x1.9d1da0p6f, -0x1.9d1d9cp6f, -88.0f,
                             -87.9999f,      -0x1p-149f,     -0x1p-30f,      NAN};
    for (int l = 1; l < nl; l++) {
        int seen = lv[l]->attn_xweights == cpulm_kernels_generic.attn_xweights;
        for (int p = 1; p < l; p++) /* a level's own only: the ones above inherit it */
            seen |= lv[p]->attn_xweights == lv[l]->attn_xweights;
        if (seen) continue;
        uint64_t bad = 0, checked = 0;
        uint32_t u = 0x80000000u;
        int nsp = (int)(sizeof special / sizeof special[0]);
        while (u <= end || nsp > 0) {
            int n = 0;
            for (; n < B && nsp > 0; n++)
                x[n] = special[--nsp];
            for (; n < B && u <= end; n++, u += stride)
                memcpy(&x[n], &u, 4);
            memcpy(s, x, sizeof(float) * (size_t)n);
            float M = 0.0f;
            lv[l]->attn_xweights(n, s, ms, &M);
            for (int j = 0; j < n; j++) {
                float e = expf(x[j]);
                if (memcmp(&e, &s[j], 4) != 0 || ms[j] != 1.0f) {
                    if (bad++ < 5)
                        fprintf(stderr, "  %s: expf(%a) = %a, got %a\n", lv[l]->name, x[j], e,
                                s[j]);
                }
            }
            checked += (uint64_t)n;
            CHECK(t, M == 0.0f);
        }
        fprintf(stderr, "  %s: %llu arguments, %llu differ from libm\n", lv[l]->name,
                (unsigned long long)checked, (unsigned long long)bad);
        CHECK(t, bad == 0);
    }
    free(x), free(s), free(ms);
}

/* The exact path as attention.c drives it, on one KV head: nt consecutive tokens (first at
 * position p0) x gq query heads as rows, tiles of keys shared by every row, a token's rows
 * in one attn_xpv call. out[(t * gq + h) * d ..]. */
static void exact_tiled(const cpulm_kernels *lv, int d, int gq, int nt, int p0, const float *q,
                        const float *k, const float *v, float *out) {
    const int m = nt * gq, T = CPULM_ATTN_TILE;
    float *s = malloc(sizeof(float) * (size_t)m * T), *ms = malloc(sizeof(float) * (size_t)m * T);
    float *acc = calloc((size_t)m * d, sizeof(float)), *M = malloc(sizeof(float) * (size_t)m);
    float *S = calloc((size_t)m, sizeof(float));
    double *qt = malloc(sizeof(double) * (size_t)m * d); /* [d][m]: the rows transposed */
    for (int i = 0; i < m; i++) {
        M[i] = -INFINITY;
        for (int c = 0; c < d; c++)
            qt[c * m + i] = h16(q[(int64_t)i * d + c]);
    }
    const float scale = 1.0f / sqrtf((float)d);
    int jend = p0 + nt;
    for (int j = 0; j < jend; j += T) {
        int n = jend - j < T ? jend - j : T, t0 = j > p0 ? j - p0 : 0;
        lv->attn_xscores(d, m - t0 * gq, n, qt + t0 * gq, m, k + (int64_t)j * d, d, scale,
                         s + t0 * gq * T, T);
        for (int tk = t0; tk < nt; tk++) {
            int lim = p0 + tk - j + 1 < n ? p0 + tk - j + 1 : n, r = tk * gq;
            for (int h = 0; h < gq; h++)
                lv->attn_xweights(lim, s + (r + h) * T, ms + (r + h) * T, &M[r + h]);
            lv->attn_xpv(d, gq, lim, ms + r * T, s + r * T, T, v + (int64_t)j * d, d,
                         acc + (int64_t)r * d, d, S + r);
        }
    }
    for (int i = 0; i < m; i++)
        for (int c = 0; c < d; c++)
            out[(int64_t)i * d + c] = acc[(int64_t)i * d + c] * (S[i] == 0.0f ? 0.0f : 1.0f / S[i]);
    free(s), free(ms), free(acc), free(M), free(S), free(qt);
}

/* Prompts (blocks of tokens) and generation (one token) at positions up to ~3k, head sizes
 * 64 and 128, GQA 1/4/8: every row's output is attn_f16's (the generic one) bit for bit, at
 * every level. Scores vary over a wide range so the max moves often and weights underflow. */
TEST(attn_exact_tiled_equals_attn_f16) {
    const cpulm_kernels *lv[16];
    int nl = levels(lv);
    const int N = 3100;
    const struct {
        int d, gq, nt, p0;
    } cs[] = {{64, 4, 16, 0},    {64, 4, 16, 1000}, {64, 4, 1, 3099}, {128, 8, 8, 2040},
              {128, 1, 1, 0},    {64, 1, 40, 500},  {128, 4, 3, 63},  {64, 8, 1, 64},
              {128, 8, 1, 2500}, {64, 4, 5, 127}};
    uint16_t *k16 = malloc(2 * (size_t)N * 128), *v16 = malloc(2 * (size_t)N * 128);
    float *k = malloc(sizeof(float) * (size_t)N * 128),
          *v = malloc(sizeof(float) * (size_t)N * 128);
    float *q = malloc(sizeof(float) * 64 * 128), *out = malloc(sizeof(float) * 64 * 128);
    float *ref = malloc(sizeof(float) * 64 * 128);
    uint16_t *q16 = malloc(2 * 128);
    REQUIRE(t, k16 && v16 && k && v && q && out && ref && q16);
    for (size_t ci = 0; ci < sizeof cs / sizeof cs[0]; ci++) {
        const int d = cs[ci].d, gq = cs[ci].gq, nt = cs[ci].nt, p0 = cs[ci].p0, m = nt * gq;
        fill(k, (int64_t)N * d, ci * 3 + 1, 3.0f);
        fill(v, (int64_t)N * d, ci * 3 + 2, 1.0f);
        fill(q, (int64_t)m * d, ci * 3 + 3, 3.0f);
        for (int64_t i = 0; i < (int64_t)N * d; i++) {
            k16[i] = cpulm_f32_to_fp16(k[i]), k[i] = cpulm_fp16_to_f32(k16[i]);
            v16[i] = cpulm_f32_to_fp16(v[i]), v[i] = cpulm_fp16_to_f32(v16[i]);
        }
        for (int i = 0; i < m; i++) { /* the reference rows, once for every level */
            for (int c = 0; c < d; c++)
                q16[c] = cpulm_f32_to_fp16(q[(int64_t)i * d + c]);
            cpulm_kernels_generic.attn_f16(d, p0 + i / gq + 1, q16, (const uint8_t *)k16,
                                           (const uint8_t *)v16, 2 * (uint64_t)d,
                                           1.0f / sqrtf((float)d), ref + (int64_t)i * d);
        }
        for (int l = 0; l < nl; l++) {
            exact_tiled(lv[l], d, gq, nt, p0, q, k, v, out);
            for (int i = 0; i < m; i++) {
                int same = memcmp(ref + (int64_t)i * d, out + (int64_t)i * d,
                                  sizeof(float) * (size_t)d) == 0;
                if (!same)
                    fprintf(stderr, "  %s d=%d gq=%d token %d of %d at %d, row %d: differs\n",
                            lv[l]->name, d, gq, i / gq, nt, p0, i);
                CHECK(t, same);
            }
        }
    }
    free(k16), free(v16), free(k), free(v), free(q), free(out), free(ref), free(q16);
}

/* ---- model level ---- */

static cpulm_model *load(const char *file) {
    char rel[256];
    snprintf(rel, sizeof rel, "testdata/models/%s", file);
    const char *p = test_shared_path(rel);
    if (!p) {
        snprintf(rel, sizeof rel, "models/%s", file);
        p = test_shared_path(rel);
    }
    return p ? cpulm_model_load(p, NULL, NULL) : NULL;
}

/* cpulm_ctx_params.attn_fast of ctx_of's contexts: the tiled path on F16 caches too (other
 * caches always take it) unless a test asks for another */
static int ctx_attn = 1;

static cpulm_ctx *ctx_of(const cpulm_model *m, int n_ctx, int nth, cpulm_kv_type kv) {
    cpulm_ctx_params cp = cpulm_ctx_default_params();
    cp.attn_fast = ctx_attn;
    cp.n_ctx = n_ctx;
    cp.n_batch = 512;
    cp.n_threads = nth;
    cp.kv_type = kv;
    cp.n_outputs_max = 64;
    return cpulm_ctx_new(m, &cp, NULL);
}

/* Prompt lengths of the model-level tests: under qemu and sanitizers (CI) shorter, in
 * shorter batches, so that they still cross batches: attention there costs the square of the
 * length. The native stage runs the full lengths. */
#define SLOW_BUILD     (test_emulated() || test_sanitized())
#define TAIL_BATCH     (SLOW_BUILD ? 128 : 512)
#define TAIL_N(native) (SLOW_BUILD ? 300 : (native))

/* logits of the last `tail` tokens: the first n - tail in prompt batches of up to
 * TAIL_BATCH, then one token per decode (the split path). Returns malloc'd [tail][V]. */
static float *tail_logits(cpulm_ctx *ctx, const int32_t *toks, int n, int tail, int32_t V,
                          int batched_tail) {
    float *out = malloc(sizeof(float) * (size_t)tail * (size_t)V);
    int8_t want[512];
    int head = n - tail;
    for (int i = 0; i < head; i += TAIL_BATCH) {
        int c = head - i < TAIL_BATCH ? head - i : TAIL_BATCH;
        cpulm_batch b = {.n = c, .token = toks + i};
        if (cpulm_ctx_decode(ctx, &b) != CPULM_OK) return free(out), NULL;
    }
    if (batched_tail) {
        memset(want, 1, sizeof want);
        cpulm_batch b = {.n = tail, .token = toks + head, .want_logits = want};
        if (cpulm_ctx_decode(ctx, &b) != CPULM_OK) return free(out), NULL;
        for (int i = 0; i < tail; i++)
            memcpy(out + (size_t)i * V, cpulm_ctx_logits(ctx, i), sizeof(float) * (size_t)V);
        return out;
    }
    for (int i = 0; i < tail; i++) {
        cpulm_batch b = {.n = 1, .token = toks + head + i};
        if (cpulm_ctx_decode(ctx, &b) != CPULM_OK) return free(out), NULL;
        memcpy(out + (size_t)i * V, cpulm_ctx_logits(ctx, 0), sizeof(float) * (size_t)V);
    }
    return out;
}

/* 700 tokens (3 chunks; qemu 300 in 4): the last 20 as one prompt batch (block path, 128-row
 * blocks: many rows per score call) == one by one (split path, 4-row items), at 1 and 3 threads,
 * for an F16 and a Q8_0 cache. */
TEST(attn_prompt_and_generation_paths_bit_identical) {
    cpulm_model *m = load("tiny-llama3-q4_0.gguf");
    if (!m) SKIP(t, "models not found (CPULM_SHARED)");
    int32_t V = cpulm_vocab_n(m), n = TAIL_N(700), tail = 20, toks[700];
    for (int i = 0; i < n; i++)
        toks[i] = (i * 7919 + 13) % V;
    cpulm_kv_type kvs[] = {CPULM_KV_F16, CPULM_KV_Q8_0};
    for (int kvi = 0; kvi < 2; kvi++) {
        cpulm_ctx *a = ctx_of(m, 1024, 1, kvs[kvi]), *b = ctx_of(m, 1024, 3, kvs[kvi]);
        REQUIRE(t, a && b);
        float *la = tail_logits(a, toks, n, tail, V, 1), *lb = tail_logits(b, toks, n, tail, V, 0);
        REQUIRE(t, la && lb);
        CHECK(t, memcmp(la, lb, sizeof(float) * (size_t)tail * V) == 0);
        free(la), free(lb);
        cpulm_ctx_free(a), cpulm_ctx_free(b);
    }
    cpulm_model_free(m);
}

/* The default F16 path (exact tiles) gives the logits of attn_f16 per (token, head) (the
 * walk, attn_fast = -1) bit for bit: 700 tokens (qemu: 300), the last 20 as one prompt batch or one
 * by one, at 1 and 2 threads; tiny-llama3 (head size 64, GQA 4: the SIMD kernels) and stories260K
 * (head size 8: avx512's head-8 ops and whole-row tiles, elsewhere the generic fallbacks). */
TEST(attn_exact_path_equals_the_walk) {
    const char *files[] = {"tiny-llama3-f32.gguf", "stories260K.gguf"};
    /* under qemu tiny-llama3 only: stories260K's head size 8 runs the generic fallbacks,
     * plain C checked natively and under the sanitizers */
    for (int f = 0; f < (test_emulated() ? 1 : 2); f++) {
        cpulm_model *m = load(files[f]);
        if (!m) SKIP(t, "models not found (CPULM_SHARED)");
        int32_t V = cpulm_vocab_n(m), n = TAIL_N(700), tail = 20, toks[700];
        for (int i = 0; i < n; i++)
            toks[i] = (i * 7919 + 13) % V;
        float *lg[3];
        for (int r = 0; r < 3; r++) { /* walk; exact batched, 1 thread; exact 1 by 1, 2 */
            ctx_attn = r == 0 ? -1 : 0;
            cpulm_ctx *c = ctx_of(m, 1024, r == 1 ? 1 : 2, CPULM_KV_F16);
            REQUIRE(t, c != NULL);
            lg[r] = tail_logits(c, toks, n, tail, V, r == 1);
            REQUIRE(t, lg[r] != NULL);
            cpulm_ctx_free(c);
        }
        ctx_attn = 1;
        CHECK(t, memcmp(lg[0], lg[1], sizeof(float) * (size_t)tail * V) == 0);
        CHECK(t, memcmp(lg[0], lg[2], sizeof(float) * (size_t)tail * V) == 0);
        for (int r = 0; r < 3; r++)
            free(lg[r]);
        cpulm_model_free(m);
    }
}

/* Q8_0 and Q4_0 caches (head dim 64) stay near the F16 cache's logits over 600 tokens
 * (qemu: 300). */
TEST(attn_quantized_kv_close_to_f16) {
    cpulm_model *m = load("tiny-llama3-f32.gguf");
    if (!m) SKIP(t, "models not found (CPULM_SHARED)");
    int32_t V = cpulm_vocab_n(m), n = TAIL_N(600), tail = 4, toks[600];
    for (int i = 0; i < n; i++)
        toks[i] = (i * 31 + 5) % V;
    cpulm_ctx *c16 = ctx_of(m, 1024, 2, CPULM_KV_F16);
    REQUIRE(t, c16 != NULL);
    float *ref = tail_logits(c16, toks, n, tail, V, 0);
    REQUIRE(t, ref != NULL);
    const cpulm_kv_type q[2] = {CPULM_KV_Q8_0, CPULM_KV_Q4_0};
    const double tol[2] = {0.1, 1.0}; /* q4_0 keys are coarse: 4 bits per element */
    for (int i = 0; i < 2; i++) {
        cpulm_ctx *c = ctx_of(m, 1024, 2, q[i]);
        REQUIRE(t, c != NULL);
        float *l = tail_logits(c, toks, n, tail, V, 0);
        REQUIRE(t, l != NULL);
        double worst = 0;
        for (int64_t j = 0; j < (int64_t)tail * V; j++)
            if (fabs(l[j] - ref[j]) > worst) worst = fabs(l[j] - ref[j]);
        fprintf(stderr, "  %s cache: worst |logit - f16's| %.4f\n", i ? "q4_0" : "q8_0", worst);
        CHECK(t, worst < tol[i] && worst > 0);
        free(l);
        cpulm_ctx_free(c);
    }
    free(ref);
    cpulm_ctx_free(c16);
    cpulm_model_free(m);
}

TEST(attn_quantized_kv_needs_whole_blocks_per_head) {
    cpulm_model *m = load("stories260K.gguf");
    if (!m) SKIP(t, "models not found (CPULM_SHARED)");
    const cpulm_kv_type q[2] = {CPULM_KV_Q8_0, CPULM_KV_Q4_0};
    for (int i = 0; i < 2; i++) {
        cpulm_ctx_params cp = cpulm_ctx_default_params();
        cp.n_ctx = 64;
        cp.kv_type = q[i];
        cpulm_error err = {0};
        cpulm_ctx *c = cpulm_ctx_new(m, &cp, &err);
        CHECK(t,
              c == NULL && err.code == CPULM_ERR_UNSUPPORTED && strstr(err.msg, "multiple of 32"));
        cpulm_ctx_free(c);
    }
    cpulm_model_free(m);
}

/* Generation steps of 3 sequences (3 one-token blocks per decode), then of sequence 0
 * alone, over prompts of 200-274 tokens (partial tiles); logits of every step,
 * malloc'd [8 * 3 + 8][V]. */
/* Sequence s's prompt length in gen_logits: 200, 237, 274 (the last crosses a chunk);
 * under qemu 40, 77, 274 (prompt matmuls dominate there). */
static int gen_prompt_len(int s) {
    return (s == 2 || !test_emulated() ? 200 : 40) + 37 * s;
}

static float *gen_logits(const cpulm_model *m, int attn, int nth) {
    cpulm_ctx_params cp = cpulm_ctx_default_params();
    cp.attn_fast = attn;
    cp.n_ctx = 512;
    cp.n_batch = 512;
    cp.n_threads = nth;
    cp.n_seq_max = 3;
    cpulm_ctx *c = cpulm_ctx_new(m, &cp, NULL);
    const int32_t V = cpulm_vocab_n(m);
    float *out = malloc(sizeof(float) * 32 * (size_t)V);
    if (!c || !out) return cpulm_ctx_free(c), free(out), NULL;
    int32_t toks[300], seq[3] = {0, 1, 2};
    int8_t want[3] = {1, 1, 1};
    for (int i = 0; i < 300; i++)
        toks[i] = (i * 7919 + 13) % V;
    int ok = 1;
    for (int s = 0; s < 3 && ok; s++) {
        int32_t sq[300];
        for (int i = 0; i < 300; i++)
            sq[i] = s;
        cpulm_batch b = {.n = gen_prompt_len(s), .token = toks + s, .seq = sq};
        ok = cpulm_ctx_decode(c, &b) == CPULM_OK;
    }
    for (int step = 0; step < 16 && ok; step++) {
        int n = step < 8 ? 3 : 1;
        float *o = out + (size_t)(step < 8 ? 3 * step : 24 + step - 8) * V;
        cpulm_batch b = {.n = n, .token = toks + 100 + step, .seq = seq, .want_logits = want};
        ok = cpulm_ctx_decode(c, &b) == CPULM_OK;
        for (int i = 0; i < n && ok; i++)
            memcpy(o + (size_t)i * V, cpulm_ctx_logits(c, i), sizeof(float) * (size_t)V);
    }
    cpulm_ctx_free(c);
    if (!ok) free(out);
    return ok ? out : NULL;
}

/* A synthetic Q8_0 model with 4 KV heads (GQA 2, head size 64: the SIMD entries run; the
 * shared tiny models have 1 KV head or head size 8), written to the temporary directory as
 * name and loaded; the file is removed once loaded. NULL on failure. */
/* The "tiny" synthetic shape with these sizes, written to the temporary directory as name
 * and loaded; the file is removed once loaded. NULL on failure. */
static cpulm_model *synth_model(const char *name, int n_layer, int n_embd, int n_ff, int n_head,
                                int n_head_kv, int n_ctx, cpulm_dtype type) {
    cpulm_synth_params sp;
    if (cpulm_synth_shape("tiny", &sp) != CPULM_OK) return NULL;
    sp.hp.n_layer = n_layer, sp.hp.n_embd = n_embd, sp.hp.n_ff = n_ff, sp.hp.n_head = n_head;
    sp.hp.n_head_kv = n_head_kv, sp.hp.n_vocab = 300, sp.hp.n_ctx_train = n_ctx, sp.type = type;
    char path[512];
    snprintf(path, sizeof path, "%s/%s", test_tmp_dir(), name);
    if (cpulm_synth_write(path, &sp, NULL) != CPULM_OK) return NULL;
    cpulm_model *m = cpulm_model_load(path, NULL, NULL);
    remove(path);
    return m;
}

/* Under qemu and sanitizers one layer: these tests check the driver's items, threads and
 * sequences, which one layer exercises as two do (the CI budget: two layers cost ~140 s of
 * qemu time); natively the given count. */
static cpulm_model *heads4_model(const char *name, int n_layer, int n_ctx) {
    if (test_emulated() || test_sanitized()) n_layer = 1;
    return synth_model(name, n_layer, 512, 256, 8, 4, n_ctx, CPULM_DTYPE_Q8_0);
}

/* Generation on the exact path, whose items take several KV heads (for one sequence all 4
 * at 1 thread, 2 at 2, 1 at 3; 3 sequences at once: 4), gives the walk's logits bit for
 * bit on a model with several KV heads (a synthetic one: 4 KV heads, GQA 2, head size 64,
 * so the SIMD entries run; the shared tiny models have 1 KV head or head size 8). */
TEST(attn_exact_generation_equals_the_walk_4_kv_heads) {
    cpulm_model *m = heads4_model("attn-gen-heads.gguf", 2, 512);
    REQUIRE(t, m != NULL);
    const size_t bytes = sizeof(float) * 32 * (size_t)cpulm_vocab_n(m);
    float *walk = gen_logits(m, -1, 1);
    REQUIRE(t, walk != NULL);
    /* under qemu and sanitizers: 1 and 3 threads (one item of 4 KV heads, items of one) */
    for (int nth = 1; nth <= 3; nth += SLOW_BUILD ? 2 : 1) {
        float *x = gen_logits(m, 0, nth);
        REQUIRE(t, x != NULL);
        int same = memcmp(walk, x, bytes) == 0;
        if (!same) fprintf(stderr, "  exact path, %d threads: differs from the walk\n", nth);
        CHECK(t, same);
        free(x);
    }
    free(walk);
    cpulm_model_free(m);
}

/* Sequence 0's tokens of gen_logits as one prompt batch (the block path): its logits at
 * the 16 generated positions, malloc'd [16][V]. */
static float *block_logits(const cpulm_model *m) {
    cpulm_ctx_params cp = cpulm_ctx_default_params();
    cp.attn_fast = 1;
    cp.n_ctx = 512;
    cp.n_batch = 512;
    cp.n_threads = 2;
    cp.n_outputs_max = 16;
    cpulm_ctx *c = cpulm_ctx_new(m, &cp, NULL);
    const int32_t V = cpulm_vocab_n(m);
    float *out = malloc(sizeof(float) * 16 * (size_t)V);
    if (!c || !out) return cpulm_ctx_free(c), free(out), NULL;
    int32_t toks[216];
    int8_t want[216] = {0};
    const int n0 = gen_prompt_len(0);
    for (int i = 0; i < n0; i++)
        toks[i] = (i * 7919 + 13) % V;
    for (int i = 0; i < 16; i++)
        toks[n0 + i] = ((100 + i) * 7919 + 13) % V, want[n0 + i] = 1;
    cpulm_batch b = {.n = n0 + 16, .token = toks, .want_logits = want};
    int ok = cpulm_ctx_decode(c, &b) == CPULM_OK;
    for (int i = 0; i < 16 && ok; i++)
        memcpy(out + (size_t)i * V, cpulm_ctx_logits(c, i), sizeof(float) * (size_t)V);
    cpulm_ctx_free(c);
    if (!ok) free(out);
    return ok ? out : NULL;
}

/* Split-K generation (the fast path; 3 sequences at once, then one; 1-3 threads; items
 * of 2 KV heads at 1 thread with 3 sequences, of 1 otherwise) gives sequence 0 the logits
 * of the block path (its tokens as one prompt batch), bit for bit, on the 4-KV-head
 * synthetic model. */
TEST(attn_split_generation_equals_the_block_path_4_kv_heads) {
    cpulm_model *m = heads4_model("attn-split-heads.gguf", 2, 512);
    REQUIRE(t, m != NULL);
    const size_t V = (size_t)cpulm_vocab_n(m), row = sizeof(float) * V;
    float *ref = block_logits(m);
    REQUIRE(t, ref != NULL);
    for (int nth = 1; nth <= 3; nth += SLOW_BUILD ? 2 : 1) { /* qemu: as above */
        float *x = gen_logits(m, 1, nth);
        REQUIRE(t, x != NULL);
        int same = 1;
        for (int s = 0; s < 16; s++)
            same &= memcmp(ref + s * V, x + (s < 8 ? 3 * s : 24 + s - 8) * V, row) == 0;
        if (!same) fprintf(stderr, "  split path, %d threads: differs from the block path\n", nth);
        CHECK(t, same);
        free(x);
    }
    free(ref);
    cpulm_model_free(m);
}

/* ---- CPULM_ATTN_AUTO: the numerics of a sequence follow its rows in the call ---- */

/* A piece of a decode call: tokens first..first+n-1 of prompt id (token i: ((i + 11 * id) *
 * 7919 + 13) % V) at positions first.. of sequence seq. */
typedef struct auto_piece {
    int32_t seq, first, n, id;
} auto_piece;

/* One decode call of the pieces in order on a fresh context (attn numerics, n_seq
 * sequences), then `gen` steps of one token per sequence; logits of every piece's tokens and
 * of the steps, malloc'd [rows][V] in batch order. */
static float *auto_logits(const cpulm_model *m, int attn, int n_seq, const auto_piece *pc, int np,
                          int gen, int *rows) {
    cpulm_ctx_params cp = cpulm_ctx_default_params();
    cp.attn_fast = attn, cp.n_ctx = 256, cp.n_batch = 256, cp.n_outputs_max = 256;
    cp.n_threads = 2, cp.n_seq_max = n_seq;
    cpulm_ctx *c = cpulm_ctx_new(m, &cp, NULL);
    const int32_t V = cpulm_vocab_n(m);
    int32_t tok[256], pos[256], seq[256], end[4] = {0}, id[4] = {0}, n = 0;
    int8_t want[256];
    for (int p = 0; p < np; p++)
        for (int32_t i = pc[p].first; i < pc[p].first + pc[p].n; i++, n++) {
            tok[n] = ((i + 11 * pc[p].id) * 7919 + 13) % V, pos[n] = i, seq[n] = pc[p].seq;
            want[n] = 1, end[pc[p].seq] = i + 1, id[pc[p].seq] = pc[p].id;
        }
    *rows = n + gen * n_seq;
    float *out = malloc(sizeof(float) * (size_t)*rows * (size_t)V);
    int ok = c && out;
    for (int step = -1, o = 0; step < gen && ok; step++) {
        const int32_t k = step < 0 ? n : n_seq;
        for (int32_t s = 0; step >= 0 && s < n_seq; s++) /* a step: one token per sequence */
            tok[s] = (end[s] * 31 + id[s]) % V, pos[s] = end[s]++, seq[s] = s;
        cpulm_batch b = {.n = k, .token = tok, .pos = pos, .seq = seq, .want_logits = want};
        ok = cpulm_ctx_decode(c, &b) == CPULM_OK;
        for (int32_t i = 0; i < k && ok; i++, o++)
            memcpy(out + (size_t)o * V, cpulm_ctx_logits(c, i), sizeof(float) * (size_t)V);
    }
    cpulm_ctx_free(c);
    if (!ok) free(out);
    return ok ? out : NULL;
}

/* Under auto a batch of 4 sequences, two of >= 64 rows in the call (tiled; sequence 0's in
 * two runs of the batch) and two of fewer (exact), then 2 generation steps of the 4, gives
 * each sequence the logits it gets decoded alone with the same calls, bit for bit (a rule
 * per call, as llama.cpp's, took the tiled numerics for all 4: 184 rows). */
TEST(attn_auto_batch_of_4_equals_each_alone) {
    cpulm_model *m = heads4_model("attn-auto-batch.gguf", 2, 256);
    REQUIRE(t, m != NULL);
    const int32_t V = cpulm_vocab_n(m), len[4] = {70, 20, 64, 30};
    const auto_piece batch[5] = {
        {0, 0, 40, 0}, {1, 0, 20, 1}, {2, 0, 64, 2}, {3, 0, 30, 3}, {0, 40, 30, 0}};
    const int at[5] = {0, 40, 60, 124, 154}; /* each piece's first row in the batch */
    const int gen = 2, n_all = 184;
    int rows;
    float *all = auto_logits(m, CPULM_ATTN_AUTO, 4, batch, 5, gen, &rows);
    REQUIRE(t, all != NULL && rows == n_all + 4 * gen);
    for (int32_t s = 0; s < 4; s++) {
        const auto_piece one = {0, 0, len[s], s};
        int n1;
        float *x = auto_logits(m, CPULM_ATTN_AUTO, 1, &one, 1, gen, &n1);
        REQUIRE(t, x != NULL && n1 == len[s] + gen);
        int same = 1;
        for (int p = 0; p < 5; p++) /* the prompt rows */
            if (batch[p].seq == s)
                same &= memcmp(all + (size_t)at[p] * V, x + (size_t)batch[p].first * V,
                               sizeof(float) * (size_t)(batch[p].n * V)) == 0;
        for (int g = 0; g < gen; g++) /* the steps */
            same &= memcmp(all + (size_t)(n_all + 4 * g + s) * V, x + (size_t)(len[s] + g) * V,
                           sizeof(float) * (size_t)V) == 0;
        if (!same)
            fprintf(stderr, "  sequence %d (%d rows): batch differs from alone\n", s, len[s]);
        CHECK(t, same);
        free(x);
    }
    free(all);
    cpulm_model_free(m);
}

/* The rule: under auto a sequence's 64 rows in a call take the tiled numerics (`fast`'s
 * bits), 63 the exact ones (`ref`'s bits), also when the call has more rows (two sequences of
 * 40: 80); a head size that is not a multiple of 16 (stories260K: 8) always the exact ones. */
TEST(attn_auto_rule_per_sequence_rows) {
    cpulm_model *m = heads4_model("attn-auto-rule.gguf", 1, 256);
    REQUIRE(t, m != NULL);
    const size_t row = sizeof(float) * (size_t)cpulm_vocab_n(m);
    const auto_piece p64 = {0, 0, 64, 0}, p63 = {0, 0, 63, 0};
    const auto_piece two[2] = {{0, 0, 40, 0}, {1, 0, 40, 1}};
    const struct {
        const auto_piece *pc;
        int np, n_seq, want; /* want: the numerics auto should equal */
    } cases[3] = {{&p64, 1, 1, 1}, {&p63, 1, 1, 0}, {two, 2, 2, 0}};
    for (int i = 0; i < 3; i++) {
        float *lg[3]; /* ref, fast, auto */
        int rows = 0;
        for (int a = 0; a < 3; a++) {
            lg[a] = auto_logits(m, a == 2 ? CPULM_ATTN_AUTO : a, cases[i].n_seq, cases[i].pc,
                                cases[i].np, 0, &rows);
            REQUIRE(t, lg[a] != NULL);
        }
        const size_t bytes = row * (size_t)rows;
        int ok = memcmp(lg[2], lg[cases[i].want], bytes) == 0 &&
                 memcmp(lg[2], lg[!cases[i].want], bytes) != 0;
        if (!ok) fprintf(stderr, "  case %d: auto is not %s\n", i, cases[i].want ? "fast" : "ref");
        CHECK(t, ok);
        for (int a = 0; a < 3; a++)
            free(lg[a]);
    }
    cpulm_model_free(m);
    cpulm_model *s = load("stories260K.gguf");
    if (!s) SKIP(t, "models not found (CPULM_SHARED)");
    const size_t bytes = sizeof(float) * 64 * (size_t)cpulm_vocab_n(s);
    float *r = auto_logits(s, 0, 1, &p64, 1, 0, &(int){0});
    float *f = auto_logits(s, 1, 1, &p64, 1, 0, &(int){0});
    float *x = auto_logits(s, CPULM_ATTN_AUTO, 1, &p64, 1, 0, &(int){0});
    REQUIRE(t, r && f && x);
    CHECK(t, memcmp(r, x, bytes) == 0 && memcmp(f, x, bytes) != 0);
    free(r), free(f), free(x);
    cpulm_model_free(s);
}

/* attn_xscores on prompt blocks (up to 64 rows: passes of 8 rows, a last pass of 1-7 rows)
 * x key counts that leave every group tail (6, 4, then single keys), against the generic op
 * bit for bit, at every level; padded strides, the pads NaN. */
TEST(attn_xscores_prompt_blocks_bit_identical) {
    const cpulm_kernels *lv[16];
    int nl = levels(lv);
    const int ds[] = {7, 40, 64, 128}, ms[] = {12, 13, 15, 16, 63, 64}, ns[] = {5, 10, 11, 63, 64};
    enum { MM = 64, NN = 64, DD = 128, PAD = 3 };
    double *qt = malloc(sizeof(double) * DD * (MM + PAD));
    float *q = malloc(sizeof(float) * MM * DD), *k = malloc(sizeof(float) * NN * (DD + PAD));
    float *s0 = malloc(sizeof(float) * MM * NN), *s1 = malloc(sizeof(float) * MM * NN);
    REQUIRE(t, qt && q && k && s0 && s1);
    for (size_t di = 0; di < sizeof ds / sizeof ds[0]; di++)
        for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++)
            for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
                const int d = ds[di], m = ms[mi], n = ns[ni];
                const int64_t ldq = m + PAD, ldk = d + PAD;
                const uint64_t seed = (uint64_t)(d * 10000 + m * 100 + n);
                fill(q, (int64_t)m * d, seed, 3.0f);
                fill(k, (int64_t)n * ldk, seed + 1, 3.0f);
                for (int64_t i = 0; i < (int64_t)n * ldk; i++)
                    k[i] = i % ldk < d ? h16(k[i]) : NAN;
                for (int64_t i = 0; i < (int64_t)d * ldq; i++)
                    qt[i] = i % ldq < m ? h16(q[(i % ldq) * d + i / ldq]) : NAN;
                cpulm_kernels_generic.attn_xscores(d, m, n, qt, ldq, k, ldk, 0.125f, s0, NN);
                for (int l = 1; l < nl; l++) {
                    for (int i = 0; i < MM * NN; i++)
                        s1[i] = s0[i] = i % NN < n && i / NN < m ? s0[i] : -7.0f;
                    lv[l]->attn_xscores(d, m, n, qt, ldq, k, ldk, 0.125f, s1, NN);
                    CHECK(t, memcmp(s0, s1, sizeof(float) * MM * NN) == 0);
                }
            }
    free(qt), free(q), free(k), free(s0), free(s1);
}

/* attn_xweights on groups of keys none of which is above the running max (the usual case:
 * the avx2 level skips its prefix max there): ties with the max, -0 against +0, NaN, -inf,
 * +inf as the max, scores in and past expf's special ranges; some groups with one key above,
 * every tail; bit for bit with the generic op at every level. */
TEST(attn_xweights_groups_below_the_max_bit_identical) {
    const cpulm_kernels *lv[16];
    int nl = levels(lv);
    const float pool[] = {0.0f,    -0.0f,  1.0f,   -1.0f,      NAN,    -INFINITY, -100.0f,
                          -90.0f,  -87.5f, 2.5f,   0x1p-149f,  -3.25f, 0.75f,     -0x1.9fe368p6f,
                          -104.0f, 2.0f,   -16.0f, -0x1p-140f, 1.5f,   2.5f};
    const float starts[] = {2.5f, 0.0f, -0.0f, INFINITY, 1.0f, 100.0f};
    const int np = (int)(sizeof pool / sizeof pool[0]);
    float sc[40];
    uint64_t r = 777;
    for (int l = 1; l < nl; l++)
        for (int n = 1; n <= 40; n++)
            for (int rep = 0; rep < 24; rep++) {
                const float M = starts[rep % 6];
                for (int j = 0; j < n; j++) {
                    float x = pool[rng(&r) % (uint64_t)np];
                    /* mostly at most the max; now and then one key above it */
                    if (x > M && rng(&r) % 8 != 0) x = M;
                    sc[j] = x;
                }
                CHECK(t, xweights_like_generic(lv[l], n, sc, M));
            }
}

/* ---- attn_q*: tiles read in place from Q8_0 / Q4_0 caches ---- */

/* n rows of d random elements (scale amp) quantized to type t, ld bytes apart (ld >= the
 * row's bytes; the gap holds 0x5a bytes no op may read into a result), and their exact f32
 * values (dequantized) into f (may be NULL). */
static uint8_t *qrows(cpulm_dtype t, int64_t d, int n, uint64_t ld, uint64_t seed, float amp,
                      float *f) {
    uint8_t *r = malloc(ld * (size_t)n + 64);
    float *x = malloc(sizeof(float) * (size_t)d);
    if (!r || !x) return free(r), free(x), NULL;
    memset(r, 0x5a, ld * (size_t)n + 64);
    for (int j = 0; j < n; j++) {
        fill(x, d, seed + (uint64_t)j * 7, amp);
        cpulm_kernels_generic.from_float[t](x, r + (uint64_t)j * ld, d);
        if (f) cpulm_kernels_generic.to_float[t](r + (uint64_t)j * ld, f + (int64_t)j * d, d);
    }
    free(x);
    return r;
}

/* A query block whose amax is 127 (scale 1): its halves round to even, as llama.cpp's x86
 * quantizer (vcvtps2dq) does. */
static const float ties[8] = {127.0f, 0.5f, 1.5f, 2.5f, -2.5f, -0.5f, 126.5f, -126.5f};

/* attn_qquant's definition by hand: llama.cpp's Q8_0 of the query, a scale per block of 32
 * (f16, amax / 127), halves to even, and an all-zero block all 0. */
TEST(attn_qquant_is_q8_0_per_block) {
    float q[64] = {0};
    memcpy(q, ties, sizeof ties);
    for (int e = 32; e < 64; e++) /* block 1: amax 3 at e = 40 */
        q[e] = e == 40 ? -3.0f : 0.001f * (float)(e - 32);
    int8_t q8[64];
    float qd[2];
    cpulm_kernels_generic.attn_qquant(64, 1, q, 64, q8, qd);
    const int8_t want[8] = {127, 0, 2, 2, -2, 0, 126, -126};
    CHECK(t, memcmp(q8, want, sizeof want) == 0 && q8[8] == 0 && q8[31] == 0);
    CHECK(t, qd[0] == 1.0f && q8[40] == -127);
    CHECK(t,
          qd[1] == cpulm_fp16_to_f32(cpulm_f32_to_fp16(3.0f / 127.0f)) && qd[1] != 3.0f / 127.0f);
    CHECK(t, q8[33] == (int8_t)nearbyintf(0.001f * 127.0f / 3.0f)); /* 0.04: 0 */
    memset(q, 0, sizeof q);
    cpulm_kernels_generic.attn_qquant(64, 1, q, 64, q8, qd);
    CHECK(t, qd[0] == 0.0f && qd[1] == 0.0f && q8[0] == 0 && q8[63] == 0);
}

/* Every attn_q* entry at every level against the generic one, bit for bit: Q8_0 and Q4_0,
 * d = 32..256, m and n across every vector tail, rows of several heads (ld > the row). */
TEST(attn_qentries_bit_identical_at_every_level) {
    const cpulm_kernels *lv[16];
    int nl = levels(lv);
    const cpulm_dtype ts[] = {CPULM_DTYPE_Q8_0, CPULM_DTYPE_Q4_0};
    const int ds[] = {32, 64, 96, 128, 256}, ms[] = {1, 2, 3, 4, 5, 8, 9, 64},
              ns[] = {1, 2, 3, 4, 5, 7, 8, 17, 64};
    float *q = malloc(sizeof(float) * 64 * 256), *s0 = malloc(sizeof(float) * 64 * 64);
    float *s1 = malloc(sizeof(float) * 64 * 64), *o0 = malloc(sizeof(float) * 64 * 256);
    float *o1 = malloc(sizeof(float) * 64 * 256), qd0[64 * 8], qd1[64 * 8], a[64];
    int8_t *q0 = malloc(64 * 256), *q1 = malloc(64 * 256);
    REQUIRE(t, q && s0 && s1 && o0 && o1 && q0 && q1);
    for (int ti = 0; ti < 2; ti++)
        for (size_t di = 0; di < sizeof ds / sizeof ds[0]; di++)
            for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
                const int d = ds[di], n = ns[ni];
                const uint64_t ld = cpulm_dtype_row_bytes(ts[ti], d) * (uint64_t)(1 + n % 3);
                const uint64_t seed = (uint64_t)(ti * 100000 + d * 100 + n);
                uint8_t *k = qrows(ts[ti], d, n, ld, seed, 1.5f, NULL);
                uint8_t *v = qrows(ts[ti], d, n, ld, seed + 1, 1.0f, NULL);
                REQUIRE(t, k && v);
                for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++) {
                    const int m = ms[mi];
                    fill(q, (int64_t)m * d, seed + 2 + (uint64_t)m, 4.0f);
                    if (m > 2) memset(q + d, 0, sizeof(float) * (size_t)d); /* amax 0 */
                    memcpy(q, ties, sizeof ties); /* amax 127: id 1, halves */
                    for (int li = 1; li < nl; li++) {
                        cpulm_kernels_generic.attn_qquant(d, m, q, d, q0, qd0);
                        lv[li]->attn_qquant(d, m, q, d, q1, qd1);
                        CHECK(t, memcmp(q0, q1, (size_t)(m * d)) == 0 &&
                                     memcmp(qd0, qd1, sizeof(float) * (size_t)(m * d / 32)) == 0);
                        for (int i = 0; i < 64 * 64; i++)
                            s0[i] = s1[i] = -7.0f;
                        cpulm_kernels_generic.attn_qscores(d, ts[ti], m, n, q0, qd0, 0.125f, k, ld,
                                                           s0, 64, NULL);
                        /* a hint of other rows (here v's) changes nothing */
                        lv[li]->attn_qscores(d, ts[ti], m, n, q0, qd0, 0.125f, k, ld, s1, 64, v);
                        CHECK(t, memcmp(s0, s1, sizeof(float) * 64 * 64) == 0);
                        for (int i = 0; i < m; i++) { /* from nothing seen, and a running max */
                            float M0 = i % 2 ? -INFINITY : 0.25f * (float)i, L0 = 2.0f;
                            float M1 = M0, L1 = L0;
                            const int lim = n - i % n;
                            memcpy(s1 + i * 64, s0 + i * 64, sizeof(float) * (size_t)n);
                            const float a0 =
                                cpulm_kernels_generic.attn_softmaxz(n, lim, s0 + i * 64, &M0, &L0);
                            a[i] = lv[li]->attn_softmaxz(n, lim, s1 + i * 64, &M1, &L1);
                            CHECK(t, a0 == a[i] && M0 == M1 && L0 == L1 &&
                                         memcmp(s0 + i * 64, s1 + i * 64, 4 * (size_t)n) == 0);
                        }
                        fill(o0, (int64_t)m * d, seed + 3, 2.0f);
                        for (int i = 0; i < m; i++) /* a = 0 (a first tile): o is not read */
                            for (int e = 0; e < d && a[i] == 0.0f; e++)
                                o0[i * d + e] = NAN;
                        memcpy(o1, o0, sizeof(float) * (size_t)(m * d));
                        cpulm_kernels_generic.attn_qpv(d, ts[ti], m, n, s0, 64, v, ld, a, o0, d,
                                                       NULL);
                        lv[li]->attn_qpv(d, ts[ti], m, n, s0, 64, v, ld, a, o1, d, k);
                        CHECK(t, memcmp(o0, o1, sizeof(float) * (size_t)(m * d)) == 0);
                        for (int e = 0; e < m * d; e++)
                            CHECK(t, isfinite(o0[e]));
                    }
                }
                free(k), free(v);
            }
    free(q), free(s0), free(s1), free(o0), free(o1), free(q0), free(q1);
}

/* attn_softmaxz flushes exactly the weights below -87 (no libm path) and agrees with
 * attn_softmax_row wherever vexp's result is a normal float; every level the same bits. */
TEST(attn_softmaxz_flushes_underflow_only) {
    const cpulm_kernels *lv[16];
    int nl = levels(lv);
    float s[64], z[64], r[64];
    for (int j = 0; j < 64; j++) /* scores from 10 down to -180: max 10, gaps past -87 */
        s[j] = 10.0f - 3.0f * (float)j + 0.01f * (float)(j % 7);
    for (int li = 0; li < nl; li++) {
        float Mz = -INFINITY, Lz = 0, Mr = -INFINITY, Lr = 0;
        memcpy(z, s, sizeof s), memcpy(r, s, sizeof s);
        lv[li]->attn_softmaxz(64, 61, z, &Mz, &Lz);
        cpulm_kernels_generic.attn_softmax_row(64, 61, r, &Mr, &Lr);
        int ok = Mz == Mr;
        for (int j = 0; j < 64; j++) {
            const int under = j < 61 && s[j] - Mr < -87.0f;
            ok &= under ? z[j] == 0.0f : z[j] == r[j];
        }
        ok &= fabsf(Lz - Lr) <= 1e-6f * Lr;
        /* the old sum's scale flushes too: a running max 100 below the row's */
        float M0 = -90.0f, L0 = 1.0f, M1 = M0, L1 = L0;
        memcpy(z, s, sizeof s), memcpy(r, s, sizeof s);
        ok &= lv[li]->attn_softmaxz(64, 61, z, &M1, &L1) == 0.0f && L1 == Lz;
        ok &= cpulm_kernels_generic.attn_softmaxz(64, 61, r, &M0, &L0) == 0.0f && L0 == L1;
        CHECK(t, ok);
    }
}

/* The tiled algorithm on the attn_q* ops (query quantized once, tiles of the cache read in
 * place) against a float64 softmax attention over the cache's own values (the dequantized
 * K and V) at 1k-16k keys: the error left is the Q8_0 query's (llama.cpp's: a step of
 * amax / 127 per block of 32, so scores err by ~1e-2 here) and f32 arithmetic's;
 * every level gives the generic bits. */
static void qtiled_attention(const cpulm_kernels *lv, cpulm_dtype t, int d, int m, const float *q,
                             const int *pos, const uint8_t *k, const uint8_t *v, uint64_t ld,
                             float *out) {
    float *s = malloc(sizeof(float) * CPULM_ATTN_TILE), *o = malloc(sizeof(float) * (size_t)d);
    float *oc = malloc(sizeof(float) * (size_t)d), *qd = malloc(sizeof(float) * (size_t)m * d);
    int8_t *q8 = malloc((size_t)m * (size_t)d);
    lv->attn_qquant(d, m, q, d, q8, qd);
    for (int r = 0; r < m; r++) {
        float M = -INFINITY, L = 0.0f;
        memset(o, 0, sizeof(float) * (size_t)d);
        for (int j0 = 0; j0 <= pos[r]; j0 += CPULM_ATTN_CHUNK) {
            float mc = -INFINITY, lc = 0.0f;
            memset(oc, 0, sizeof(float) * (size_t)d);
            int jend = pos[r] + 1 < j0 + CPULM_ATTN_CHUNK ? pos[r] + 1 : j0 + CPULM_ATTN_CHUNK;
            for (int j = j0; j < jend; j += CPULM_ATTN_TILE) {
                int n = jend - j < CPULM_ATTN_TILE ? jend - j : CPULM_ATTN_TILE;
                lv->attn_qscores(d, t, 1, n, q8 + (int64_t)r * d, qd + r * (d / 32),
                                 1.0f / sqrtf((float)d), k + (uint64_t)j * ld, ld, s, n, NULL);
                float a = lv->attn_softmaxz(n, n, s, &mc, &lc);
                lv->attn_qpv(d, t, 1, n, s, n, v + (uint64_t)j * ld, ld, &a, oc, d, NULL);
            }
            lv->attn_merge(d, 1, &mc, &lc, oc, d, &M, &L, o, d);
        }
        for (int c = 0; c < d; c++)
            out[(int64_t)r * d + c] = o[c] * (1.0f / L);
    }
    free(s), free(o), free(oc), free(qd), free(q8);
}

TEST(attn_qtiled_matches_float64_at_1k_to_16k) {
    const cpulm_kernels *lv[16];
    int nl = levels(lv);
    const int lens[] = {1024, 4096, 16384};
    const cpulm_dtype ts[] = {CPULM_DTYPE_Q8_0, CPULM_DTYPE_Q4_0};
    for (int ti = 0; ti < 2; ti++)
        for (int li = 0; li < N_LENS; li++)
            for (int d = 64; d <= 128; d += 64) {
                int n = lens[li], m = 4, pos[4] = {0, 300, n / 2 + 7, n - 1};
                const uint64_t ld = cpulm_dtype_row_bytes(ts[ti], d);
                float *q = malloc(sizeof(float) * (size_t)m * d);
                float *kf = malloc(sizeof(float) * (size_t)n * d),
                      *vf = malloc(sizeof(float) * (size_t)n * d);
                float *out = malloc(sizeof(float) * (size_t)m * d),
                      *ref = malloc(sizeof(float) * (size_t)m * d);
                REQUIRE(t, q && kf && vf && out && ref);
                fill(q, (int64_t)m * d, (uint64_t)n + (uint64_t)d, 3.0f);
                uint8_t *k = qrows(ts[ti], d, n, ld, (uint64_t)n * 3 + (uint64_t)d, 3.0f, kf);
                uint8_t *v = qrows(ts[ti], d, n, ld, (uint64_t)n * 5 + (uint64_t)d, 1.0f, vf);
                REQUIRE(t, k && v);
                qtiled_attention(lv[0], ts[ti], d, m, q, pos, k, v, ld, ref);
                double e = test_attn_oracle_err(d, m, q, pos, kf, vf, ref);
                fprintf(stderr, "  %s n=%d d=%d: |err| %.3g\n", ti ? "q4_0" : "q8_0", n, d, e);
                CHECK(t, e < 1.5e-2); /* measured 2.9e-3 to 6.1e-3 */
                for (int l = 1; l < nl; l++) {
                    qtiled_attention(lv[l], ts[ti], d, m, q, pos, k, v, ld, out);
                    CHECK(t, memcmp(out, ref, sizeof(float) * (size_t)m * d) == 0);
                }
                free(q), free(kf), free(vf), free(out), free(ref), free(k), free(v);
            }
}

/* The split path (one token per decode, at 1 and 3 threads) against the block path (the
 * same last 8 of n tokens as one batch) on model m, for each of the n_kv caches, bit for
 * bit: the first token that differs is named. The prefix is computed once per cache and
 * handed to the other contexts through the state API (qemu's time). */
static void split_equals_block(test_ctx *t, const cpulm_model *m, int32_t n,
                               const cpulm_kv_type *kvs, int n_kv) {
    const int32_t V = cpulm_vocab_n(m), tail = 8, head = n - tail;
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)n);
    REQUIRE(t, toks != NULL);
    for (int i = 0; i < n; i++)
        toks[i] = (i * 7919 + 13) % V;
    for (int kvi = 0; kvi < n_kv; kvi++) {
        cpulm_ctx *c = ctx_of(m, 1024, 1, kvs[kvi]);
        REQUIRE(t, c != NULL);
        float *ref = tail_logits(c, toks, n, tail, V, 1);
        REQUIRE(t, ref != NULL);
        void *state = malloc(cpulm_ctx_seq_state_bytes(c, head));
        REQUIRE(t, state && cpulm_ctx_seq_state_get(c, 0, 0, head, state) == CPULM_OK);
        cpulm_ctx_free(c);
        for (int nth = 1; nth <= 3; nth += 2) {
            c = ctx_of(m, 1024, nth, kvs[kvi]);
            REQUIRE(t, c && cpulm_ctx_seq_state_set(c, 0, 0, head, state) == CPULM_OK);
            float *x = tail_logits(c, toks + head, tail, tail, V, 0);
            cpulm_ctx_free(c);
            REQUIRE(t, x != NULL);
            int i = 0;
            while (i < tail && !memcmp(ref + (size_t)i * V, x + (size_t)i * V, 4 * (size_t)V))
                i++;
            if (i < tail)
                fprintf(stderr, "  cache %d, %d threads: token at %d differs from the block path\n",
                        kvi, nth, head + i);
            CHECK(t, i == tail);
            free(x);
        }
        free(state);
        free(ref);
    }
    free(toks);
}

/* On Q8_0 and Q4_0 caches (the attn_q* ops), generation one token at a time (the split
 * path: a pool of 1 thread takes items of 2 KV heads at this depth, one of 3 items of 1)
 * gives the logits of the same tokens as one prompt batch (the block path), bit for bit, on
 * a one-layer model with 4 KV heads (GQA 2, head size 64: the SIMD entries run); the last 8
 * of 800 tokens (300 under qemu and sanitizers), so they read 4 chunks (2), the last one
 * partial. The prefix is
 * computed once and handed to the other contexts through the state API (qemu's time). */
TEST(attn_quantized_split_equals_block_path_4_kv_heads) {
    cpulm_model *m = heads4_model("attn-qsplit-heads.gguf", 1, 1024);
    REQUIRE(t, m != NULL);
    const cpulm_kv_type kvs[] = {CPULM_KV_Q8_0, CPULM_KV_Q4_0};
    /* under qemu and sanitizers the last 8 of 300: 2 chunks, the second partial (qemu's
     * softfloat made the 520-token prefix 60 s of CPU there, 134 s of the arm64 stage's wall
     * beside another test); the fold over 3 and more chunks is
     * attn_split_folds_chunks_in_chunk_order's */
    split_equals_block(t, m, SLOW_BUILD ? 300 : 800, kvs, 2);
    cpulm_model_free(m);
}

/* A one-layer synthetic model with F32 weights, 2 KV heads (GQA 2, head size 64: the SIMD
 * entries run), n_embd 256: its matmuls keep every bit of the attention output (those of
 * heads4_model's Q8_0 weights take it as Q8_0), and under qemu its tokens cost about a
 * quarter of tiny-llama3-f32's. Written to the temporary directory as name and loaded. */
static cpulm_model *f32_model(const char *name) {
    return synth_model(name, 1, 256, 128, 4, 2, 1024, CPULM_DTYPE_F32);
}

/* Pins the split path's fold order: split_fold folds a (token, KV head)'s chunk partials
 * in chunk order, as the block path does, so that both give the same bits; any other order
 * associates the online-softmax sums differently. The other split tests do not see it: on
 * models with Q8_0 / Q4_0 weights the matmuls take their input as Q8_0, which absorbs a
 * last-bit change of the attention output (they pass with the fold reversed or rotated).
 * So: F32 weights (f32_model); and 4 chunks (positions 772-779, the last chunk partial;
 * the same under qemu), since with 2 the only other order is the reverse, while from 3 on
 * there are rotations and swaps (reversed, rotated 1,2,3,0 and the first two swapped: each
 * changes thousands of the 8 x 300 logits). F16 (attn_fast = 1: the tiled path) and Q8_0
 * caches, one token per decode at 1 and 3 threads against the same 8 tokens as one batch
 * (the block path), bit for bit. The 772-token prefix is computed once per cache and handed
 * over by the state API. */
TEST(attn_split_folds_chunks_in_chunk_order) {
    cpulm_model *m = f32_model("attn-fold-order.gguf");
    REQUIRE(t, m != NULL);
    const cpulm_kv_type kvs[] = {CPULM_KV_F16, CPULM_KV_Q8_0};
    split_equals_block(t, m, 780, kvs, 2);
    cpulm_model_free(m);
}

/* ---- driver options: sliding window and attention sinks ---- */

/* A float64 softmax attention of row (token t, head h) of c's last batch in layer il over
 * the cache's keys max(0, pos - window + 1)..pos (dequantized as stored), with o's sink of
 * head h as a key of value 0; worst |diff| against c->att, relative to the largest |v|.
 * q16: the query rounded to f16 first (the exact numerics'). */
static double opts_row_err(cpulm_ctx *c, int il, const cpulm_attn_opts *o, int32_t t, int h,
                           int q16, double *sc, float *kr, float *vr) {
    const int d = c->m->hp.head_dim, nh = c->m->hp.n_head, g = h / (nh / c->m->hp.n_head_kv);
    const size_t off = cpulm_dtype_row_bytes(c->kv.dtype, d) * (size_t)g;
    const int32_t pos = c->pos[t], lo = o->window > 0 && pos >= o->window ? pos - o->window + 1 : 0;
    const float *q = c->q + ((size_t)t * nh + h) * d;
    cpulm_to_float_fn cvt = cpulm_kernels_generic.to_float[c->kv.dtype];
    double M = o->sinks ? o->sinks[h] : -INFINITY, den = 0, out[256] = {0}, vmax = 0;
    int32_t rot_k, rot_v; /* a rotated cache (kvrot.h): the values back to the model's space */
    cpulm_kvrot_plan(c->m, (int)c->kv.dtype, &rot_k, &rot_v);
    for (int32_t j = lo; j <= pos; j++) {
        cvt(cpulm_kv_k(&c->kv, il, c->seq[t], j) + off, kr, d);
        double s = 0;
        for (int e = 0; e < d; e++)
            s += (q16 ? h16(q[e]) : (double)q[e]) * kr[e];
        sc[j - lo] = s / sqrt((double)d);
        M = sc[j - lo] > M ? sc[j - lo] : M;
    }
    for (int32_t j = lo; j <= pos; j++) {
        cvt(cpulm_kv_v(&c->kv, il, c->seq[t], j) + off, vr, d);
        if (rot_v) cpulm_kvrot_rows(vr, d, rot_v);
        const double p = exp(sc[j - lo] - M);
        den += p;
        for (int e = 0; e < d; e++) {
            out[e] += p * vr[e];
            vmax = fabs(vr[e]) > vmax ? fabs(vr[e]) : vmax;
        }
    }
    if (o->sinks) den += exp(o->sinks[h] - M);
    double err = 0;
    const float *att = c->att + ((size_t)t * nh + h) * d;
    for (int e = 0; e < d; e++)
        err = fmax(err, fabs(att[e] - out[e] / den));
    return err / vmax;
}

/* Runs the driver with o on layer il of c's last batch (one thread doing the items of nth);
 * opts_run_err also returns the worst relative error of its rows against opts_row_err. */
static void opts_run(cpulm_ctx *c, int il, const cpulm_attn_opts *o, int nth) {
    const uint64_t base = atomic_load(&c->work_ctr); /* a job of its own, as a pass */
    c->work_base[0].v = base;
    cpulm_attn_run(c, il, o, 0, nth);
}

static double opts_run_err(cpulm_ctx *c, int il, const cpulm_attn_opts *o, int nth, int q16) {
    opts_run(c, il, o, nth);
    double *sc = malloc(sizeof(double) * (size_t)c->kv.n_ctx), err = 0;
    float *kr = malloc(sizeof(float) * 2 * 256);
    for (int32_t t = 0; sc && kr && t < c->n_tok; t++)
        for (int h = 0; h < c->m->hp.n_head; h++)
            err = fmax(err, opts_row_err(c, il, o, t, h, q16, sc, kr, kr + 256));
    free(sc);
    free(kr);
    return err;
}

/* c with tokens of sequence 0 decoded in batches of the sizes in `batches` (0-ended). */
static cpulm_ctx *opts_ctx(const cpulm_model *m, cpulm_kv_type kv, int attn, const int *batches) {
    ctx_attn = attn;
    cpulm_ctx *c = ctx_of(m, 1024, 1, kv);
    ctx_attn = 1;
    int32_t toks[512];
    for (int p = 0; c && *batches; batches++) {
        for (int i = 0; i < *batches; i++)
            toks[i] = ((p + i) * 7919 + 13) % cpulm_vocab_n(m);
        cpulm_batch b = {.n = *batches, .token = toks};
        if (cpulm_ctx_decode(c, &b) != CPULM_OK) return cpulm_ctx_free(c), NULL;
        p += *batches;
    }
    return c;
}

/* Drops c's last token and decodes it again alone (generation: the same K, V and query). */
static int opts_regen_last(cpulm_ctx *c) {
    const int32_t p = cpulm_ctx_seq_len(c, 0) - 1;
    const cpulm_token tok = (p * 7919 + 13) % cpulm_vocab_n(c->m);
    cpulm_batch b = {.n = 1, .token = &tok};
    return cpulm_ctx_seq_rm(c, 0, p) == CPULM_OK && cpulm_ctx_decode(c, &b) == CPULM_OK;
}

static const float opts_sinks[8] = {-30.0f, -2.0f, -0.5f, 0.0f, 0.5f, 2.0f, 4.0f, 30.0f};
/* under qemu (CI) the even cases only: a sink per head, a window of 100, one of 1 */
static const cpulm_attn_opts opts_cases[] = {{0, opts_sinks}, {300, NULL}, {100, opts_sinks},
                                             {5000, NULL},    {1, NULL},   {300, opts_sinks}};
#define N_OPTS    (int)(sizeof opts_cases / sizeof opts_cases[0])
#define OPTS_STEP (test_emulated() ? 2 : 1)
#define OPTS_NTH  (test_emulated() ? 1 : 3)
/* the batches: a prompt ending in a block of OPTS_TAIL tokens past a chunk boundary, and the
 * same tokens with the last one alone (generation) */
#define OPTS_HEAD (test_emulated() ? 256 : 280)
#define OPTS_TAIL (test_emulated() ? 9 : 41)

static cpulm_model *opts_model(const char *name) {
    return synth_model(name, 1, 256, 128, 4, 2, 1024, CPULM_DTYPE_Q8_0); /* GQA 2, d 64 */
}

/* Sliding windows (1 key; 100; 300, across a chunk boundary; more than the context) and
 * attention sinks (per head, from far below to far above the scores) are parameters of the
 * driver: for every cache type and numerics, prompt blocks (the last OPTS_TAIL tokens) and
 * generation (the last token alone: split items, exact items of several KV heads) match a
 * float64 softmax attention over the window with the sink in the denominator, and the last
 * token's row is the same bits both ways (and with its items planned for 1 or 3 threads). */
TEST(attn_window_and_sinks_match_float64) {
    cpulm_model *m = opts_model("attn-opts.gguf");
    REQUIRE(t, m != NULL);
    static const struct {
        cpulm_kv_type kv;
        int attn;
        double tol;
        const char *name;
    } cfg[] = {{CPULM_KV_F32, 1, 1e-6, "f32"},
               {CPULM_KV_F16, 1, 1e-6, "f16 tiled"},
               /* the Q8_0 query (llama.cpp's): measured up to 6.1e-5 */
               {CPULM_KV_Q8_0, 1, 2e-4, "q8_0"},
               {CPULM_KV_Q4_0, 1, 2e-4, "q4_0"},
               {CPULM_KV_F16, 0, 2e-3, "f16 exact"}}; /* f16 accumulation */
    const int prompt[] = {OPTS_HEAD, OPTS_TAIL, 0};
    const size_t qd = (size_t)m->hp.n_head * (size_t)m->hp.head_dim;
    float *last = malloc(sizeof(float) * qd * N_OPTS);
    REQUIRE(t, last != NULL);
    for (size_t i = 0; i < sizeof cfg / sizeof cfg[0]; i++) {
        cpulm_ctx *c = opts_ctx(m, cfg[i].kv, cfg[i].attn, prompt);
        REQUIRE(t, c != NULL);
        double err[N_OPTS] = {0};
        for (int k = 0; k < N_OPTS; k += OPTS_STEP) { /* prompt blocks */
            err[k] = opts_run_err(c, 0, &opts_cases[k], 1, cfg[i].attn == 0);
            memcpy(last + k * qd, c->att + (OPTS_TAIL - 1) * qd, sizeof(float) * qd);
        }
        CHECK(t, opts_regen_last(c));
        for (int k = 0; k < N_OPTS; k += OPTS_STEP) { /* the last token alone */
            const cpulm_attn_opts *o = &opts_cases[k];
            double eg = 0;
            int same = 1;
            for (int nth = 1; nth <= OPTS_NTH; nth += 2) {
                eg = fmax(eg, opts_run_err(c, 0, o, nth, cfg[i].attn == 0));
                same &= memcmp(last + k * qd, c->att, sizeof(float) * qd) == 0;
            }
            if (err[k] > cfg[i].tol || eg > cfg[i].tol || !same)
                fprintf(stderr, "  %s window %d sinks %d: prompt %.3g, generation %.3g%s\n",
                        cfg[i].name, o->window, o->sinks != NULL, err[k], eg,
                        same ? "" : ", the last token differs");
            CHECK(t, err[k] <= cfg[i].tol && eg <= cfg[i].tol && same);
        }
        cpulm_ctx_free(c);
    }
    free(last);
    cpulm_model_free(m);
}

/* The exact numerics with a window give the bits of attn_f16 over the window's keys (the
 * walk, attn_fast = -1, which slices the cache): prompt blocks and generation. */
TEST(attn_exact_window_equals_the_walk) {
    cpulm_model *m = opts_model("attn-opts-walk.gguf");
    REQUIRE(t, m != NULL);
    const int prompt[] = {OPTS_HEAD, OPTS_TAIL, 0};
    cpulm_ctx *x = opts_ctx(m, CPULM_KV_F16, 0, prompt), *w = opts_ctx(m, CPULM_KV_F16, -1, prompt);
    REQUIRE(t, x && w);
    for (int r = 0; r < 2; r++) {
        if (r) CHECK(t, opts_regen_last(x) && opts_regen_last(w));
        const size_t bytes = sizeof(float) * (size_t)x->n_tok * m->hp.n_head * m->hp.head_dim;
        for (int k = 0; k < N_OPTS; k++) {
            if (opts_cases[k].sinks) continue; /* the walk has none */
            opts_run(x, 0, &opts_cases[k], 2);
            opts_run(w, 0, &opts_cases[k], 2);
            const int same = memcmp(x->att, w->att, bytes) == 0;
            if (!same)
                fprintf(stderr, "  %s, window %d: differs from the walk\n",
                        r ? "generation" : "prompt", opts_cases[k].window);
            CHECK(t, same);
        }
    }
    cpulm_ctx_free(x);
    cpulm_ctx_free(w);
    cpulm_model_free(m);
}

/* Prompt blocks shrink (not below 64 rows) until the items cover 2 a thread: 256-row blocks
 * made 64 items of a 512-token batch on the 1B shape, half of what 64 threads had at 128. */
TEST(attn_block_tokens_keep_two_items_a_thread) {
    /* the 1B shape: 4 query heads a KV head, 8 KV heads, 64 tokens (256 rows) at most */
    CHECK_EQ_INT(t, cpulm_attn_block_tokens(64, 4, 8, 512, 2), 64);
    CHECK_EQ_INT(t, cpulm_attn_block_tokens(64, 4, 8, 512, 32), 64);  /* 64 items */
    CHECK_EQ_INT(t, cpulm_attn_block_tokens(64, 4, 8, 512, 64), 32);  /* 128 items */
    CHECK_EQ_INT(t, cpulm_attn_block_tokens(64, 4, 8, 512, 128), 16); /* 256 items, 64 rows */
    CHECK_EQ_INT(t, cpulm_attn_block_tokens(64, 4, 8, 512, 512), 16); /* never under 64 rows */
    CHECK_EQ_INT(t, cpulm_attn_block_tokens(64, 4, 8, 100, 64), 16);  /* a short prompt */
    CHECK_EQ_INT(t, cpulm_attn_block_tokens(1, 256, 1, 512, 64), 1);  /* one token a block */
    CHECK_EQ_INT(t, cpulm_attn_tokens_per_block(4), 64);
}

/* Quantized KV caches against llama.cpp (tests/data/kvq-ref.json, `scripts/ref-logits.py
 * kvq` with llama-perplexity -ctk/-ctv q8_0 or q4_0, -fa on): the tiny shape as llama (heads
 * of 64) and as qwen3 with heads of 128, 192 and 96, so the query's Q8_0 and the Hadamard
 * rotation's sizes (keys 64, 128, 64; values 64; none at 96) are llama.cpp's. Without the
 * rotation a q4_0 cache stood 0.03-0.04 nats of KL away from llama.cpp's, q8_0 1.2e-4. One
 * 512-token call and batches of 37; F32's reference tolerance (measured 2e-5 to 2.6e-4). */
TEST(attn_quantized_kv_ref_llamacpp) {
    if (test_emulated()) NOT_APPLICABLE(t, "minutes under emulation: the ops are checked above");
    cpulm_json_doc *d = refcase_load("kvq-ref.json");
    REQUIRE(t, d);
    const cpulm_json *cases = cpulm_json_get(cpulm_json_root(d), "cases");
    REQUIRE(t, cpulm_json_len(cases) >= 6);
    const size_t n = test_sanitized() ? 1 : cpulm_json_len(cases);
    for (size_t i = 0; i < n; i++) {
        const cpulm_json *c = cpulm_json_at(cases, i);
        double w1 = 0, w2 = 0;
        CHECK_EQ_INT(t, refcase_check(c, 512, CPULM_ATTN_AUTO, 0.0022, &w1), 0);
        CHECK_EQ_INT(t, refcase_check(c, 37, CPULM_ATTN_AUTO, 0.0022, &w2), 0);
        fprintf(stderr, "  %s: worst |diff| %.5f, %.5f in batches of 37\n",
                cpulm_json_str(cpulm_json_get(c, "name")), w1, w2);
    }
    cpulm_json_free(d);
}

/* The worst |error| of kvrot's rotation against H[i][j] = (-1)^popcount(i & j) / sqrt(n) in
 * float64 over blocks of n = 64, 128, 256, and of applying it twice against the identity.
 * Not vectorized: aarch64 gcc 12 stops with an internal compiler error vectorizing these
 * reductions. */
#if defined(__GNUC__) && !defined(__clang__)
#define KVROT_NOVEC __attribute__((optimize("no-tree-vectorize")))
#else
#define KVROT_NOVEC
#endif
KVROT_NOVEC static double kvrot_err(void) {
    float x[256], y[256];
    double err = 0;
    for (int n = 64; n <= 256; n *= 2) {
        fill(x, 256, (uint64_t)n, 3.0f);
        memcpy(y, x, sizeof x);
        cpulm_kvrot_rows(y, 256, n);
        for (int b = 0; b < 256; b += n)
            for (int i = 0; i < n; i++) {
                double s = 0;
                for (int j = 0; j < n; j++)
                    s += (__builtin_popcount((unsigned)(i & j)) % 2 ? -1.0 : 1.0) * x[b + j];
                err = fmax(err, fabs(s / sqrt((double)n) - y[b + i]));
            }
        cpulm_kvrot_rows(y, 256, n);
        for (int i = 0; i < 256; i++)
            err = fmax(err, fabs((double)y[i] - x[i]));
    }
    return err;
}

/* kvrot.h's rotation: x -> H x with H[i][j] = (-1)^popcount(i & j) / sqrt(n) (Sylvester's
 * order, as llama.cpp's ggml_gen_hadamard) block by block, within f32 rounding of float64;
 * applied twice it is the identity; the plan's sizes follow llama.cpp's rule. */
TEST(attn_kvrot_is_the_normalized_hadamard) {
    CHECK(t, kvrot_err() < 1e-5);
    static const struct {
        int d, kv, rk, rv;
    } plan[] = {{64, CPULM_DTYPE_Q8_0, 64, 64},  {128, CPULM_DTYPE_Q4_0, 128, 64},
                {192, CPULM_DTYPE_Q8_0, 64, 64}, {256, CPULM_DTYPE_Q8_0, 256, 64},
                {96, CPULM_DTYPE_Q8_0, 0, 0},    {128, CPULM_DTYPE_F16, 0, 0}};
    cpulm_model *m = synth_model("kvrot-plan.gguf", 1, 256, 128, 2, 1, 64, CPULM_DTYPE_F32);
    REQUIRE(t, m != NULL);
    for (size_t i = 0; i < sizeof plan / sizeof plan[0]; i++) {
        m->hp.head_dim = plan[i].d; /* the plan reads the shape only */
        for (int32_t il = 0; il < m->hp.n_layer; il++)
            m->layers[il].head_dim = plan[i].d;
        int32_t rk = -1, rv = -1;
        cpulm_kvrot_plan(m, plan[i].kv, &rk, &rv);
        CHECK(t, rk == plan[i].rk && rv == plan[i].rv);
    }
    cpulm_model_free(m);
}
