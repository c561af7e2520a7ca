/* cmd_loadtest.c: `cpulm loadtest`: a closed-loop load generator for OpenAI-compatible
 * servers. For each concurrency level C, C worker threads each send a request, wait for
 * the whole answer, and send the next, until the level's request count is done. Reports
 * per level: TTFT (streaming only), end-to-end latency and inter-token latency
 * percentiles, aggregate output tokens/s, requests/s and errors, as a Markdown table or
 * JSON. Bounded: at most 1024 workers, 1,000,000 requests per level, a per-request timeout
 * and a per-level time limit; only the given URL is contacted. */
#define _GNU_SOURCE
#include <pthread.h>
#include <unistd.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "tools_api.h"
#include "commands.h"
#include "common.h"
#include "loadtest.h"
#include "progress.h"

typedef struct lt_opts {
    const char *url, *api_key, *format;
    int32_t *conc;
    int n_conc, n_requests, prompt_len, max_tokens, stream, chat, progress;
    float timeout_s, max_time_s, wait_s;
} lt_opts;

typedef struct samples {
    double *v;
    size_t n, cap;
} samples;

typedef struct level {
    const lt_opts *o;
    const lt_url *u;
    atomic_int next;
    double deadline;
    pthread_mutex_t mu;
    samples ttft, e2e, itl;
    int n_ok, n_err;
    int64_t out_tokens, prompt_tokens;
    char first_error[160];
    double wall;
    int32_t conc;
    cli_progress *prog;
} level;

static void lt_usage(FILE *f) {
    fprintf(f,
            "usage: cpulm loadtest [options]\n"
            "  --url URL             server base URL (default http://127.0.0.1:8080)\n"
            "  --concurrency LIST    concurrent clients per level, e.g. 1,10,50,100 (default 1,4)\n"
            "  --requests N          requests per level (default 20)\n"
            "  --prompt-len L        prompt length in words, about one token each (default 32)\n"
            "  --max-tokens M        tokens to generate per request (default 64; sent with\n"
            "                        ignore_eos so every request generates M)\n"
            "  --stream              stream (SSE): measures TTFT and inter-token latency\n"
            "  --chat                use /v1/chat/completions (default /v1/completions)\n"
            "  -o, --output md|json  report format (default md)\n"
            "  --api-key KEY         bearer token (default $CPULM_API_KEY)\n"
            "  --timeout S           per-request limit (default 300)\n"
            "  --max-time S          per-level limit: no new requests after it (default 600)\n"
            "  --wait S              first wait up to S seconds for the server to be ready\n"
            "                        (GET /ready, or /health where there is no /ready;\n"
            "                        0: start at once; default 120)\n"
            "  --progress, --no-progress  live line on stderr: requests done per level\n"
            "                        (default: when stderr is a terminal)\n");
}

static int parse_lt(int argc, char **argv, lt_opts *o) {
    cli c = {.cmd = "loadtest", .argc = argc, .argv = argv};
    const char *conc = "1,4";
    for (c.i = 1; c.i < argc; c.i++) {
        if (cli_flag(&c, "-h", "--help")) {
            lt_usage(stdout);
            exit(0);
        } else if (cli_flag(&c, "--url", NULL)) {
            if (!(o->url = cli_value(&c))) return EXIT_USAGE;
        } else if (cli_flag(&c, "--concurrency", NULL)) {
            if (!(conc = cli_value(&c))) return EXIT_USAGE;
        } else if (cli_flag(&c, "--requests", NULL)) {
            if (!cli_int(&c, 1, 1000000, &o->n_requests)) return EXIT_USAGE;
        } else if (cli_flag(&c, "--prompt-len", NULL)) {
            if (!cli_int(&c, 1, 1 << 20, &o->prompt_len)) return EXIT_USAGE;
        } else if (cli_flag(&c, "--max-tokens", NULL)) {
            if (!cli_int(&c, 1, 1 << 20, &o->max_tokens)) return EXIT_USAGE;
        } else if (cli_flag(&c, "--stream", NULL)) {
            o->stream = 1;
        } else if (cli_flag(&c, "--chat", NULL)) {
            o->chat = 1;
        } else if (cli_flag(&c, "-o", "--output")) {
            if (!(o->format = cli_value(&c))) return EXIT_USAGE;
        } else if (cli_flag(&c, "--api-key", NULL)) {
            if (!(o->api_key = cli_value(&c))) return EXIT_USAGE;
        } else if (cli_flag(&c, "--timeout", NULL)) {
            if (!cli_float(&c, 0.1, 86400, &o->timeout_s)) return EXIT_USAGE;
        } else if (cli_flag(&c, "--max-time", NULL)) {
            if (!cli_float(&c, 0.1, 86400, &o->max_time_s)) return EXIT_USAGE;
        } else if (cli_flag(&c, "--wait", NULL)) {
            if (!cli_float(&c, 0, 86400, &o->wait_s)) return EXIT_USAGE;
        } else if (cli_progress_flag(&c, &o->progress)) {
        } else {
            if (cli_rest(&c)) return EXIT_USAGE;
        }
    }
    o->n_conc = cli_int_list(conc, &o->conc);
    for (int i = 0; i < o->n_conc; i++)
        if (o->conc[i] < 1 || o->conc[i] > 1024) o->n_conc = -1;
    if (o->n_conc <= 0) {
        fprintf(stderr, "cpulm loadtest: bad value '%s' for --concurrency (1..1024 each)\n", conc);
        return EXIT_USAGE;
    }
    if (strcmp(o->format, "md") != 0 && strcmp(o->format, "json") != 0) {
        fprintf(stderr, "cpulm loadtest: bad value '%s' for -o (md or json)\n", o->format);
        return EXIT_USAGE;
    }
    return 0;
}

/* ---- requests ---- */

/* A prompt of about prompt_len tokens; request i starts differently so the server's
 * prefix cache does not turn the test into a cache benchmark. */
static void make_body(const lt_opts *o, int i, cpulm_buf *b) {
    static const char *words[] = {"the", "little", "cat", "sat", "on",  "a",    "warm", "mat",
                                  "and", "looked", "at",  "big", "red", "ball", "in",   "sun"};
    cpulm_buf text;
    cpulm_buf_init(&text, 0);
    cpulm_buf_printf(&text, "%d", i);
    for (int k = 1; k < o->prompt_len; k++)
        cpulm_buf_printf(&text, " %s", words[(k * 7 + i) % 16]);
    cpulm_json_writer w;
    cpulm_json_writer_init(&w, b, 0, 0);
    cpulm_json_obj_begin(&w);
    if (o->chat) {
        cpulm_json_key(&w, "messages");
        cpulm_json_arr_begin(&w);
        cpulm_json_obj_begin(&w);
        cpulm_json_key(&w, "role");
        cpulm_json_write_str(&w, "user");
        cpulm_json_key(&w, "content");
        cpulm_json_write_strn(&w, text.data, text.len);
        cpulm_json_obj_end(&w);
        cpulm_json_arr_end(&w);
    } else {
        cpulm_json_key(&w, "prompt");
        cpulm_json_write_strn(&w, text.data, text.len);
    }
    cpulm_json_key(&w, "max_tokens");
    cpulm_json_write_int(&w, o->max_tokens);
    cpulm_json_key(&w, "ignore_eos");
    cpulm_json_write_bool(&w, 1);
    cpulm_json_key(&w, "stream");
    cpulm_json_write_bool(&w, o->stream);
    if (o->stream) {
        cpulm_json_key(&w, "stream_options");
        cpulm_json_obj_begin(&w);
        cpulm_json_key(&w, "include_usage");
        cpulm_json_write_bool(&w, 1);
        cpulm_json_obj_end(&w);
    }
    cpulm_json_obj_end(&w);
    cpulm_buf_release(&text);
}

static void push(samples *s, double v) {
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 256;
        double *p = realloc(s->v, sizeof *p * cap);
        if (!p) return;
        s->v = p;
        s->cap = cap;
    }
    s->v[s->n++] = v;
}

static void record(level *lv, const lt_result *r) {
    pthread_mutex_lock(&lv->mu);
    if (r->status == 200 && !r->error[0]) {
        lv->n_ok++;
        push(&lv->e2e, r->t_total);
        if (r->t_first >= 0) push(&lv->ttft, r->t_first);
        for (int32_t k = 1; k < r->n_events; k++)
            push(&lv->itl, r->t_events[k] - r->t_events[k - 1]);
        lv->out_tokens += r->completion_tokens >= 0 ? r->completion_tokens : r->n_events;
        if (r->prompt_tokens > 0) lv->prompt_tokens += r->prompt_tokens;
    } else {
        lv->n_err++;
        if (!lv->first_error[0])
            snprintf(lv->first_error, sizeof lv->first_error, "HTTP %d %s", r->status, r->error);
    }
    int done = lv->n_ok + lv->n_err;
    cli_progress_update(lv->prog, done == lv->o->n_requests,
                        "cpulm loadtest: concurrency %d: %d/%d requests, %d errors", lv->conc, done,
                        lv->o->n_requests, lv->n_err);
    pthread_mutex_unlock(&lv->mu);
}

static void *worker(void *arg) {
    level *lv = arg;
    const lt_opts *o = lv->o;
    lt_conn c;
    lt_conn_init(&c);
    cpulm_buf body;
    cpulm_buf_init(&body, 0);
    const char *path = o->chat ? "/v1/chat/completions" : "/v1/completions";
    for (;;) {
        int i = atomic_fetch_add(&lv->next, 1);
        if (i >= o->n_requests || lt_now() > lv->deadline) break;
        cpulm_buf_reset(&body);
        make_body(o, i, &body);
        lt_result r;
        lt_post(&c, lv->u, path, body.data, body.len, o->api_key, o->stream, o->timeout_s, &r);
        record(lv, &r);
        lt_result_release(&r);
    }
    cpulm_buf_release(&body);
    free(c.buf);
    lt_conn_close(&c);
    return NULL;
}

static int run_level(level *lv, int32_t conc) {
    pthread_t *th = calloc((size_t)conc, sizeof *th);
    if (!th) return -1;
    double t0 = lt_now();
    lv->deadline = t0 + lv->o->max_time_s;
    int32_t n = 0;
    for (; n < conc; n++)
        if (pthread_create(&th[n], NULL, worker, lv) != 0) break;
    for (int32_t i = 0; i < n; i++)
        pthread_join(th[i], NULL);
    lv->wall = lt_now() - t0;
    free(th);
    return n == conc ? 0 : -1;
}

/* ---- report ---- */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void sort_samples(samples *s) {
    if (s->n) qsort(s->v, s->n, sizeof(double), cmp_double); /* qsort(NULL, 0) is UB */
}

/* Nearest-rank percentile in milliseconds; -1 when there are no samples. */
static double pct_ms(samples *s, double p) {
    if (s->n == 0) return -1;
    size_t k = (size_t)(p / 100.0 * (double)s->n + 0.999999);
    if (k < 1) k = 1;
    if (k > s->n) k = s->n;
    return s->v[k - 1] * 1000.0;
}

static void fmt_ms(char *out, size_t cap, samples *s) {
    if (!s->n)
        snprintf(out, cap, "-");
    else
        snprintf(out, cap, "%.1f / %.1f / %.1f", pct_ms(s, 50), pct_ms(s, 90), pct_ms(s, 99));
}

static void print_md_row(level *lv, int32_t conc) {
    char ttft[64], e2e[64], itl[64];
    fmt_ms(ttft, sizeof ttft, &lv->ttft);
    fmt_ms(e2e, sizeof e2e, &lv->e2e);
    fmt_ms(itl, sizeof itl, &lv->itl);
    printf("| %4d | %5d | %5d | %s | %s | %s | %8.1f | %6.2f |\n", conc, lv->n_ok, lv->n_err, ttft,
           e2e, itl, (double)lv->out_tokens / lv->wall, lv->n_ok / lv->wall);
}

static void json_pcts(cpulm_json_writer *w, const char *key, samples *s) {
    cpulm_json_key(w, key);
    if (!s->n) {
        cpulm_json_write_null(w);
        return;
    }
    cpulm_json_obj_begin(w);
    const double ps[3] = {50, 90, 99};
    const char *names[3] = {"p50", "p90", "p99"};
    for (int i = 0; i < 3; i++) {
        cpulm_json_key(w, names[i]);
        cpulm_json_write_double(w, pct_ms(s, ps[i]));
    }
    cpulm_json_obj_end(w);
}

static void json_level(cpulm_json_writer *w, level *lv, int32_t conc) {
    cpulm_json_obj_begin(w);
    cpulm_json_key(w, "concurrency");
    cpulm_json_write_int(w, conc);
    cpulm_json_key(w, "ok");
    cpulm_json_write_int(w, lv->n_ok);
    cpulm_json_key(w, "errors");
    cpulm_json_write_int(w, lv->n_err);
    json_pcts(w, "ttft_ms", &lv->ttft);
    json_pcts(w, "latency_ms", &lv->e2e);
    json_pcts(w, "itl_ms", &lv->itl);
    cpulm_json_key(w, "output_tokens_per_s");
    cpulm_json_write_double(w, (double)lv->out_tokens / lv->wall);
    cpulm_json_key(w, "requests_per_s");
    cpulm_json_write_double(w, lv->n_ok / lv->wall);
    cpulm_json_key(w, "mean_prompt_tokens");
    cpulm_json_write_double(w, lv->n_ok ? (double)lv->prompt_tokens / lv->n_ok : 0);
    cpulm_json_key(w, "wall_s");
    cpulm_json_write_double(w, lv->wall);
    cpulm_json_key(w, "first_error");
    if (lv->first_error[0])
        cpulm_json_write_str(w, lv->first_error);
    else
        cpulm_json_write_null(w);
    cpulm_json_obj_end(w);
}

static void level_release(level *lv) {
    free(lv->ttft.v);
    free(lv->e2e.v);
    free(lv->itl.v);
    pthread_mutex_destroy(&lv->mu);
}

/* ---- readiness ---- */

/* Waits (up to o->wait_s) until the server answers its readiness probe: GET /ready (cpulm
 * serve: 503 while the model loads), or /health where /ready is 404 (llama-server answers
 * 503 there while loading). Refused connections (a server still starting) and 503 mean
 * "not yet"; any other answer means go (the requests report what is wrong). Returns 0 when
 * ready, -1 after the wait. */
static int wait_ready(const lt_opts *o, const lt_url *u, cli_progress *prog) {
    if (o->wait_s <= 0) return 0;
    const double end = lt_now() + o->wait_s;
    const char *path = "/ready";
    lt_conn c;
    lt_conn_init(&c);
    int ready = 0, told = 0;
    for (;;) {
        lt_result r;
        lt_get(&c, u, path, o->api_key, 5.0, &r);
        const int st = r.status;
        lt_result_release(&r);
        if (st == 404 && strcmp(path, "/ready") == 0) {
            path = "/health";
            continue;
        }
        if (st != 0 && st != 503) {
            ready = 1;
            break;
        }
        if (lt_now() >= end) break;
        if (!told++) /* once, also off a terminal: a wrong URL would wait in silence */
            fprintf(stderr, "cpulm loadtest: waiting up to %g s for %s to be ready (--wait)\n",
                    (double)o->wait_s, o->url);
        cli_progress_update(prog, 1, "cpulm loadtest: waiting for %s to be ready", o->url);
        lt_conn_close(&c);
        usleep(200000);
    }
    lt_conn_close(&c);
    free(c.buf);
    cli_progress_clear(prog);
    if (!ready)
        fprintf(stderr, "cpulm loadtest: %s not ready after %g s (--wait)\n", o->url,
                (double)o->wait_s);
    return ready ? 0 : -1;
}

int cmd_loadtest(int argc, char **argv) {
    lt_opts o = {.url = "http://127.0.0.1:8080",
                 .format = "md",
                 .progress = -1,
                 .n_requests = 20,
                 .prompt_len = 32,
                 .max_tokens = 64,
                 .timeout_s = 300,
                 .max_time_s = 600,
                 .wait_s = 120};
    o.api_key = getenv("CPULM_API_KEY");
    int rc = parse_lt(argc, argv, &o);
    if (rc) return rc;
    lt_url u;
    char why[256];
    if (lt_url_parse(o.url, &u, why, sizeof why) != 0) {
        fprintf(stderr, "cpulm loadtest: %s\n", why);
        free(o.conc);
        return EXIT_USAGE;
    }
    int md = strcmp(o.format, "md") == 0, failed = 0;
    cli_progress prog;
    cli_progress_init(&prog, o.progress);
    if (wait_ready(&o, &u, &prog) != 0) {
        cli_progress_end(&prog);
        free(o.conc);
        return 1;
    }
    cpulm_buf js;
    cpulm_buf_init(&js, 0);
    cpulm_json_writer w;
    cpulm_json_writer_init(&w, &js, 0, 2);
    if (md) {
        printf("%s %s, %d requests per level, prompt ~%d tokens, %d output tokens%s\n\n", o.url,
               o.chat ? "chat" : "completions", o.n_requests, o.prompt_len, o.max_tokens,
               o.stream ? ", streaming" : "");
        printf("| conc | ok | errors | TTFT p50/p90/p99 ms | latency p50/p90/p99 ms | "
               "inter-token p50/p90/p99 ms | output t/s | req/s |\n");
        printf("|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    } else {
        cpulm_json_obj_begin(&w);
        cpulm_json_key(&w, "url");
        cpulm_json_write_str(&w, o.url);
        cpulm_json_key(&w, "levels");
        cpulm_json_arr_begin(&w);
    }
    for (int i = 0; i < o.n_conc; i++) {
        level lv;
        memset(&lv, 0, sizeof lv);
        lv.o = &o;
        lv.u = &u;
        lv.conc = o.conc[i];
        lv.prog = &prog;
        pthread_mutex_init(&lv.mu, NULL);
        cli_progress_update(&prog, 1, "cpulm loadtest: concurrency %d: 0/%d requests", lv.conc,
                            o.n_requests);
        int started = run_level(&lv, o.conc[i]) == 0;
        cli_progress_clear(&prog); /* before the row goes to stdout on the same terminal */
        if (!started) fprintf(stderr, "cpulm loadtest: could not start all workers\n");
        sort_samples(&lv.ttft);
        sort_samples(&lv.e2e);
        sort_samples(&lv.itl);
        if (md)
            print_md_row(&lv, o.conc[i]);
        else
            json_level(&w, &lv, o.conc[i]);
        if (lv.first_error[0])
            fprintf(stderr, "concurrency %d: first error: %s\n", o.conc[i], lv.first_error);
        failed |= lv.n_ok == 0;
        fflush(stdout);
        level_release(&lv);
    }
    if (!md) {
        cpulm_json_arr_end(&w);
        cpulm_json_obj_end(&w);
        printf("%s\n", js.data);
    }
    cli_progress_end(&prog);
    cpulm_buf_release(&js);
    free(o.conc);
    return failed ? 1 : 0;
}
