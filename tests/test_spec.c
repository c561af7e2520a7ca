/* test_spec.c: speculative decoding (src/spec/). Greedy output with n-gram and draft-model
 * speculation is token-identical to plain decoding across the shared models and many
 * prompts; with point-mass drafts even sampled output is (same seed, same draws); the
 * speculative sampling rule keeps the target's distribution (two-sample chi-square over a
 * fixed seed set, and the same test shown to reject a wrong distribution). */
#include <string.h>

#include "spec/spec.h"
#include "test.h"

/* Under qemu (f32 math ~250x slower) and the sanitizers (~10x): fewer models, prompts and
 * seeds, the same checks on the same paths. */
static int light(void) {
#if defined(__SANITIZE_ADDRESS__)
    return 1;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
    return 1;
#endif
#endif
    return test_emulated();
}

static cpulm_model *load(const char *rel) {
    const char *p = test_shared_path(rel);
    if (!p) return NULL;
    cpulm_model_params mp = cpulm_model_default_params();
    return cpulm_model_load(p, &mp, NULL);
}

static cpulm_ctx *new_ctx(const cpulm_model *m, int32_t n_out) {
    cpulm_ctx_params cp = cpulm_ctx_default_params();
    cp.n_ctx = 256;
    cp.n_threads = 1;
    cp.n_outputs_max = n_out;
    cp.no_pin = 1;
    return cpulm_ctx_new(m, &cp, NULL);
}

typedef struct picker {
    cpulm_sampler *smp;
} picker;

static cpulm_token pick_fn(void *user, const float *logits) {
    picker *pk = user;
    cpulm_token t = cpulm_sampler_sample(pk->smp, logits);
    cpulm_sampler_accept(pk->smp, t);
    return t;
}

static int32_t tokenize(const cpulm_model *m, const char *text, cpulm_token *out, int32_t cap) {
    int32_t n = 0;
    if (cpulm_tokenize(m, text, strlen(text), 1, 0, out, cap, &n) != CPULM_OK) return -1;
    return n;
}

static int eval_prompt(cpulm_ctx *ctx, const cpulm_token *toks, int32_t n) {
    if (cpulm_ctx_seq_rm(ctx, 0, 0) != CPULM_OK) return 0;
    cpulm_batch b = {.n = n, .token = toks};
    return cpulm_ctx_decode(ctx, &b) == CPULM_OK;
}

/* Plain decoding: n tokens after the prompt, one decode each. */
static int plain(cpulm_ctx *ctx, const cpulm_token *toks, int32_t n_prompt, picker *pk,
                 cpulm_token *out, int32_t n) {
    if (!eval_prompt(ctx, toks, n_prompt)) return 0;
    for (int32_t i = 0; i < n; i++) {
        out[i] = pick_fn(pk, cpulm_ctx_logits(ctx, 0));
        if (i + 1 == n) break;
        cpulm_batch b = {.n = 1, .token = &out[i]};
        if (cpulm_ctx_decode(ctx, &b) != CPULM_OK) return 0;
    }
    return 1;
}

/* The same n tokens through cpulm_spec_step. rule: hand the sampler to the spec (the
 * speculative sampling rule for a sampling draft model). */
static int speculate(cpulm_spec *s, cpulm_ctx *ctx, const cpulm_token *toks, int32_t n_prompt,
                     picker *pk, int rule, cpulm_token *out, int32_t n) {
    if (!eval_prompt(ctx, toks, n_prompt)) return 0;
    if (cpulm_spec_begin(s, toks, n_prompt) != CPULM_OK) return 0;
    cpulm_spec_pick pick = {.fn = pick_fn, .user = pk, .smp = rule ? pk->smp : NULL};
    int32_t got = 0;
    out[got++] = pick_fn(pk, cpulm_ctx_logits(ctx, 0));
    cpulm_token step[64];
    while (got < n) {
        int32_t k = 0;
        if (cpulm_spec_step(s, ctx, 0, out[got - 1], &pick, step, &k) != CPULM_OK) return 0;
        /* rollback kept the cache exact: everything emitted but the new pending token */
        if (k < 1 || cpulm_ctx_seq_len(ctx, 0) != n_prompt + got + k - 1) return 0;
        for (int32_t i = 0; i < k && got < n; i++)
            out[got++] = step[i];
    }
    return 1;
}

TEST(spec_ngram_draft_finds_latest_match) {
    /* ... 5 6 7 8 ... 5 6 9 ... 5 6 : the latest "5 6" is followed by 9 */
    cpulm_token h[] = {1, 5, 6, 7, 8, 2, 5, 6, 9, 3, 5, 6};
    cpulm_token out[8];
    int32_t n = cpulm_spec_ngram_draft(h, 12, 2, 3, 8, out);
    CHECK_EQ_INT(t, n, 4); /* up to the end of the history */
    CHECK_EQ_INT(t, out[0], 9);
    CHECK_EQ_INT(t, out[1], 3);
    CHECK_EQ_INT(t, out[3], 6);
    /* a match of the longer key wins over a later match of a shorter one */
    cpulm_token h2[] = {4, 5, 6, 1, 2, 9, 5, 6, 7, 4, 5, 6};
    n = cpulm_spec_ngram_draft(h2, 12, 2, 3, 2, out);
    CHECK_EQ_INT(t, n, 2);
    CHECK_EQ_INT(t, out[0], 1); /* "4 5 6" at 0 beats the later "5 6" at 6 */
    CHECK_EQ_INT(t, out[1], 2);
    CHECK_EQ_INT(t, cpulm_spec_ngram_draft(h2, 12, 4, 4, 8, out), 0);
    cpulm_token h3[] = {7, 7, 7};
    CHECK_EQ_INT(t, cpulm_spec_ngram_draft(h3, 3, 2, 2, 8, out), 1); /* overlapping match */
    CHECK_EQ_INT(t, cpulm_spec_ngram_draft(h3, 1, 1, 3, 8, out), 0);
}

TEST(spec_best_len_follows_acceptance) {
    CHECK_EQ_INT(t, cpulm_spec_best_len(0.0, 0.1, 16), 0);
    CHECK_EQ_INT(t, cpulm_spec_best_len(0.05, 0.1, 16), 0); /* 1.05 / 1.1 < 1 */
    CHECK_EQ_INT(t, cpulm_spec_best_len(1.0, 0.1, 16), 16);
    int32_t lo = cpulm_spec_best_len(0.5, 0.1, 16), hi = cpulm_spec_best_len(0.9, 0.1, 16);
    CHECK(t, lo >= 1 && lo < hi && hi <= 16);
    /* a costly draft model needs a better rate */
    CHECK_EQ_INT(t, cpulm_spec_best_len(0.3, 0.6, 16), 0);
    CHECK(t, cpulm_spec_best_len(0.3, 0.1, 16) >= 1);
}

static const char *prompts[] = {
    "Once upon a time",
    "The cat sat on the mat. The cat sat on the mat. The cat",
    "Lily and Tom went to the park. Lily and Tom",
    "One day, a little girl named",
    "He said hello. She said hello. He said",
    "The sun was hot",
    "a b c a b c a b",
    "Tim had a big red ball. Tim liked his big red ball",
    "There was a dog",
    "Mom said no. Dad said no. Mom said",
};
#define N_PROMPTS (light() ? 3 : (int)(sizeof prompts / sizeof prompts[0]))

/* Greedy tokens with speculation (params sp) equal plain greedy tokens for every prompt.
 * Returns the number of prompts compared (0 on a setup failure). */
static int greedy_same(test_ctx *t, const cpulm_model *m, const cpulm_spec_params *sp,
                       int32_t n_gen, cpulm_spec_stats *stats) {
    cpulm_ctx *ctx = new_ctx(m, sp->draft_max + 1);
    cpulm_spec *s = ctx ? cpulm_spec_new(sp, m, NULL) : NULL;
    cpulm_sampler_params spp = cpulm_sampler_default_params();
    spp.temp = 0.0f;
    picker pk = {cpulm_sampler_new(&spp, cpulm_vocab_n(m))};
    int done = 0;
    for (int i = 0; s && pk.smp && i < N_PROMPTS; i++) {
        cpulm_token toks[128], a[128], b[128];
        int32_t n = tokenize(m, prompts[i], toks, 128);
        cpulm_sampler_reset(pk.smp);
        int ok_a = plain(ctx, toks, n, &pk, a, n_gen);
        cpulm_sampler_reset(pk.smp);
        int ok_b = speculate(s, ctx, toks, n, &pk, 0, b, n_gen);
        CHECK(t, ok_a && ok_b);
        if (ok_a && ok_b && memcmp(a, b, (size_t)n_gen * sizeof *a)) {
            fprintf(stderr, "  greedy output differs (%s, prompt %d)\n",
                    cpulm_spec_kind_name(sp->kind), i);
            t->n_fail++;
        }
        done++;
    }
    memset(stats, 0, sizeof *stats);
    if (s) cpulm_spec_stats_get(s, stats);
    cpulm_sampler_free(pk.smp);
    cpulm_spec_free(s);
    cpulm_ctx_free(ctx);
    return done;
}

static const char *models[] = {
    "models/stories260K.gguf",
    "testdata/models/tiny-llama-f16.gguf",
    "testdata/models/tiny-llama-q4_0.gguf",
    "testdata/models/tiny-llama3-q8_0.gguf",
    "testdata/models/tiny-qwen2-f32.gguf",
    "testdata/models/tiny-mixtral-q4_k_m.gguf",
};

TEST(spec_ngram_greedy_identical) {
    int64_t acc_total = 0;
    int measured = 0; /* runs whose adaptive length used timed costs, not the prior */
    for (size_t k = 0; k < (light() ? 2 : sizeof models / sizeof models[0]); k++) {
        cpulm_model *m = load(models[k]);
        if (!m) SKIP(t, "shared models not found");
        cpulm_spec_params sp = cpulm_spec_default_params();
        sp.kind = CPULM_SPEC_NGRAM;
        for (int v = 0; v < 2; v++) { /* adaptive, then always the longest draft */
            sp.adaptive = !v;
            sp.ngram_min = v ? 1 : 2;
            sp.draft_max = v ? 12 : 8;
            cpulm_spec_stats st;
            CHECK_EQ_INT(t, greedy_same(t, m, &sp, 40, &st), N_PROMPTS);
            acc_total += st.accepted;
            /* timed: one more verified token over a 1-token decode, clamped to (0, 1] */
            CHECK(t, st.cost > 0.0 && st.cost <= 1.0);
            measured += !v && st.cost != (double)sp.verify_cost;
        }
        if (k == 0) { /* not timed: the prior throughout */
            sp.measure_cost = 0;
            cpulm_spec_stats st;
            CHECK_EQ_INT(t, greedy_same(t, m, &sp, 40, &st), N_PROMPTS);
            CHECK(t, st.cost == (double)sp.verify_cost);
        }
        cpulm_model_free(m);
    }
    CHECK(t, acc_total > 0); /* the drafts were not all rejected: verification did work */
    CHECK(t, measured > 0);
}

TEST(spec_draft_model_greedy_identical) {
    /* target, draft: the same model; a differently quantized one; a different model
     * (random, so drafts are mostly rejected) */
    static const char *pairs[][2] = {
        {"models/stories260K.gguf", "models/stories260K.gguf"},
        {"testdata/models/tiny-llama-f16.gguf", "testdata/models/tiny-llama-q4_0.gguf"},
        {"testdata/models/tiny-llama-q8_0.gguf", "testdata/models/tiny-llama-f32.gguf"},
        {"testdata/models/tiny-qwen2-f16.gguf", "testdata/models/tiny-llama-q4_0.gguf"},
    };
    for (size_t k = 0; k < (light() ? 2 : sizeof pairs / sizeof pairs[0]); k++) {
        cpulm_model *m = load(pairs[k][0]), *d = load(pairs[k][1]);
        if (!m || !d) {
            cpulm_model_free(m);
            cpulm_model_free(d);
            SKIP(t, "shared models not found");
        }
        cpulm_spec_params sp = cpulm_spec_default_params();
        sp.kind = CPULM_SPEC_DRAFT;
        sp.draft_model = d;
        sp.draft_ctx.n_ctx = 256;
        sp.draft_ctx.n_threads = 1;
        sp.draft_ctx.no_pin = 1;
        for (int v = 0; v < 2; v++) {
            sp.adaptive = !v;
            sp.draft_max = v ? 6 : 16;
            cpulm_spec_stats st;
            CHECK_EQ_INT(t, greedy_same(t, m, &sp, 32, &st), N_PROMPTS);
            /* the model drafting for itself is always right (so both caches were rolled
             * back right); the rest only needs the same output */
            if (k == 0) CHECK(t, st.drafted > 0 && st.accepted == st.drafted);
        }
        cpulm_model_free(m);
        cpulm_model_free(d);
    }
}

TEST(spec_draft_vocab_mismatch_is_an_error) {
    cpulm_model *m = load("models/stories260K.gguf");
    cpulm_model *d = load("models/llama-2-tiny-random.gguf");
    if (!m || !d) {
        cpulm_model_free(m);
        cpulm_model_free(d);
        SKIP(t, "shared models not found");
    }
    cpulm_spec_params sp = cpulm_spec_default_params();
    sp.kind = CPULM_SPEC_DRAFT;
    sp.draft_model = d;
    cpulm_error err = {0};
    CHECK(t, cpulm_spec_new(&sp, m, &err) == NULL);
    CHECK_EQ_INT(t, err.code, CPULM_ERR_INVALID_ARG);
    CHECK(t, strstr(err.msg, "32000") != NULL);
    sp.draft_model = NULL;
    CHECK(t, cpulm_spec_new(&sp, m, &err) == NULL);
    sp.kind = CPULM_SPEC_NGRAM;
    sp.draft_max = 0;
    CHECK(t, cpulm_spec_new(&sp, m, &err) == NULL);
    cpulm_model_free(m);
    cpulm_model_free(d);
}

/* With n-gram drafts the emitted tokens are drawn by the caller's sampler from the target's
 * rows: sampled output is the plain output, draw for draw, for any seed. */
TEST(spec_ngram_sampled_identical) {
    cpulm_model *m = load("models/stories260K.gguf");
    if (!m) SKIP(t, "shared models not found");
    cpulm_spec_params sp = cpulm_spec_default_params();
    sp.kind = CPULM_SPEC_NGRAM;
    sp.ngram_min = 1;
    sp.adaptive = 0;
    cpulm_ctx *ctx = new_ctx(m, sp.draft_max + 1);
    cpulm_spec *s = cpulm_spec_new(&sp, m, NULL);
    REQUIRE(t, ctx && s);
    for (int seed = 0; seed < 8; seed++) {
        cpulm_sampler_params spp = cpulm_sampler_default_params();
        spp.seed = (uint64_t)seed;
        spp.temp = seed % 2 ? 0.7f : 1.0f;
        spp.top_k = seed % 4 < 2 ? 0 : 40; /* the whole-vocabulary draw and the cut path */
        spp.top_p = seed % 4 < 2 ? 1.0f : 0.95f;
        spp.min_p = seed % 4 < 2 ? 0.0f : 0.05f;
        spp.repeat_penalty = seed % 3 ? 1.0f : 1.1f; /* penalties see accepted drafts */
        picker pk = {cpulm_sampler_new(&spp, cpulm_vocab_n(m))};
        cpulm_token toks[64], a[48], b[48];
        int32_t n = tokenize(m, prompts[seed % N_PROMPTS], toks, 64);
        CHECK(t, plain(ctx, toks, n, &pk, a, 48));
        cpulm_sampler_reset(pk.smp);
        CHECK(t, speculate(s, ctx, toks, n, &pk, 0, b, 48));
        CHECK(t, !memcmp(a, b, sizeof a));
        cpulm_sampler_free(pk.smp);
    }
    cpulm_spec_stats st;
    cpulm_spec_stats_get(s, &st);
    CHECK(t, st.accepted > 0 && st.passes > 0 && st.emitted > st.passes);
    cpulm_spec_free(s);
    cpulm_ctx_free(ctx);
    cpulm_model_free(m);
}

/* ---- the speculative sampling rule keeps the target's distribution ----
 * With the draft sampling at temperature 0.4 against a target at 1.0 (q much sharper than
 * p), 1200 seeds give chi2 / critical of 0.2 - 0.5 here, and 2 - 5 when the rule is broken
 * by always accepting or by redrawing from p instead of norm(max(0, p - q)) (both checked
 * by hand in the change that added this test). */

#define VOCAB   512
#define N_SEEDS (light() ? 300 : 1200)
#define N_POS   3 /* output positions compared: 1 .. N_POS (0 is drawn before any draft) */

/* Counts of the token at output positions 1..N_POS over the seed range [seed0, + N_SEEDS):
 * plain sampling (s NULL) or speculation with a sampling draft model. */
static int sample_counts(const cpulm_model *m, cpulm_ctx *ctx, cpulm_spec *s, uint64_t seed0,
                         float temp, int32_t top_k, int32_t (*counts)[VOCAB]) {
    cpulm_token toks[32], out[N_POS + 1];
    int32_t n = tokenize(m, "Once upon a time", toks, 32);
    memset(counts, 0, sizeof(int32_t) * N_POS * VOCAB);
    for (int i = 0; i < N_SEEDS; i++) {
        cpulm_sampler_params spp = cpulm_sampler_default_params();
        spp.seed = seed0 + (uint64_t)i;
        spp.temp = temp;
        spp.top_k = top_k;
        spp.top_p = 1.0f;
        spp.min_p = 0.0f;
        picker pk = {cpulm_sampler_new(&spp, VOCAB)};
        int ok = s ? speculate(s, ctx, toks, n, &pk, 1, out, N_POS + 1)
                   : plain(ctx, toks, n, &pk, out, N_POS + 1);
        cpulm_sampler_free(pk.smp);
        if (!ok) return 0;
        for (int p = 0; p < N_POS; p++)
            counts[p][out[p + 1]]++;
    }
    return 1;
}

/* Two-sample chi-square of equal-size samples a, b over bins with a + b >= 10 (the rest
 * pooled into one bin); returns the statistic over its p = 0.001 critical value
 * (Wilson-Hilferty), so > 1 rejects "same distribution". */
static double chi2_ratio(const int32_t *a, const int32_t *b) {
    double chi = 0.0, pa = 0.0, pb = 0.0;
    int df = -1;
    for (int i = 0; i < VOCAB; i++) {
        if (a[i] + b[i] >= 10) {
            double d = a[i] - b[i];
            chi += d * d / (a[i] + b[i]);
            df++;
        } else {
            pa += a[i], pb += b[i];
        }
    }
    if (pa + pb > 0) chi += (pa - pb) * (pa - pb) / (pa + pb), df++;
    if (df < 1) return 0.0;
    double z = 3.09, h = 2.0 / (9.0 * df), c = df * pow(1.0 - h + z * sqrt(h), 3);
    return chi / c;
}

TEST(spec_sampling_rule_keeps_distribution) {
    cpulm_model *m = load("models/stories260K.gguf");
    if (!m) SKIP(t, "shared models not found");
    cpulm_spec_params sp = cpulm_spec_default_params();
    sp.kind = CPULM_SPEC_DRAFT;
    sp.draft_model = m; /* itself, but sampling colder: q is sharper than p */
    sp.draft_ctx.n_ctx = 64;
    sp.draft_ctx.n_threads = 1;
    sp.draft_ctx.no_pin = 1;
    sp.draft_sp.temp = 0.4f;
    sp.draft_sp.top_k = 0;
    sp.draft_sp.top_p = 1.0f;
    sp.draft_sp.min_p = 0.0f;
    sp.draft_sp.seed = 99;
    sp.adaptive = 0;
    sp.draft_max = 4;
    cpulm_ctx *ctx = new_ctx(m, sp.draft_max + 1);
    cpulm_spec *s = cpulm_spec_new(&sp, m, NULL);
    static int32_t plain_c[N_POS][VOCAB], spec_c[N_POS][VOCAB], hot_c[N_POS][VOCAB];
    REQUIRE(t, ctx && s);
    for (int cfg = 0; cfg < (light() ? 1 : 2); cfg++) { /* all tokens; top-k 20 (p has zeros
                                                         * q has not) */
        int32_t top_k = cfg ? 20 : 0;
        REQUIRE(t, sample_counts(m, ctx, NULL, 1000, 1.0f, top_k, plain_c));
        REQUIRE(t, sample_counts(m, ctx, s, 5000, 1.0f, top_k, spec_c));
        if (cfg == 0 && !light()) { /* the test has power: the draft's own distribution
                                     * (what "always accept" would give) is rejected */
            REQUIRE(t, sample_counts(m, ctx, NULL, 5000, 0.4f, 0, hot_c));
            CHECK(t, chi2_ratio(plain_c[0], hot_c[0]) > 1.0);
        }
        for (int p = 0; p < N_POS; p++) {
            double r = chi2_ratio(plain_c[p], spec_c[p]);
            if (!(r < 1.0)) {
                fprintf(stderr, "  cfg %d position %d: chi2 / critical = %.2f\n", cfg, p + 1, r);
                t->n_fail++;
            }
        }
    }
    cpulm_spec_stats st;
    cpulm_spec_stats_get(s, &st);
    CHECK(t, st.accepted > 0 && st.accepted < st.drafted); /* both branches of the rule ran */
    cpulm_spec_free(s);
    cpulm_ctx_free(ctx);
    cpulm_model_free(m);
}

/* cpulm_sampler_dist is the distribution sample() draws from (last_prob after a sample
 * agrees for every token, for greedy, whole-vocabulary and cut pipelines), sums to 1, and
 * leaves the RNG alone. */
TEST(spec_sampler_dist_is_the_draw_distribution) {
    enum { NV = 300 };
    float logits[NV], probs[NV];
    for (int i = 0; i < NV; i++)
        logits[i] = (float)((i * 37) % 101) / 13.0f - (i == 7 ? 50.0f : 0.0f);
    for (int cfg = 0; cfg < 4; cfg++) {
        cpulm_sampler_params p = cpulm_sampler_default_params();
        p.seed = 42;
        p.temp = cfg == 0 ? 0.0f : 0.9f;
        p.top_k = cfg == 2 ? 10 : 0;
        p.top_p = cfg == 3 ? 0.8f : 1.0f;
        p.min_p = cfg == 3 ? 0.1f : 0.0f;
        p.repeat_penalty = 1.3f;
        cpulm_sampler *a = cpulm_sampler_new(&p, NV), *b = cpulm_sampler_new(&p, NV);
        REQUIRE(t, a && b);
        cpulm_sampler_accept(a, 3), cpulm_sampler_accept(b, 3);
        cpulm_sampler_dist(a, logits, NULL, probs);
        double sum = 0.0;
        for (int i = 0; i < NV; i++)
            sum += probs[i];
        CHECK_NEAR(t, sum, 1.0, 1e-5);
        cpulm_token ta = cpulm_sampler_sample(a, logits), tb = cpulm_sampler_sample(b, logits);
        CHECK_EQ_INT(t, ta, tb); /* dist drew nothing */
        int bad = 0;
        for (int i = 0; cfg > 0 && i < NV; i++) /* greedy's last_prob is the softmax */
            bad += fabsf(probs[i] - cpulm_sampler_last_prob(a, i)) > 1e-6f;
        CHECK_EQ_INT(t, bad, 0);
        CHECK(t, probs[ta] > 0.0f);
        CHECK(t, cfg != 0 || probs[ta] == 1.0f);
        CHECK(t, cfg != 2 || probs[7] == 0.0f);
        double u = cpulm_sampler_uniform(a);
        CHECK(t, u >= 0.0 && u < 1.0 && u != cpulm_sampler_uniform(a));
        cpulm_sampler_free(a);
        cpulm_sampler_free(b);
    }
}

/* Near the end of the context the draft is cut to the room left, and a step with no room
 * for the pending token is CPULM_ERR_KV_FULL with the cache untouched: the tokens up to
 * the full context are plain decoding's. */
TEST(spec_step_respects_context_end) {
    cpulm_model *m = load("models/stories260K.gguf");
    if (!m) SKIP(t, "shared models not found");
    cpulm_ctx_params cp = cpulm_ctx_default_params();
    cp.n_ctx = 40;
    cp.n_threads = 1;
    cp.n_outputs_max = 17;
    cp.no_pin = 1;
    cpulm_ctx *ctx = cpulm_ctx_new(m, &cp, NULL);
    cpulm_spec_params sp = cpulm_spec_default_params();
    sp.kind = CPULM_SPEC_NGRAM;
    sp.ngram_min = 1;
    sp.adaptive = 0;
    cpulm_spec *s = cpulm_spec_new(&sp, m, NULL);
    cpulm_sampler_params spp = cpulm_sampler_default_params();
    spp.temp = 0.0f;
    picker pk = {cpulm_sampler_new(&spp, cpulm_vocab_n(m))};
    REQUIRE(t, ctx && s && pk.smp);
    cpulm_token toks[40], a[40], b[64];
    int32_t n = tokenize(m, "The cat sat. The cat sat. The cat", toks, 40);
    REQUIRE(t, n > 0 && n < 30);
    int32_t room = 40 - n; /* plain decoding emits this many before the context is full */
    REQUIRE(t, plain(ctx, toks, n, &pk, a, room));
    REQUIRE(t, eval_prompt(ctx, toks, n) && cpulm_spec_begin(s, toks, n) == CPULM_OK);
    cpulm_spec_pick pick = {.fn = pick_fn, .user = &pk};
    cpulm_sampler_reset(pk.smp);
    int32_t got = 0, k = 0;
    b[got++] = pick_fn(&pk, cpulm_ctx_logits(ctx, 0));
    cpulm_status st = CPULM_OK;
    while (got < 60 &&
           (st = cpulm_spec_step(s, ctx, 0, b[got - 1], &pick, b + got, &k)) == CPULM_OK)
        got += k;
    CHECK_EQ_INT(t, st, CPULM_ERR_KV_FULL);
    CHECK_EQ_INT(t, cpulm_ctx_seq_len(ctx, 0), 40);
    CHECK(t, got == room + 1); /* the last one was drawn but has no room to be decoded */
    CHECK(t, !memcmp(a, b, (size_t)room * sizeof *a));
    cpulm_spec_stats stats;
    cpulm_spec_stats_get(s, &stats);
    CHECK(t, stats.accepted > 0);
    cpulm_sampler_free(pk.smp);
    cpulm_spec_free(s);
    cpulm_ctx_free(ctx);
    cpulm_model_free(m);
}
