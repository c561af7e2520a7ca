/* test_embed.c: embeddings (cpulm_ctx_params.embeddings / pooling). The pooling rules are
 * checked against the per-token vectors of the same pass (LAST and CLS are rows of it, MEAN
 * their average), the reference's pooled vectors of llama.cpp (embeddings.json: every cosine
 * >= the case's min_cosine), batched against one input at a time, thread-count
 * independence, logits unchanged, the position rule of MEAN/CLS, and the helpers. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "cpulm.h"
#include "test.h"

static cpulm_model *load(const char *file) {
    char rel[256];
    snprintf(rel, sizeof rel, "testdata/models/%s", file);
    const char *p = test_shared_path(rel);
    if (!p) return NULL;
    cpulm_error err = {0};
    cpulm_model *m = cpulm_model_load(p, NULL, &err);
    if (!m) fprintf(stderr, "  load %s: %s\n", file, err.msg);
    return m;
}

static cpulm_ctx *embd_ctx(const cpulm_model *m, cpulm_embd_mode mode, cpulm_pooling pool,
                           int n_seq, int n_threads) {
    cpulm_ctx_params p = cpulm_ctx_default_params();
    p.n_ctx = 128;
    p.n_batch = 128;
    p.n_seq_max = n_seq;
    p.n_outputs_max = 128;
    p.n_threads = n_threads;
    p.embeddings = mode;
    p.pooling = pool;
    return cpulm_ctx_new(m, &p, NULL);
}

static double cosine(const float *a, const float *b, int32_t n) {
    double ab = 0, aa = 0, bb = 0;
    for (int32_t i = 0; i < n; i++) {
        ab += (double)a[i] * b[i];
        aa += (double)a[i] * a[i];
        bb += (double)b[i] * b[i];
    }
    return aa > 0 && bb > 0 ? ab / sqrt(aa * bb) : 0.0;
}

static const cpulm_token toks[12] = {1, 50, 60, 70, 80, 90, 100, 110, 120, 130, 140, 150};

/* Per-token embeddings of every token of toks[0..n) (pooling NONE, all rows wanted). */
static float *per_token(const cpulm_model *m, int32_t n) {
    cpulm_ctx *c = embd_ctx(m, CPULM_EMBD_ONLY, CPULM_POOLING_NONE, 1, 1);
    if (!c) return NULL;
    int8_t want[12];
    memset(want, 1, sizeof want);
    cpulm_batch b = {.n = n, .token = toks, .want_logits = want};
    const int32_t E = cpulm_ctx_n_embd(c);
    float *out = malloc(sizeof(float) * (size_t)n * (size_t)E);
    if (cpulm_ctx_decode(c, &b) != CPULM_OK || cpulm_ctx_n_outputs(c) != n) n = 0;
    for (int32_t i = 0; i < n; i++)
        memcpy(out + (size_t)i * E, cpulm_ctx_embeddings_ith(c, i), sizeof(float) * (size_t)E);
    cpulm_ctx_free(c);
    if (!n) {
        free(out);
        return NULL;
    }
    return out;
}

/* Pooled vector of toks[0..n) in sequence seq of a fresh context. */
static int pooled(const cpulm_model *m, cpulm_pooling pool, int32_t n, int n_threads, float *out) {
    cpulm_ctx *c = embd_ctx(m, CPULM_EMBD_ONLY, pool, 1, n_threads);
    if (!c) return 0;
    cpulm_batch b = {.n = n, .token = toks};
    int ok = cpulm_ctx_decode(c, &b) == CPULM_OK && cpulm_ctx_embeddings_seq(c, 0) != NULL;
    if (ok)
        memcpy(out, cpulm_ctx_embeddings_seq(c, 0), sizeof(float) * (size_t)cpulm_ctx_n_embd(c));
    cpulm_ctx_free(c);
    return ok;
}

TEST(embed_pooling_matches_per_token_rows) {
    cpulm_model *m = load("tiny-llama-f32.gguf");
    if (!m) SKIP(t, "CPULM_SHARED models not found");
    const int32_t n = 12, E = 256;
    float *rows = per_token(m, n);
    REQUIRE(t, rows != NULL);
    float v[256], mean[256] = {0};
    CHECK(t, pooled(m, CPULM_POOLING_LAST, n, 1, v));
    CHECK(t, memcmp(v, rows + (size_t)(n - 1) * E, sizeof v) == 0);
    CHECK(t, pooled(m, CPULM_POOLING_CLS, n, 1, v));
    CHECK(t, memcmp(v, rows, sizeof v) == 0);
    CHECK(t, pooled(m, CPULM_POOLING_MEAN, n, 1, v));
    for (int32_t i = 0; i < n; i++)
        for (int32_t j = 0; j < E; j++)
            mean[j] += rows[(size_t)i * E + j] / (float)n;
    for (int32_t j = 0; j < E; j++)
        CHECK_NEAR(t, v[j], mean[j], 1e-5 * (1 + fabs(mean[j])));
    /* two threads compute the same bits */
    float v2[256];
    for (cpulm_pooling p = CPULM_POOLING_MEAN; p <= CPULM_POOLING_LAST; p++) {
        CHECK(t, pooled(m, p, n, 1, v) && pooled(m, p, n, 2, v2));
        CHECK(t, memcmp(v, v2, sizeof v) == 0);
    }
    free(rows);
    cpulm_model_free(m);
}

TEST(embed_logits_unchanged_and_skipped) {
    cpulm_model *m = load("tiny-qwen2-q8_0.gguf");
    if (!m) SKIP(t, "CPULM_SHARED models not found");
    cpulm_ctx *plain = embd_ctx(m, CPULM_EMBD_OFF, CPULM_POOLING_UNSPECIFIED, 1, 2);
    cpulm_ctx *both = embd_ctx(m, CPULM_EMBD_WITH_LOGITS, CPULM_POOLING_MEAN, 1, 2);
    cpulm_ctx *only = embd_ctx(m, CPULM_EMBD_ONLY, CPULM_POOLING_MEAN, 1, 2);
    REQUIRE(t, plain && both && only);
    cpulm_batch b = {.n = 9, .token = toks};
    CHECK_EQ_INT(t, cpulm_ctx_decode(plain, &b), CPULM_OK);
    CHECK_EQ_INT(t, cpulm_ctx_decode(both, &b), CPULM_OK);
    CHECK_EQ_INT(t, cpulm_ctx_decode(only, &b), CPULM_OK);
    const int32_t V = cpulm_vocab_n(m), E = cpulm_ctx_n_embd(both);
    CHECK(t, cpulm_ctx_logits(both, 0) &&
                 memcmp(cpulm_ctx_logits(plain, 0), cpulm_ctx_logits(both, 0), sizeof(float) * V) ==
                     0);
    CHECK(t, cpulm_ctx_logits(only, 0) == NULL && cpulm_ctx_n_outputs(only) == 0);
    CHECK(t, memcmp(cpulm_ctx_embeddings_seq(both, 0), cpulm_ctx_embeddings_seq(only, 0),
                    sizeof(float) * E) == 0);
    CHECK(t,
          cpulm_ctx_embeddings_seq(plain, 0) == NULL && cpulm_ctx_embeddings_ith(plain, 0) == NULL);
    CHECK(t, cpulm_ctx_embeddings_ith(both, 0) == NULL); /* pooled: no per-token vectors */
    CHECK_EQ_INT(t, cpulm_ctx_pooling(plain), CPULM_POOLING_NONE);
    /* embeddings only holds no logits buffer */
    CHECK(t, cpulm_ctx_memory_bytes(only) + sizeof(float) * (uint64_t)V <=
                 cpulm_ctx_memory_bytes(plain));
    cpulm_ctx_free(plain);
    cpulm_ctx_free(both);
    cpulm_ctx_free(only);
    cpulm_model_free(m);
}

TEST(embed_positions_rule_and_batches) {
    cpulm_model *m = load("tiny-llama-q4_0.gguf");
    if (!m) SKIP(t, "CPULM_SHARED models not found");
    const int32_t E = 256;
    /* MEAN needs the whole sequence in one batch; the cache is left unchanged on refusal */
    cpulm_ctx *c = embd_ctx(m, CPULM_EMBD_ONLY, CPULM_POOLING_MEAN, 2, 2);
    REQUIRE(t, c != NULL);
    cpulm_batch b = {.n = 4, .token = toks};
    CHECK_EQ_INT(t, cpulm_ctx_decode(c, &b), CPULM_OK);
    cpulm_batch b2 = {.n = 4, .token = toks + 4};
    CHECK_EQ_INT(t, cpulm_ctx_decode(c, &b2), CPULM_ERR_INVALID_ARG);
    CHECK_EQ_INT(t, cpulm_ctx_seq_len(c, 0), 4);
    CHECK(t, cpulm_ctx_embeddings_seq(c, 0) == NULL && cpulm_ctx_embeddings_seq(c, 1) == NULL);
    cpulm_ctx_free(c);
    /* LAST may continue a cached sequence: chunked equals whole */
    float whole[256];
    CHECK(t, pooled(m, CPULM_POOLING_LAST, 12, 2, whole));
    c = embd_ctx(m, CPULM_EMBD_ONLY, CPULM_POOLING_LAST, 1, 2);
    REQUIRE(t, c != NULL);
    cpulm_batch a1 = {.n = 5, .token = toks}, a2 = {.n = 7, .token = toks + 5};
    CHECK_EQ_INT(t, cpulm_ctx_decode(c, &a1), CPULM_OK);
    CHECK_EQ_INT(t, cpulm_ctx_decode(c, &a2), CPULM_OK);
    const float *v = cpulm_ctx_embeddings_seq(c, 0);
    CHECK(t, v && cosine(v, whole, E) > 0.99999);
    cpulm_ctx_free(c);
    /* three sequences interleaved in one batch: each its own vector, none for the fourth */
    c = embd_ctx(m, CPULM_EMBD_ONLY, CPULM_POOLING_MEAN, 4, 2);
    REQUIRE(t, c != NULL);
    cpulm_token tk[12];
    int32_t sq[12];
    for (int i = 0; i < 12; i++) {
        tk[i] = toks[i / 3 + (i % 3) * 4]; /* seq s gets toks[4s .. 4s+3] */
        sq[i] = i % 3;
    }
    cpulm_batch mb = {.n = 12, .token = tk, .seq = sq};
    CHECK_EQ_INT(t, cpulm_ctx_decode(c, &mb), CPULM_OK);
    for (int s = 0; s < 3; s++) {
        cpulm_ctx *one = embd_ctx(m, CPULM_EMBD_ONLY, CPULM_POOLING_MEAN, 1, 2);
        REQUIRE(t, one != NULL);
        cpulm_batch ob = {.n = 4, .token = toks + 4 * s};
        CHECK_EQ_INT(t, cpulm_ctx_decode(one, &ob), CPULM_OK);
        const float *x = cpulm_ctx_embeddings_seq(c, s), *y = cpulm_ctx_embeddings_seq(one, 0);
        CHECK(t, x && y && cosine(x, y, E) > 0.99999);
        cpulm_ctx_free(one);
    }
    CHECK(t, cpulm_ctx_embeddings_seq(c, 3) == NULL);
    cpulm_ctx_free(c);
    cpulm_model_free(m);
}

TEST(embed_params_and_helpers) {
    cpulm_model *m = load("tiny-llama-q8_0.gguf");
    if (!m) SKIP(t, "CPULM_SHARED models not found");
    /* no pooling_type key: NONE, as llama.cpp */
    CHECK_EQ_INT(t, cpulm_model_pooling(m), CPULM_POOLING_NONE);
    cpulm_ctx *c = embd_ctx(m, CPULM_EMBD_ONLY, CPULM_POOLING_UNSPECIFIED, 1, 1);
    CHECK(t, c && cpulm_ctx_pooling(c) == CPULM_POOLING_NONE);
    cpulm_ctx_free(c);
    cpulm_ctx_params p = cpulm_ctx_default_params();
    CHECK_EQ_INT(t, p.embeddings, CPULM_EMBD_OFF);
    CHECK_EQ_INT(t, p.pooling, CPULM_POOLING_UNSPECIFIED);
    p.embeddings = CPULM_EMBD_ONLY;
    p.pooling = CPULM_POOLING_RANK;
    cpulm_error err = {0};
    CHECK(t, cpulm_ctx_new(m, &p, &err) == NULL && err.code == CPULM_ERR_UNSUPPORTED);
    p.pooling = (cpulm_pooling)7;
    CHECK(t, cpulm_ctx_new(m, &p, &err) == NULL && err.code == CPULM_ERR_INVALID_ARG);
    cpulm_model_free(m);
    static const char *const names[] = {"none", "mean", "cls", "last", "rank"};
    for (int i = 0; i < 5; i++) {
        cpulm_pooling q = CPULM_POOLING_UNSPECIFIED;
        CHECK(t, cpulm_pooling_parse(names[i], &q) == CPULM_OK && (int)q == i);
        CHECK(t, strcmp(cpulm_pooling_name(q), names[i]) == 0);
    }
    cpulm_pooling q;
    CHECK_EQ_INT(t, cpulm_pooling_parse("avg", &q), CPULM_ERR_INVALID_ARG);
    CHECK(t, strcmp(cpulm_pooling_name(CPULM_POOLING_UNSPECIFIED), "unspecified") == 0);
    float v[3] = {3, 0, -4}, z[2] = {0, 0};
    cpulm_embd_normalize(v, 3);
    CHECK_NEAR(t, v[0], 0.6, 1e-7);
    CHECK_NEAR(t, v[2], -0.8, 1e-7);
    cpulm_embd_normalize(z, 2);
    CHECK(t, z[0] == 0 && z[1] == 0);
}

/* cpulm_ctx_embed: packed batches equal one input per context; long inputs chunked (LAST) or
 * refused (MEAN). */
TEST(embed_ctx_embed_packs_inputs) {
    cpulm_model *m = load("tiny-qwen2-q4_k_m.gguf");
    if (!m) SKIP(t, "CPULM_SHARED models not found");
    const cpulm_token *in[5] = {toks, toks + 2, toks + 5, toks, toks + 1};
    const int32_t n_tok[5] = {12, 3, 7, 1, 11};
    const int32_t E = 256;
    for (cpulm_pooling p = CPULM_POOLING_MEAN; p <= CPULM_POOLING_LAST; p++) {
        cpulm_ctx_params cp = cpulm_ctx_default_params();
        cp.n_ctx = 32;
        cp.n_batch = 16; /* 12+3 fit, then 7+1, then 11: three decodes */
        cp.n_seq_max = 3;
        cp.n_threads = 2;
        cp.embeddings = CPULM_EMBD_ONLY;
        cp.pooling = p;
        cpulm_ctx *c = cpulm_ctx_new(m, &cp, NULL);
        REQUIRE(t, c != NULL);
        float all[5 * 256], one[256];
        CHECK_EQ_INT(t, cpulm_ctx_embed(c, in, n_tok, 5, all), CPULM_OK);
        for (int i = 0; i < 5; i++) {
            CHECK_EQ_INT(t, cpulm_ctx_embed(c, in + i, n_tok + i, 1, one), CPULM_OK);
            CHECK(t, cosine(one, all + i * E, E) > 0.99999);
        }
        for (int s = 0; s < 3; s++)
            CHECK_EQ_INT(t, cpulm_ctx_seq_len(c, s), 0);
        cp.n_batch = 5; /* inputs of 12, 7 and 11 tokens are longer than a batch */
        cpulm_ctx *small = cpulm_ctx_new(m, &cp, NULL);
        REQUIRE(t, small != NULL);
        float part[5 * 256];
        cpulm_status st = cpulm_ctx_embed(small, in, n_tok, 5, part);
        if (p == CPULM_POOLING_LAST) {
            CHECK_EQ_INT(t, st, CPULM_OK);
            for (int i = 0; i < 5; i++)
                CHECK(t, cosine(part + i * E, all + i * E, E) > 0.99999);
        } else {
            CHECK_EQ_INT(t, st, CPULM_ERR_TOO_SMALL);
        }
        const int32_t zero = 0, big = 33;
        CHECK_EQ_INT(t, cpulm_ctx_embed(c, in, &zero, 1, one), CPULM_ERR_INVALID_ARG);
        CHECK_EQ_INT(t, cpulm_ctx_embed(c, in, &big, 1, one), CPULM_ERR_KV_FULL);
        cpulm_ctx_free(small);
        cpulm_ctx_free(c);
    }
    cpulm_ctx *none = embd_ctx(m, CPULM_EMBD_ONLY, CPULM_POOLING_NONE, 1, 1);
    float v[256];
    CHECK(t, none && cpulm_ctx_embed(none, in, n_tok, 1, v) == CPULM_ERR_INVALID_ARG);
    cpulm_ctx_free(none);
    cpulm_model_free(m);
}

static cpulm_json_doc *load_reference(void) {
    const char *path = test_shared_path("testdata/reference/llamacpp/embeddings.json");
    if (!path) return NULL;
    size_t n;
    char *text = test_read_file(path, &n);
    if (!text) return NULL;
    cpulm_json_doc *d = NULL;
    cpulm_json_parse(text, n, NULL, &d, NULL, NULL);
    free(text);
    return d;
}

/* One case of embeddings.json: every input's vector, one input per call and all inputs in
 * one packed decode, has cosine >= min_cosine with llama.cpp's, and the two agree. */
static void check_reference_case(test_ctx *t, const cpulm_json *cs) {
    const char *file = cpulm_json_str(cpulm_json_get(cs, "model"));
    cpulm_pooling pool;
    REQUIRE(t, file && cpulm_pooling_parse(cpulm_json_str(cpulm_json_get(cs, "pooling")), &pool) ==
                           CPULM_OK);
    const double min_cos = cpulm_json_num(cpulm_json_get(cs, "min_cosine"), 2.0);
    const cpulm_json *inputs = cpulm_json_get(cs, "inputs");
    const int32_t n = (int32_t)cpulm_json_len(inputs);
    cpulm_model *m = load(file);
    REQUIRE(t, m != NULL && n > 0 && n <= 16);
    cpulm_ctx_params cp = cpulm_ctx_default_params();
    cp.n_ctx = 64;
    cp.n_batch = 256;
    cp.n_seq_max = n;
    cp.n_threads = 2;
    cp.embeddings = CPULM_EMBD_ONLY;
    cp.pooling = pool;
    cpulm_ctx *c = cpulm_ctx_new(m, &cp, NULL);
    REQUIRE(t, c != NULL);
    const int32_t E = cpulm_ctx_n_embd(c);
    cpulm_token *tok[16] = {0};
    int32_t n_tok[16];
    float *all = malloc(sizeof(float) * (size_t)n * (size_t)E),
          *one = malloc(sizeof(float) * (size_t)E);
    for (int32_t i = 0; i < n; i++) {
        const char *text = cpulm_json_str(cpulm_json_get(cpulm_json_at(inputs, i), "text"));
        tok[i] = malloc(sizeof(cpulm_token) * 64);
        CHECK_EQ_INT(t, cpulm_tokenize(m, text, strlen(text), 1, 0, tok[i], 64, &n_tok[i]),
                     CPULM_OK);
    }
    CHECK_EQ_INT(t, cpulm_ctx_embed(c, (const cpulm_token *const *)tok, n_tok, n, all), CPULM_OK);
    for (int32_t i = 0; i < n; i++) {
        const cpulm_json *ref = cpulm_json_get(cpulm_json_at(inputs, i), "embedding");
        CHECK_EQ_INT(t, (int64_t)cpulm_json_len(ref), E);
        float r[4096];
        for (int32_t j = 0; j < E && j < 4096; j++)
            r[j] = (float)cpulm_json_num(cpulm_json_at(ref, j), 0);
        CHECK_EQ_INT(t, cpulm_ctx_embed(c, (const cpulm_token *const *)&tok[i], &n_tok[i], 1, one),
                     CPULM_OK);
        const double c1 = cosine(one, r, E), cb = cosine(all + (size_t)i * E, r, E);
        if (c1 < min_cos || cb < min_cos)
            fprintf(stderr, "  %s %s input %d: cosine %.6f (batched %.6f) < %.5f\n", file,
                    cpulm_pooling_name(pool), i, c1, cb, min_cos);
        CHECK(t, c1 >= min_cos && cb >= min_cos);
        CHECK(t, cosine(one, all + (size_t)i * E, E) > 0.99999);
        free(tok[i]);
    }
    free(all);
    free(one);
    cpulm_ctx_free(c);
    cpulm_model_free(m);
}

TEST(embed_reference_llamacpp) {
    cpulm_json_doc *d = load_reference();
    if (!d) SKIP(t, "CPULM_SHARED reference embeddings not found");
    const cpulm_json *cases = cpulm_json_get(cpulm_json_root(d), "cases");
    CHECK(t, cpulm_json_len(cases) >= 6);
    for (size_t i = 0; i < cpulm_json_len(cases); i++)
        check_reference_case(t, cpulm_json_at(cases, i));
    cpulm_json_free(d);
}
