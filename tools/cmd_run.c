/* cmd_run.c: `cpulm run`: tokenize a prompt, evaluate it in batches, then sample and stream
 * tokens to stdout until -n tokens or an end-of-generation token. Timings go to stderr. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "commands.h"
#include "common.h"
#include "options.h"
#include "spec_cli.h"
#include "tools_api.h"

typedef struct run_opts {
    const char *model, *prompt, *file;
    const char *grammar, *grammar_file, *json_schema; /* constrained output (one of them) */
    int n_predict, n_threads, n_threads_batch, n_ctx, n_batch, ignore_eos, verbose, escape,
        no_display_prompt;
    cpulm_kv_type kv;
    int attn_fast;
    cpulm_sampler_params sp;
    const char *words[64]; /* the prompt given as arguments (llama-run, llama-simple) */
    int n_words;
    cli_spec spec; /* --spec, -md, --draft-max, ... */
} run_opts;

static void run_usage(FILE *f) {
    fprintf(f, "usage: cpulm run [-m MODEL] [-p PROMPT | -f FILE] [options]\n"
               "       cpulm run MODEL.gguf [PROMPT] [options]      (llama-run's order)\n");
    cli_help(f, "run");
    fputs(CLI_COMPAT_HELP, f);
}

/* llama-run's `MODEL [PROMPT...]` and llama-simple's `-m MODEL PROMPT`: an argument that is
 * not a flag is the model while none is given (a file, file:// stripped); the ones after it
 * are the prompt's words, joined with spaces as llama-run does. Model names and URLs
 * (llama-run's ollama://, hf://, https://) are not fetched. */
static int run_positional(cli *c, run_opts *o) {
    const char *a = c->argv[c->i];
    size_t n = strlen(a);
    if (!o->model) {
        if (!strncmp(a, "file://", 7)) a += 7;
        if (strstr(a, "://") || !(access(a, F_OK) == 0 || (n > 5 && !strcmp(a + n - 5, ".gguf")))) {
            fprintf(stderr,
                    "cpulm run: '%s' is not a model file; cpulm does not fetch models by name or "
                    "URL: `cpulm pull OWNER/REPO/FILE.gguf`, then -m FILE (a prompt goes after "
                    "the model or in -p)\n",
                    a);
            return EXIT_USAGE;
        }
        o->model = a;
        return 0;
    }
    if (o->n_words == (int)(sizeof o->words / sizeof o->words[0])) {
        fprintf(stderr, "cpulm run: too many prompt words; quote the prompt or use -p\n");
        return EXIT_USAGE;
    }
    o->words[o->n_words++] = a;
    return 0;
}

/* The prompt words joined with single spaces (malloc'd; NULL when out of memory). */
static char *join_words(const run_opts *o) {
    size_t n = 1;
    for (int i = 0; i < o->n_words; i++)
        n += strlen(o->words[i]) + 1;
    char *s = malloc(n), *p = s;
    for (int i = 0; s && i < o->n_words; i++)
        p += sprintf(p, "%s%s", i ? " " : "", o->words[i]);
    return s;
}

/* One option of the table (options.def) or a positional argument; returns 0 or EXIT_USAGE. */
static int run_opt(cli *c, int id, const cli_val *v, void *ctx) {
    run_opts *o = ctx;
    switch (id) {
    case CLI_POS: return run_positional(c, o);
    case OPT_MODEL: o->model = v->s; break;
    case OPT_PROMPT: o->prompt = v->s; break;
    case OPT_FILE: o->file = v->s; break;
    case OPT_N_PREDICT: o->n_predict = (int)v->i; break;
    case OPT_THREADS: o->n_threads = (int)v->i; break;
    case OPT_THREADS_BATCH: o->n_threads_batch = (int)v->i; break;
    case OPT_CTX: o->n_ctx = (int)v->i; break;
    case OPT_BATCH: o->n_batch = (int)v->i; break;
    case OPT_NUMA: break; /* applied by the parser */
    case OPT_KV: o->kv = (cpulm_kv_type)v->i; break;
    case OPT_ATTN: o->attn_fast = cli_attn_value(v); break;
    case OPT_IGNORE_EOS: o->ignore_eos = 1; break;
    case OPT_GRAMMAR: o->grammar = v->s; break;
    case OPT_GRAMMAR_FILE: o->grammar_file = v->s; break;
    case OPT_JSON_SCHEMA: o->json_schema = v->s; break;
    case OPT_ESCAPE: o->escape = 1; break;
    case OPT_NO_ESCAPE: o->escape = 0; break;
    case OPT_NO_DISPLAY_PROMPT: o->no_display_prompt = 1; break;
    case OPT_CONVERSATION: break; /* cmd_run hands such lines to chat before parsing */
    default:
        if (cli_sampler_opt(id, v, &o->sp) || cli_spec_opt(id, v, &o->spec)) break;
        return cli_unhandled(c, v);
    }
    return 0;
}

static int parse_run(int argc, char **argv, run_opts *o) {
    cli c = {.cmd = "run", .argc = argc, .argv = argv};
    o->sp = cpulm_sampler_default_params();
    o->n_predict = 256;
    o->attn_fast = CPULM_ATTN_AUTO;
    cli_spec_init(&o->spec);
    if (cli_parse(&c, run_usage, run_opt, o)) return EXIT_USAGE;
    if (!!o->prompt + !!o->file + !!o->n_words > 1) {
        fprintf(stderr, "cpulm run: give one prompt: -p, -f or words after the model\n");
        return EXIT_USAGE;
    }
    if (!!o->grammar + !!o->grammar_file + !!o->json_schema > 1) {
        fprintf(stderr, "cpulm run: give one of --grammar, --grammar-file, --json-schema\n");
        return EXIT_USAGE;
    }
    return cli_spec_check(&c, &o->spec);
}

/* Feeds toks[0..n) into sequence 0 in batches of n_batch; logits of the last one remain. */
static int eval_prompt(cpulm_ctx *ctx, const cpulm_token *toks, int32_t n, int32_t n_batch) {
    for (int32_t i = 0; i < n; i += n_batch) {
        int32_t k = n - i < n_batch ? n - i : n_batch;
        cpulm_batch b = {.n = k, .token = toks + i};
        cpulm_status s = cpulm_ctx_decode(ctx, &b);
        if (s != CPULM_OK) {
            fprintf(stderr, "cpulm run: decode failed: %s\n", cpulm_status_str(s));
            return 1;
        }
    }
    return 0;
}

/* The GBNF text asked for (--grammar, --grammar-file, or compiled from --json-schema), or
 * NULL with *rc 0 when none; on a usage error prints why and sets *rc = EXIT_USAGE. */
static char *grammar_text(const run_opts *o, int *rc) {
    *rc = 0;
    if (o->grammar) {
        size_t n = strlen(o->grammar);
        char *g = malloc(n + 1);
        if (g) memcpy(g, o->grammar, n + 1);
        return g;
    }
    if (o->grammar_file) {
        char *g = cli_read_file(o->grammar_file, NULL);
        if (!g) *rc = EXIT_USAGE;
        return g;
    }
    if (!o->json_schema) return NULL;
    cpulm_json_doc *doc = NULL;
    cpulm_error err = {0};
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    if (cpulm_json_parse(o->json_schema, strlen(o->json_schema), NULL, &doc, NULL, &err) !=
            CPULM_OK ||
        cpulm_grammar_from_schema(cpulm_json_root(doc), &b, &err) != CPULM_OK) {
        fprintf(stderr, "cpulm run: --json-schema: %s\n", err.msg);
        *rc = EXIT_USAGE;
    }
    cpulm_json_free(doc);
    char *g = *rc ? NULL : cpulm_buf_detach(&b, NULL);
    cpulm_buf_release(&b);
    return g;
}

/* Compiles the grammar and its matcher; returns 0, or EXIT_USAGE after printing why. */
static int grammar_setup(const run_opts *o, const cpulm_model *m, cpulm_grammar **g,
                         cpulm_grammar_vocab **v, cpulm_grammar_matcher **gm) {
    int rc;
    char *text = grammar_text(o, &rc);
    if (!text) return rc;
    cpulm_error err = {0};
    if (cpulm_grammar_parse(text, strlen(text), NULL, g, &err) != CPULM_OK) {
        fprintf(stderr, "cpulm run: %s\n", err.msg);
        free(text);
        return EXIT_USAGE;
    }
    free(text);
    *v = cpulm_grammar_vocab_new(m);
    *gm = *v ? cpulm_grammar_matcher_new(*g, *v) : NULL;
    if (!*gm) {
        fprintf(stderr, "cpulm run: out of memory building the grammar matcher\n");
        return 1;
    }
    return 0;
}

static int generate(cpulm_ctx *ctx, const cpulm_model *m, const run_opts *o, cpulm_sampler *smp,
                    cpulm_grammar_matcher *gm, int32_t *n_gen) {
    cpulm_detok dt;
    cpulm_detok_init(&dt, m, 0);
    char buf[1024];
    int32_t n_ctx = cpulm_ctx_n_ctx(ctx);
    int rc = 0;
    if (gm) { /* close the grammar before -n or the context cuts it */
        int32_t budget = n_ctx - cpulm_ctx_seq_len(ctx, 0);
        if (o->n_predict > 0 && o->n_predict < budget) budget = o->n_predict;
        cpulm_grammar_matcher_set_budget(gm, budget > 0 ? budget : 1);
    }
    for (*n_gen = 0; o->n_predict < 0 || *n_gen < o->n_predict; ++*n_gen) {
        if (cpulm_ctx_seq_len(ctx, 0) >= n_ctx) break;
        const uint32_t *allow = gm ? cpulm_grammar_mask(gm) : NULL;
        if (gm && !allow) {
            fprintf(stderr, "cpulm run: the grammar is too complex to follow\n");
            return 1;
        }
        cpulm_token t = cpulm_sampler_sample_masked(smp, cpulm_ctx_logits(ctx, 0), allow);
        cpulm_sampler_accept(smp, t);
        if ((!o->ignore_eos || gm) && cpulm_token_is_eog(m, t)) break;
        if (gm && cpulm_grammar_accept_token(gm, t) != CPULM_OK) return 1;
        int32_t w = cpulm_detok_push(&dt, t, buf, sizeof buf);
        if (w > 0) fwrite(buf, 1, (size_t)w, stdout);
        fflush(stdout);
        if (gm && cpulm_grammar_must_end(gm)) {
            ++*n_gen;
            break;
        }
        cpulm_batch b = {.n = 1, .token = &t};
        cpulm_status st = cpulm_ctx_decode(ctx, &b);
        if (st != CPULM_OK) { /* t was printed: it counts */
            ++*n_gen;
            rc = cli_gen_status("run", st);
            break;
        }
    }
    int32_t w = cpulm_detok_flush(&dt, buf, sizeof buf);
    if (w > 0) fwrite(buf, 1, (size_t)w, stdout);
    fputc('\n', stdout);
    return rc;
}

/* The caller's side of speculation (src/spec/spec.h): draws each token exactly as
 * generate() does (grammar mask, sampler, grammar state) and refuses to go on (-1, which no
 * draft equals) once the output has ended, so verification stops there too. */
typedef struct run_pick {
    cpulm_sampler *smp;
    cpulm_grammar_matcher *gm;
    const cpulm_model *m;
    int ignore_eos, done, failed;
} run_pick;

static cpulm_token run_pick_fn(void *user, const float *logits) {
    run_pick *r = user;
    if (r->done) return -1;
    const uint32_t *allow = r->gm ? cpulm_grammar_mask(r->gm) : NULL;
    if (r->gm && !allow) {
        fprintf(stderr, "cpulm run: the grammar is too complex to follow\n");
        r->done = r->failed = 1;
        return -1;
    }
    cpulm_token t = cpulm_sampler_sample_masked(r->smp, logits, allow);
    cpulm_sampler_accept(r->smp, t);
    if ((!r->ignore_eos || r->gm) && cpulm_token_is_eog(r->m, t)) {
        r->done = 1;
        return t;
    }
    if (r->gm && cpulm_grammar_accept_token(r->gm, t) != CPULM_OK) {
        r->done = r->failed = 1;
        return -1;
    }
    if (r->gm && cpulm_grammar_must_end(r->gm)) r->done = 1;
    return t;
}

/* Prints out[0..n) as generate() would and counts them; returns 1 when the output ends. */
static int run_emit(const cpulm_token *out, int32_t n, const run_opts *o, const cpulm_model *m,
                    int has_gm, cpulm_detok *dt, int32_t max_gen, int32_t *n_gen) {
    char buf[1024];
    for (int32_t i = 0; i < n; i++) {
        if (out[i] < 0 || ((!o->ignore_eos || has_gm) && cpulm_token_is_eog(m, out[i]))) return 1;
        int32_t w = cpulm_detok_push(dt, out[i], buf, sizeof buf);
        if (w > 0) fwrite(buf, 1, (size_t)w, stdout);
        if (++*n_gen >= max_gen) return 1;
    }
    fflush(stdout);
    return 0;
}

/* generate() with speculation: the same tokens, several per target pass (--spec, -md). */
static int generate_spec(cpulm_ctx *ctx, const cpulm_model *m, const run_opts *o,
                         cpulm_sampler *smp, cpulm_grammar_matcher *gm, cpulm_spec *spec,
                         int32_t *n_gen) {
    int32_t n_ctx = cpulm_ctx_n_ctx(ctx), n_prompt = cpulm_ctx_seq_len(ctx, 0);
    int32_t max_gen = n_ctx - n_prompt; /* what generate() emits before the context is full */
    if (o->n_predict >= 0 && o->n_predict < max_gen) max_gen = o->n_predict;
    if (gm) cpulm_grammar_matcher_set_budget(gm, max_gen > 0 ? max_gen : 1);
    cpulm_detok dt;
    cpulm_detok_init(&dt, m, 0);
    run_pick r = {.smp = smp, .gm = gm, .m = m, .ignore_eos = o->ignore_eos};
    cpulm_spec_pick pick = {.fn = run_pick_fn, .user = &r, .smp = gm ? NULL : smp};
    cpulm_token out[257];
    int32_t n = 0;
    *n_gen = 0;
    cpulm_status st = CPULM_OK;
    if (max_gen > 0) out[n++] = run_pick_fn(&r, cpulm_ctx_logits(ctx, 0));
    while (n > 0 && !run_emit(out, n, o, m, gm != NULL, &dt, max_gen, n_gen) && !r.done) {
        st = cpulm_spec_step(spec, ctx, 0, out[n - 1], &pick, out, &n);
        if (st != CPULM_OK) break;
    }
    if (r.failed) return 1;
    char buf[1024];
    int32_t w = cpulm_detok_flush(&dt, buf, sizeof buf);
    if (w > 0) fwrite(buf, 1, (size_t)w, stdout);
    fputc('\n', stdout);
    return cli_gen_status("run", st);
}

/* Evaluates the prompt, generates (speculating when spec is set), then prints the timings
 * and the speculation statistics to stderr. Returns the exit code. */
static int run_all(cpulm_ctx *ctx, const cpulm_model *m, const run_opts *o, cpulm_sampler *smp,
                   cpulm_grammar_matcher *gm, cpulm_spec *spec, const cpulm_token *toks, int32_t n,
                   int32_t n_batch, double load_ms) {
    for (int32_t i = 0; i < n; i++)
        cpulm_sampler_accept(smp, toks[i]);
    double t0 = cli_now_ms();
    int rc = eval_prompt(ctx, toks, n, n_batch);
    double t1 = cli_now_ms(), c1 = cli_cpu_ms();
    int32_t n_gen = 0;
    if (!rc && spec) {
        cpulm_status st = cpulm_spec_begin(spec, toks, n);
        if (st != CPULM_OK) fprintf(stderr, "cpulm run: speculation: %s\n", cpulm_status_str(st));
        rc = st != CPULM_OK;
    }
    if (!rc)
        rc = spec ? generate_spec(ctx, m, o, smp, gm, spec, &n_gen)
                  : generate(ctx, m, o, smp, gm, &n_gen);
    double t2 = cli_now_ms(), c2 = cli_cpu_ms();
    char extra[240] = "";
    if (spec) cli_spec_summary(spec, &o->spec, extra, sizeof extra);
    fprintf(stderr,
            "\nload: %.1f ms | prompt: %d tokens, %.2f ms, %.2f t/s | generation: %d "
            "tokens, %.2f ms, %.2f t/s, cpu %.1f ms | threads %d, kernels %s%s\n",
            load_ms, n, t1 - t0, n / ((t1 - t0) / 1e3), n_gen, t2 - t1,
            n_gen > 0 ? n_gen / ((t2 - t1) / 1e3) : 0.0, c2 - c1, cpulm_ctx_threads(ctx),
            cpulm_kernel_level(), extra);
    return rc;
}

/* Replaces llama.cpp's escapes in place: \n \t \r \\ \" \'; others stay as written. */
static void unescape(char *s) {
    char *w = s;
    for (const char *r = s; *r; r++) {
        if (*r != '\\' || !r[1]) {
            *w++ = *r;
            continue;
        }
        const char *from = "ntr\\\"'", *to = "\n\t\r\\\"'", *hit = strchr(from, r[1]);
        if (hit)
            *w++ = to[hit - from], r++;
        else
            *w++ = *r;
    }
    *w = 0;
}

/* llama-cli's conversation flags (-cnv, -i, ...) mean "chat": hand the line to `cpulm chat`. */
static int wants_chat(int argc, char **argv) {
    static const char *flags[] = {"-cnv",          "--conversation",      "-i",
                                  "--interactive", "--interactive-first", "-if"};
    for (int i = 1; i < argc; i++)
        for (size_t k = 0; k < sizeof flags / sizeof flags[0]; k++)
            if (!strcmp(argv[i], flags[k])) return 1;
    return 0;
}

int cmd_run(int argc, char **argv) {
    if (wants_chat(argc, argv)) return cmd_chat(argc, argv);
    run_opts o;
    memset(&o, 0, sizeof o);
    int rc = parse_run(argc, argv, &o);
    if (rc) return rc;
    const char *path = cli_model_path(o.model);
    if (!path) return EXIT_USAGE;
    char *file_text = NULL;
    if (o.file && !(file_text = cli_read_file(o.file, NULL))) return EXIT_USAGE;
    if (o.n_words && !(file_text = join_words(&o))) return 1;
    if (o.file)
        cli_chomp(file_text);
    else if (o.prompt && o.escape && !(file_text = strdup(o.prompt)))
        return 1;
    if (file_text && o.escape && !o.file) unescape(file_text);
    const char *prompt = file_text ? file_text : (o.prompt ? o.prompt : "");
    double load_ms;
    cpulm_model *m = cli_load_model(path, 0, &load_ms);
    if (!m) {
        free(file_text);
        return cli_load_failed_rc(path);
    }
    cpulm_grammar *g = NULL;
    cpulm_grammar_vocab *gv = NULL;
    cpulm_grammar_matcher *gm = NULL;
    if ((rc = grammar_setup(&o, m, &g, &gv, &gm)) != 0) {
        cpulm_grammar_matcher_free(gm);
        cpulm_grammar_vocab_free(gv);
        cpulm_grammar_free(g);
        cpulm_model_free(m);
        free(file_text);
        return rc;
    }
    cpulm_token *toks = NULL;
    int32_t n = cli_tokenize(m, prompt, strlen(prompt), 1, 0, &toks);
    cpulm_ctx_params cp = cli_ctx_default_params();
    cp.n_ctx = o.n_ctx;
    cp.n_threads = o.n_threads;
    cp.n_threads_batch = o.n_threads_batch;
    cp.kv_type = o.kv;
    cp.attn_fast = o.attn_fast;
    if (o.n_batch) cp.n_batch = o.n_batch;
    if (o.spec.p.kind != CPULM_SPEC_NONE) { /* one decode verifies draft_max + 1 rows */
        if (o.spec.p.draft_max >= cp.n_batch) o.spec.p.draft_max = cp.n_batch - 1;
        if (o.spec.p.draft_max < 1) o.spec.p.kind = CPULM_SPEC_NONE;
        cp.n_outputs_max = o.spec.p.draft_max + 1;
    }
    cpulm_error err = {0};
    cpulm_ctx *ctx = n > 0 ? cpulm_ctx_new(m, &cp, &err) : NULL;
    cpulm_sampler *smp = cpulm_sampler_new(&o.sp, cpulm_vocab_n(m));
    cpulm_model *dm = NULL;
    cpulm_spec *spec = NULL;
    rc = 1;
    if (n == 0)
        fprintf(stderr, "cpulm run: empty prompt and the model has no BOS token\n");
    else if (!ctx)
        fprintf(stderr, "cpulm run: %s\n", err.msg);
    else if (n >= cpulm_ctx_n_ctx(ctx))
        fprintf(stderr, "cpulm run: prompt of %d tokens does not fit the context of %d\n", n,
                cpulm_ctx_n_ctx(ctx));
    else if (smp) {
        cp.n_ctx = cpulm_ctx_n_ctx(ctx); /* the draft model's context matches it */
        rc = cli_spec_open("run", &o.spec, m, &cp, &o.sp, &dm, &spec);
        if (!rc && !o.no_display_prompt) fputs(prompt, stdout);
        fflush(stdout);
        if (!rc) rc = run_all(ctx, m, &o, smp, gm, spec, toks, n, cp.n_batch, load_ms);
    }
    cpulm_spec_free(spec);
    cpulm_model_free(dm);
    cpulm_sampler_free(smp);
    cpulm_grammar_matcher_free(gm);
    cpulm_grammar_vocab_free(gv);
    cpulm_grammar_free(g);
    cpulm_ctx_free(ctx);
    free(toks);
    cpulm_model_free(m);
    free(file_text);
    return rc;
}
