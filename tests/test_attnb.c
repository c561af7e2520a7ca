/* test_attnb.c: attention with bf16 products (attn_b*, CPULM_ATTN_BF16).
 * Kernel level: every level's attn_bpack / attn_bscores / attn_bpv equals the generic one bit
 * for bit (odd shapes, tails, values down in the subnormal range that the step flushes); the
 * generic step is vdpbf16ps's (the high pair element first, each step rounded, subnormals
 * flushed); the tiled algorithm on these ops stays within a stated bound of float64 at 1k-4k
 * keys. Model level: a prompt under CPULM_ATTN_BF16 gives logits close to the f32 tiles' (their
 * bits on a level without bf16 products, where it runs as auto), the same bits at 1 and 2
 * threads, and generation keeps the default numerics. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpulm.h"
#include "base/fp16.h"
#include "kernels/kernels.h"
#include "attn_oracle.h"
#include "levels.h"
#include "toolkit/synth.h"
#include "test.h"

static uint64_t rng(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* uniform in (-scale, scale); every 13th element tiny (2^-130 .. 2^-120: flushed or
 * near the flush) so the DAZ / FTZ rules are exercised */
static void fill(float *x, int64_t n, uint64_t seed, float scale) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 7;
    for (int64_t i = 0; i < n; i++) {
        const double u = (double)(rng(&s) >> 11) / 9007199254740992.0 - 0.5;
        x[i] = i % 13 == 5 ? (float)(u * 0x1p-120) : (float)(u * 2 * scale);
    }
}

static int nk_of(int n) {
    return (n + 15) / 16 * 16;
}

/* A shape's operands and generic's results (s0: scores, o0: values from oin) for the
 * products' checks. */
typedef struct shape_ref {
    int d, m, n;
    int64_t ld;
    const uint32_t *qp;
    const float *p, *a, *oin, *s0, *o0;
    float *s1, *o1;
} shape_ref;

/* Level k's scores and values from the K tile kp (nk keys a pair row) and the V tile vp
 * equal generic's; what = a label for a failure. */
static void products_check(test_ctx *t, const cpulm_kernels *k, const shape_ref *c,
                           const uint32_t *kp, int nk, const uint32_t *vp, const char *what) {
    const int d = c->d, m = c->m, n = c->n;
    k->attn_bscores(d, m, n, c->qp, d / 2, kp, nk, 0.125f, c->s1, 256);
    for (int i = 0; i < m; i++)
        CHECK(t, memcmp(c->s0 + i * 256, c->s1 + i * 256, sizeof(float) * (size_t)n) == 0);
    memcpy(c->o1, c->oin, sizeof(float) * (size_t)(m * c->ld));
    k->attn_bpv(d, m, n, c->p, 256, vp, c->a, c->o1, c->ld);
    CHECK(t, memcmp(c->o0, c->o1, sizeof(float) * (size_t)(m * c->ld)) == 0);
    if (t->n_fail) fprintf(stderr, "  level %s d=%d m=%d n=%d (%s)\n", k->name, d, m, n, what);
}

/* One shape at every level against generic: the packed tiles, the scores, the values; then
 * every level's scores and values from a tile packed for more keys (nx: as the driver's
 * shared tiles, packed with every key the sequence holds) equal generic's from the tile of n. */
static void shape_check(test_ctx *t, const cpulm_kernels **lv, int nl, int d, int m, int n) {
    const int nx = n + 9 < 256 ? n + 9 : 256;
    const int64_t ld = d + 16, hb = (int64_t)nk_of(nx) * d / 2 + 16; /* strided rows */
    const int np = (nx + 1) / 2;
    float *q = malloc(sizeof(float) * (size_t)(m * ld)),
          *k = malloc(sizeof(float) * (size_t)(nx * ld));
    float *v = malloc(sizeof(float) * (size_t)(nx * ld)),
          *p = malloc(sizeof(float) * (size_t)(m * 256));
    float *s0 = malloc(sizeof(float) * (size_t)(m * 256)),
          *s1 = malloc(sizeof(float) * (size_t)(m * 256));
    float *o0 = malloc(sizeof(float) * (size_t)(m * ld)),
          *o1 = malloc(sizeof(float) * (size_t)(m * ld));
    float *oin = malloc(sizeof(float) * (size_t)(m * ld)), a[64];
    uint32_t *qp = malloc(4 * (size_t)(m * d / 2)), *kp0 = malloc(4 * (size_t)hb);
    uint32_t *kp1 = malloc(4 * (size_t)hb), *vp0 = malloc(4 * (size_t)(np * d + 16));
    uint32_t *vp1 = malloc(4 * (size_t)(np * d + 16));
    uint16_t *kh = malloc(2 * (size_t)(nx * ld)), *vh = malloc(2 * (size_t)(nx * ld));
    REQUIRE(t, q && k && v && p && s0 && s1 && o0 && o1 && oin && qp && kp0 && kp1 && vp0 && vp1 &&
                   kh && vh);
    const uint64_t seed = (uint64_t)(d * 100000 + m * 1000 + n);
    fill(q, m * ld, seed, 2.0f), fill(k, nx * ld, seed + 1, 2.0f), fill(v, nx * ld, seed + 2, 1.0f);
    fill(p, m * 256, seed + 3, 1.0f), fill(oin, m * ld, seed + 4, 1.0f);
    for (int64_t i = 0; i < nx * ld; i++) { /* F16 cache rows; every 7th an f16 subnormal */
        kh[i] = i % 7 == 3 ? (uint16_t)(i % 1023 + 1) : cpulm_f32_to_fp16(k[i]);
        vh[i] = i % 7 == 4 ? (uint16_t)(0x8000 | (i % 1023 + 1)) : cpulm_f32_to_fp16(v[i]);
    }
    for (int i = 0; i < m; i++)
        a[i] = i % 3 == 1 ? 0.0f : 0.25f * (float)(i + 1);
    for (int i = 0; i < m; i++)
        for (int e = 0; e < d; e += 2)
            qp[i * d / 2 + e / 2] = cpulm_bf16_pair(q[i * ld + e], q[i * ld + e + 1]);
    memset(kp0, 0xA5, 4 * (size_t)hb), memset(vp0, 0xA5, 4 * (size_t)(np * d + 16));
    cpulm_kernels_generic.attn_bpack(d, n, kh, ld, vh, ld, kp0, vp0);
    cpulm_kernels_generic.attn_bscores(d, m, n, qp, d / 2, kp0, nk_of(n), 0.125f, s0, 256);
    memcpy(o0, oin, sizeof(float) * (size_t)(m * ld));
    cpulm_kernels_generic.attn_bpv(d, m, n, p, 256, vp0, a, o0, ld);
    const shape_ref c = {d, m, n, ld, qp, p, a, oin, s0, o0, s1, o1};
    for (int li = 1; li < nl && !t->n_fail; li++) {
        memset(kp1, 0xA5, 4 * (size_t)hb), memset(vp1, 0xA5, 4 * (size_t)(np * d + 16));
        lv[li]->attn_bpack(d, n, kh, ld, vh, ld, kp1, vp1);
        CHECK(t, memcmp(kp0, kp1, 4 * (size_t)hb) == 0); /* padding 0s and the slack alike */
        CHECK(t, memcmp(vp0, vp1, 4 * (size_t)(np * d + 16)) == 0);
        products_check(t, lv[li], &c, kp0, nk_of(n), vp0, "the tile of n");
    }
    /* the tile of nx keys: its first n serve as the tile of n (the values past n infinite, so
     * that a product of one with a weight of 0 would show as NaN) */
    for (int64_t i = (int64_t)n * ld; i < nx * ld; i++)
        vh[i] = i % 2 ? 0x7c00 : 0xfc00;
    cpulm_kernels_generic.attn_bpack(d, nx, kh, ld, vh, ld, kp1, vp1);
    for (int li = 0; li < nl && nx > n && !t->n_fail; li++)
        products_check(t, lv[li], &c, kp1, nk_of(nx), vp1, "a tile packed for more keys");
    free(q), free(k), free(v), free(p), free(s0), free(s1), free(o0), free(o1), free(oin);
    free(qp), free(kp0), free(kp1), free(vp0), free(vp1), free(kh), free(vh);
}

/* Head sizes with and without whole 32-element pair blocks, rows past the 6-row register
 * block, key counts with tails of every kind up to a full tile. */
TEST(attnb_entries_bit_identical_at_every_level) {
    const cpulm_kernels *lv[16];
    const int nl = test_kernel_levels(lv, 16);
    const int ds[] = {16, 48, 64, 128, 256}, ms[] = {1, 5, 6, 7, 13, 64},
              ns[] = {1, 2, 7, 16, 17, 33, 64, 65, 255, 256};
    for (size_t di = 0; di < sizeof ds / sizeof ds[0]; di++)
        for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++)
            for (size_t ni = 0; ni < sizeof ns / sizeof ns[0] && !t->n_fail; ni++)
                shape_check(t, lv, nl, ds[di], ms[mi], ns[ni]);
}

/* The generic step is vdpbf16ps's lane (Intel SDM; checked against the instruction on Zen 5
 * over 2e7 random operands): 1 + 2^-24 + 2^-24 taken one product at a time stays 1 (a tie to
 * even each time; a fused pair sum would give 1 + 2^-23); the high element goes first (from
 * 2^30: + -2^30 then + 1 gives 1, the low one first 0); a subnormal result is 0; the
 * conversion flushes subnormals and ties to even. */
TEST(attnb_step_is_vdpbf16ps_lane) {
    const float tiny = 0x1p-12f; /* bf16-exact; its square is half an ulp of 1 */
    float p[2] = {tiny, tiny}, o[16], a = 1.0f, s;
    uint32_t vp[16], kp[32] = {0}, qp[2];
    for (int c = 0; c < 16; c++)
        vp[c] = cpulm_bf16_pair(tiny, tiny), o[c] = 1.0f;
    cpulm_kernels_generic.attn_bpv(16, 1, 2, p, 2, vp, &a, o, 16);
    CHECK(t, o[0] == 1.0f && o[15] == 1.0f);
    /* d = 4: key 0's pairs (0, 2^30) and (1, -2^30) against a query of ones */
    kp[0] = cpulm_bf16_pair(0.0f, 0x1p30f), kp[16] = cpulm_bf16_pair(1.0f, -0x1p30f);
    qp[0] = qp[1] = cpulm_bf16_pair(1.0f, 1.0f);
    cpulm_kernels_generic.attn_bscores(4, 1, 1, qp, 2, kp, 16, 1.0f, &s, 1);
    CHECK(t, s == 1.0f);
    kp[0] = cpulm_bf16_pair(0x1p-70f, 0x1p-70f), kp[16] = 0;
    qp[0] = cpulm_bf16_pair(0x1p-60f, 0x1p-60f);
    cpulm_kernels_generic.attn_bscores(4, 1, 1, qp, 2, kp, 16, 1.0f, &s, 1);
    CHECK(t, s == 0.0f); /* 2^-130 + 2^-130 = 2^-129 is subnormal: flushed */
    CHECK(t, cpulm_f32_to_bf16_daz(0x1p-130f) == 0 && cpulm_f32_to_bf16_daz(-0x1p-130f) == 0x8000);
    CHECK(t, cpulm_f32_to_bf16_daz(1.0f + 0x1p-8f) == 0x3f80); /* tie to even */
    CHECK(t, cpulm_f32_to_bf16_daz(1.0f + 0x1p-8f + 0x1p-20f) == 0x3f81);
}

/* The tiled algorithm (chunks of 256, online softmax, fold) on the bf16 ops at level lv:
 * out[r] = attention of row r (position pos[r]) over keys 0..pos[r]. */
static void btiled(const cpulm_kernels *lv, int d, int m, const float *q, const int *pos,
                   const uint16_t *k, const uint16_t *v, float *out) {
    float *s = malloc(sizeof(float) * CPULM_ATTN_TILE), *o = malloc(sizeof(float) * (size_t)d);
    float *oc = malloc(sizeof(float) * (size_t)d);
    uint32_t *kp = malloc(4 * (size_t)CPULM_ATTN_TILE * (size_t)d / 2),
             *vp = malloc(4 * (size_t)CPULM_ATTN_TILE * (size_t)d / 2), *qp = malloc(4 * (size_t)d);
    const float scale = 1.0f / sqrtf((float)d);
    for (int r = 0; r < m; r++) {
        float M = -INFINITY, L = 0.0f;
        memset(o, 0, sizeof(float) * (size_t)d);
        for (int e = 0; e < d; e += 2)
            qp[e / 2] = cpulm_bf16_pair(q[r * d + e], q[r * d + e + 1]);
        for (int j = 0; j <= pos[r]; j += CPULM_ATTN_TILE) {
            const int n = pos[r] + 1 - j < CPULM_ATTN_TILE ? pos[r] + 1 - j : CPULM_ATTN_TILE;
            float mc = -INFINITY, lc = 0.0f;
            memset(oc, 0, sizeof(float) * (size_t)d);
            lv->attn_bpack(d, n, k + (int64_t)j * d, d, v + (int64_t)j * d, d, kp, vp);
            lv->attn_bscores(d, 1, n, qp, d / 2, kp, nk_of(n), scale, s, n);
            float a = lv->attn_softmax_row(n, n, s, &mc, &lc);
            lv->attn_bpv(d, 1, n, s, n, vp, &a, oc, d);
            lv->attn_merge(d, 1, &mc, &lc, oc, d, &M, &L, o, d);
        }
        for (int c = 0; c < d; c++)
            out[r * d + c] = o[c] * (1.0f / L);
    }
    free(s), free(o), free(oc), free(kp), free(vp), free(qp);
}

/* Sharp rows (queries and keys of scale 3: scores up to ~|20|) and flat ones (scale 0.5),
 * f16 keys and values as an F16 cache holds them, head sizes 64 and 128, 1k and 4k keys:
 * within ATTNB_BOUND of float64 (docs/CORRECTNESS.md; the f32 tiles: 2e-5), every level the
 * generic bits. */
#define ATTNB_BOUND 1e-2
TEST(attnb_tiled_within_bound_of_float64) {
    const cpulm_kernels *lv[16];
    const int nl = test_kernel_levels(lv, 16);
    const int lens[] = {1024, 4096};
    const float scales[] = {3.0f, 0.5f};
    for (int li = 0; li < (test_emulated() ? 1 : 2); li++)
        for (int d = 64; d <= 128; d += 64)
            for (int si = 0; si < 2; si++) {
                const int n = lens[li], m = 4, pos[4] = {0, 300, n / 2 + 7, n - 1};
                float *q = malloc(sizeof(float) * (size_t)(m * d)),
                      *k = malloc(sizeof(float) * (size_t)n * d);
                float *v = malloc(sizeof(float) * (size_t)n * d),
                      *out = malloc(sizeof(float) * (size_t)(m * d));
                float *ref = malloc(sizeof(float) * (size_t)(m * d));
                REQUIRE(t, q && k && v && out && ref);
                uint64_t s = (uint64_t)(n + d + si) * 0x9E3779B97F4A7C15ull + 1;
                for (int64_t i = 0; i < (int64_t)n * d; i++) {
                    const double u1 = (double)(rng(&s) >> 11) / 9007199254740992.0 - 0.5;
                    const double u2 = (double)(rng(&s) >> 11) / 9007199254740992.0 - 0.5;
                    k[i] = cpulm_fp16_to_f32(cpulm_f32_to_fp16((float)(u1 * 2 * scales[si])));
                    v[i] = cpulm_fp16_to_f32(cpulm_f32_to_fp16((float)(u2 * 2)));
                    if (i < m * d) q[i] = (float)(u2 * 2 * scales[si]);
                }
                uint16_t *kh = malloc(2 * (size_t)n * d), *vh = malloc(2 * (size_t)n * d);
                REQUIRE(t, kh && vh);
                for (int64_t i = 0; i < (int64_t)n * d; i++)
                    kh[i] = cpulm_f32_to_fp16(k[i]), vh[i] = cpulm_f32_to_fp16(v[i]);
                btiled(lv[0], d, m, q, pos, kh, vh, ref);
                const double e = test_attn_oracle_err(d, m, q, pos, k, v, ref);
                if (!(e < ATTNB_BOUND))
                    fprintf(stderr, "  n=%d d=%d scale %.1f: |err| %.3g\n", n, d, scales[si], e);
                CHECK(t, e < ATTNB_BOUND);
                for (int l = 1; l < nl; l++) {
                    btiled(lv[l], d, m, q, pos, kh, vh, out);
                    CHECK(t, memcmp(out, ref, sizeof(float) * (size_t)(m * d)) == 0);
                }
                free(q), free(k), free(v), free(out), free(ref), free(kh), free(vh);
            }
}

/* ---- the model's driver under CPULM_ATTN_BF16 ---- */

static cpulm_model *synth_model(int n_layer) {
    cpulm_synth_params sp;
    if (cpulm_synth_shape("tiny", &sp) != CPULM_OK) return NULL;
    sp.hp.n_layer = n_layer, sp.hp.n_embd = 512, sp.hp.n_ff = 256, sp.hp.n_head = 8;
    sp.hp.n_head_kv = 2, sp.hp.n_vocab = 300, sp.hp.n_ctx_train = 1024;
    sp.type = CPULM_DTYPE_Q8_0;
    char path[512];
    snprintf(path, sizeof path, "%s/attnb.gguf", test_tmp_dir());
    if (cpulm_synth_write(path, &sp, NULL) != CPULM_OK) return NULL;
    cpulm_model *m = cpulm_model_load(path, NULL, NULL);
    remove(path);
    return m;
}

/* Logits of a prompt of n tokens in batches of `batch`, then `gen` tokens one at a time:
 * [n_out][V] for the prompt's last token and each generated one. */
static float *run_logits(const cpulm_model *m, int attn, int nth, int n, int batch, int gen) {
    cpulm_ctx_params cp = cpulm_ctx_default_params();
    cp.attn_fast = attn, cp.n_ctx = 1024, cp.n_batch = 512, cp.n_threads = nth;
    cpulm_ctx *c = cpulm_ctx_new(m, &cp, NULL);
    const int32_t V = cpulm_vocab_n(m);
    float *out = malloc(sizeof(float) * (size_t)V * (size_t)(gen + 1));
    int32_t tok[1024];
    for (int i = 0; i < n + gen; i++)
        tok[i] = (i * 7919 + 13) % V;
    int ok = c && out;
    for (int i = 0; ok && i < n; i += batch) {
        cpulm_batch b = {.n = n - i < batch ? n - i : batch, .token = tok + i};
        ok = cpulm_ctx_decode(c, &b) == CPULM_OK;
    }
    if (ok) memcpy(out, cpulm_ctx_logits(c, 0), sizeof(float) * (size_t)V);
    for (int g = 0; ok && g < gen; g++) {
        cpulm_batch b = {.n = 1, .token = tok + n + g};
        ok = cpulm_ctx_decode(c, &b) == CPULM_OK;
        if (ok)
            memcpy(out + (size_t)V * (g + 1), cpulm_ctx_logits(c, 0), sizeof(float) * (size_t)V);
    }
    cpulm_ctx_free(c);
    if (!ok) free(out);
    return ok ? out : NULL;
}

static double max_diff(const float *a, const float *b, size_t n) {
    double w = 0;
    for (size_t i = 0; i < n; i++)
        w = fabs((double)a[i] - b[i]) > w ? fabs((double)a[i] - b[i]) : w;
    return w;
}

/* 600 tokens in batches of 200 (qemu, sanitizers: 260 in 130): the bf16 products' logits are
 * within 0.05 of the f32 tiles' (a logit moves by less than that when one score moves by
 * bf16's rounding) and differ from them (the bf16 ops did run); the same bits at 1 and 2
 * threads; a prompt of fewer than CPULM_ATTN_AUTO_ROWS rows per call keeps auto's bits, and
 * so does the generation after the prompt when its prompt was short. */
TEST(attnb_model_close_to_f32_tiles_and_thread_invariant) {
    cpulm_model *m = synth_model(2);
    REQUIRE(t, m);
    const int slow = test_emulated() || test_sanitized();
    const int n = slow ? 260 : 600, batch = slow ? 130 : 200;
    const size_t V = (size_t)cpulm_vocab_n(m);
    float *f32 = run_logits(m, CPULM_ATTN_AUTO, 2, n, batch, 0);
    float *b1 = run_logits(m, CPULM_ATTN_BF16, 1, n, batch, 0);
    float *b2 = run_logits(m, CPULM_ATTN_BF16, 2, n, batch, 0);
    REQUIRE(t, f32 && b1 && b2);
    if (cpulm_attn_resolve(CPULM_ATTN_BF16) != CPULM_ATTN_BF16) {
        /* a level without bf16 products (cpulm_attn_resolve): bf16 runs as auto, bit for bit */
        CHECK(t, memcmp(f32, b1, sizeof(float) * V) == 0);
        CHECK(t, memcmp(f32, b2, sizeof(float) * V) == 0);
        free(f32), free(b1), free(b2);
        cpulm_model_free(m);
        return;
    }
    const double dd = max_diff(f32, b1, V);
    if (!(dd < 0.05 && dd > 0)) fprintf(stderr, "  bf16 vs f32 tiles: max |dlogit| %.3g\n", dd);
    CHECK(t, dd < 0.05 && dd > 0);
    CHECK(t, memcmp(b1, b2, sizeof(float) * V) == 0);
    /* short calls: 40 rows a call are under CPULM_ATTN_AUTO_ROWS: auto's exact numerics */
    float *sa = run_logits(m, CPULM_ATTN_AUTO, 2, 120, 40, 3);
    float *sb = run_logits(m, CPULM_ATTN_BF16, 2, 120, 40, 3);
    REQUIRE(t, sa && sb);
    CHECK(t, memcmp(sa, sb, sizeof(float) * V * 4) == 0);
    free(f32), free(b1), free(b2), free(sa), free(sb);
    cpulm_model_free(m);
}

/* A layer's tiles are packed once per call with every key the sequence then holds, and
 * serve all the call's blocks (attention.c's pack_tile): a prompt cut into calls at other
 * places repacks its partly filled tiles each call, and the prompt's last logits keep their
 * bits (a row's keys past its position enter with weight 0, which adds nothing). 600 tokens
 * in calls of 200, 300 and 120 (qemu, sanitizers: 260 in 130, 260 and 65), one layer (so
 * no other layer's packing overwrites a tile between calls). On a level without bf16 products
 * the same prompts run as auto, whose f32 tiles must keep the same bits too. */
TEST(attnb_model_tiles_shared_across_calls) {
    cpulm_model *m = synth_model(1);
    REQUIRE(t, m);
    const int slow = test_emulated() || test_sanitized();
    const int n = slow ? 260 : 600, cuts[3] = {slow ? 130 : 200, slow ? 260 : 300, slow ? 65 : 120};
    const size_t V = (size_t)cpulm_vocab_n(m);
    float *ref = run_logits(m, CPULM_ATTN_BF16, 2, n, cuts[0], 0);
    REQUIRE(t, ref);
    int finite = 1;
    for (size_t i = 0; i < V; i++)
        finite &= isfinite(ref[i]) != 0;
    CHECK(t, finite);
    for (int i = 1; i < 3; i++) {
        float *x = run_logits(m, CPULM_ATTN_BF16, 2, n, cuts[i], 0);
        REQUIRE(t, x);
        if (memcmp(ref, x, sizeof(float) * V) != 0)
            fprintf(stderr, "  calls of %d vs %d: max |dlogit| %.3g\n", cuts[0], cuts[i],
                    max_diff(ref, x, V));
        CHECK(t, memcmp(ref, x, sizeof(float) * V) == 0);
        free(x);
    }
    free(ref);
    cpulm_model_free(m);
}
