/* test_attn.c: tiled attention (issue #11).
 * Kernel level: every attn_* entry at every ISA level this CPU offers is bit-identical to
 * the generic one on odd shapes; the whole tiled algorithm (chunks, tiles, online softmax,
 * fold) run with each level's entries matches a float64 softmax attention at 1k-16k keys.
 * Model level: prompt (block) and generation (split) paths give the same bits past several
 * chunks, whatever the thread count; quantized KV caches stay close to f16; a quantized
 * cache on a head size that is not a multiple of 32 is an error, not an assertion. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpulm.h"
#include "base/fp16.h"
#include "kernels/kernels.h"
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

static int levels(const cpulm_kernels **lv) {
    return cpulm_kernels_levels(lv, 16);
}

/* ---- kernel entries against the generic ones, bit for bit ---- */

TEST(attn_entries_bit_identical_at_every_level) {
    const cpulm_kernels *lv[16];
    int nl = levels(lv);
    const int ds[] = {8, 48, 64, 80, 128, 256}, ms[] = {1, 3, 4, 5, 9},
              ns[] = {1, 7, 16, 17, 33, 64};
    float *q = malloc(sizeof(float) * 9 * 256), *k = malloc(sizeof(float) * 64 * 256);
    float *v = malloc(sizeof(float) * 64 * 256), *s0 = malloc(sizeof(float) * 9 * 64);
    float *s1 = malloc(sizeof(float) * 9 * 64), *o0 = malloc(sizeof(float) * 9 * 256);
    float *o1 = malloc(sizeof(float) * 9 * 256), a[9];
    REQUIRE(t, q && k && v && s0 && s1 && o0 && o1);
    for (int li = 1; li < nl; li++)
        for (size_t di = 0; di < sizeof ds / sizeof ds[0]; di++)
            for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++)
                for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
                    int d = ds[di], m = ms[mi], n = ns[ni];
                    uint64_t seed = (uint64_t)(d * 1000 + m * 100 + n);
                    fill(q, (int64_t)m * d, seed, 2.0f);
                    fill(k, (int64_t)n * d, seed + 1, 2.0f);
                    fill(v, (int64_t)n * d, seed + 2, 1.0f);
                    cpulm_kernels_generic.attn_scores(d, m, n, q, d, k, d, 0.125f, s0, 64);
                    lv[li]->attn_scores(d, m, n, q, d, k, d, 0.125f, s1, 64);
                    for (int i = 0; i < m; i++)
                        CHECK(t, memcmp(s0 + i * 64, s1 + i * 64, sizeof(float) * (size_t)n) == 0);
                    float M0 = m > 2 ? 0.5f : -INFINITY, L0 = 3.0f, M1 = M0, L1 = L0;
                    int lim = n > 3 ? n - 3 : n;
                    memcpy(s1, s0, sizeof(float) * 64);
                    float a0 = cpulm_kernels_generic.attn_softmax_row(n, lim, s0, &M0, &L0);
                    float a1 = lv[li]->attn_softmax_row(n, lim, s1, &M1, &L1);
                    CHECK(t, a0 == a1 && M0 == M1 && L0 == L1 &&
                                 memcmp(s0, s1, sizeof(float) * (size_t)n) == 0);
                    for (int i = 0; i < m; i++)
                        a[i] = 0.25f * (float)(i + 1);
                    fill(s0, (int64_t)m * 64, seed + 3, 1.0f);
                    fill(o0, (int64_t)m * d, seed + 4, 1.0f);
                    memcpy(o1, o0, sizeof(float) * (size_t)m * d);
                    cpulm_kernels_generic.attn_pv(d, m, n, s0, 64, v, d, a, o0, d);
                    lv[li]->attn_pv(d, m, n, s0, 64, v, d, a, o1, d);
                    CHECK(t, memcmp(o0, o1, sizeof(float) * (size_t)m * d) == 0);
                    float mc[9], lc[9], Ma[9], La[9], Mb[9], Lb[9];
                    for (int i = 0; i < m; i++) {
                        mc[i] = i == 1 ? -INFINITY : 0.3f * (float)i;
                        lc[i] = 1.0f + (float)i;
                        Ma[i] = Mb[i] = i == 2 ? -INFINITY : 1.0f - 0.2f * (float)i;
                        La[i] = Lb[i] = 2.0f;
                    }
                    memcpy(o1, o0, sizeof(float) * (size_t)m * d);
                    cpulm_kernels_generic.attn_merge(d, m, mc, lc, q, d, Ma, La, o0, d);
                    lv[li]->attn_merge(d, m, mc, lc, q, d, Mb, Lb, o1, d);
                    CHECK(t, memcmp(o0, o1, sizeof(float) * (size_t)m * d) == 0 &&
                                 memcmp(Ma, Mb, sizeof(float) * (size_t)m) == 0 &&
                                 memcmp(La, Lb, sizeof(float) * (size_t)m) == 0);
                }
    free(q), free(k), free(v), free(s0), free(s1), free(o0), free(o1);
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

static double oracle_err(int d, int m, const float *q, const int *pos, const float *k,
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

/* Keys spread so that softmax weights vary over several orders of magnitude (sharp rows),
 * values of unit scale; rows at positions from the first key to the last. */
TEST(attn_tiled_matches_float64_at_1k_to_16k) {
    const cpulm_kernels *lv[16];
    int nl = levels(lv);
    const int lens[] = {1024, 4096, 16384};
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
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
            double e = oracle_err(d, m, q, pos, k, v, ref);
            if (!(e < 2e-5)) fprintf(stderr, "  generic n=%d d=%d: |err| %.3g\n", n, d, e);
            CHECK(t, e < 2e-5);
            for (int l = 1; l < nl; l++) {
                tiled_attention(lv[l], d, m, q, pos, k, v, out);
                CHECK(t, memcmp(out, ref, sizeof(float) * (size_t)m * d) == 0);
            }
            free(q), free(k), free(v), free(out), free(ref);
        }
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

static cpulm_ctx *ctx_of(const cpulm_model *m, int n_ctx, int nth, cpulm_kv_type kv) {
    cpulm_ctx_params cp = cpulm_ctx_default_params();
    cp.n_ctx = n_ctx;
    cp.n_batch = 512;
    cp.n_threads = nth;
    cp.kv_type = kv;
    cp.n_outputs_max = 64;
    return cpulm_ctx_new(m, &cp, NULL);
}

/* logits of the last `tail` tokens: the first n - tail in prompt batches of up to 512,
 * then one token per decode (the split path). Returns malloc'd [tail][V]. */
static float *tail_logits(cpulm_ctx *ctx, const int32_t *toks, int n, int tail, int32_t V,
                          int batched_tail) {
    float *out = malloc(sizeof(float) * (size_t)tail * (size_t)V);
    int8_t want[512];
    int head = n - tail;
    for (int i = 0; i < head; i += 512) {
        int c = head - i < 512 ? head - i : 512;
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

/* 700 tokens (3 chunks): the last 20 as one prompt batch (block path) == one by one
 * (split path), at 1 and 3 threads, for an F16 and a Q8_0 cache. */
TEST(attn_prompt_and_generation_paths_bit_identical) {
    cpulm_model *m = load("tiny-llama3-q4_0.gguf");
    if (!m) SKIP(t, "models not found (CPULM_SHARED)");
    int32_t V = cpulm_vocab_n(m), n = 700, tail = 20, toks[700];
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

/* Q8_0 and Q4_0 caches (head dim 64) stay near the F16 cache's logits over 600 tokens. */
TEST(attn_quantized_kv_close_to_f16) {
    cpulm_model *m = load("tiny-llama3-f32.gguf");
    if (!m) SKIP(t, "models not found (CPULM_SHARED)");
    int32_t V = cpulm_vocab_n(m), n = 600, tail = 4, toks[600];
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
