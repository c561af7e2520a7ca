/* cmd_logits.c: `cpulm logits`: evaluates a token sequence teacher-forced and prints the
 * top-K logits at every position, in text or in the JSON shape of the reference files:
 * {"tokens": [...], "logits_topk": [[[id, logit], ...], ...]}. */
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "common.h"
#include "options.h"

static void logits_usage(FILE *f) {
    fprintf(f, "usage: cpulm logits [-m MODEL] (-p PROMPT | --tokens 1,2,3) [--top K] [--json]\n");
    cli_help(f, "logits");
    fputs(CLI_COMPAT_HELP, f);
}

/* Indices of the k largest values, descending (ties: lower id first). */
static void top_k(const float *x, int32_t n, int32_t k, int32_t *idx) {
    for (int32_t j = 0; j < k; j++)
        idx[j] = -1;
    for (int32_t i = 0; i < n; i++) {
        int32_t j = k;
        while (j > 0 && (idx[j - 1] < 0 || x[i] > x[idx[j - 1]]))
            j--;
        if (j >= k) continue;
        memmove(idx + j + 1, idx + j, sizeof(int32_t) * (size_t)(k - j - 1));
        idx[j] = i;
    }
}

static void print_row(const float *lg, int32_t n_vocab, int32_t k, int json, int32_t pos,
                      cpulm_token tok) {
    int32_t idx[256];
    top_k(lg, n_vocab, k, idx);
    if (json)
        printf("%s[", pos ? ", " : "");
    else
        printf("pos %d (token %d):", pos, tok);
    for (int32_t j = 0; j < k; j++) {
        if (json)
            printf("%s[%d, %.6f]", j ? ", " : "", idx[j], lg[idx[j]]);
        else
            printf(" %d:%.4f", idx[j], lg[idx[j]]);
    }
    printf(json ? "]" : "\n");
}

static int eval_all(cpulm_ctx *ctx, const cpulm_model *m, const cpulm_token *toks, int32_t n,
                    int32_t k, int json) {
    int32_t B = 64;
    int8_t want[64];
    memset(want, 1, sizeof want);
    int32_t n_vocab = cpulm_vocab_n(m);
    if (json) {
        printf("{\"tokens\": [");
        for (int32_t i = 0; i < n; i++)
            printf("%s%d", i ? ", " : "", toks[i]);
        printf("], \"logits_topk\": [");
    }
    for (int32_t i = 0; i < n; i += B) {
        int32_t c = n - i < B ? n - i : B;
        cpulm_batch b = {.n = c, .token = toks + i, .want_logits = want};
        cpulm_status s = cpulm_ctx_decode(ctx, &b);
        if (s != CPULM_OK) {
            fprintf(stderr, "cpulm logits: decode failed: %s\n", cpulm_status_str(s));
            return 1;
        }
        for (int32_t j = 0; j < c; j++)
            print_row(cpulm_ctx_logits(ctx, j), n_vocab, k, json, i + j, toks[i + j]);
    }
    if (json) printf("]}\n");
    return 0;
}

typedef struct logits_opts {
    const char *model, *prompt, *tokens, *kv;
    int k, json, no_bos, threads, attn_fast;
} logits_opts;

static int logits_opt(cli *c, int id, const cli_val *v, void *ctx) {
    logits_opts *o = ctx;
    switch (id) {
    case OPT_MODEL: o->model = v->s; break;
    case OPT_PROMPT: o->prompt = v->s; break;
    case OPT_TOKEN_IDS: o->tokens = v->s; break;
    case OPT_TOP: o->k = (int)v->i; break;
    case OPT_THREADS: o->threads = (int)v->i; break;
    case OPT_KV: o->kv = v->s; break;
    case OPT_ATTN: o->attn_fast = cli_attn_value(v); break;
    case OPT_JSON: o->json = 1; break;
    case OPT_NO_BOS: o->no_bos = 1; break;
    default: return cli_unhandled(c, v);
    }
    return 0;
}

int cmd_logits(int argc, char **argv) {
    cli c = {.cmd = "logits", .argc = argc, .argv = argv};
    logits_opts o = {.kv = "f16", .k = 10, .attn_fast = CPULM_ATTN_AUTO};
    int rc = cli_parse(&c, logits_usage, logits_opt, &o);
    if (rc) return rc;
    if (!o.prompt == !o.tokens) {
        fprintf(stderr, "cpulm logits: give exactly one of -p PROMPT or --tokens LIST\n");
        return EXIT_USAGE;
    }
    cpulm_kv_type kvt = CPULM_KV_F16;
    if (!cli_kv_type(o.kv, &kvt)) {
        fprintf(stderr, "cpulm logits: bad --kv '%s' (f16, f32, q8_0 or q4_0)\n", o.kv);
        return EXIT_USAGE;
    }
    cpulm_token *toks = NULL;
    int32_t n = 0;
    if (o.tokens && (n = cli_int_list(o.tokens, &toks)) <= 0) {
        fprintf(stderr, "cpulm logits: bad --tokens '%s'\n", o.tokens);
        return EXIT_USAGE;
    }
    const char *path = cli_model_path(o.model);
    if (!path) return EXIT_USAGE;
    cpulm_model *m = cli_load_model(path, 0, NULL);
    if (!m) return cli_load_failed_rc(path);
    rc = 1;
    if (o.prompt) n = cli_tokenize(m, o.prompt, strlen(o.prompt), !o.no_bos, 0, &toks);
    for (int32_t i = 0; i < n; i++)
        if (toks[i] < 0 || toks[i] >= cpulm_vocab_n(m)) {
            fprintf(stderr, "cpulm logits: token %d out of range [0, %d)\n", toks[i],
                    cpulm_vocab_n(m));
            n = -1;
            break;
        }
    cpulm_ctx_params cp = cli_ctx_default_params();
    cp.n_ctx = n > 0 ? n : 1;
    cp.n_batch = 64;
    cp.n_outputs_max = 64;
    cp.n_threads = o.threads;
    cp.kv_type = kvt;
    cp.attn_fast = o.attn_fast;
    cpulm_error err = {0};
    cpulm_ctx *ctx = n > 0 ? cpulm_ctx_new(m, &cp, &err) : NULL;
    if (n > 0 && !ctx) fprintf(stderr, "cpulm logits: %s\n", err.msg);
    if (ctx) rc = eval_all(ctx, m, toks, n, o.k, o.json);
    cpulm_ctx_free(ctx);
    free(toks);
    cpulm_model_free(m);
    return rc;
}
