/* test_encoder.c: encoder models (bert, nomic-bert) against llama.cpp: the WordPiece tokens
 * and embeddings of synthetic files (tests/data/encoder-ref.json, made by
 * scripts/encoder-ref.py with the shared llama-server), the rank scores of a synthetic
 * reranker on 20 query/document sets, and what encoders refuse. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "cpulm.h"
#include "model/model.h"
#include "toolkit/synth.h"
#include "test.h"

#ifndef CPULM_SOURCE_DIR
#define CPULM_SOURCE_DIR "."
#endif

#define MAX_TOK 256

/* Writes (once per name) the synthetic model of a case and loads it. */
static cpulm_model *case_model(const cpulm_json *c) {
    const char *shape = cpulm_json_str(cpulm_json_get(c, "shape"));
    const char *type = cpulm_json_str(cpulm_json_get(c, "type"));
    const int rerank = cpulm_json_bool(cpulm_json_get(c, "rerank"), 0);
    cpulm_synth_params p;
    if (!shape || !type || cpulm_synth_shape(shape, &p) != CPULM_OK) return NULL;
    p.type = !strcmp(type, "f16") ? CPULM_DTYPE_F16 : CPULM_DTYPE_F32;
    p.rerank = rerank;
    char path[512];
    snprintf(path, sizeof path, "%s/enc-%s-%s-%d.gguf", test_tmp_dir(), shape, type, rerank);
    cpulm_error err = {0};
    if (cpulm_synth_write(path, &p, &err) != CPULM_OK) {
        fprintf(stderr, "  synth %s: %s\n", path, err.msg);
        return NULL;
    }
    cpulm_model *m = cpulm_model_load(path, NULL, &err);
    if (!m) fprintf(stderr, "  load %s: %s\n", path, err.msg);
    return m;
}

static cpulm_json_doc *load_ref(void) {
    size_t n = 0;
    char *text = test_read_file(CPULM_SOURCE_DIR "/tests/data/encoder-ref.json", &n);
    cpulm_json_doc *d = NULL;
    if (text) cpulm_json_parse(text, n, NULL, &d, NULL, NULL);
    free(text);
    return d;
}

static cpulm_pooling pooling_of(const char *s) {
    if (!strcmp(s, "cls")) return CPULM_POOLING_CLS;
    if (!strcmp(s, "last")) return CPULM_POOLING_LAST;
    if (!strcmp(s, "rank")) return CPULM_POOLING_RANK;
    return CPULM_POOLING_MEAN;
}

static cpulm_ctx *enc_ctx(const cpulm_model *m, cpulm_pooling pooling, int n_seq, int nth) {
    cpulm_ctx_params cp = cpulm_ctx_default_params();
    cp.n_ctx = 256;
    cp.n_batch = 256;
    cp.n_seq_max = n_seq;
    cp.n_threads = cp.n_threads_batch = nth;
    cp.embeddings = CPULM_EMBD_ONLY;
    cp.pooling = pooling;
    cpulm_error err = {0};
    cpulm_ctx *c = cpulm_ctx_new(m, &cp, &err);
    if (!c) fprintf(stderr, "  context: %s\n", err.msg);
    return c;
}

static double cosine(const float *a, const cpulm_json *b, int32_t n) {
    double ab = 0, aa = 0, bb = 0;
    for (int32_t i = 0; i < n; i++) {
        const double y = cpulm_json_num(cpulm_json_at(b, (size_t)i), 0);
        ab += a[i] * y;
        aa += (double)a[i] * a[i];
        bb += y * y;
    }
    return ab / sqrt(aa * bb + 1e-30);
}

/* One embedding case: every text's tokens equal llama-server's, and its embedding's cosine
 * with llama-server's >= 0.999, all texts in one packed call (n_seq sequences per batch)
 * and with nth threads. Returns the failures; *worst: the lowest cosine. */
static int check_embed_case(const cpulm_json *c, int n_seq, int nth, double *worst) {
    cpulm_model *m = case_model(c);
    if (!m) return 1;
    const cpulm_json *items = cpulm_json_get(c, "items");
    const int32_t n_all = (int32_t)cpulm_json_len(items), E = m->hp.n_embd;
    /* under qemu every text's tokens, the embeddings of every other one (7 of 14, 133 of 247
     * tokens, the longest and the shortest text among them): the same kernels, about half the
     * softfloat */
    const int32_t step = test_emulated() ? 2 : 1, n = (n_all + step - 1) / step;
    cpulm_token *toks = malloc(sizeof(cpulm_token) * MAX_TOK * (size_t)n_all);
    const cpulm_token **in = malloc(sizeof *in * (size_t)n);
    int32_t *nt = malloc(sizeof *nt * (size_t)n_all);
    float *out = malloc(sizeof(float) * (size_t)E * (size_t)n);
    int fails = 0;
    for (int32_t a = 0; a < n_all; a++) {
        const cpulm_json *it = cpulm_json_at(items, (size_t)a), *ref = cpulm_json_get(it, "tokens");
        const char *text = cpulm_json_str(cpulm_json_get(it, "text"));
        const cpulm_token *tk = toks + (size_t)a * MAX_TOK;
        fails += cpulm_tokenize(m, text, strlen(text), 1, 1, toks + (size_t)a * MAX_TOK, MAX_TOK,
                                &nt[a]) != CPULM_OK;
        int same = (size_t)nt[a] == cpulm_json_len(ref);
        for (int32_t k = 0; same && k < nt[a]; k++)
            same = tk[k] == (cpulm_token)cpulm_json_num(cpulm_json_at(ref, (size_t)k), -1);
        if (!same) fprintf(stderr, "  tokens of \"%s\" differ from llama.cpp's\n", text);
        fails += !same;
    }
    for (int32_t i = 0; i < n; i++) { /* the texts embedded: every step-th */
        in[i] = toks + (size_t)i * step * MAX_TOK;
        nt[i] = nt[i * step];
    }
    cpulm_ctx *ctx =
        enc_ctx(m, pooling_of(cpulm_json_str(cpulm_json_get(c, "pooling"))), n_seq, nth);
    if (!ctx || cpulm_ctx_embed(ctx, in, nt, n, out) != CPULM_OK) fails++;
    *worst = 1;
    for (int32_t i = 0; ctx && i < n; i++) {
        const cpulm_json *ref =
            cpulm_json_get(cpulm_json_at(items, (size_t)(i * step)), "embedding");
        const double cs =
            (size_t)E == cpulm_json_len(ref) ? cosine(out + (size_t)i * E, ref, E) : 0;
        *worst = cs < *worst ? cs : *worst;
        fails += !(cs >= 0.999);
    }
    cpulm_ctx_free(ctx);
    free(toks);
    free(in);
    free(nt);
    free(out);
    cpulm_model_free(m);
    return fails;
}

/* tiny-bert (absolute positions, biases, GELU) in F32 with mean pooling and in F16 with
 * CLS; tiny-nomic-bert (fused QKV, rotary, SwiGLU) in F32 with mean and in F16 with last:
 * 14 texts each (punctuation, capitals, accents, uncovered words, padding spaces), packed several
 * sequences to a batch and one at a time. Under qemu (the arm64 stage, minutes of softfloat)
 * one at a time on the first case of each shape only: the packing is architecture-neutral
 * and runs for every case natively, every case's layers still run packed there. */
TEST(encoder_ref_embeddings) {
    cpulm_json_doc *d = load_ref();
    REQUIRE(t, d);
    const cpulm_json *cases = cpulm_json_get(cpulm_json_root(d), "cases");
    int n_embed = 0;
    for (size_t i = 0; i < cpulm_json_len(cases); i++) {
        const cpulm_json *c = cpulm_json_at(cases, i);
        if (strcmp(cpulm_json_str(cpulm_json_get(c, "pooling")), "rank") == 0) continue;
        double w1 = 0, w2 = 0;
        CHECK_EQ_INT(t, check_embed_case(c, 8, 2, &w1), 0);
        if (!test_emulated() || n_embed % 2 == 0)
            CHECK_EQ_INT(t, check_embed_case(c, 1, 1, &w2), 0);
        fprintf(stderr, "  %s: lowest cosine %.6f (packed), %.6f (one at a time)\n",
                cpulm_json_str(cpulm_json_get(c, "name")), w1, w2);
        n_embed++;
    }
    CHECK(t, n_embed >= 4);
    cpulm_json_free(d);
}

/* Scores of one set's documents, each pair in its own sequence of one packed decode. */
static int rank_set(cpulm_ctx *ctx, const cpulm_model *m, const cpulm_json *set, float *scores) {
    const char *q = cpulm_json_str(cpulm_json_get(set, "query"));
    const cpulm_json *docs = cpulm_json_get(set, "documents");
    const int32_t n = (int32_t)cpulm_json_len(docs), E = m->hp.n_embd;
    cpulm_token toks[8][MAX_TOK];
    const cpulm_token *in[8];
    int32_t nt[8];
    float out[8 * 256];
    if (n > 8 || E > 256) return 1;
    for (int32_t i = 0; i < n; i++) {
        const char *doc = cpulm_json_str(cpulm_json_at(docs, (size_t)i));
        if (cpulm_rerank_tokens(m, q, strlen(q), doc, strlen(doc), toks[i], MAX_TOK, &nt[i]))
            return 1;
        in[i] = toks[i];
    }
    if (cpulm_ctx_embed(ctx, in, nt, n, out) != CPULM_OK) return 1;
    for (int32_t i = 0; i < n; i++)
        scores[i] = out[(size_t)i * E]; /* rank pooling: the score is element 0 */
    return 0;
}

/* The synthetic reranker (tiny-bert with a classification head): on each of the 20
 * query/document sets (under qemu the first 4), the documents' order by score is
 * llama-server's and each score is within 1e-3 of its. */
TEST(encoder_ref_rerank) {
    cpulm_json_doc *d = load_ref();
    REQUIRE(t, d);
    const cpulm_json *cases = cpulm_json_get(cpulm_json_root(d), "cases"), *c = NULL;
    for (size_t i = 0; i < cpulm_json_len(cases); i++)
        if (!strcmp(cpulm_json_str(cpulm_json_get(cpulm_json_at(cases, i), "pooling")), "rank"))
            c = cpulm_json_at(cases, i);
    REQUIRE(t, c);
    cpulm_model *m = case_model(c);
    REQUIRE(t, m);
    cpulm_ctx *ctx = enc_ctx(m, CPULM_POOLING_RANK, 8, 2);
    REQUIRE(t, ctx);
    const cpulm_json *sets = cpulm_json_get(c, "sets");
    CHECK(t, cpulm_json_len(sets) >= 20);
    double worst = 0;
    /* under qemu the first 4 sets (4, 5, 6 and 7 documents: every batch size of the 20) */
    const size_t n_sets = test_emulated() ? 4 : cpulm_json_len(sets);
    for (size_t s = 0; s < n_sets; s++) {
        const cpulm_json *set = cpulm_json_at(sets, s), *ref = cpulm_json_get(set, "scores");
        float sc[8];
        const int32_t n = (int32_t)cpulm_json_len(ref);
        CHECK_EQ_INT(t, rank_set(ctx, m, set, sc), 0);
        for (int32_t i = 0; i < n; i++)
            for (int32_t j = 0; j < n; j++) {
                const double ri = cpulm_json_num(cpulm_json_at(ref, (size_t)i), 0);
                const double rj = cpulm_json_num(cpulm_json_at(ref, (size_t)j), 0);
                if (ri > rj + 1e-4) CHECK(t, sc[i] > sc[j]); /* the same order */
            }
        for (int32_t i = 0; i < n; i++) {
            const double dd = fabs(sc[i] - cpulm_json_num(cpulm_json_at(ref, (size_t)i), 0));
            worst = dd > worst ? dd : worst;
        }
    }
    CHECK(t, worst <= 1e-3);
    fprintf(stderr, "  rerank: worst |score diff| %.6f over %zu sets\n", worst, n_sets);
    cpulm_ctx_free(ctx);
    cpulm_model_free(m);
    cpulm_json_free(d);
}

/* An encoder computes no logits, rank pooling needs a classification head, and a sequence
 * must be whole in one decode (its attention sees only the batch). */
TEST(encoder_refusals) {
    cpulm_json_doc *d = load_ref();
    REQUIRE(t, d);
    cpulm_model *m = case_model(cpulm_json_at(cpulm_json_get(cpulm_json_root(d), "cases"), 0));
    REQUIRE(t, m);
    CHECK(t, cpulm_model_is_encoder(m));
    cpulm_ctx_params cp = cpulm_ctx_default_params();
    cp.n_threads = 1;
    cpulm_ctx *c = cpulm_ctx_new(m, &cp, NULL); /* no embeddings: refused */
    CHECK(t, c == NULL);
    cp.embeddings = CPULM_EMBD_WITH_LOGITS;
    CHECK(t, cpulm_ctx_new(m, &cp, NULL) == NULL);
    cp.embeddings = CPULM_EMBD_ONLY;
    cp.pooling = CPULM_POOLING_RANK; /* no cls head in this file */
    CHECK(t, cpulm_ctx_new(m, &cp, NULL) == NULL);
    cp.pooling = CPULM_POOLING_LAST;
    cp.n_ctx = 4096; /* past the 256 absolute positions */
    CHECK(t, cpulm_ctx_new(m, &cp, NULL) == NULL);
    cp.n_ctx = 64;
    c = cpulm_ctx_new(m, &cp, NULL);
    REQUIRE(t, c);
    cpulm_token tok[4] = {2, 200, 201, 3};
    cpulm_batch b = {.n = 2, .token = tok};
    CHECK_EQ_INT(t, cpulm_ctx_decode(c, &b), CPULM_OK);
    b.token = tok + 2; /* continuing the sequence in a second decode */
    CHECK_EQ_INT(t, cpulm_ctx_decode(c, &b), CPULM_ERR_INVALID_ARG);
    cpulm_ctx_free(c);
    cpulm_model_free(m);
    cpulm_json_free(d);
}
