/* cmd_serve.c: `cpulm serve`: flag parsing and logging for the OpenAI-compatible server
 * (src/server/server.h). Prints "listening on http://HOST:PORT" on stdout once bound
 * (with --port 0 this is how callers learn the port), logs to stderr, exits 0 after a
 * graceful SIGTERM/SIGINT shutdown, 1 if the model cannot be loaded, 2 on usage errors. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chat_common.h"
#include "commands.h"
#include "common.h"
#include "options.h"
#include "spec_cli.h"

static void serve_usage(FILE *f) {
    fprintf(f, "usage: cpulm serve [-m MODEL] [options]\n");
    cli_help(f, "serve");
    fprintf(f, "Speculative decoding, per slot inside the batched steps (requests may send\n"
               "\"speculative.n_max\": 0 to opt out; docs/SERVER.md): the --spec flags above.\n"
               "Endpoints: POST /v1/chat/completions, POST /v1/completions, GET /v1/models,\n"
               "POST /v1/embeddings (with --embeddings), GET /health, GET /ready, GET /metrics.\n"
               "See docs/SERVER.md.\n" CLI_COMPAT_HELP);
}

/* An empty key would turn authentication off without a word (issue #25): refuse it, and any
 * key a client could not send back in an Authorization field (whitespace, control bytes). */
static int check_api_key(const char *key, const char *from) {
    if (!key) return 0;
    if (!*key) {
        fprintf(stderr,
                "cpulm serve: %s is empty: give a non-empty key, or leave it out to serve "
                "without authentication\n",
                from);
        return EXIT_USAGE;
    }
    for (const unsigned char *k = (const unsigned char *)key; *k; k++)
        if (*k <= 0x20 || *k == 0x7f) {
            fprintf(stderr, "cpulm serve: %s holds whitespace or a control character\n", from);
            return EXIT_USAGE;
        }
    return 0;
}

/* The speculation flags (shared with run and bench) into the server's parameters. */
static void spec_to_params(const cli_spec *o, cpulm_server_params *p) {
    if (o->p.kind == CPULM_SPEC_NONE) return;
    p->spec = cpulm_spec_kind_name(o->p.kind);
    p->draft_path = o->draft_path;
    p->draft_max = o->p.draft_max;
    p->draft_min = o->p.draft_min;
    p->draft_p_min = o->p.p_min;
    p->ngram_min = o->p.ngram_min;
    p->ngram_max = o->p.ngram_max;
    p->spec_fixed = !o->p.adaptive;
    p->n_threads_draft = o->n_threads_draft;
}

/* The HTTP front's rows; 1 when id was one of them. */
static int http_opt(int id, const cli_val *v, cpulm_server_params *p) {
    switch (id) {
    case OPT_HOST: p->host = v->s; break;
    case OPT_PORT: p->port = (int)v->i; break;
    case OPT_TIMEOUT: p->timeout_s = (float)v->f; break;
    case OPT_GRACE: p->grace_s = (float)v->f; break;
    case OPT_MAX_BODY: p->max_body = (size_t)v->i; break;
    case OPT_MAX_CONNS: p->max_conns = (int)v->i; break;
    case OPT_MAX_CONNS_CLIENT: p->max_conns_per_client = (int)v->i; break;
    case OPT_HEAD_TIMEOUT: p->head_timeout_s = (float)v->f; break;
    case OPT_BODY_TIMEOUT: p->body_timeout_s = (float)v->f; break;
    case OPT_MAX_BODY_TOTAL: p->max_body_total = (size_t)v->i; break;
    case OPT_IDLE_TIMEOUT: p->idle_timeout_s = (float)v->f; break;
    case OPT_SLOTS: p->no_slots = 0; break;
    case OPT_NO_SLOTS: p->no_slots = 1; break;
    case OPT_ALIAS: p->model_alias = v->s; break;
    default: return 0;
    }
    return 1;
}

/* The engine's and scheduler's rows: 0 = ok, else the exit code. */
static int serve_opt(cli *c, int id, const cli_val *v, cpulm_server_params *p, const char **model,
                     const char **tmpl, int *total) {
    switch (id) {
    case OPT_MODEL: *model = v->s; break;
    case OPT_PARALLEL:
        if (!cli_within(c, v, 1, 256)) return EXIT_USAGE;
        p->sched.n_parallel = (int)v->i;
        break;
    case OPT_CTX: p->sched.n_ctx = (int)v->i; break;
    case OPT_KV: p->sched.kv_type = (cpulm_kv_type)v->i; break;
    case OPT_ATTN: p->sched.attn_fast = cli_attn_value(v); break;
    case OPT_CTX_TOTAL: *total = (int)v->i; break;
    case OPT_CHUNK: p->sched.n_chunk = (int)v->i; break;
    case OPT_PREFILL_EVERY: p->sched.prefill_every = (int)v->i; break;
    case OPT_MAX_QUEUE: p->sched.max_queue = (int)v->i; break;
    case OPT_MAX_STEP_MS: p->sched.max_step_ms = (float)v->f; break;
    case OPT_CACHE_RAM: p->sched.cache_ram_mib = (int)v->i; break;
    case OPT_KV_IDLE: p->sched.kv_idle = (int)v->i; break;
    case OPT_KV_BUDGET: p->sched.kv_budget = (int)v->i; break;
    case OPT_THREADS: p->sched.n_threads = (int)v->i; break;
    case OPT_THREADS_BATCH: p->sched.n_threads_batch = (int)v->i; break;
    case OPT_NUMA: break; /* applied by the parser */
    case OPT_API_KEY: p->api_key = v->s; return check_api_key(p->api_key, "--api-key");
    case OPT_EMBEDDINGS: p->embeddings = 1; break;
    case OPT_RERANK: p->rerank = p->embeddings = 1; break;
    case OPT_POOLING:
        (void)cpulm_pooling_parse(v->s, &p->pooling);
        break; /* the table checked it */
    case OPT_CHAT_TEMPLATE: *tmpl = v->s; break;
    default:
        if (http_opt(id, v, p)) break;
        return cli_unhandled(c, v);
    }
    return 0;
}

/* What serve's rows fill (parse_serve's outputs and locals). */
typedef struct serve_args {
    cpulm_server_params *p;
    const char **model, **tmpl;
    int *total;
    cli_spec *spec;
} serve_args;

static int serve_arg(cli *c, int id, const cli_val *v, void *ctx) {
    serve_args *A = ctx;
    if (id == CLI_POS) return cli_unknown(c);
    if (cli_spec_opt(id, v, A->spec)) return 0;
    return serve_opt(c, id, v, A->p, A->model, A->tmpl, A->total);
}

static int parse_serve(int argc, char **argv, cpulm_server_params *p, const char **model,
                       const char **tmpl) {
    cli c = {.cmd = "serve", .argc = argc, .argv = argv};
    int total = 0;
    cli_spec spec;
    cli_spec_init(&spec);
    serve_args A = {.p = p, .model = model, .tmpl = tmpl, .total = &total, .spec = &spec};
    int rc = cli_parse(&c, serve_usage, serve_arg, &A);
    if (rc) return rc;
    rc = cli_spec_check(&c, &spec);
    if (rc) return rc;
    if (spec.draft_path && cli_check_file("serve", spec.draft_path)) return EXIT_USAGE;
    spec_to_params(&spec, p);
    if (p->max_body_total && p->max_body_total < p->max_body) {
        fprintf(stderr, "cpulm serve: --max-body-total %zu is less than --max-body %zu\n",
                p->max_body_total, p->max_body);
        return EXIT_USAGE;
    }
    if (total && p->sched.n_ctx) {
        fprintf(stderr, "cpulm serve: give -c (per slot) or --ctx-total, not both\n");
        return EXIT_USAGE;
    }
    if (total && (p->sched.n_ctx = total / p->sched.n_parallel) < 1) {
        fprintf(stderr, "cpulm serve: --ctx-total %d leaves no context for each of %d slots\n",
                total, p->sched.n_parallel);
        return EXIT_USAGE;
    }
    return 0;
}

static void log_stderr(int level, const char *msg, void *user) {
    static const char *names[] = {"debug", "info", "warn", "error"};
    (void)user;
    if (level < CPULM_LOG_INFO) return;
    fprintf(stderr, "cpulm serve: %s: %s\n", names[level & 3], msg);
}

int cmd_serve(int argc, char **argv) {
    cpulm_server_params p = cpulm_server_default_params();
    const char *model = NULL;
    const char *env_key = getenv("CPULM_API_KEY");
    p.api_key = env_key;
    p.sched.no_pin = cli_env_flag("CPULM_NO_PIN");
    const char *tmpl_arg = NULL;
    char *tmpl_owned = NULL;
    int rc = parse_serve(argc, argv, &p, &model, &tmpl_arg);
    if (rc) return rc;
    if (p.api_key == env_key && check_api_key(env_key, "$CPULM_API_KEY")) return EXIT_USAGE;
    if (tmpl_arg && !cli_chat_template(NULL, tmpl_arg, &p.chat_template, &tmpl_owned))
        return EXIT_USAGE;
    if (!(p.model_path = cli_model_path(model))) return EXIT_USAGE;
    if (cli_check_file("serve", p.model_path)) return EXIT_USAGE;
    cpulm_log_set(log_stderr, NULL);
    cpulm_error err = {0};
    cpulm_server *srv = cpulm_server_new(&p, &err);
    if (!srv) {
        fprintf(stderr, "cpulm serve: %s\n", err.msg);
        free(tmpl_owned);
        return 1;
    }
    printf("cpulm serve: listening on http://%s:%d\n", p.host, cpulm_server_port(srv));
    if (p.sched.n_ctx)
        fprintf(stderr,
                "cpulm serve: %d slots x %d tokens of context each (-c is per slot, "
                "unlike llama-server's total)\n",
                p.sched.n_parallel, p.sched.n_ctx);
    else
        fprintf(stderr,
                "cpulm serve: %d slots, each with the model's context (at most 4096; -c "
                "is per slot, unlike llama-server's total)\n",
                p.sched.n_parallel);
    if (p.sched.n_threads || p.sched.n_threads_batch) { /* -t / -tb as the scheduler gets them */
        char gen[24] = "the default", prompt[24];
        if (p.sched.n_threads) snprintf(gen, sizeof gen, "%d", p.sched.n_threads);
        snprintf(prompt, sizeof prompt, "%d", p.sched.n_threads_batch);
        fprintf(stderr, "cpulm serve: threads: %s for generation, %s for prompt steps\n", gen,
                p.sched.n_threads_batch ? prompt : gen);
    }
    fflush(stdout);
    rc = cpulm_server_run(srv, &err) == CPULM_OK ? 0 : 1;
    if (rc)
        fprintf(stderr, "cpulm serve: %s\n", err.msg);
    else
        fprintf(stderr, "cpulm serve: stopped\n");
    cpulm_server_free(srv);
    free(tmpl_owned);
    return rc;
}
