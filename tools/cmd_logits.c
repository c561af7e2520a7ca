/* cmd_logits.c: `cpulm logits`: evaluates a token sequence teacher-forced and prints the
 * top-K logits at every position, in text or in the JSON shape of the reference files:
 * {"tokens": [...], "logits_topk": [[[id, logit], ...], ...]}. */
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "common.h"

static void logits_usage(FILE *f) {
    fprintf(f, "usage: cpulm logits [-m MODEL] (-p PROMPT | --tokens 1,2,3) [--top K] [--json]\n"
               "  --no-bos           do not add BOS to the prompt\n"
               "  -t N               threads\n"
               "  --kv, -ctk TYPE  KV cache type f16|f32|q8_0|q4_0 (default f16)\n"
               "  --attn ref|fast  F16 KV attention: ref (default, llama.cpp's numerics) or fast\n"
               "                   (tiled, f32 accumulation; logits differ by up to "
               "~0.01);\n"
               "                   auto: fast for calls of >= 64 tokens (llama.cpp build "
               "9928)\n" CLI_COMPAT_HELP);
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

int cmd_logits(int argc, char **argv) {
    cli c = {.cmd = "logits", .argc = argc, .argv = argv};
    const char *model = NULL, *prompt = NULL, *tokens = NULL, *kv = "f16";
    int k = 10, json = 0, no_bos = 0, threads = 0, attn_fast = 0;
    for (c.i = 1; c.i < argc; c.i++) {
        if (cli_flag(&c, "-h", "--help")) {
            logits_usage(stdout);
            return 0;
        } else if (cli_flag(&c, "-m", "--model")) {
            if (!(model = cli_value(&c))) return EXIT_USAGE;
        } else if (cli_flag(&c, "-p", "--prompt")) {
            if (!(prompt = cli_value(&c))) return EXIT_USAGE;
        } else if (cli_flag(&c, "--tokens", NULL)) {
            if (!(tokens = cli_value(&c))) return EXIT_USAGE;
        } else if (cli_flag(&c, "--top", "-k")) {
            if (!cli_int(&c, 1, 256, &k)) return EXIT_USAGE;
        } else if (cli_flag(&c, "-t", "--threads")) {
            if (!cli_int(&c, 1, 512, &threads)) return EXIT_USAGE;
        } else if (cli_is_kv_flag(&c)) {
            if (!(kv = cli_value(&c))) return EXIT_USAGE;
        } else if (cli_flag(&c, "--attn", NULL)) {
            if (!cli_attn_flag(&c, &attn_fast)) return EXIT_USAGE;
        } else if (cli_flag(&c, "--json", NULL)) {
            json = 1;
        } else if (cli_flag(&c, "--no-bos", NULL)) {
            no_bos = 1;
        } else {
            if (cli_rest(&c)) return EXIT_USAGE;
        }
    }
    if (!prompt == !tokens) {
        fprintf(stderr, "cpulm logits: give exactly one of -p PROMPT or --tokens LIST\n");
        return EXIT_USAGE;
    }
    cpulm_kv_type kvt = CPULM_KV_F16;
    if (!cli_kv_type(kv, &kvt)) {
        fprintf(stderr, "cpulm logits: bad --kv '%s' (f16, f32, q8_0 or q4_0)\n", kv);
        return EXIT_USAGE;
    }
    cpulm_token *toks = NULL;
    int32_t n = 0;
    if (tokens && (n = cli_int_list(tokens, &toks)) <= 0) {
        fprintf(stderr, "cpulm logits: bad --tokens '%s'\n", tokens);
        return EXIT_USAGE;
    }
    const char *path = cli_model_path(model);
    if (!path) return EXIT_USAGE;
    cpulm_model *m = cli_load_model(path, 0, NULL);
    if (!m) return cli_load_failed_rc(path);
    int rc = 1;
    if (prompt) n = cli_tokenize(m, prompt, strlen(prompt), !no_bos, 0, &toks);
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
    cp.n_threads = threads;
    cp.kv_type = kvt;
    cp.attn_fast = attn_fast;
    cpulm_error err = {0};
    cpulm_ctx *ctx = n > 0 ? cpulm_ctx_new(m, &cp, &err) : NULL;
    if (n > 0 && !ctx) fprintf(stderr, "cpulm logits: %s\n", err.msg);
    if (ctx) rc = eval_all(ctx, m, toks, n, k, json);
    cpulm_ctx_free(ctx);
    free(toks);
    cpulm_model_free(m);
    return rc;
}
