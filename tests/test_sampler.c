/* test_sampler.c: the sampling pipeline stage by stage (hand-computed expectations through
 * cpulm_sampler_last_prob), greedy ties, NaN/inf logits, seeding and draw statistics. */
#include <math.h>
#include <string.h>

#include "cpulm.h"
#include "test.h"

/* Params with every stage off and temperature 1: a test turns on the stage it checks. */
static cpulm_sampler_params plain(void) {
    cpulm_sampler_params p = cpulm_sampler_default_params();
    p.temp = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.seed = 1234;
    return p;
}

TEST(sampler_default_params_match_llama_cpp) {
    cpulm_sampler_params p = cpulm_sampler_default_params();
    CHECK_NEAR(t, p.temp, 0.8, 1e-7);
    CHECK_EQ_INT(t, p.top_k, 40);
    CHECK_NEAR(t, p.top_p, 0.95, 1e-7);
    CHECK_NEAR(t, p.min_p, 0.05, 1e-7);
    CHECK_NEAR(t, p.repeat_penalty, 1.0, 0);
    CHECK_EQ_INT(t, p.repeat_last_n, 64);
    CHECK_NEAR(t, p.presence_penalty, 0.0, 0);
    CHECK_NEAR(t, p.frequency_penalty, 0.0, 0);
    CHECK(t, p.seed == 0xFFFFFFFFu); /* drawn from the clock at _new */
    CHECK_NEAR(t, p.typical_p, 1.0, 0);
    CHECK(t, p.logit_bias == NULL && p.n_logit_bias == 0);
}

TEST(sampler_new_rejects_empty_vocab) {
    CHECK(t, cpulm_sampler_new(NULL, 0) == NULL);
    CHECK(t, cpulm_sampler_new(NULL, -3) == NULL);
    cpulm_sampler_free(NULL);
    cpulm_sampler *s = cpulm_sampler_new(NULL, 10); /* NULL params: defaults */
    CHECK(t, s != NULL);
    cpulm_sampler_free(s);
}

TEST(sampler_greedy_argmax_ties_lowest_id) {
    cpulm_sampler_params p = plain();
    p.temp = 0.0f;
    cpulm_sampler *s = cpulm_sampler_new(&p, 6);
    REQUIRE(t, s);
    float l1[6] = {1.0f, 3.0f, NAN, 3.0f, -INFINITY, 2.5f};
    CHECK_EQ_INT(t, cpulm_sampler_sample(s, l1), 1);
    /* greedy reports the full softmax of the penalised logits (NaN has probability 0) */
    double z = exp(1.0) + 2 * exp(3.0) + exp(2.5);
    CHECK_NEAR(t, cpulm_sampler_last_prob(s, 1), exp(3.0) / z, 1e-6);
    CHECK_NEAR(t, cpulm_sampler_last_prob(s, 0), exp(1.0) / z, 1e-6);
    CHECK_NEAR(t, cpulm_sampler_last_prob(s, 2), 0.0, 0);
    CHECK_NEAR(t, cpulm_sampler_last_prob(s, 4), 0.0, 0);
    CHECK_NEAR(t, cpulm_sampler_last_prob(s, 99), 0.0, 0);
    float l2[6] = {NAN, NAN, -1.0f, NAN, -0.5f, -0.5f};
    CHECK_EQ_INT(t, cpulm_sampler_sample(s, l2), 4);
    p.temp = -1.0f; /* any temp <= 0 is greedy */
    cpulm_sampler *s2 = cpulm_sampler_new(&p, 6);
    REQUIRE(t, s2);
    CHECK_EQ_INT(t, cpulm_sampler_sample(s2, l2), 4);
    cpulm_sampler_free(s2);
    cpulm_sampler_free(s);
}

TEST(sampler_repeat_penalty_divides_positive_multiplies_negative) {
    cpulm_sampler_params p = plain();
    p.temp = 0.0f;
    p.repeat_penalty = 2.0f;
    cpulm_sampler *s = cpulm_sampler_new(&p, 4);
    REQUIRE(t, s);
    float l[4] = {2.0f, -2.0f, 1.5f, 0.5f};
    cpulm_sampler_accept(s, 0);
    cpulm_sampler_accept(s, 1);
    cpulm_sampler_accept(s, 0); /* the repeat penalty applies once, whatever the count */
    /* penalised: {1, -4, 1.5, 0.5} */
    CHECK_EQ_INT(t, cpulm_sampler_sample(s, l), 2);
    double z = exp(1.0) + exp(-4.0) + exp(1.5) + exp(0.5);
    CHECK_NEAR(t, cpulm_sampler_last_prob(s, 0), exp(1.0) / z, 1e-6);
    CHECK_NEAR(t, cpulm_sampler_last_prob(s, 1), exp(-4.0) / z, 1e-6);
    CHECK_NEAR(t, cpulm_sampler_last_prob(s, 3), exp(0.5) / z, 1e-6);
    /* the logits array itself is not modified */
    CHECK(t, l[0] == 2.0f && l[1] == -2.0f);
    cpulm_sampler_reset(s); /* forgets the history */
    CHECK_EQ_INT(t, cpulm_sampler_sample(s, l), 0);
    cpulm_sampler_free(s);
}

TEST(sampler_repeat_window_forgets_old_tokens) {
    cpulm_sampler_params p = plain();
    p.temp = 0.0f;
    p.repeat_penalty = 10.0f;
    p.repeat_last_n = 2;
    cpulm_sampler *s = cpulm_sampler_new(&p, 4);
    REQUIRE(t, s);
    float l[4] = {4.0f, 3.0f, 2.0f, 1.0f};
    cpulm_sampler_accept(s, 0);
    cpulm_sampler_accept(s, 1);
    CHECK_EQ_INT(t, cpulm_sampler_sample(s, l), 2); /* 0 and 1 penalised to 0.4, 0.3 */
    cpulm_sampler_accept(s, 2);                     /* window is now {1, 2} */
    CHECK_EQ_INT(t, cpulm_sampler_sample(s, l), 0);
    cpulm_sampler_accept(s, 0);
    cpulm_sampler_accept(s, 0); /* window {0, 0} */
    CHECK_EQ_INT(t, cpulm_sampler_sample(s, l), 1);
    cpulm_sampler_accept(s, -1);  /* out of range: ignored */
    cpulm_sampler_accept(s, 100); /* likewise */
    CHECK_EQ_INT(t, cpulm_sampler_sample(s, l), 1);
    cpulm_sampler_free(s);

    p.repeat_last_n = 0; /* penalties off */
    s = cpulm_sampler_new(&p, 4);
    REQUIRE(t, s);
    cpulm_sampler_accept(s, 0);
    CHECK_EQ_INT(t, cpulm_sampler_sample(s, l), 0);
    cpulm_sampler_free(s);

    p.repeat_last_n = -1; /* the whole history */
    s = cpulm_sampler_new(&p, 4);
    REQUIRE(t, s);
    cpulm_sampler_accept(s, 0);
    for (int i = 0; i < 500; i++)
        cpulm_sampler_accept(s, 3);
    CHECK_EQ_INT(t, cpulm_sampler_sample(s, l), 1);
    cpulm_sampler_free(s);
}

TEST(sampler_presence_and_frequency_penalties) {
    cpulm_sampler_params p = plain();
    p.temp = 0.0f;
    p.presence_penalty = 1.0f;
    p.frequency_penalty = 0.5f;
    cpulm_sampler *s = cpulm_sampler_new(&p, 3);
    REQUIRE(t, s);
    float l[3] = {2.0f, 0.0f, -1.0f};
    for (int i = 0; i < 3; i++)
        cpulm_sampler_accept(s, 0);
    cpulm_sampler_accept(s, 2);
    /* 0: 2 - 3*0.5 - 1 = -0.5; 1: 0; 2: -1 - 0.5 - 1 = -2.5 */
    CHECK_EQ_INT(t, cpulm_sampler_sample(s, l), 1);
    double z = exp(-0.5) + exp(0.0) + exp(-2.5);
    CHECK_NEAR(t, cpulm_sampler_last_prob(s, 0), exp(-0.5) / z, 1e-6);
    CHECK_NEAR(t, cpulm_sampler_last_prob(s, 2), exp(-2.5) / z, 1e-6);
    cpulm_sampler_free(s);
}

TEST(sampler_top_k_keeps_k_best) {
    cpulm_sampler_params p = plain();
    p.top_k = 2;
    cpulm_sampler *s = cpulm_sampler_new(&p, 5);
    REQUIRE(t, s);
    float l[5] = {1.0f, 3.0f, 2.0f, 0.0f, 2.0f}; /* 2 and 4 tie: the lower id wins */
    cpulm_token tok = cpulm_sampler_sample(s, l);
    CHECK(t, tok == 1 || tok == 2);
    double p1 = 1.0 / (1.0 + exp(-1.0));
    CHECK_NEAR(t, cpulm_sampler_last_prob(s, 1), p1, 1e-6);
    CHECK_NEAR(t, cpulm_sampler_last_prob(s, 2), 1.0 - p1, 1e-6);
    CHECK_NEAR(t, cpulm_sampler_last_prob(s, 4), 0.0, 0);
    CHECK_NEAR(t, cpulm_sampler_last_prob(s, 0), 0.0, 0);
    cpulm_sampler_free(s);
}

/* logits = log(probs) so the softmax is the probs themselves */
static void log_probs(float *l, const double *pr, int n) {
    for (int i = 0; i < n; i++)
        l[i] = (float)log(pr[i]);
}

TEST(sampler_top_p_keeps_crossing_token) {
    const double pr[5] = {0.05, 0.5, 0.15, 0.3, 0.0};
    float l[5];
    log_probs(l, pr, 5); /* token 4 is -inf: never a candidate */
    for (int with_top_k = 0; with_top_k < 2; with_top_k++) {
        cpulm_sampler_params p = plain();
        p.top_k = with_top_k ? 4 : 0; /* sorted by top-k, or lazily by top-p itself */
        p.top_p = 0.75f;              /* 0.5 < 0.75 <= 0.8: keeps 2 tokens */
        cpulm_sampler *s = cpulm_sampler_new(&p, 5);
        REQUIRE(t, s);
        cpulm_token tok = cpulm_sampler_sample(s, l);
        CHECK(t, tok == 1 || tok == 3);
        CHECK_NEAR(t, cpulm_sampler_last_prob(s, 1), 0.5 / 0.8, 1e-6);
        CHECK_NEAR(t, cpulm_sampler_last_prob(s, 3), 0.3 / 0.8, 1e-6);
        CHECK_NEAR(t, cpulm_sampler_last_prob(s, 2), 0.0, 0);
        cpulm_sampler_free(s);

        p.top_p = 0.9f; /* 0.8 < 0.9 <= 0.95: keeps 3 */
        s = cpulm_sampler_new(&p, 5);
        REQUIRE(t, s);
        cpulm_sampler_sample(s, l);
        CHECK_NEAR(t, cpulm_sampler_last_prob(s, 2), 0.15 / 0.95, 1e-6);
        CHECK_NEAR(t, cpulm_sampler_last_prob(s, 0), 0.0, 0);
        cpulm_sampler_free(s);
    }
}

TEST(sampler_top_p_uses_softmax_of_top_k) {
    /* top-k 2 leaves {0.5, 0.3} renormalised to {0.625, 0.375}: top-p 0.6 keeps one */
    const double pr[4] = {0.5, 0.3, 0.15, 0.05};
    float l[4];
    log_probs(l, pr, 4);
    cpulm_sampler_params p = plain();
    p.top_k = 2;
    p.top_p = 0.6f;
    cpulm_sampler *s = cpulm_sampler_new(&p, 4);
    REQUIRE(t, s);
    CHECK_EQ_INT(t, cpulm_sampler_sample(s, l), 0);
    CHECK_NEAR(t, cpulm_sampler_last_prob(s, 0), 1.0, 1e-6);
    cpulm_sampler_free(s);
}

TEST(sampler_min_p_relative_to_best) {
    const double pr[4] = {0.15, 0.05, 0.5, 0.3};
    float l[4];
    log_probs(l, pr, 4);
    for (int sorted = 0; sorted < 2; sorted++) {
        cpulm_sampler_params p = plain();
        p.top_k = sorted ? 3 : 0;
        p.min_p = 0.2f; /* threshold 0.1: drops 0.05 */
        cpulm_sampler *s = cpulm_sampler_new(&p, 4);
        REQUIRE(t, s);
        cpulm_sampler_sample(s, l);
        CHECK_NEAR(t, cpulm_sampler_last_prob(s, 0), 0.15 / 0.95, 1e-6);
        CHECK_NEAR(t, cpulm_sampler_last_prob(s, 2), 0.5 / 0.95, 1e-6);
        CHECK_NEAR(t, cpulm_sampler_last_prob(s, 1), 0.0, 0);
        cpulm_sampler_free(s);
        p.min_p = 0.7f; /* threshold 0.35: only the best */
        s = cpulm_sampler_new(&p, 4);
        REQUIRE(t, s);
        CHECK_EQ_INT(t, cpulm_sampler_sample(s, l), 2);
        CHECK_NEAR(t, cpulm_sampler_last_prob(s, 2), 1.0, 1e-6);
        cpulm_sampler_free(s);
    }
}

TEST(sampler_temperature_after_cuts) {
    const double pr[4] = {0.5, 0.3, 0.15, 0.05};
    float l[4];
    log_probs(l, pr, 4);
    cpulm_sampler_params p = plain();
    p.top_p = 0.9f; /* cut at temperature 1: keeps 3 however hot or cold the draw */
    p.temp = 2.0f;
    cpulm_sampler *s = cpulm_sampler_new(&p, 4);
    REQUIRE(t, s);
    cpulm_sampler_sample(s, l);
    double z = sqrt(0.5) + sqrt(0.3) + sqrt(0.15); /* p^(1/T) renormalised */
    CHECK_NEAR(t, cpulm_sampler_last_prob(s, 0), sqrt(0.5) / z, 1e-6);
    CHECK_NEAR(t, cpulm_sampler_last_prob(s, 2), sqrt(0.15) / z, 1e-6);
    CHECK_NEAR(t, cpulm_sampler_last_prob(s, 3), 0.0, 0);
    cpulm_sampler_free(s);

    p.temp = 1e-6f; /* very cold: no overflow, all mass on the best */
    s = cpulm_sampler_new(&p, 4);
    REQUIRE(t, s);
    CHECK_EQ_INT(t, cpulm_sampler_sample(s, l), 0);
    CHECK_NEAR(t, cpulm_sampler_last_prob(s, 0), 1.0, 1e-6);
    CHECK_NEAR(t, cpulm_sampler_last_prob(s, 1), 0.0, 1e-6);
    cpulm_sampler_free(s);
}

TEST(sampler_draw_frequencies_follow_probabilities) {
    const double pr[4] = {0.2, 0.5, 0.0, 0.3};
    float l[4];
    log_probs(l, pr, 4);
    cpulm_sampler_params p = plain();
    p.seed = 42;
    cpulm_sampler *s = cpulm_sampler_new(&p, 4);
    REQUIRE(t, s);
    int count[4] = {0};
    const int n = 20000;
    for (int i = 0; i < n; i++) {
        cpulm_token tok = cpulm_sampler_sample(s, l);
        REQUIRE(t, tok >= 0 && tok < 4);
        count[tok]++;
    }
    /* binomial sd <= sqrt(0.25 / 20000) = 0.0035: 0.015 is over 4 sd */
    for (int i = 0; i < 4; i++)
        CHECK_NEAR(t, (double)count[i] / n, pr[i], 0.015);
    CHECK_EQ_INT(t, count[2], 0);
    cpulm_sampler_free(s);
}

static int draw_many(cpulm_sampler *s, const float *l, cpulm_token *out, int n) {
    for (int i = 0; i < n; i++)
        out[i] = cpulm_sampler_sample(s, l);
    return n;
}

TEST(sampler_same_seed_same_tokens) {
    enum { V = 50, N = 200 };
    float l[V];
    for (int i = 0; i < V; i++)
        l[i] = (float)((i * 7) % 13) * 0.3f;
    cpulm_sampler_params p = plain();
    p.seed = 7;
    cpulm_sampler *a = cpulm_sampler_new(&p, V), *b = cpulm_sampler_new(&p, V);
    p.seed = 8;
    cpulm_sampler *c = cpulm_sampler_new(&p, V);
    REQUIRE(t, a && b && c);
    cpulm_token ta[N], tb[N], tc[N];
    draw_many(a, l, ta, N);
    draw_many(b, l, tb, N);
    draw_many(c, l, tc, N);
    CHECK(t, memcmp(ta, tb, sizeof ta) == 0);
    CHECK(t, memcmp(ta, tc, sizeof ta) != 0);
    cpulm_sampler_reset(a); /* restarts the RNG from the same seed */
    draw_many(a, l, tb, N);
    CHECK(t, memcmp(ta, tb, sizeof ta) == 0);
    cpulm_sampler_free(a);
    cpulm_sampler_free(b);
    cpulm_sampler_free(c);
}

TEST(sampler_clock_seed_differs_between_samplers) {
    enum { V = 1000, N = 64 };
    static float l[V]; /* uniform: 1000^64 sequences, equal only if the seeds are */
    cpulm_sampler_params p = plain();
    p.seed = 0xFFFFFFFFu;
    cpulm_sampler *a = cpulm_sampler_new(&p, V), *b = cpulm_sampler_new(&p, V);
    REQUIRE(t, a && b);
    cpulm_token ta[N], tb[N];
    draw_many(a, l, ta, N);
    draw_many(b, l, tb, N);
    CHECK(t, memcmp(ta, tb, sizeof ta) != 0);
    cpulm_sampler_free(a);
    cpulm_sampler_free(b);
}

TEST(sampler_infinite_and_nan_logits) {
    cpulm_sampler_params p = plain();
    p.seed = 3;
    cpulm_sampler *s = cpulm_sampler_new(&p, 5);
    REQUIRE(t, s);
    float l[5] = {0.0f, INFINITY, 5.0f, INFINITY, NAN};
    int count[5] = {0};
    for (int i = 0; i < 2000; i++)
        count[cpulm_sampler_sample(s, l)]++;
    CHECK_EQ_INT(t, count[0] + count[2] + count[4], 0); /* only the +inf tokens */
    CHECK(t, count[1] > 800 && count[3] > 800);
    CHECK_NEAR(t, cpulm_sampler_last_prob(s, 1), 0.5, 1e-6);
    float bad[5] = {NAN, NAN, -INFINITY, NAN, -INFINITY};
    CHECK_EQ_INT(t, cpulm_sampler_sample(s, bad), 0); /* documented fallback */
    CHECK_NEAR(t, cpulm_sampler_last_prob(s, 0), 0.0, 0);
    cpulm_sampler_free(s);
}

TEST(sampler_large_vocab_defaults) {
    /* a realistic vocab through the default pipeline: the draw stays in the top 40 */
    enum { V = 152064 };
    float *l = malloc(V * sizeof *l);
    REQUIRE(t, l);
    uint32_t x = 12345;
    for (int i = 0; i < V; i++) {
        x = x * 1664525u + 1013904223u;
        l[i] = (float)(x >> 8) / (float)(1u << 24) * 10.0f;
    }
    cpulm_sampler_params p = cpulm_sampler_default_params();
    p.seed = 99;
    cpulm_sampler *s = cpulm_sampler_new(&p, V);
    REQUIRE(t, s);
    for (int it = 0; it < 20; it++) {
        cpulm_token tok = cpulm_sampler_sample(s, l);
        REQUIRE(t, tok >= 0 && tok < V);
        int n_greater = 0;
        for (int i = 0; i < V; i++)
            n_greater += l[i] > l[tok];
        CHECK(t, n_greater < 40);
        CHECK(t, cpulm_sampler_last_prob(s, tok) > 0.0f);
    }
    cpulm_sampler_free(s);
    p.top_k = 0; /* top-p alone on the full vocab */
    p.min_p = 0.0f;
    s = cpulm_sampler_new(&p, V);
    REQUIRE(t, s);
    double sum = 0.0;
    cpulm_token tok = cpulm_sampler_sample(s, l);
    CHECK(t, cpulm_sampler_last_prob(s, tok) > 0.0f);
    for (int i = 0; i < V; i += 1)
        sum += cpulm_sampler_last_prob(s, i);
    CHECK_NEAR(t, sum, 1.0, 1e-3);
    cpulm_sampler_free(s);
    free(l);
}

/* A grammar's mask: only allowed tokens are ever drawn (greedy and sampled, with top-k/p
 * cuts applied after the mask), and an allowed token with -inf logit is still returned when
 * it is the only one allowed. */
TEST(sampler_masked_draws_only_allowed) {
    enum { V = 300 };
    float logits[V];
    uint32_t allow[(V + 31) / 32] = {0};
    for (int i = 0; i < V; i++)
        logits[i] = (float)((i * 7919) % 101) / 10.0f;
    const int ok[] = {3, 77, 150, 299};
    for (int k = 0; k < 4; k++)
        allow[ok[k] >> 5] |= 1u << (ok[k] & 31);
    for (int mode = 0; mode < 2; mode++) {
        cpulm_sampler_params p = cpulm_sampler_default_params();
        p.temp = mode ? 0.9f : 0.0f;
        p.top_k = 2;
        p.seed = 7;
        cpulm_sampler *s = cpulm_sampler_new(&p, V);
        REQUIRE(t, s);
        for (int r = 0; r < 200; r++) {
            cpulm_token tok = cpulm_sampler_sample_masked(s, logits, allow);
            CHECK(t, tok == 3 || tok == 77 || tok == 150 || tok == 299);
        }
        CHECK(t, cpulm_sampler_last_prob(s, 0) == 0.0f);
        cpulm_sampler_free(s);
    }
    uint32_t only[(V + 31) / 32] = {0};
    only[250 >> 5] |= 1u << (250 & 31);
    logits[250] = -INFINITY;
    cpulm_sampler *s = cpulm_sampler_new(NULL, V);
    CHECK_EQ_INT(t, cpulm_sampler_sample_masked(s, logits, only), 250);
    cpulm_sampler_free(s);
}

/* With no cut the draw walks the vocabulary in blocks (draw_all): mass in the first, a
 * middle and the last block is drawn at its probability, last_prob sums to one, and a mask
 * that allows only tokens of the last block is obeyed. */
TEST(sampler_no_cuts_draws_across_blocks) {
    enum { V = 3001 }; /* three full blocks of 1024 would be 3072: the last one is partial */
    static float l[V];
    const int heavy[3] = {5, 1500, 3000};
    double rest = 0.1 / (V - 3);
    for (int i = 0; i < V; i++)
        l[i] = (float)log(rest);
    for (int k = 0; k < 3; k++)
        l[heavy[k]] = (float)log(0.3);
    cpulm_sampler_params p = plain();
    p.seed = 5;
    cpulm_sampler *s = cpulm_sampler_new(&p, V);
    REQUIRE(t, s);
    int count[3] = {0}, n_rest = 0;
    /* binomial sd 0.0032 at 20,000 draws: 0.015 is over 4 sd; qemu (CI) draws 5,000 (sd
     * 0.0065, tolerance 0.03) */
    const int n = test_emulated() ? 5000 : 20000;
    const double tol = test_emulated() ? 0.03 : 0.015;
    for (int i = 0; i < n; i++) {
        cpulm_token tok = cpulm_sampler_sample(s, l);
        REQUIRE(t, tok >= 0 && tok < V);
        int h = tok == heavy[0] ? 0 : tok == heavy[1] ? 1 : tok == heavy[2] ? 2 : -1;
        if (h >= 0)
            count[h]++;
        else
            n_rest++;
    }
    for (int k = 0; k < 3; k++)
        CHECK_NEAR(t, (double)count[k] / n, 0.3, tol);
    CHECK_NEAR(t, (double)n_rest / n, 0.1, tol);
    double sum = 0.0;
    for (int i = 0; i < V; i++)
        sum += cpulm_sampler_last_prob(s, i);
    CHECK_NEAR(t, sum, 1.0, 1e-5);
    CHECK_NEAR(t, cpulm_sampler_last_prob(s, heavy[2]), 0.3, 1e-5);

    uint32_t allow[(V + 31) / 32] = {0};
    allow[2999 >> 5] |= 1u << (2999 & 31);
    allow[2050 >> 5] |= 1u << (2050 & 31);
    int seen[2] = {0};
    for (int i = 0; i < 400; i++) {
        cpulm_token tok = cpulm_sampler_sample_masked(s, l, allow);
        REQUIRE(t, tok == 2999 || tok == 2050);
        seen[tok == 2999]++;
    }
    CHECK(t, seen[0] > 100 && seen[1] > 100); /* equal logits: about 200 each */
    CHECK_NEAR(t, cpulm_sampler_last_prob(s, 2050), 0.5, 1e-6);
    CHECK_NEAR(t, cpulm_sampler_last_prob(s, heavy[0]), 0.0, 0);
    cpulm_sampler_free(s);
}

/* logit_bias is added to the logit before everything else: it moves the greedy pick, a
 * -inf bias (llama-server's false) bans a token at any temperature, biases of the same id
 * add up, ids outside the vocabulary are ignored, a grammar mask still wins, and the
 * params' array is copied (the caller may free it at once). */
TEST(sampler_logit_bias_moves_bans_and_is_copied) {
    const float logits[4] = {1.0f, 2.0f, 3.0f, 0.0f};
    cpulm_sampler_params p = plain();
    p.temp = 0.0f;
    cpulm_logit_bias lb[4] = {{2, -100.0f}, {1, 1.5f}, {1, 1.5f}, {99, 50.0f}};
    p.logit_bias = lb;
    p.n_logit_bias = 1;
    cpulm_sampler *s = cpulm_sampler_new(&p, 4);
    REQUIRE(t, s);
    CHECK_EQ_INT(t, cpulm_sampler_sample(s, logits), 1); /* 3 - 100 is below 2 */
    cpulm_sampler_free(s);
    p.n_logit_bias = 4; /* 2 - 100, 2 + 1.5 + 1.5 = 5 above 3; 99 ignored */
    s = cpulm_sampler_new(&p, 4);
    REQUIRE(t, s);
    lb[1].bias = lb[2].bias = -1000.0f; /* copied at _new: no effect now */
    CHECK_EQ_INT(t, cpulm_sampler_sample(s, logits), 1);
    CHECK_NEAR(t, cpulm_sampler_last_prob(s, 1), exp(5.0) / (exp(5.0) + exp(1.0) + exp(0.0)), 1e-5);
    uint32_t allow[1] = {(1u << 0) | (1u << 3)}; /* the mask beats a +bias */
    CHECK(t, cpulm_sampler_sample_masked(s, logits, allow) == 0);
    cpulm_sampler_free(s);

    cpulm_logit_bias force = {3, 100.0f}, ban[2] = {{2, -INFINITY}, {0, -INFINITY}};
    p = plain(); /* temperature 1, no cuts (draw_all) and with top-k (the heap path) */
    for (int mode = 0; mode < 2; mode++) {
        p.top_k = mode ? 3 : 0;
        p.logit_bias = &force;
        p.n_logit_bias = 1;
        s = cpulm_sampler_new(&p, 4);
        REQUIRE(t, s);
        for (int i = 0; i < 50; i++)
            CHECK_EQ_INT(t, cpulm_sampler_sample(s, logits), 3);
        cpulm_sampler_free(s);
        p.logit_bias = ban;
        p.n_logit_bias = 2;
        s = cpulm_sampler_new(&p, 4);
        REQUIRE(t, s);
        int seen1 = 0;
        for (int i = 0; i < 200; i++) {
            cpulm_token tok = cpulm_sampler_sample(s, logits);
            CHECK(t, tok == 1 || tok == 3);
            seen1 += tok == 1;
        }
        CHECK(t, seen1 > 100); /* p(1) = e^2 / (e^2 + 1) = 0.88 */
        CHECK(t, cpulm_sampler_last_prob(s, 2) == 0.0f);
        cpulm_sampler_free(s);
    }
}

/* The bias goes before the repeat penalty (llama.cpp's order): a seen token with logit 1
 * and bias +3 becomes (1 + 3) / 2 = 2 under repeat_penalty 2, not 1 / 2 + 3. */
TEST(sampler_logit_bias_before_penalties) {
    const float logits[3] = {1.0f, 2.1f, 0.0f};
    cpulm_logit_bias lb = {0, 3.0f};
    cpulm_sampler_params p = plain();
    p.temp = 0.0f;
    p.repeat_penalty = 2.0f;
    p.repeat_last_n = -1;
    p.logit_bias = &lb;
    p.n_logit_bias = 1;
    cpulm_sampler *s = cpulm_sampler_new(&p, 3);
    REQUIRE(t, s);
    cpulm_sampler_accept(s, 0);
    CHECK_EQ_INT(t, cpulm_sampler_sample(s, logits), 1); /* 2 < 2.1 (3.5 would win) */
    double z = exp(2.0) + exp(2.1) + exp(0.0);
    CHECK_NEAR(t, cpulm_sampler_last_prob(s, 0), exp(2.0) / z, 1e-5);
    cpulm_sampler_free(s);
}

/* Locally typical sampling: p = {0.6, 0.2, 20 x 0.01}, entropy H = 1.549; surprises
 * -log p are 0.51, 1.61 and 4.61, so token 1 is the most typical, then 0, then the rest.
 * typical_p 0.15 keeps token 1 alone (greedy would say 0); 0.7 keeps {1, 0} (0.2 + 0.6
 * crosses it), drawn 0.25 / 0.75. typical_p 1 (and 0) is off. */
TEST(sampler_typical_keeps_closest_to_entropy) {
    enum { V = 22 };
    float l[V];
    l[0] = (float)log(0.6);
    l[1] = (float)log(0.2);
    for (int i = 2; i < V; i++)
        l[i] = (float)log(0.01);
    cpulm_sampler_params p = plain();
    p.typical_p = 0.15f;
    cpulm_sampler *s = cpulm_sampler_new(&p, V);
    REQUIRE(t, s);
    for (int i = 0; i < 20; i++)
        CHECK_EQ_INT(t, cpulm_sampler_sample(s, l), 1);
    CHECK_NEAR(t, cpulm_sampler_last_prob(s, 1), 1.0, 1e-6);
    cpulm_sampler_free(s);
    p.typical_p = 0.7f;
    p.top_k = 10; /* the entropy is over what top-k kept: still 1 then 0 here */
    s = cpulm_sampler_new(&p, V);
    REQUIRE(t, s);
    int n1 = 0;
    for (int i = 0; i < 2000; i++) {
        cpulm_token tok = cpulm_sampler_sample(s, l);
        CHECK(t, tok == 0 || tok == 1);
        n1 += tok == 1;
    }
    CHECK_NEAR(t, n1 / 2000.0, 0.25, 0.05);
    CHECK_NEAR(t, cpulm_sampler_last_prob(s, 1), 0.25, 1e-5);
    cpulm_sampler_free(s);
    for (int k = 0; k < 2; k++) {
        p = plain();
        p.typical_p = k ? 0.0f : 1.0f;
        s = cpulm_sampler_new(&p, V);
        REQUIRE(t, s);
        cpulm_sampler_sample(s, l);
        CHECK_NEAR(t, cpulm_sampler_last_prob(s, 5), 0.01, 1e-5);
        cpulm_sampler_free(s);
    }
}
