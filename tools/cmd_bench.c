/* cmd_bench.c: `cpulm bench`: llama-bench-style throughput tests (pp, tg, pg) over every
 * combination of the sweep axes, llama-batched-bench-style parallel sequences, a TTFT
 * curve, and --compare of two JSON outputs. Measurement lives in bench_run.c, output in
 * bench_out.c; this file parses flags and drives the runs. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "commands.h"
#include "common.h"
#include "options.h"
#include "spec_cli.h"

static void bench_usage(FILE *f) {
    fputs("usage: cpulm bench [-m MODEL] [options]     (every option takes a list: 1,2,4 or "
          "1-16*2)\n",
          f);
    cli_help(f, "bench");
    fputs("Giving any of -p/-n/-pg/-npl/--ttft runs only the tests asked for.\n"
          "Results are mean ± sample stddev over the repetitions; model load is not "
          "timed.\n" CLI_COMPAT_HELP,
          f);
}

typedef struct bench_opts {
    const char *model, *cmp_a, *cmp_b;
    bench_params p;
    int reps, progress; /* progress: -1 auto */
    bench_fmt fmt;
    long long seed;
    int attn_fast;
    cli_spec spec;
    const char *spec_prompt, *spec_prompt_file;
} bench_opts;

/* The current flag's value (a list) into l, in its row's range (options.def). */
static int list_flag(const cli_val *v, bench_list *l) {
    char err[128];
    if (bench_list_parse(v->s, (int32_t)v->opt->lo, (int32_t)v->opt->hi, l, err, sizeof err)) {
        fprintf(stderr, "cpulm bench: bad value '%s' for %s (%s)\n", v->s, v->flag, err);
        return 0;
    }
    return 1;
}

static int pg_flag(const cli_val *v, bench_params *p) {
    bench_list two = {0};
    char err[128];
    if (bench_list_parse(v->s, 0, (int32_t)v->opt->hi, &two, err, sizeof err) || two.n != 2 ||
        p->pg_prompt.n >= BENCH_MAX_LIST) {
        fprintf(stderr, "cpulm bench: bad value '%s' for -pg (want PP,TG)\n", v->s);
        return 0;
    }
    p->pg_prompt.v[p->pg_prompt.n++] = two.v[0];
    p->pg_gen.v[p->pg_gen.n++] = two.v[1];
    return 1;
}

/* -ctk and -ctv set the one KV type list (cpulm stores K and V alike; the parser refused a
 * second, different one, so -ctk q8_0 -ctv f16 is an error, not two configurations). A
 * second spelling replaces the list, not appends to it: -ctk q8_0 -ctv q8_0 had run every
 * test twice, each with its own depth fill (a "3x slower" fill at depth 8192 was two). */
static int kv_flag(const cli_val *v, bench_list *l) {
    char err[128];
    l->n = 0;
    if (bench_kv_list_parse(v->s, l, err, sizeof err)) {
        fprintf(stderr, "cpulm bench: bad value '%s' for %s (%s)\n", v->s, v->flag, err);
        return 0;
    }
    return 1;
}

/* Rows of the sweep axes; returns 1 when id was one (ok reports parse success). */
static int axis_flag(int id, const cli_val *v, bench_params *p, int *ok) {
    switch (id) {
    case OPT_N_PROMPT: *ok = list_flag(v, &p->n_prompt); break;
    case OPT_N_GEN: *ok = list_flag(v, &p->n_gen); break;
    case OPT_N_DEPTH: *ok = list_flag(v, &p->n_depth); break;
    case OPT_PG: *ok = pg_flag(v, p); break;
    case OPT_THREADS: *ok = list_flag(v, &p->threads); break;
    case OPT_THREADS_BATCH: *ok = list_flag(v, &p->threads_batch); break;
    case OPT_BATCH: *ok = list_flag(v, &p->n_batch); break;
    case OPT_UBATCH: *ok = list_flag(v, &p->n_ubatch); break;
    case OPT_KV: *ok = kv_flag(v, &p->type_k); break;
    case OPT_PARALLEL: *ok = list_flag(v, &p->npl); break;
    case OPT_NPP: *ok = list_flag(v, &p->npp); break;
    case OPT_NTG: *ok = list_flag(v, &p->ntg); break;
    case OPT_TTFT: *ok = list_flag(v, &p->ttft); break;
    default: return 0;
    }
    return 1;
}

/* llama-bench runs every -m in turn; cpulm bench measures one model per run (each run's
 * rows carry one model's environment), so a second, different -m is refused with the way
 * to get the same table. */
static int model_flag(const char *v, const char **model) {
    if (*model && strcmp(v, *model) != 0) {
        fprintf(stderr,
                "cpulm bench: one model per run (got -m %s and -m %s): run cpulm bench once per "
                "model with -o json, then cpulm bench --compare A.json B.json\n",
                *model, v);
        return 0;
    }
    *model = v;
    return 1;
}

/* One row of the table other than the axes: 1 = ok, 0 = bad value (printed). */
static int bench_opt(cli *c, int id, const cli_val *v, bench_opts *o) {
    switch (id) {
    case OPT_MODEL: return model_flag(v->s, &o->model);
    case OPT_REPS: o->reps = (int)v->i; break;
    case OPT_BENCH_OUTPUT: return bench_fmt_parse(v->s, &o->fmt) == 0;
    case OPT_JSON: o->fmt = BENCH_FMT_JSON; break;
    case OPT_SEED:
        if (v->i >= 0) o->seed = v->i;
        break;
    case OPT_PROGRESS: o->progress = 1; break;
    case OPT_NO_PROGRESS: o->progress = 0; break;
    case OPT_NUMA: break; /* applied by the parser */
    case OPT_ATTN: o->attn_fast = cli_attn_value(v); break;
    case OPT_COMPARE: o->cmp_a = v->s, o->cmp_b = v->s2; break;
    case OPT_SPEC_PROMPT: o->spec_prompt = v->s; break;
    case OPT_SPEC_PROMPT_FILE: o->spec_prompt_file = v->s; break;
    default:
        if (cli_spec_opt(id, v, &o->spec)) break;
        cli_unhandled(c, v);
        return 0;
    }
    return 1;
}

/* One argument: a sweep axis or another row; 0 = ok, else EXIT_USAGE (message printed). */
static int bench_arg(cli *c, int id, const cli_val *v, void *ctx) {
    bench_opts *o = ctx;
    int ok = 1;
    if (id == CLI_POS) return cli_unknown(c);
    if (!axis_flag(id, v, &o->p, &ok)) ok = bench_opt(c, id, v, o);
    return ok ? 0 : EXIT_USAGE;
}

/* Returns -1 to go on, else the exit code. */
static int parse_bench(int argc, char **argv, bench_opts *o) {
    cli c = {.cmd = "bench", .argc = argc, .argv = argv};
    o->reps = 5;
    o->progress = -1;
    o->attn_fast = CPULM_ATTN_AUTO;
    cli_spec_init(&o->spec);
    if (cli_parse(&c, bench_usage, bench_arg, o)) return EXIT_USAGE;
    return cli_spec_check(&c, &o->spec) ? EXIT_USAGE : -1;
}

typedef struct progress_state {
    int i, n;
} progress_state;

/* One line, rewritten in place with \r and cleared to the end (ESC [K). */
static void show_progress(void *user, const bench_test *t, int rep, int n_reps) {
    const progress_state *ps = user;
    char name[64];
    bench_test_name(t, name, sizeof name);
    if (rep < 0)
        fprintf(stderr, "\rcpulm bench: [%d/%d] %s, kv %s: warm-up\033[K", ps->i + 1, ps->n, name,
                bench_kv_name(t->type_k));
    else
        fprintf(stderr, "\rcpulm bench: [%d/%d] %s, kv %s: repetition %d/%d\033[K", ps->i + 1,
                ps->n, name, bench_kv_name(t->type_k), rep + 1, n_reps);
    fflush(stderr);
}

/* The sg tests' inputs: the prompt's tokens and the speculation parameters, with the draft
 * model loaded (and its vocabulary checked) into *dm. Returns 0 or an exit code. */
static int spec_setup(bench_opts *o, const cpulm_model *m, cpulm_model **dm, cpulm_token **toks,
                      int32_t *n) {
    static const char dflt[] = "Once upon a time, there was a little girl named Lily. She loved "
                               "to play outside in the park with her friends.";
    *dm = NULL;
    *toks = NULL;
    if (o->spec.p.kind == CPULM_SPEC_NONE) return 0;
    char *text = o->spec_prompt_file ? cli_read_file(o->spec_prompt_file, NULL) : NULL;
    if (o->spec_prompt_file && !text) return EXIT_USAGE;
    if (text) cli_chomp(text);
    const char *p = text ? text : o->spec_prompt ? o->spec_prompt : dflt;
    *n = cli_tokenize(m, p, strlen(p), 1, 0, toks);
    free(text);
    if (*n < 1) {
        fprintf(stderr, "cpulm bench: the sg prompt gives no tokens\n");
        return EXIT_USAGE;
    }
    cpulm_ctx_params cp = cli_ctx_default_params();
    cpulm_sampler_params sp = cpulm_sampler_default_params();
    cpulm_spec *s = NULL;
    int rc = cli_spec_open("bench", &o->spec, m, &cp, &sp, dm, &s);
    cpulm_spec_free(s); /* each sg test makes its own; this checked the draft model */
    o->spec.p.draft_model = *dm;
    o->spec.p.draft_ctx = cli_ctx_default_params();
    o->p.spec_prompt_len = *n;
    return rc;
}

static int run_all(const bench_opts *o, const cpulm_model *m, bench_result *res, int n,
                   const bench_test *tests, int *n_done, const cpulm_token *sg, int32_t n_sg) {
    progress_state ps = {0, n};
    int show = o->progress >= 0 ? o->progress : isatty(2);
    bench_runner br = {.m = m,
                       .seed = (uint64_t)o->seed,
                       .progress = show ? show_progress : NULL,
                       .progress_user = &ps,
                       .attn_fast = o->attn_fast,
                       .spec_prompt = sg,
                       .n_spec_prompt = n_sg,
                       .spec = &o->spec.p};
    char err[256];
    for (ps.i = 0; ps.i < n; ps.i++) {
        if (bench_run_test(&br, &tests[ps.i], o->reps, &res[ps.i], err, sizeof err)) {
            char name[64];
            bench_test_name(&tests[ps.i], name, sizeof name);
            fprintf(stderr, "%scpulm bench: %s: %s\n", show ? "\r\033[K" : "", name, err);
            return 1;
        }
        *n_done = ps.i + 1;
    }
    if (show) fprintf(stderr, "\r\033[K");
    return 0;
}

int cmd_bench(int argc, char **argv) {
    bench_opts o;
    memset(&o, 0, sizeof o);
    int rc = parse_bench(argc, argv, &o);
    if (rc >= 0) return rc;
    if (o.cmp_a) return bench_compare(stdout, o.cmp_a, o.cmp_b) ? 1 : 0;
    o.p.spec_kind = o.spec.p.kind;
    o.p.spec_prompt_len = 1; /* counted now, the real length once the model tokenizes it */
    bench_params_defaults(&o.p);
    int n = bench_expand(&o.p, NULL, 0);
    if (n == 0) {
        fprintf(stderr, "cpulm bench: no test left (every length given is 0)\n");
        return EXIT_USAGE;
    }
    if (n > 100000) {
        fprintf(stderr, "cpulm bench: %d combinations is too many\n", n);
        return EXIT_USAGE;
    }
    const char *path = cli_model_path(o.model);
    if (!path) return EXIT_USAGE;
    bench_test *tests = malloc(sizeof *tests * (size_t)n);
    bench_result *res = malloc(sizeof *res * (size_t)n);
    cpulm_model *m = tests && res ? cli_load_model(path, 0, NULL) : NULL;
    if (!m) {
        free(tests);
        free(res);
        return tests && res ? cli_load_failed_rc(path) : 1;
    }
    cpulm_model *dm = NULL;
    cpulm_token *sg = NULL;
    int32_t n_sg = 0;
    rc = spec_setup(&o, m, &dm, &sg, &n_sg);
    bench_expand(&o.p, tests, n);
    int done = 0;
    if (!rc) rc = run_all(&o, m, res, n, tests, &done, sg, n_sg);
    bench_env env;
    bench_env_fill(&env, m, path);
    env.attn = cli_attn_name(cpulm_attn_resolve(o.attn_fast)); /* what the runs took */
    if (done > 0 && bench_write(stdout, o.fmt, &env, res, done)) {
        fprintf(stderr, "cpulm bench: writing the results failed\n");
        rc = 1;
    }
    cpulm_model_free(dm);
    free(sg);
    cpulm_model_free(m);
    free(tests);
    free(res);
    return rc;
}
