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
#include "spec_cli.h"

static void serve_usage(FILE *f) {
    fprintf(
        f,
        "usage: cpulm serve [-m MODEL] [options]\n"
        "  -m, --model FILE      GGUF model (default: $CPULM_MODEL or stories260K)\n"
        "  --host ADDR           bind address (default 127.0.0.1; 0.0.0.0 exposes it)\n"
        "  --port N              TCP port (default 8080; 0 = any free port, printed)\n"
        "  -np, --parallel N     sequences decoded together (default 4)\n"
        "  -c, --ctx-size N      context PER SEQUENCE (default: model's, at most 4096).\n"
        "                        NOTE: llama-server's -c is the total shared by its -np\n"
        "                        slots; cpulm's is per slot: -c 4096 -np 4 holds 4 x 4096\n"
        "  --ctx-total N         llama-server's meaning: N tokens in total, N / -np per slot\n"
        "  -ctk, -ctv TYPE       KV cache type: f16 (default), q8_0, q4_0, f32 (K and V alike)\n"
        "  --chunk N             most prompt tokens per scheduler step (default 256)\n"
        "  --max-step-ms MS      target inter-token time (median gap) while prompts are\n"
        "                        evaluated next to running streams; long steps take 2x it\n"
        "                        (default: a measured decode step of all slots;\n"
        "                        -1: off, every step takes --chunk prompt tokens)\n"
        "  --prefill-every N     long steps delay at most 1 in N of the streams' tokens\n"
        "                        (default 3; 1: every step long)\n"
        "  --max-queue N         requests waiting for a slot before 429 (default 64)\n"
        "  --cache-ram MIB       RAM prompt cache shared by all slots (default 2048; 0 = off)\n"
        "  --kv-idle N           KV tokens free slots keep for prefix reuse, all together\n"
        "                        (default: -c with the prompt cache on, all with it off;\n"
        "                        -1 = all); KV memory is the tokens held, not -np x -c\n"
        "  --kv-budget N         KV tokens running requests may reserve in all (prompt +\n"
        "                        max_tokens per choice); the next waits until it fits\n"
        "                        (default 0: no limit)\n"
        "  -t, --threads N       decode threads (default: physical cores)\n"
        "  -tb, --threads-batch N  threads of steps that evaluate prompt tokens (default: -t)\n"
        "  --numa MODE           distribute: threads over every NUMA node's cores, weights\n"
        "                        interleaved; isolate: cores and memory of the starting node;\n"
        "                        numactl: the CPUs numactl/taskset allowed (docs/PERFORMANCE.md)\n"
        "  --api-key KEY         require Authorization: Bearer KEY on /v1/*\n"
        "                        (default: $CPULM_API_KEY, else none; an empty key is an error)\n"
        "  --alias NAME          model id in /v1/models (default: file name)\n"
        "  --chat-template NAME|FILE  override the model's chat template (llama3, llama2,\n"
        "                        mistral, chatml, deepseek-r1, gemma, plain, or a Jinja file)\n"
        "  --embeddings          serve POST /v1/embeddings (a second, embeddings-only context)\n"
        "  --pooling P           its pooling: mean|last|cls (default: the model's)\n"
        "  --slots, --no-slots   GET /slots, llama-server's slot monitor (default: on)\n"
        "  --timeout S           per-request time limit in seconds (default 600)\n"
        "  --grace S             shutdown grace period in seconds (default 30)\n"
        "  --max-body BYTES      request body limit (default 1048576)\n"
        "  --max-conns N         open connections (default 1024)\n"
        "  --max-conns-per-client N  per client address (default 256; 0 = no limit)\n"
        "  --head-timeout S      a request head must arrive within S seconds (default 10)\n"
        "  --body-timeout S      a request body may pause at most S seconds (default 10; 408)\n"
        "  --max-body-total BYTES  memory for request bodies being received, all connections\n"
        "                        together (default 64 MiB or 4 x --max-body; 503 past it)\n"
        "  --idle-timeout S      idle keep-alive connections close after S (default 60)\n"
        "Speculative decoding, per slot inside the batched steps (requests may send\n"
        "\"speculative.n_max\": 0 to opt out; docs/SERVER.md):\n" CLI_SPEC_HELP
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

static int parse_serve(int argc, char **argv, cpulm_server_params *p, const char **model,
                       const char **tmpl) {
    cli c = {.cmd = "serve", .argc = argc, .argv = argv};
    int kv_given = 0;
    int total = 0;
    cli_spec spec;
    cli_spec_init(&spec);
    for (c.i = 1; c.i < argc; c.i++) {
        float f;
        int v, sf = cli_spec_flag(&c, &spec);
        if (sf < 0) return EXIT_USAGE;
        if (sf > 0) {
            continue;
        } else if (cli_flag(&c, "-h", "--help")) {
            serve_usage(stdout);
            exit(0);
        } else if (cli_flag(&c, "-m", "--model")) {
            if (!(*model = cli_value(&c))) return EXIT_USAGE;
        } else if (cli_flag(&c, "--host", NULL)) {
            if (!(p->host = cli_value(&c))) return EXIT_USAGE;
        } else if (cli_flag(&c, "--port", NULL)) {
            if (!cli_int(&c, 0, 65535, &p->port)) return EXIT_USAGE;
        } else if (cli_parallel_flag(&c)) {
            if (!cli_int(&c, 1, 256, &p->sched.n_parallel)) return EXIT_USAGE;
        } else if (cli_flag(&c, "-c", "--ctx-size")) {
            if (!cli_int(&c, 0, 1 << 24, &p->sched.n_ctx)) return EXIT_USAGE;
        } else if (cli_flag(&c, "-ctk", "--cache-type-k") ||
                   cli_flag(&c, "-ctv", "--cache-type-v")) {
            if (!cli_kv_flag(&c, &p->sched.kv_type, &kv_given)) return EXIT_USAGE;
        } else if (cli_flag(&c, "--ctx-total", NULL)) {
            if (!cli_int(&c, 1, 1 << 24, &total)) return EXIT_USAGE;
        } else if (cli_flag(&c, "--chunk", NULL)) {
            if (!cli_int(&c, 1, 65536, &p->sched.n_chunk)) return EXIT_USAGE;
        } else if (cli_flag(&c, "--prefill-every", NULL)) {
            if (!cli_int(&c, 1, 1000, &p->sched.prefill_every)) return EXIT_USAGE;
        } else if (cli_flag(&c, "--max-queue", NULL)) {
            if (!cli_int(&c, 0, 1 << 20, &p->sched.max_queue)) return EXIT_USAGE;
        } else if (cli_flag(&c, "--max-step-ms", NULL)) {
            if (!cli_float(&c, -1, 1e6, &f)) return EXIT_USAGE;
            p->sched.max_step_ms = f;
        } else if (cli_flag(&c, "--cache-ram", "-cram")) {
            if (!cli_int(&c, 0, 1 << 24, &v)) return EXIT_USAGE;
            p->sched.cache_ram_mib = v;
        } else if (cli_flag(&c, "--kv-idle", NULL)) {
            if (!cli_int(&c, -1, 1 << 30, &v)) return EXIT_USAGE;
            p->sched.kv_idle = v;
        } else if (cli_flag(&c, "--kv-budget", NULL)) {
            if (!cli_int(&c, 0, 1 << 30, &v)) return EXIT_USAGE;
            p->sched.kv_budget = v;
        } else if (cli_flag(&c, "-t", "--threads")) {
            if (!cli_int(&c, 1, 512, &p->sched.n_threads)) return EXIT_USAGE;
        } else if (cli_flag(&c, "-tb", "--threads-batch")) {
            if (!cli_int(&c, 1, 512, &p->sched.n_threads_batch)) return EXIT_USAGE;
        } else if (cli_flag(&c, "--numa", NULL)) {
            if (!cli_numa_flag(&c)) return EXIT_USAGE;
        } else if (cli_flag(&c, "--api-key", NULL)) {
            if (!(p->api_key = cli_value(&c))) return EXIT_USAGE;
            if (check_api_key(p->api_key, "--api-key")) return EXIT_USAGE;
        } else if (cli_flag(&c, "--embeddings", "--embedding")) {
            p->embeddings = 1;
        } else if (cli_flag(&c, "--slots", "--no-slots")) {
            p->no_slots = !strcmp(argv[c.i], "--no-slots");
        } else if (cli_flag(&c, "--pooling", NULL)) {
            const char *pv = cli_value(&c);
            if (!pv) return EXIT_USAGE;
            if (cpulm_pooling_parse(pv, &p->pooling) != CPULM_OK ||
                p->pooling == CPULM_POOLING_RANK) {
                fprintf(stderr, "cpulm serve: --pooling must be mean, last, cls or none\n");
                return EXIT_USAGE;
            }
        } else if (cli_flag(&c, "--chat-template", NULL)) {
            if (!(*tmpl = cli_value(&c))) return EXIT_USAGE;
        } else if (cli_flag(&c, "--alias", NULL)) {
            if (!(p->model_alias = cli_value(&c))) return EXIT_USAGE;
        } else if (cli_flag(&c, "--timeout", NULL)) {
            if (!cli_float(&c, 0.001, 1e6, &f)) return EXIT_USAGE;
            p->timeout_s = f;
        } else if (cli_flag(&c, "--grace", NULL)) {
            if (!cli_float(&c, 0, 1e6, &f)) return EXIT_USAGE;
            p->grace_s = f;
        } else if (cli_flag(&c, "--max-body", NULL)) {
            if (!cli_int(&c, 1024, 1 << 30, &v)) return EXIT_USAGE;
            p->max_body = (size_t)v;
        } else if (cli_flag(&c, "--max-conns", NULL)) {
            if (!cli_int(&c, 1, 65535, &p->max_conns)) return EXIT_USAGE;
        } else if (cli_flag(&c, "--max-conns-per-client", NULL)) {
            if (!cli_int(&c, 0, 65535, &p->max_conns_per_client)) return EXIT_USAGE;
        } else if (cli_flag(&c, "--head-timeout", NULL)) {
            if (!cli_float(&c, 0.001, 1e6, &f)) return EXIT_USAGE;
            p->head_timeout_s = f;
        } else if (cli_flag(&c, "--body-timeout", NULL)) {
            if (!cli_float(&c, 0.001, 1e6, &f)) return EXIT_USAGE;
            p->body_timeout_s = f;
        } else if (cli_flag(&c, "--max-body-total", NULL)) {
            long long b;
            if (!cli_i64(&c, 1024, 1LL << 40, &b)) return EXIT_USAGE;
            p->max_body_total = (size_t)b;
        } else if (cli_flag(&c, "--idle-timeout", NULL)) {
            if (!cli_float(&c, 0.001, 1e6, &f)) return EXIT_USAGE;
            p->idle_timeout_s = f;
        } else {
            if (cli_rest(&c)) return EXIT_USAGE;
        }
    }
    int rc = cli_spec_check(&c, &spec);
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
