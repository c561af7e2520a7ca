/* refcase.c: llama.cpp reference cases for synthetic models (see refcase.h). */
#include "refcase.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

#ifndef CPULM_SOURCE_DIR
#define CPULM_SOURCE_DIR "."
#endif

cpulm_json_doc *refcase_load(const char *file) {
    char path[512];
    snprintf(path, sizeof path, "%s/tests/data/%s", CPULM_SOURCE_DIR, file);
    size_t n = 0;
    char *text = test_read_file(path, &n);
    cpulm_json_doc *d = NULL;
    if (text) cpulm_json_parse(text, n, NULL, &d, NULL, NULL);
    free(text);
    return d;
}

cpulm_model *refcase_synth_load(const cpulm_synth_params *p, const char *file) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", test_tmp_dir(), file);
    cpulm_error err = {0};
    FILE *f = fopen(path, "rb");
    if (f)
        fclose(f);
    else if (cpulm_synth_write(path, p, &err) != CPULM_OK) {
        fprintf(stderr, "  synth %s: %s\n", file, err.msg);
        return NULL;
    }
    cpulm_model *m = cpulm_model_load(path, NULL, &err);
    if (!m) fprintf(stderr, "  load %s: %s\n", file, err.msg);
    return m;
}

/* The shape's synth params in a weight type, cut to `layers` layers when > 0. */
static int shape_params(const char *shape, const char *type, int layers, cpulm_synth_params *p) {
    const int dt = type ? cpulm_dtype_from_name(type) : -1;
    if (!shape || dt < 0 || cpulm_synth_shape(shape, p) != CPULM_OK) {
        fprintf(stderr, "  no shape '%s' in type '%s'\n", shape ? shape : "", type ? type : "");
        return -1;
    }
    p->type = (cpulm_dtype)dt;
    if (layers > 0) cpulm_synth_set_layers(p, layers);
    return 0;
}

cpulm_model *refcase_synth_shape(const char *shape, const char *type, int layers) {
    cpulm_synth_params p;
    if (shape_params(shape, type, layers, &p) < 0) return NULL;
    char name[160];
    snprintf(name, sizeof name, "%s-%s-%d.gguf", shape, type, layers);
    return refcase_synth_load(&p, name);
}

cpulm_model *refcase_model(const cpulm_json *c) {
    const char *shape = cpulm_json_str(cpulm_json_get(c, "shape"));
    const char *type = cpulm_json_str(cpulm_json_get(c, "type"));
    const int layers = (int)cpulm_json_num(cpulm_json_get(c, "layers"), 0);
    cpulm_synth_params p;
    if (shape_params(shape, type, layers, &p) < 0) return NULL;
    p.hp.n_swa = (int32_t)cpulm_json_num(cpulm_json_get(c, "swa"), p.hp.n_swa);
    p.swa_period = (int32_t)cpulm_json_num(cpulm_json_get(c, "swa_period"), p.swa_period);
    p.rope_linear = (float)cpulm_json_num(cpulm_json_get(c, "rope_linear"), p.rope_linear);
    p.hp.final_softcap = (float)cpulm_json_num(cpulm_json_get(c, "softcap"), p.hp.final_softcap);
    p.k_eq_v = (int)cpulm_json_num(cpulm_json_get(c, "k_eq_v"), p.k_eq_v);
    p.double_wide_mlp = (int)cpulm_json_num(cpulm_json_get(c, "double_wide_mlp"), 0);
    p.kv_heads_global = (int32_t)cpulm_json_num(cpulm_json_get(c, "kv_heads_global"), 0);
    p.yarn_factor = (float)cpulm_json_num(cpulm_json_get(c, "yarn"), p.yarn_factor);
    p.yarn_orig_ctx = (int32_t)cpulm_json_num(cpulm_json_get(c, "yarn_orig_ctx"), p.yarn_orig_ctx);
    p.hp.head_dim = (int32_t)cpulm_json_num(cpulm_json_get(c, "head_dim"), p.hp.head_dim);
    const char *arch = cpulm_json_str(cpulm_json_get(c, "arch"));
    if (arch) p.arch = arch; /* the case's JSON outlives the load */
    char name[260];
    snprintf(name, sizeof name, "%s-%s-%d-w%d-p%d-r%g-c%g-k%d-d%d-g%d-y%g-%d-h%d-%s.gguf", shape,
             type, layers, p.hp.n_swa, p.swa_period, (double)p.rope_linear,
             (double)p.hp.final_softcap, p.k_eq_v, p.double_wide_mlp, (int)p.kv_heads_global,
             (double)p.yarn_factor, (int)p.yarn_orig_ctx, (int)p.hp.head_dim, p.arch ? p.arch : "");
    return refcase_synth_load(&p, name);
}

/* refcase_ctx on a KV cache of type kv */
static cpulm_ctx *ctx_kv(const cpulm_model *m, int n_ctx, int n_batch, int n_seq, int nth, int fast,
                         cpulm_kv_type kv) {
    cpulm_ctx_params cp = cpulm_ctx_default_params();
    cp.kv_type = kv;
    cp.n_ctx = n_ctx;
    cp.n_batch = n_batch;
    cp.n_outputs_max = n_batch;
    cp.n_seq_max = n_seq;
    cp.n_threads = nth;
    cp.attn_fast = fast;
    return cpulm_ctx_new(m, &cp, NULL);
}

cpulm_ctx *refcase_ctx(const cpulm_model *m, int n_ctx, int n_batch, int n_seq, int nth, int fast) {
    return ctx_kv(m, n_ctx, n_batch, n_seq, nth, fast, cpulm_ctx_default_params().kv_type);
}

float *refcase_logits(cpulm_ctx *ctx, const int32_t *toks, int32_t n, int32_t step, int32_t V) {
    float *out = malloc(sizeof(float) * (size_t)n * (size_t)V);
    int8_t *want = malloc((size_t)step);
    int ok = out && want;
    if (want) memset(want, 1, (size_t)step);
    for (int32_t i = 0; ok && i < n; i += step) {
        int32_t k = n - i < step ? n - i : step;
        cpulm_batch b = {.n = k, .token = toks + i, .want_logits = want};
        ok = cpulm_ctx_decode(ctx, &b) == CPULM_OK;
        for (int32_t j = 0; ok && j < k; j++)
            memcpy(out + (size_t)(i + j) * V, cpulm_ctx_logits(ctx, j), sizeof(float) * (size_t)V);
    }
    free(want);
    if (!ok) free(out);
    return ok ? out : NULL;
}

void refcase_log_softmax(const float *l, int32_t V, double *out) {
    double mx = l[0], sum = 0;
    for (int32_t i = 1; i < V; i++)
        mx = l[i] > mx ? l[i] : mx;
    for (int32_t i = 0; i < V; i++)
        sum += exp(l[i] - mx);
    for (int32_t i = 0; i < V; i++)
        out[i] = l[i] - mx - log(sum);
}

/* Compares the scored positions of case c's logits; returns failures, worst diff out. */
static int compare(const cpulm_json *c, const float *lg, const int32_t *toks, int32_t n, int32_t V,
                   double tol, double *worst_out) {
    const cpulm_json *rows = cpulm_json_get(c, "logprobs_topk");
    const int32_t first = (int32_t)cpulm_json_num(cpulm_json_get(c, "first"), 0);
    double *lp = malloc(sizeof(double) * (size_t)V), worst = 0, nll = 0;
    int fails = 0;
    for (int32_t j = first; lp && j < n - 1; j++) {
        refcase_log_softmax(lg + (size_t)j * V, V, lp);
        nll -= lp[toks[j + 1]];
        const cpulm_json *row = cpulm_json_at(rows, (size_t)(j - first));
        for (size_t r = 0; r < cpulm_json_len(row); r++) {
            int32_t id = (int32_t)cpulm_json_num(cpulm_json_at(cpulm_json_at(row, r), 0), -1);
            double ref = cpulm_json_num(cpulm_json_at(cpulm_json_at(row, r), 1), 0);
            double d = id >= 0 && id < V ? fabs(lp[id] - ref) : 1e9;
            worst = d > worst || d != d ? d : worst;
            fails += !(d <= tol);
        }
    }
    double ppl = exp(nll / (n - 1 - first)), ref_ppl = cpulm_json_num(cpulm_json_get(c, "ppl"), 0);
    if (!lp || !(fabs(ppl - ref_ppl) <= 0.005 * ref_ppl)) fails++;
    if (fails)
        fprintf(stderr,
                "  %s: %d failures, worst |diff| %.5f (tol %.4f), ppl %.4f (llama.cpp %.4f)\n",
                cpulm_json_str(cpulm_json_get(c, "name")), fails, worst, tol, ppl, ref_ppl);
    *worst_out = worst;
    free(lp);
    return fails;
}

int refcase_check(const cpulm_json *c, int32_t step, int fast, double tol, double *worst) {
    cpulm_model *m = refcase_model(c);
    if (!m) return 1;
    const cpulm_json *jt = cpulm_json_get(c, "tokens");
    const int32_t n = (int32_t)cpulm_json_len(jt), V = cpulm_vocab_n(m);
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
    for (int32_t i = 0; toks && i < n; i++)
        toks[i] = (int32_t)cpulm_json_num(cpulm_json_at(jt, (size_t)i), 0);
    if (toks && n > 0) toks[0] = cpulm_token_bos(m);
    const char *kv = cpulm_json_str(cpulm_json_get(c, "kv")); /* the case's KV cache type */
    const cpulm_kv_type kt = !kv                   ? cpulm_ctx_default_params().kv_type
                             : !strcmp(kv, "q8_0") ? CPULM_KV_Q8_0
                             : !strcmp(kv, "q4_0") ? CPULM_KV_Q4_0
                                                   : CPULM_KV_F32;
    cpulm_ctx *ctx = toks && n > 1 ? ctx_kv(m, n, 512, 1, 2, fast, kt) : NULL;
    float *lg = ctx ? refcase_logits(ctx, toks, n, step, V) : NULL;
    int fails = lg ? compare(c, lg, toks, n, V, tol, worst) : 1;
    free(lg);
    free(toks);
    cpulm_ctx_free(ctx);
    cpulm_model_free(m);
    return fails;
}

/* Four sequences of different lengths (37, 50, 23, 64 tokens, then 5 generated) decoded as
 * one batch against each decoded alone: the number of logit rows that differ in any bit, or
 * -1 when a context or decode fails. */
int refcase_batch4_diffs(const cpulm_model *m) {
    const int32_t V = cpulm_vocab_n(m), lens[4] = {37, 50, 23, 64}, gen = 5;
    float *alone[4];
    int32_t toks[4][80];
    for (int s = 0; s < 4; s++) {
        for (int32_t i = 0; i < lens[s] + gen; i++)
            toks[s][i] = i == 0 ? 1 : 3 + (int32_t)((s * 131 + i * 37) % 500);
        cpulm_ctx *c1 = refcase_ctx(m, 128, 64, 1, 2, 0);
        if (!c1) return -1;
        alone[s] = refcase_logits(c1, toks[s], lens[s] + gen, lens[s], V);
        if (!alone[s]) return -1;
        cpulm_ctx_free(c1);
    }
    cpulm_ctx *c = refcase_ctx(m, 128, 256, 4, 2, 0);
    if (!c) return -1;
    int32_t bt[256], bs[256], at[4][80], n = 0;
    int8_t want[256];
    for (int32_t i = 0; i < 64; i++)
        for (int s = 0; s < 4; s++)
            if (i < lens[s]) {
                bt[n] = toks[s][i];
                bs[n] = s;
                want[n] = 1;
                at[s][i] = n++;
            }
    cpulm_batch b = {.n = n, .token = bt, .seq = bs, .want_logits = want};
    if (cpulm_ctx_decode(c, &b) != CPULM_OK) return -1;
    int diff = 0;
    for (int s = 0; s < 4; s++)
        for (int32_t i = 0; i < lens[s]; i++)
            diff += memcmp(cpulm_ctx_logits(c, at[s][i]), alone[s] + (size_t)i * V,
                           sizeof(float) * (size_t)V) != 0;
    for (int32_t g = 0; g < gen; g++) {
        for (int s = 0; s < 4; s++) {
            bt[s] = toks[s][lens[s] + g];
            bs[s] = s;
        }
        cpulm_batch b1 = {.n = 4, .token = bt, .seq = bs, .want_logits = want};
        if (cpulm_ctx_decode(c, &b1) != CPULM_OK) return -1;
        for (int s = 0; s < 4; s++)
            diff += memcmp(cpulm_ctx_logits(c, s), alone[s] + (size_t)(lens[s] + g) * V,
                           sizeof(float) * (size_t)V) != 0;
    }
    for (int s = 0; s < 4; s++)
        free(alone[s]);
    cpulm_ctx_free(c);
    return diff;
}
