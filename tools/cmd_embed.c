/* cmd_embed.c: `cpulm embed`: embeddings of one or more texts (-p, repeatable; -f FILE, one
 * input per line), pooled (the model's pooling or --pooling) and L2-normalized unless --raw,
 * printed as text or, with --json, in the OpenAI list shape llama.cpp's llama-embedding
 * prints. Pooled inputs are packed into few decodes (cpulm_ctx_embed); --pooling none prints
 * every token's vector. */
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "common.h"
#include "options.h"

#define MAX_INPUTS 4096
#define MAX_FILES  16

static void embed_usage(FILE *f) {
    fprintf(f, "usage: cpulm embed [-m MODEL] (-p TEXT ... | -f FILE) [options]\n");
    cli_help(f, "embed");
}

typedef struct embed_opts {
    const char *model;
    const char *inputs[MAX_INPUTS];
    int n_inputs;
    const char *files[MAX_FILES]; /* -f, read after the flags */
    int n_files;
    int raw, json, no_bos, n_ctx, n_batch, threads;
    cpulm_pooling pooling;
} embed_opts;

static void print_vec(const float *v, int32_t n, int json) {
    if (json) putchar('[');
    for (int32_t j = 0; j < n; j++)
        printf(json ? "%s%.6g" : "%s%9.6f", j ? (json ? "," : " ") : "", v[j]);
    if (json) putchar(']');
}

/* One input's output: its vector (pooled) or its tokens' vectors (none), rows [n_rows][E]. */
static void print_item(int idx, const float *rows, int32_t n_rows, int32_t E, int json) {
    if (!json) {
        for (int32_t r = 0; r < n_rows; r++) {
            if (n_rows == 1)
                printf("embedding %d: ", idx);
            else
                printf("embedding %d token %d: ", idx, r);
            print_vec(rows + (size_t)r * E, E, 0);
            putchar('\n');
        }
        return;
    }
    printf("%s{\"object\":\"embedding\",\"index\":%d,\"embedding\":", idx ? ",\n" : "", idx);
    if (n_rows > 1 || n_rows == 0) putchar('[');
    for (int32_t r = 0; r < n_rows; r++) {
        if (r) putchar(',');
        print_vec(rows + (size_t)r * E, E, 1);
    }
    if (n_rows > 1 || n_rows == 0) putchar(']');
    putchar('}');
}

/* Pooling NONE: every token of each input, one input per decode. */
static int embed_tokens(cpulm_ctx *ctx, cpulm_token **tok, const int32_t *n_tok,
                        const embed_opts *o) {
    const int32_t E = cpulm_ctx_n_embd(ctx);
    float *rows = malloc(sizeof(float) * (size_t)E * (size_t)o->n_batch);
    int8_t *want = malloc((size_t)o->n_batch);
    if (!rows || !want) return 1;
    memset(want, 1, (size_t)o->n_batch);
    int rc = 0;
    for (int i = 0; i < o->n_inputs && !rc; i++) {
        (void)cpulm_ctx_seq_rm(ctx, 0, 0); /* clearing (p0 = 0) cannot fail */
        cpulm_batch b = {.n = n_tok[i], .token = tok[i], .want_logits = want};
        cpulm_status s = n_tok[i] > o->n_batch ? CPULM_ERR_TOO_SMALL : cpulm_ctx_decode(ctx, &b);
        if (s != CPULM_OK) {
            fprintf(stderr,
                    "cpulm embed: input %d (%d tokens): %s (pooling none needs the input "
                    "in one batch: raise -b)\n",
                    i, n_tok[i], cpulm_status_str(s));
            rc = 1;
            break;
        }
        for (int32_t r = 0; r < n_tok[i]; r++) {
            memcpy(rows + (size_t)r * E, cpulm_ctx_embeddings_ith(ctx, r),
                   sizeof(float) * (size_t)E);
            if (!o->raw) cpulm_embd_normalize(rows + (size_t)r * E, E);
        }
        print_item(i, rows, n_tok[i], E, o->json);
    }
    free(rows);
    free(want);
    return rc;
}

static int embed_pooled(cpulm_ctx *ctx, cpulm_token **tok, const int32_t *n_tok,
                        const embed_opts *o) {
    const int32_t E = cpulm_ctx_n_embd(ctx);
    float *out = malloc(sizeof(float) * (size_t)E * (size_t)o->n_inputs);
    if (!out) return 1;
    cpulm_status s = cpulm_ctx_embed(ctx, (const cpulm_token *const *)tok, n_tok, o->n_inputs, out);
    if (s != CPULM_OK) {
        fprintf(stderr, "cpulm embed: %s%s\n", cpulm_status_str(s),
                s == CPULM_ERR_TOO_SMALL ? " (an input is longer than a batch: raise -b)"
                : s == CPULM_ERR_KV_FULL ? " (an input is longer than the context: raise -c)"
                                         : "");
        free(out);
        return 1;
    }
    for (int i = 0; i < o->n_inputs; i++) {
        if (!o->raw) cpulm_embd_normalize(out + (size_t)i * E, E);
        print_item(i, out + (size_t)i * E, 1, E, o->json);
    }
    free(out);
    return 0;
}

static int run_embed(cpulm_model *m, embed_opts *o) {
    cpulm_token *tok[MAX_INPUTS];
    int32_t n_tok[MAX_INPUTS];
    int rc = 0, n_made = 0;
    for (int i = 0; i < o->n_inputs && !rc; i++, n_made++) {
        n_tok[i] = cli_tokenize(m, o->inputs[i], strlen(o->inputs[i]), !o->no_bos, 0, &tok[i]);
        if (n_tok[i] < 1) {
            fprintf(stderr, "cpulm embed: input %d gives no tokens\n", i);
            rc = 1;
        }
    }
    cpulm_ctx_params cp = cli_ctx_default_params();
    cp.n_ctx = o->n_ctx;
    cp.n_batch = o->n_batch;
    cp.n_seq_max = o->n_inputs < 64 ? o->n_inputs : 64;
    cp.n_outputs_max = o->n_batch;
    cp.n_threads = o->threads;
    cp.embeddings = CPULM_EMBD_ONLY;
    cp.pooling = o->pooling;
    cpulm_error err = {0};
    cpulm_ctx *ctx = rc ? NULL : cpulm_ctx_new(m, &cp, &err);
    if (!rc && !ctx) {
        fprintf(stderr, "cpulm embed: %s\n", err.msg);
        rc = 1;
    }
    if (ctx) {
        if (o->json)
            printf("{\"object\":\"list\",\"pooling\":\"%s\",\"data\":[\n",
                   cpulm_pooling_name(cpulm_ctx_pooling(ctx)));
        rc = cpulm_ctx_pooling(ctx) == CPULM_POOLING_NONE ? embed_tokens(ctx, tok, n_tok, o)
                                                          : embed_pooled(ctx, tok, n_tok, o);
        if (o->json) printf("]}\n");
    }
    cpulm_ctx_free(ctx);
    for (int i = 0; i < n_made; i++)
        free(tok[i]);
    return rc;
}

/* Non-empty lines of text become inputs (the text is kept: the inputs point into it). */
static int add_lines(embed_opts *o, char *text) {
    for (char *line = strtok(text, "\r\n"); line; line = strtok(NULL, "\r\n")) {
        if (o->n_inputs >= MAX_INPUTS) {
            fprintf(stderr, "cpulm embed: more than %d inputs\n", MAX_INPUTS);
            return 0;
        }
        o->inputs[o->n_inputs++] = line;
    }
    return 1;
}

/* The -f files' lines as inputs: the texts joined into one buffer (*text, owned by the
 * caller) that the inputs point into. 0 after printing why on failure. */
static int read_files(embed_opts *o, char **text) {
    size_t len = 0, n;
    for (int i = 0; i < o->n_files; i++) {
        char *t = cli_read_file(o->files[i], &n), *grown;
        if (!t) return 0;
        if (!(grown = realloc(*text, len + n + 2))) {
            free(t);
            return 0;
        }
        *text = grown;
        memcpy(*text + len, t, n);
        len += n;
        (*text)[len++] = '\n';
        (*text)[len] = 0;
        free(t);
    }
    return add_lines(o, *text);
}

/* One row of the table: 0 = ok, else the exit code. */
static int embed_opt(cli *c, int id, const cli_val *v, void *ctx) {
    embed_opts *o = ctx;
    switch (id) {
    case OPT_MODEL: o->model = v->s; break;
    case OPT_PROMPT:
        if (o->n_inputs >= MAX_INPUTS) return EXIT_USAGE;
        o->inputs[o->n_inputs++] = v->s;
        break;
    case OPT_FILE: /* read once the flags are parsed (repeatable, as -p) */
        if (o->n_files == MAX_FILES) {
            fprintf(stderr, "cpulm embed: more than %d -f files\n", MAX_FILES);
            return EXIT_USAGE;
        }
        o->files[o->n_files++] = v->s;
        break;
    case OPT_POOLING:
        (void)cpulm_pooling_parse(v->s, &o->pooling); /* the table allows only none|mean|cls|last */
        break;
    case OPT_RAW: o->raw = 1; break;
    case OPT_NORMALIZE: o->raw = 0; break;
    case OPT_JSON: o->json = 1; break;
    case OPT_NO_BOS: o->no_bos = 1; break;
    case OPT_CTX:
        if (!cli_at_least(c, v, 1)) return EXIT_USAGE;
        o->n_ctx = (int)v->i;
        break;
    case OPT_BATCH: o->n_batch = (int)v->i; break;
    case OPT_THREADS: o->threads = (int)v->i; break;
    default: return cli_unhandled(c, v);
    }
    return 0;
}

static int parse_embed_args(cli *c, embed_opts *o, char **file_text) {
    int rc = cli_parse(c, embed_usage, embed_opt, o);
    if (rc) return rc;
    if (o->n_files && !read_files(o, file_text)) return EXIT_USAGE;
    if (o->n_inputs == 0) {
        fprintf(stderr, "cpulm embed: give -p TEXT or -f FILE\n");
        return EXIT_USAGE;
    }
    return 0;
}

int cmd_embed(int argc, char **argv) {
    cli c = {.cmd = "embed", .argc = argc, .argv = argv};
    static embed_opts o;
    memset(&o, 0, sizeof o);
    o.n_ctx = 2048;
    o.n_batch = 512;
    o.pooling = CPULM_POOLING_UNSPECIFIED;
    char *file_text = NULL;
    int rc = parse_embed_args(&c, &o, &file_text);
    if (rc) {
        free(file_text);
        return rc;
    }
    const char *path = cli_model_path(o.model);
    cpulm_model *m = path ? cli_load_model(path, 0, NULL) : NULL;
    if (!m) {
        free(file_text);
        return path ? cli_load_failed_rc(path) : EXIT_USAGE;
    }
    rc = run_embed(m, &o);
    cpulm_model_free(m);
    free(file_text);
    return rc;
}
