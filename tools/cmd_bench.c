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
#include "spec_cli.h"

static void bench_usage(FILE *f) {
    fprintf(
        f,
        "usage: cpulm bench [-m MODEL] [options]     (every option takes a list: 1,2,4 or 1-16*2)\n"
        "  -m, --model FILE     GGUF model (default: $CPULM_MODEL or stories260K)\n"
        "  -p, --n-prompt N     prompt tests: N random tokens evaluated in batches (default 512;\n"
        "                       0 = none)\n"
        "  -n, --n-gen N        generation tests: N tokens one at a time (default 128; 0 = none)\n"
        "  -pg PP,TG            prompt of PP tokens then TG generated tokens (repeatable)\n"
        "  -d, --n-depth N      tokens already in the cache before each test (llama-bench -d;\n"
        "                       filled once, untimed; default 0)\n"
        "  -t, --threads N      threads (default: physical cores)\n"
        "  -tb, --threads-batch N  threads for prompt batches (default: -t)\n"
        "  --numa MODE          distribute: threads over every NUMA node's cores, weights\n"
        "                       interleaved; isolate: cores and memory of the starting node;\n"
        "                       numactl: the CPUs numactl/taskset allowed (docs/PERFORMANCE.md)\n"
        "  -b, --batch-size N   logical batch (default 2048)\n"
        "  -ub, --ubatch-size N physical batch: tokens per decode call (default 512)\n"
        "  -ctk, --kv TYPE      KV cache type: f16, q8_0, q4_0, f32 (default f16; -ctv,\n"
        "                       --cache-type-k/-v are the same: K and V share one type)\n"
        "  --attn ref|fast      F16 KV attention: ref (default, llama.cpp's numerics) or fast\n"
        "                       (tiled, f32 accumulation; not shown in the output); auto:\n"
        "                       fast for calls of >= 64 tokens (llama.cpp build 9928)\n"
        "  -npl, -np, --parallel N  parallel sequences decoded together after their prompts\n"
        "  -npp N               prompt tokens per parallel sequence (default 128)\n"
        "  -ntg N               tokens generated per parallel sequence (default 32)\n"
        "  --ttft N             time-to-first-token tests for prompt lengths N\n"
        "  -r, --repetitions N  timed repetitions after one warm-up (default 5)\n"
        "  -o, --output FMT     md (default), csv, json, jsonl, sql (llama-bench's formats);\n"
        "                       --json is -o json\n"
        "  --seed N             seed of the random prompt tokens (default fixed)\n"
        "  --progress, --no-progress  live progress line on stderr (default: when a tty)\n"
        "  --compare A.json B.json    side-by-side table of two JSON outputs with B/A ratios\n"
        "  --spec ngram|draft, -md FILE  speculative generation: each -n length runs as an sg\n"
        "                       test, greedy tokens after a text prompt, once plain (none) and\n"
        "                       once speculating, instead of a tg test (default -n 128); the\n"
        "                       draft flags of `cpulm run --help` apply (--draft-max, ...)\n"
        "  --spec-prompt TEXT, --spec-prompt-file FILE  the sg tests' prompt (default: a\n"
        "                       short story opening)\n"
        "Giving any of -p/-n/-pg/-npl/--ttft runs only the tests asked for.\n"
        "Results are mean ± sample stddev over the repetitions; model load is not "
        "timed.\n" CLI_COMPAT_HELP);
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

/* The value of the current flag parsed as a list into l. */
static int list_flag(cli *c, int32_t lo, int32_t hi, bench_list *l) {
    const char *flag = c->argv[c->i], *v = cli_value(c);
    char err[128];
    if (!v) return 0;
    if (bench_list_parse(v, lo, hi, l, err, sizeof err)) {
        fprintf(stderr, "cpulm bench: bad value '%s' for %s (%s)\n", v, flag, err);
        return 0;
    }
    return 1;
}

static int pg_flag(cli *c, bench_params *p) {
    bench_list two = {0};
    const char *v = cli_value(c);
    char err[128];
    if (!v) return 0;
    if (bench_list_parse(v, 0, 1 << 20, &two, err, sizeof err) || two.n != 2 ||
        p->pg_prompt.n >= BENCH_MAX_LIST) {
        fprintf(stderr, "cpulm bench: bad value '%s' for -pg (want PP,TG)\n", v);
        return 0;
    }
    p->pg_prompt.v[p->pg_prompt.n++] = two.v[0];
    p->pg_gen.v[p->pg_gen.n++] = two.v[1];
    return 1;
}

/* -ctk and -ctv both set the one KV type (cpulm stores K and V alike); repeats are merged. */
static int kv_flag(cli *c, bench_list *l) {
    const char *flag = c->argv[c->i], *v = cli_value(c);
    char err[128];
    bench_list add = {0};
    if (!v) return 0;
    if (bench_kv_list_parse(v, &add, err, sizeof err)) {
        fprintf(stderr, "cpulm bench: bad value '%s' for %s (%s)\n", v, flag, err);
        return 0;
    }
    for (int i = 0; i < add.n; i++) {
        int seen = 0;
        for (int j = 0; j < l->n; j++)
            seen |= l->v[j] == add.v[i];
        if (!seen) l->v[l->n++] = add.v[i];
    }
    return 1;
}

/* Flags of the sweep axes; returns 1 when argv[i] was one (ok reports parse success). */
static int axis_flag(cli *c, bench_params *p, int *ok) {
    const int32_t big = 1 << 20;
    if (cli_flag(c, "-p", "--n-prompt"))
        *ok = list_flag(c, 0, big, &p->n_prompt);
    else if (cli_flag(c, "-n", "--n-gen"))
        *ok = list_flag(c, 0, big, &p->n_gen);
    else if (cli_flag(c, "-d", "--n-depth"))
        *ok = list_flag(c, 0, big, &p->n_depth);
    else if (cli_flag(c, "-pg", NULL))
        *ok = pg_flag(c, p);
    else if (cli_flag(c, "-t", "--threads"))
        *ok = list_flag(c, 1, 512, &p->threads);
    else if (cli_flag(c, "-tb", "--threads-batch"))
        *ok = list_flag(c, 1, 512, &p->threads_batch);
    else if (cli_flag(c, "-b", "--batch-size"))
        *ok = list_flag(c, 1, 1 << 16, &p->n_batch);
    else if (cli_flag(c, "-ub", "--ubatch-size"))
        *ok = list_flag(c, 1, 1 << 16, &p->n_ubatch);
    else if (cli_is_kv_flag(c))
        *ok = kv_flag(c, &p->type_k);
    else if (cli_parallel_flag(c))
        *ok = list_flag(c, 1, 4096, &p->npl);
    else if (cli_flag(c, "-npp", NULL))
        *ok = list_flag(c, 1, big, &p->npp);
    else if (cli_flag(c, "-ntg", NULL))
        *ok = list_flag(c, 1, big, &p->ntg);
    else if (cli_flag(c, "--ttft", NULL))
        *ok = list_flag(c, 1, big, &p->ttft);
    else
        return 0;
    return 1;
}

/* llama-bench runs every -m in turn; cpulm bench measures one model per run (each run's
 * rows carry one model's environment), so a second, different -m is refused with the way
 * to get the same table. */
static int model_flag(cli *c, const char **model) {
    const char *v = cli_value(c);
    if (v && *model && strcmp(v, *model) != 0) {
        fprintf(stderr,
                "cpulm bench: one model per run (got -m %s and -m %s): run cpulm bench once per "
                "model with -o json, then cpulm bench --compare A.json B.json\n",
                *model, v);
        return 0;
    }
    return (*model = v) != NULL;
}

/* Returns -1 to go on, else the exit code (0 after --help). */
static int parse_bench(int argc, char **argv, bench_opts *o) {
    cli c = {.cmd = "bench", .argc = argc, .argv = argv};
    o->reps = 5;
    o->progress = -1;
    cli_spec_init(&o->spec);
    for (c.i = 1; c.i < argc; c.i++) {
        int ok = 1, sf = cli_spec_flag(&c, &o->spec);
        if (sf) {
            ok = sf > 0;
        } else if (cli_flag(&c, "-h", "--help")) {
            bench_usage(stdout);
            return 0;
        } else if (axis_flag(&c, &o->p, &ok)) {
        } else if (cli_flag(&c, "-m", "--model")) {
            ok = model_flag(&c, &o->model);
        } else if (cli_flag(&c, "-r", "--repetitions")) {
            ok = cli_int(&c, 1, BENCH_MAX_REPS, &o->reps);
        } else if (cli_flag(&c, "-o", "--output")) {
            const char *v = cli_value(&c);
            ok = v && bench_fmt_parse(v, &o->fmt) == 0;
            if (v && !ok)
                fprintf(stderr,
                        "cpulm bench: bad value '%s' for -o (want md, csv, json, jsonl or sql)\n",
                        v);
        } else if (cli_flag(&c, "--json", NULL)) {
            o->fmt = BENCH_FMT_JSON;
        } else if (cli_flag(&c, "--seed", NULL)) {
            ok = cli_i64(&c, 0, (long long)1 << 62, &o->seed);
        } else if (cli_flag(&c, "--progress", NULL) || cli_flag(&c, "--no-progress", NULL)) {
            o->progress = cli_flag(&c, "--progress", NULL);
        } else if (cli_flag(&c, "--numa", NULL)) {
            ok = cli_numa_flag(&c);
        } else if (cli_flag(&c, "--attn", NULL)) {
            ok = cli_attn_flag(&c, &o->attn_fast);
        } else if (cli_flag(&c, "--compare", NULL)) {
            ok = (o->cmp_a = cli_value(&c)) && (o->cmp_b = cli_value(&c));
        } else if (cli_flag(&c, "--spec-prompt", NULL)) {
            ok = (o->spec_prompt = cli_value(&c)) != NULL;
        } else if (cli_flag(&c, "--spec-prompt-file", NULL)) {
            ok = (o->spec_prompt_file = cli_value(&c)) != NULL;
        } else {
            if (cli_rest(&c)) return EXIT_USAGE;
        }
        if (!ok) return EXIT_USAGE;
    }
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
