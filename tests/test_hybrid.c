/* test_hybrid.c: hybrid (Gated DeltaNet + gated attention) models: the qwen35 family.
 * Logits of synthetic files against llama.cpp's (tests/data/hybrid-ref.json, made by
 * scripts/ref-logits.py hybrid with the shared llama-perplexity), the delta rule against a float64
 * oracle, batches of several sequences against each alone, and the sequence operations a
 * recurrent state allows. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "cpulm.h"
#include "model/deltanet.h"
#include "refcase.h"
#include "toolkit/synth.h"
#include "test.h"

/* The stored log-probabilities are exact to ~1.3e-4 (16-bit steps over 16 nats); the
 * tolerances are the llama.cpp reference cases' for the weight type (docs/CORRECTNESS.md)
 * plus that step. */
static double tolerance_of(const char *type) {
    if (!strcmp(type, "f16")) return 0.010 + 2e-4;
    if (!strcmp(type, "bf16")) return 0.040 + 2e-4;
    return 0.002 + 2e-4;
}

/* tiny-qwen35 (3 Gated DeltaNet layers, 1 gated attention layer, 2 key heads for 4 value
 * heads, half of each head rotated) in F32, F16, BF16, tiny-qwen35moe (the same with 8
 * experts, 2 used, and a shared expert) and tiny-qwen3next (its predecessor: plain NEOX rope,
 * joint beta/alpha projection, key heads repeated in place) in F32: 255 positions after
 * 256, so the
 * recurrence runs over 510 tokens; decoded as one prompt and in batches of 7 tokens (the
 * state carried between decodes). */
/* Under qemu (the arm64 stage) this group takes over 10 minutes (float64 oracles over
 * thousands of positions, 512-token reference chunks); the recurrence's kernels (dot_f32,
 * axpy) are checked at every ARM level by the kern group, so here it runs natively only. */
#define EMULATED_WHY "minutes under emulation: run natively; its kernels are checked by kern"

TEST(hybrid_ref_tiny_float_types) {
    if (test_emulated()) NOT_APPLICABLE(t, EMULATED_WHY);
    cpulm_json_doc *d = refcase_load("hybrid-ref.json");
    REQUIRE(t, d);
    const cpulm_json *cases = cpulm_json_get(cpulm_json_root(d), "cases");
    REQUIRE(t, cpulm_json_len(cases) >= 3);
    for (size_t i = 0; i < cpulm_json_len(cases); i++) {
        const cpulm_json *c = cpulm_json_at(cases, i);
        const char *type = cpulm_json_str(cpulm_json_get(c, "type"));
        double w1 = 0, w2 = 0;
        CHECK_EQ_INT(t, refcase_check(c, 512, 0, tolerance_of(type), &w1), 0);
        /* sanitizer builds: every case as one prompt, the batches of 7 on the first case only
         * (the state carried between decodes of every shape: batch_of_4 below) */
        if (i == 0 || !test_sanitized())
            CHECK_EQ_INT(t, refcase_check(c, 7, 0, tolerance_of(type), &w2), 0);
        fprintf(stderr, "  %s: worst |diff| %.5f (prompt), %.5f (batches of 7)\n",
                cpulm_json_str(cpulm_json_get(c, "name")), w1, w2);
    }
    cpulm_json_free(d);
}

/* ---- the delta rule against float64 ---- */

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static double uniform(uint64_t *s) {
    return (double)(rng_next(s) >> 11) / 9007199254740992.0;
}

static void unit_vector(float *x, int64_t n, uint64_t *s) {
    double sum = 0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = (float)(uniform(s) * 2 - 1);
        sum += (double)x[i] * x[i];
    }
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)(x[i] / sqrt(sum));
}

/* The recurrence in double precision, on the same float inputs. */
static void step64(int64_t n, double *S, const float *q, const float *k, const float *v, float beta,
                   float g, double *o) {
    const double decay = exp((double)g);
    for (int64_t i = 0; i < n * n; i++)
        S[i] *= decay;
    for (int64_t r = 0; r < n; r++) {
        double sk = 0;
        for (int64_t i = 0; i < n; i++)
            sk += S[r * n + i] * k[i];
        const double d = (v[r] - sk) * beta;
        for (int64_t i = 0; i < n; i++)
            S[r * n + i] += d * k[i];
    }
    for (int64_t r = 0; r < n; r++) {
        double sq = 0;
        for (int64_t i = 0; i < n; i++)
            sq += S[r * n + i] * q[i];
        o[r] = sq / sqrt((double)n);
    }
}

/* 4096 tokens of random unit q and k, v in [-1, 1], beta in (0, 1), decays between 0.82 and
 * 1 (some heads remember thousands of tokens): every output within 2e-4 of float64's. Under
 * the sanitizers 1024 tokens (the same calls; the long memory is checked natively). */
TEST(hybrid_delta_step_matches_float64) {
    if (test_emulated()) NOT_APPLICABLE(t, EMULATED_WHY);
    const int64_t sizes[2] = {32, 128};
    for (int si = 0; si < 4; si++) { /* the generic kernels, then this CPU's */
        const cpulm_kernels *kt = si < 2 ? &cpulm_kernels_generic : cpulm_kernels_get();
        const int64_t n = sizes[si % 2], T = test_sanitized() ? 1024 : 4096;
        float *S = calloc((size_t)(n * n), sizeof(float)), *q = malloc(sizeof(float) * n * 3);
        double *S64 = calloc((size_t)(n * n), sizeof(double)), *o64 = malloc(sizeof(double) * n);
        float *o = malloc(sizeof(float) * n), *d = malloc(sizeof(float) * n);
        REQUIRE(t, S && q && S64 && o64 && o && d);
        float *k = q + n, *v = q + 2 * n;
        uint64_t rs = 12345 + (uint64_t)n;
        double worst = 0;
        for (int64_t tk = 0; tk < T; tk++) {
            unit_vector(q, n, &rs);
            unit_vector(k, n, &rs);
            for (int64_t i = 0; i < n; i++)
                v[i] = (float)(uniform(&rs) * 2 - 1);
            float beta = (float)uniform(&rs), g = (float)(-0.2 * uniform(&rs) * uniform(&rs));
            cpulm_dnet_step(kt, n, S, q, k, v, beta, g, o, d);
            step64(n, S64, q, k, v, beta, g, o64);
            for (int64_t i = 0; i < n; i++)
                worst = fmax(worst, fabs(o[i] - o64[i]));
        }
        fprintf(stderr, "  %s, head size %lld: worst |diff| over %lld tokens %.2e\n", kt->name,
                (long long)n, (long long)T, worst);
        CHECK(t, worst < 2e-4);
        free(S);
        free(q);
        free(S64);
        free(o64);
        free(o);
        free(d);
    }
}

/* The chunked form (prompts) against the token-by-token form and float64 over 3000
 * tokens (sanitizers: 320, 5 chunks): in chunks of 64 (the last one partial) and in chunks of
 * random sizes 1..64, head sizes 32 and 128; outputs and the final state. */
TEST(hybrid_chunked_matches_steps_and_float64) {
    if (test_emulated()) NOT_APPLICABLE(t, EMULATED_WHY);
    const int64_t sizes[2] = {32, 128}, T = test_sanitized() ? 320 : 3000;
    for (int si = 0; si < 4; si++) { /* the generic kernels, then this CPU's */
        const cpulm_kernels *kt = si < 2 ? &cpulm_kernels_generic : cpulm_kernels_get();
        const int64_t n = sizes[si % 2], C = CPULM_DNET_CHUNK;
        float *in = malloc(sizeof(float) * (size_t)(T * (3 * n + 2)));
        float *Ss = calloc((size_t)(n * n), sizeof(float)), *Sc[2];
        double *S64 = calloc((size_t)(n * n), sizeof(double)), *o64 = malloc(sizeof(double) * n);
        float *os = malloc(sizeof(float) * n), *d = malloc(sizeof(float) * n);
        float *oc = malloc(sizeof(float) * (size_t)(C * n));
        float *ws = malloc(sizeof(float) * (size_t)cpulm_dnet_chunk_ws_floats(n));
        Sc[0] = calloc((size_t)(n * n), sizeof(float));
        Sc[1] = calloc((size_t)(n * n), sizeof(float));
        REQUIRE(t, in && Ss && S64 && o64 && os && d && oc && ws && Sc[0] && Sc[1]);
        float *q = in, *k = q + T * n, *v = k + T * n, *beta = v + T * n, *g = beta + T;
        uint64_t rs = 777 + (uint64_t)n;
        for (int64_t i = 0; i < T; i++) {
            unit_vector(q + i * n, n, &rs);
            unit_vector(k + i * n, n, &rs);
            for (int64_t j = 0; j < n; j++)
                v[i * n + j] = (float)(uniform(&rs) * 2 - 1);
            beta[i] = (float)uniform(&rs);
            g[i] = (float)(-0.2 * uniform(&rs) * uniform(&rs));
        }
        double worst_step = 0, worst_64[2] = {0, 0}, worst_state = 0;
        for (int mode = 0; mode < 2; mode++) {
            int64_t t0 = 0;
            while (t0 < T) {
                int64_t len = mode == 0 ? C : 1 + (int64_t)(uniform(&rs) * C);
                if (len > C) len = C;
                if (t0 + len > T) len = T - t0;
                cpulm_dnet_chunk(kt, len, n, Sc[mode], q + t0 * n, k + t0 * n, v + t0 * n,
                                 beta + t0, g + t0, oc, ws);
                for (int64_t i = t0; i < t0 + len; i++) {
                    if (mode == 0) {
                        cpulm_dnet_step(kt, n, Ss, q + i * n, k + i * n, v + i * n, beta[i], g[i],
                                        os, d);
                        step64(n, S64, q + i * n, k + i * n, v + i * n, beta[i], g[i], o64);
                    }
                    for (int64_t j = 0; j < n && mode == 0; j++) {
                        worst_step = fmax(worst_step, fabs(oc[(i - t0) * n + j] - os[j]));
                        worst_64[0] = fmax(worst_64[0], fabs(oc[(i - t0) * n + j] - o64[j]));
                    }
                }
                t0 += len;
            }
        }
        /* mode 1 (random chunks) against float64: replay the oracle's final state */
        for (int64_t i = 0; i < n * n; i++) { /* the float states are transposed */
            const int64_t ti = (i % n) * n + i / n;
            worst_state = fmax(worst_state, fabs(Sc[0][ti] - S64[i]));
            worst_64[1] = fmax(worst_64[1], fabs(Sc[1][ti] - S64[i]));
        }
        fprintf(stderr,
                "  %s, head size %lld: chunks of 64 vs steps %.2e, vs float64 %.2e; final state "
                "chunks of 64 %.2e, random chunks %.2e\n",
                kt->name, (long long)n, worst_step, worst_64[0], worst_state, worst_64[1]);
        CHECK(t, worst_step < 1e-5 && worst_64[0] < 1e-5);
        CHECK(t, worst_state < 1e-5 && worst_64[1] < 1e-5);
        free(in);
        free(Ss);
        free(Sc[0]);
        free(Sc[1]);
        free(S64);
        free(o64);
        free(os);
        free(d);
        free(oc);
        free(ws);
    }
}

/* ---- batches and sequence operations ---- */

/* 4 sequences of different lengths decoded together (interleaved tokens, then one token
 * each per step) give each sequence's logits bit for bit as it alone. */
static void check_batch_of_4(test_ctx *t, const char *shape) {
    cpulm_model *m = refcase_synth_shape(shape, "q8_0", 0);
    REQUIRE(t, m);
    const int32_t V = cpulm_vocab_n(m), lens[4] = {37, 50, 23, 64}, gen = 5;
    float *alone[4];
    int32_t toks[4][80];
    for (int s = 0; s < 4; s++) {
        for (int32_t i = 0; i < lens[s] + gen; i++)
            toks[s][i] = i == 0 ? 1 : 3 + (int32_t)((s * 131 + i * 37) % 500);
        cpulm_ctx *c1 = refcase_ctx(m, 128, 64, 1, 2, 0);
        REQUIRE(t, c1);
        alone[s] = refcase_logits(c1, toks[s], lens[s] + gen, lens[s], V);
        REQUIRE(t, alone[s]);
        cpulm_ctx_free(c1);
    }
    cpulm_ctx *c = refcase_ctx(m, 128, 256, 4, 2, 0);
    REQUIRE(t, c);
    int32_t bt[256], bs[256], at[4][80], n = 0;
    int8_t want[256];
    for (int32_t i = 0; i < 64; i++) /* prompts interleaved token by token */
        for (int s = 0; s < 4; s++)
            if (i < lens[s]) {
                bt[n] = toks[s][i];
                bs[n] = s;
                want[n] = 1;
                at[s][i] = n++;
            }
    cpulm_batch b = {.n = n, .token = bt, .seq = bs, .want_logits = want};
    REQUIRE(t, cpulm_ctx_decode(c, &b) == CPULM_OK);
    int diff = 0;
    for (int s = 0; s < 4; s++)
        for (int32_t i = 0; i < lens[s]; i++)
            diff += memcmp(cpulm_ctx_logits(c, at[s][i]), alone[s] + (size_t)i * V,
                           sizeof(float) * (size_t)V) != 0;
    for (int32_t g = 0; g < gen; g++) { /* then one token per sequence per decode */
        for (int s = 0; s < 4; s++) {
            bt[s] = toks[s][lens[s] + g];
            bs[s] = s;
        }
        cpulm_batch b1 = {.n = 4, .token = bt, .seq = bs, .want_logits = want};
        REQUIRE(t, cpulm_ctx_decode(c, &b1) == CPULM_OK);
        for (int s = 0; s < 4; s++)
            diff += memcmp(cpulm_ctx_logits(c, s), alone[s] + (size_t)(lens[s] + g) * V,
                           sizeof(float) * (size_t)V) != 0;
    }
    CHECK_EQ_INT(t, diff, 0);
    for (int s = 0; s < 4; s++)
        free(alone[s]);
    cpulm_ctx_free(c);
    cpulm_model_free(m);
}

TEST(hybrid_batch_of_4_equals_each_alone) {
    if (test_emulated()) NOT_APPLICABLE(t, EMULATED_WHY);
    check_batch_of_4(t, "tiny-qwen35");
    check_batch_of_4(t, "tiny-qwen35moe");
    check_batch_of_4(t, "tiny-qwen3next");
}

/* The recurrent state belongs to a sequence's whole length: removing a tail or copying a
 * prefix shorter than the source is refused (the cache unchanged); clearing and whole
 * copies work, and a copy continues exactly like its source. */
TEST(hybrid_sequence_operations) {
    if (test_emulated()) NOT_APPLICABLE(t, EMULATED_WHY);
    cpulm_model *m = refcase_synth_shape("tiny-qwen35", "f32", 0);
    REQUIRE(t, m);
    const int32_t V = cpulm_vocab_n(m);
    cpulm_ctx *c = refcase_ctx(m, 64, 64, 2, 1, 0);
    REQUIRE(t, c);
    int32_t toks[20];
    for (int i = 0; i < 20; i++)
        toks[i] = i == 0 ? 1 : 100 + i;
    cpulm_batch b = {.n = 16, .token = toks};
    REQUIRE(t, cpulm_ctx_decode(c, &b) == CPULM_OK);
    CHECK_EQ_INT(t, cpulm_ctx_seq_rm(c, 0, 8), CPULM_ERR_UNSUPPORTED);
    CHECK_EQ_INT(t, cpulm_ctx_seq_len(c, 0), 16);
    CHECK_EQ_INT(t, cpulm_ctx_seq_cp(c, 0, 1, 8), CPULM_ERR_UNSUPPORTED);
    CHECK_EQ_INT(t, cpulm_ctx_seq_cp(c, 0, 1, 16), CPULM_OK);
    CHECK_EQ_INT(t, cpulm_ctx_seq_rstate_bytes(c) > 0, 1);
    int32_t seq1 = 1;
    cpulm_batch b0 = {.n = 1, .token = &toks[16]};
    cpulm_batch b1 = {.n = 1, .token = &toks[16], .seq = &seq1};
    REQUIRE(t, cpulm_ctx_decode(c, &b0) == CPULM_OK);
    float *l0 = malloc(sizeof(float) * (size_t)V);
    memcpy(l0, cpulm_ctx_logits(c, 0), sizeof(float) * (size_t)V);
    REQUIRE(t, cpulm_ctx_decode(c, &b1) == CPULM_OK);
    CHECK(t, memcmp(l0, cpulm_ctx_logits(c, 0), sizeof(float) * (size_t)V) == 0);
    /* cleared, the sequence starts again from zeros: the first prompt's logits again */
    CHECK_EQ_INT(t, cpulm_ctx_seq_rm(c, 0, 0), CPULM_OK);
    cpulm_batch bp = {.n = 16, .token = toks};
    REQUIRE(t, cpulm_ctx_decode(c, &bp) == CPULM_OK);
    REQUIRE(t, cpulm_ctx_decode(c, &b0) == CPULM_OK);
    CHECK(t, memcmp(l0, cpulm_ctx_logits(c, 0), sizeof(float) * (size_t)V) == 0);
    free(l0);
    cpulm_ctx_free(c);
    cpulm_model_free(m);
}

/* 700 tokens decoded as one prompt (the recurrence in chunks, block attention) and as a
 * 560-token prompt then 140 single tokens (token by token, attention split over the
 * cache), F32 weights: the same logits up to rounding; and each way bit for bit the same on
 * 1 and 2 threads. Under the sanitizers 300 tokens, 240 of them the prompt (4 chunks). */
TEST(hybrid_generation_equals_prompt_and_threads) {
    if (test_emulated()) NOT_APPLICABLE(t, EMULATED_WHY);
    cpulm_model *m = refcase_synth_shape("tiny-qwen35", "f32", 0);
    REQUIRE(t, m);
    const int32_t V = cpulm_vocab_n(m), n = test_sanitized() ? 300 : 700, n_prompt = n * 4 / 5;
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)n);
    REQUIRE(t, toks);
    for (int32_t i = 0; i < n; i++)
        toks[i] = i == 0 ? 1 : 3 + (int32_t)((i * 7919) % 509);
    float *lg[2][2]; /* [threads - 1][prompt, generation] */
    for (int nth = 1; nth <= 2; nth++) {
        cpulm_ctx *c = refcase_ctx(m, 1024, n, 1, nth, 0);
        REQUIRE(t, c);
        lg[nth - 1][0] = refcase_logits(c, toks, n, n, V);
        cpulm_ctx_free(c);
        c = refcase_ctx(m, 1024, n, 1, nth, 0);
        REQUIRE(t, c);
        float *a = refcase_logits(c, toks, n_prompt, n_prompt, V);
        float *b = refcase_logits(c, toks + n_prompt, n - n_prompt, 1, V);
        lg[nth - 1][1] = malloc(sizeof(float) * (size_t)n * (size_t)V);
        REQUIRE(t, a && b && lg[nth - 1][0] && lg[nth - 1][1]);
        memcpy(lg[nth - 1][1], a, sizeof(float) * (size_t)n_prompt * (size_t)V);
        memcpy(lg[nth - 1][1] + (size_t)n_prompt * V, b,
               sizeof(float) * (size_t)(n - n_prompt) * (size_t)V);
        free(a);
        free(b);
        cpulm_ctx_free(c);
    }
    const size_t bytes = sizeof(float) * (size_t)n * (size_t)V;
    CHECK(t, memcmp(lg[0][0], lg[1][0], bytes) == 0);
    CHECK(t, memcmp(lg[0][1], lg[1][1], bytes) == 0);
    double worst = 0;
    for (size_t i = (size_t)n_prompt * V; i < (size_t)n * V; i++)
        worst = fmax(worst, fabs(lg[0][0][i] - lg[0][1][i]));
    fprintf(stderr, "  prompt vs generation: worst |diff| %.2e\n", worst);
    CHECK(t, worst < 5e-4);
    for (int i = 0; i < 2; i++) {
        free(lg[i][0]);
        free(lg[i][1]);
    }
    free(toks);
    cpulm_model_free(m);
}

/* A checkpoint: the attention layers' KV of positions [0, 128) (seq_state_get) and the
 * recurrent state after them (seq_rstate_get), put into another sequence, continue exactly
 * like the source (bit for bit: the same chunks follow), and like a fresh evaluation of the
 * whole prompt up to rounding. Until its recurrent state is set the restored sequence is
 * stale: decoding it is refused, and a cut of it is allowed. */
TEST(hybrid_state_checkpoint_restores) {
    if (test_emulated()) NOT_APPLICABLE(t, EMULATED_WHY);
    static const char *const shapes[] = {"tiny-qwen35", "tiny-qwen35moe", "tiny-qwen3next"};
    for (int sh = 0; sh < 3; sh++) {
        cpulm_model *m = refcase_synth_shape(shapes[sh], "f32", 0);
        REQUIRE(t, m);
        const int32_t V = cpulm_vocab_n(m), n = 200, cut = 128;
        int32_t toks[200];
        for (int32_t i = 0; i < n; i++)
            toks[i] = i == 0 ? 1 : 3 + (int32_t)((i * 7919) % 251);
        cpulm_ctx *c = refcase_ctx(m, 256, n, 2, 1, 0);
        REQUIRE(t, c);
        float *fresh = refcase_logits(c, toks, n, n, V);
        CHECK_EQ_INT(t, cpulm_ctx_seq_rm(c, 0, 0), CPULM_OK);
        float *head = refcase_logits(c, toks, cut, cut, V);
        const uint64_t half = cpulm_ctx_seq_state_bytes(c, cut / 2);
        uint8_t *kv = malloc(2 * half);
        uint8_t *rs = malloc(cpulm_ctx_seq_rstate_bytes(c));
        REQUIRE(t, fresh && head && kv && rs);
        /* in two blobs of 64 positions, as the server's blocks */
        REQUIRE(t, cpulm_ctx_seq_state_get(c, 0, 0, cut / 2, kv) == CPULM_OK);
        REQUIRE(t, cpulm_ctx_seq_state_get(c, 0, cut / 2, cut / 2, kv + half) == CPULM_OK);
        REQUIRE(t, cpulm_ctx_seq_rstate_get(c, 0, rs) == CPULM_OK);
        float *tail = refcase_logits(c, toks + cut, n - cut, n - cut, V); /* the source goes on */
        REQUIRE(t, tail);
        /* into sequence 1 */
        CHECK_EQ_INT(t, cpulm_ctx_seq_state_set(c, 1, 0, cut / 2, kv), CPULM_OK);
        CHECK_EQ_INT(t, cpulm_ctx_seq_state_set(c, 1, cut / 2, cut / 2, kv + half), CPULM_OK);
        int32_t seq1[200];
        for (int32_t i = 0; i < n; i++)
            seq1[i] = 1;
        int8_t want[200];
        memset(want, 1, sizeof want);
        cpulm_batch b = {.n = n - cut, .token = toks + cut, .seq = seq1, .want_logits = want};
        CHECK_EQ_INT(t, cpulm_ctx_decode(c, &b), CPULM_ERR_INVALID_ARG); /* stale */
        CHECK_EQ_INT(t, cpulm_ctx_seq_rstate_get(c, 1, rs + 0), CPULM_ERR_INVALID_ARG);
        CHECK_EQ_INT(t, cpulm_ctx_seq_rm(c, 1, cut / 2), CPULM_OK); /* stale: may be cut */
        CHECK_EQ_INT(t, cpulm_ctx_seq_len(c, 1), cut / 2);
        CHECK_EQ_INT(t, cpulm_ctx_seq_state_set(c, 1, cut / 2, cut / 2, kv + half), CPULM_OK);
        CHECK_EQ_INT(t, cpulm_ctx_seq_rstate_set(c, 1, rs), CPULM_OK);
        REQUIRE(t, cpulm_ctx_decode(c, &b) == CPULM_OK);
        double worst = 0;
        int same = 1;
        for (int32_t i = 0; i < n - cut; i++) {
            const float *l = cpulm_ctx_logits(c, i);
            same &= memcmp(l, tail + (size_t)i * V, sizeof(float) * (size_t)V) == 0;
            for (int32_t v = 0; v < V; v++)
                worst = fmax(worst, fabs(l[v] - fresh[(size_t)(cut + i) * V + v]));
        }
        fprintf(stderr, "  %s: restored vs fresh worst |diff| %.2e\n", shapes[sh], worst);
        CHECK(t, same);
        CHECK(t, worst < 5e-4);
        free(fresh);
        free(head);
        free(tail);
        free(kv);
        free(rs);
        cpulm_ctx_free(c);
        cpulm_model_free(m);
    }
}
