/* cmd_loadtest.c: `cpulm loadtest`: a load generator for OpenAI-compatible servers (cpulm
 * serve, llama-server, vLLM, ...). Requests come from a workload (data/workloads/NAME.json or
 * --prompt-len/--max-tokens); loads are closed-loop concurrency levels or open-loop
 * arrival rates (constant or Poisson); with --slo it searches for the highest load meeting
 * the objective. Per level: TTFT, inter-token latency, time per output token and
 * end-to-end percentiles over the successful requests, input/output tokens/s, requests/s,
 * goodput, and every failed request counted by kind. With a price (--price-hour or
 * --instance), cost per 1M input/output tokens and per 1k requests, and instances needed.
 * The level runner is loadtest_run.c, the arithmetic loadtest_stats.c, the tables
 * loadtest_print.c. */
#define _GNU_SOURCE
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_plan.h"
#include "commands.h"
#include "common.h"
#include "options.h"
#include "loadtest_print.h"

#define MAX_ROWS 64

typedef struct lt_opts {
    const char *url, *api_key, *format, *workload, *slo_spec, *instance, *prices;
    int32_t *conc;
    double rates[MAX_ROWS];
    int n_conc, n_rates, n_requests, prompt_len, max_tokens, stream, chat, progress;
    int poisson, arrivals_given, allow_failures, search_steps, max_inflight, fixed_given;
    int conc_given, warmup, trials;
    float timeout_s, max_time_s, wait_s, search_max, search_precision, price_hour, users,
        target_rate;
    lt_slo slo;
} lt_opts;

static void lt_usage(FILE *f) {
    fprintf(f, "usage: cpulm loadtest [options]\n");
    cli_help(f, "loadtest");
    fprintf(f, "Exit status: 0, or 1 when a request failed (unless --allow-failures), a level had\n"
               "no success, or the --slo search found no load meeting the objective.\n");
}

static int parse_rates(const char *s, lt_opts *o) {
    o->n_rates = 0;
    while (*s) {
        char *end;
        double v = strtod(s, &end);
        if (end == s || !(v > 0 && v <= 1e6) || o->n_rates == MAX_ROWS) return -1;
        o->rates[o->n_rates++] = v;
        s = end + (*end == ',');
        if (*end && *end != ',') return -1;
    }
    return o->n_rates ? 0 : -1;
}

static int bad_value(const char *v, const char *flag, const char *want) {
    fprintf(stderr, "cpulm loadtest: bad value '%s' for %s (%s)\n", v, flag, want);
    return EXIT_USAGE;
}

/* One flag; returns 1 when consumed, 0 when not ours, -1 on a bad value (message printed). */
/* The rows with a value; 1 when id was one of them. */
static int value_opt(int id, const cli_val *v, lt_opts *o, const char **conc, const char **rates,
                     const char **arrivals) {
    switch (id) {
    case OPT_LT_URL: o->url = v->s; break;
    case OPT_WORKLOAD: o->workload = v->s; break;
    case OPT_CONCURRENCY: *conc = v->s, o->conc_given = 1; break;
    case OPT_RATE: *rates = v->s; break;
    case OPT_ARRIVALS: *arrivals = v->s; break;
    case OPT_SLO: o->slo_spec = v->s; break;
    case OPT_ROOF_OUTPUT: o->format = v->s; break;
    case OPT_API_KEY: o->api_key = v->s; break;
    case OPT_INSTANCE: o->instance = v->s; break;
    case OPT_PRICES: o->prices = v->s; break;
    case OPT_REQUESTS: o->n_requests = (int)v->i; break;
    case OPT_PROMPT_LEN: o->prompt_len = (int)v->i, o->fixed_given = 1; break;
    case OPT_MAX_TOKENS: o->max_tokens = (int)v->i, o->fixed_given = 1; break;
    case OPT_WARMUP: o->warmup = (int)v->i; break;
    case OPT_MAX_INFLIGHT: o->max_inflight = (int)v->i; break;
    case OPT_SEARCH_STEPS: o->search_steps = (int)v->i; break;
    case OPT_SEARCH_MAX: o->search_max = (float)v->f; break;
    case OPT_SEARCH_PRECISION: o->search_precision = (float)v->f; break;
    case OPT_TRIALS: o->trials = (int)v->i; break;
    case OPT_PRICE_HOUR: o->price_hour = (float)v->f; break;
    case OPT_USERS: o->users = (float)v->f; break;
    case OPT_TARGET_RATE: o->target_rate = (float)v->f; break;
    case OPT_TIMEOUT: o->timeout_s = (float)v->f; break;
    case OPT_MAX_TIME: o->max_time_s = (float)v->f; break;
    case OPT_WAIT: o->wait_s = (float)v->f; break;
    default: return 0;
    }
    return 1;
}

/* The lists and names given as text, checked once every flag is read. */
static int check_opts(lt_opts *o, const char *conc, const char *rates, const char *arrivals) {
    o->n_conc = cli_int_list(conc, &o->conc);
    for (int i = 0; i < o->n_conc; i++)
        if (o->conc[i] < 1 || o->conc[i] > 1024) o->n_conc = -1;
    if (o->n_conc <= 0 || o->n_conc > MAX_ROWS)
        return bad_value(conc, "--concurrency", "1..1024 each, at most 64 levels");
    if (rates && parse_rates(rates, o))
        return bad_value(rates, "--rate", "requests/s > 0 each, at most 64 levels");
    if (arrivals && strcmp(arrivals, "poisson") && strcmp(arrivals, "constant"))
        return bad_value(arrivals, "--arrivals", "poisson or constant");
    o->arrivals_given = arrivals != NULL;
    o->poisson = !arrivals || !strcmp(arrivals, "poisson");
    if (strcmp(o->format, "md") != 0 && strcmp(o->format, "json") != 0)
        return bad_value(o->format, "-o", "md or json");
    char err[256];
    if (o->slo_spec && lt_slo_parse(o->slo_spec, &o->slo, err, sizeof err)) {
        fprintf(stderr, "cpulm loadtest: --slo: %s\n", err);
        return EXIT_USAGE;
    }
    if (o->workload && o->fixed_given) {
        fprintf(stderr, "cpulm loadtest: --prompt-len/--max-tokens and --workload exclude each "
                        "other (the workload gives the lengths)\n");
        return EXIT_USAGE;
    }
    if (o->instance && o->price_hour > 0) {
        fprintf(stderr, "cpulm loadtest: give --price-hour or --instance, not both\n");
        return EXIT_USAGE;
    }
    return 0;
}

typedef struct lt_parse {
    lt_opts *o;
    const char *conc, *rates, *arrivals; /* checked once every flag is read */
} lt_parse;

static int lt_opt(cli *c, int id, const cli_val *v, void *ctx) {
    lt_parse *P = ctx;
    lt_opts *o = P->o;
    switch (id) {
    case OPT_STREAM: o->stream = 1; break;
    case OPT_NO_STREAM: o->stream = 0; break;
    case OPT_CHAT_API: o->chat = 1; break;
    case OPT_ALLOW_FAILURES: o->allow_failures = 1; break;
    case OPT_PROGRESS: o->progress = 1; break;
    case OPT_NO_PROGRESS: o->progress = 0; break;
    default:
        if (!value_opt(id, v, o, &P->conc, &P->rates, &P->arrivals)) return cli_unhandled(c, v);
    }
    return 0;
}

static int parse_lt(int argc, char **argv, lt_opts *o) {
    cli c = {.cmd = "loadtest", .argc = argc, .argv = argv};
    lt_parse P = {.o = o, .conc = "1,4"};
    int rc = cli_parse(&c, lt_usage, lt_opt, &P);
    return rc ? rc : check_opts(o, P.conc, P.rates, P.arrivals);
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

/* ---- running ---- */

typedef struct lt_run {
    lt_opts *o;
    workload w;
    lt_url u;
    cli_progress prog;
    lt_row rows[MAX_ROWS];
    int n_rows, md, searching;
    lt_search s;        /* the --slo search's state: the answer's trials and bracket */
    int64_t next_index; /* each level's requests are new ones: no cache carries over */
    double usd_hour;
    char machine[1024]; /* what the price is of, and where it came from */
} lt_run;

static lt_row *run_one(lt_run *R, int open, double load) {
    const lt_opts *o = R->o;
    if (R->n_rows == MAX_ROWS) return NULL;
    lt_row *row = &R->rows[R->n_rows++];
    memset(row, 0, sizeof *row);
    *row = (lt_row){.open = open, .load = load, .poisson = o->poisson};
    int n = o->n_requests;
    if (!open && R->searching && n < 2 * (int)load) n = 2 * (int)load; /* every client twice */
    char label[64];
    snprintf(label, sizeof label, open ? "rate %g req/s" : "concurrency %.0f", load);
    lt_level_spec sp = {.w = &R->w,
                        .u = &R->u,
                        .api_key = o->api_key,
                        .slo = o->slo_spec ? &o->slo : NULL,
                        .stream = o->stream,
                        .chat = o->chat,
                        .timeout_s = o->timeout_s,
                        .max_time_s = o->max_time_s,
                        .n_requests = n,
                        .first_index = R->next_index,
                        .open = open,
                        .rate = load,
                        .poisson = o->poisson,
                        .conc = open ? o->max_inflight : (int)load,
                        .prog = &R->prog,
                        .label = label};
    cli_progress_update(&R->prog, 1, "cpulm loadtest: %s: 0/%d requests", label, n);
    if (lt_run_level(&sp, &row->out) != 0)
        fprintf(stderr, "cpulm loadtest: could not start all client threads\n");
    cli_progress_clear(&R->prog); /* before the row goes to stdout on the same terminal */
    R->next_index += n;
    if (o->slo_spec) {
        row->slo_checked = 1;
        row->slo_met = lt_slo_met(&o->slo, &row->out.st, row->slo_why, sizeof row->slo_why);
    }
    if (R->md) lt_md_row(row, o->slo_spec != NULL);
    fflush(stdout);
    return row;
}

/* Grows the load until the objective breaks, then bisects; returns the best row or NULL. */
static lt_row *search(lt_run *R) {
    const lt_opts *o = R->o;
    int open = o->n_rates > 0;
    double max = o->search_max > 0 ? o->search_max : open ? 100 : 256;
    lt_search *s = &R->s;
    lt_search_init(s, open ? o->rates[0] : o->conc[0], max, o->search_steps, !open);
    lt_search_set_trials(s, o->trials, o->search_precision);
    R->searching = 1;
    for (double x; (x = lt_search_next(s)) > 0;) {
        lt_row *r = run_one(R, open, x);
        if (!r) break;
        lt_search_report(s, x, r->slo_met);
    }
    if (!s->done || !s->lo_confirmed) return NULL; /* out of rows, or nothing met */
    lt_row *met[MAX_ROWS]; /* the answer's met trials, by TTFT p99: the median one is shown */
    int n = 0;
    for (int i = 0; i < R->n_rows; i++) {
        if (R->rows[i].load != s->lo || !R->rows[i].slo_met) continue;
        int j = n++;
        for (; j > 0 && lt_pct(&met[j - 1]->out.st.ttft, 99) > lt_pct(&R->rows[i].out.st.ttft, 99);
             j--)
            met[j] = met[j - 1];
        met[j] = &R->rows[i];
    }
    lt_row *best = n ? met[(n - 1) / 2] : NULL;
    return best;
}

static int load_price(lt_run *R) {
    const lt_opts *o = R->o;
    if (o->price_hour > 0) {
        R->usd_hour = o->price_hour;
        snprintf(R->machine, sizeof R->machine, "the given machine");
        return 0;
    }
    if (!o->instance) return 0;
    char path[4096], err[512];
    plan_prices p = {0};
    if (plan_prices_locate(o->prices, path, sizeof path) ||
        plan_prices_load(path, &p, err, sizeof err)) {
        fprintf(stderr, "cpulm loadtest: %s\n",
                o->prices ? err : "no price table found (--prices FILE)");
        return EXIT_USAGE;
    }
    const plan_instance *in = plan_prices_find(&p, o->instance);
    if (in) {
        R->usd_hour = in->usd_hour;
        snprintf(R->machine, sizeof R->machine,
                 "%s%s%s (list price as of %s, source %.60s in %.256s)", in->name,
                 in->gpu[0] ? ", GPU " : "", in->gpu, in->date[0] ? in->date : "?",
                 in->source[0] ? in->source : p.source, path);
    } else {
        fprintf(stderr, "cpulm loadtest: instance '%s' is not in %s\n", o->instance, path);
    }
    plan_prices_release(&p);
    return in ? 0 : EXIT_USAGE;
}

/* ---- summary ---- */

static void md_search_summary(const lt_run *R, const lt_row *best) {
    const lt_opts *o = R->o;
    char slo[256], load[32];
    lt_slo_describe(&o->slo, slo, sizeof slo);
    int open = o->n_rates > 0;
    const lt_search *sr = &R->s;
    printf("\nobjective %s over the successful requests, no request failed; each trial ran "
           "%d+ requests, loads near the boundary decided by a majority of %d trials:\n",
           slo, o->n_requests, o->trials);
    if (!best) {
        printf("NO load tried met it (lowest tried: %g: %s)\n", R->rows[0].load,
               R->rows[0].slo_why);
        return;
    }
    if (sr->hi > 0)
        printf("bracket: %g met in %d of %d trials, %g missed in %d of %d (the limit lies "
               "between them: %.0f%% apart)\n",
               sr->lo, sr->lo_met, sr->lo_runs, sr->hi, sr->hi_miss, sr->hi_runs,
               (sr->hi / sr->lo - 1) * 100);
    else
        printf("bracket: %g (the search's maximum) met in %d of %d trials\n", sr->lo, sr->lo_met,
               sr->lo_runs);
    lt_label(best, load, sizeof load);
    const lt_stats *s = &best->out.st;
    printf("highest %s meeting it: **%g%s** (%.2f req/s, goodput %.2f req/s, %.1f input t/s, "
           "%.1f output t/s, TTFT p99 %.1f ms)\n",
           open ? "rate" : "concurrency", best->load, open ? " req/s" : " users", s->n_ok / s->wall,
           s->n_good / s->wall, (double)s->in_tokens / s->wall, (double)s->out_tokens / s->wall,
           lt_pct(&s->ttft, 99) * 1000);
    double req_s = s->n_ok / s->wall;
    if (o->users > 0 && !open)
        printf("instances needed for %g concurrent users: %d (%g users each)\n", (double)o->users,
               lt_instances_needed(o->users, best->load), best->load);
    if (o->target_rate > 0)
        printf("instances needed for %g req/s: %d (%.2f req/s each)\n", (double)o->target_rate,
               lt_instances_needed(o->target_rate, req_s), req_s);
}

static void json_doc(lt_run *R, const lt_row *best) {
    const lt_opts *o = R->o;
    cpulm_buf js;
    cpulm_buf_init(&js, 0);
    cpulm_json_writer w;
    cpulm_json_writer_init(&w, &js, 0, 2);
    cpulm_json_obj_begin(&w);
    cpulm_json_key(&w, "url");
    cpulm_json_write_str(&w, o->url);
    char desc[512];
    workload_describe(&R->w, desc, sizeof desc);
    cpulm_json_key(&w, "workload");
    cpulm_json_write_str(&w, R->w.name);
    cpulm_json_key(&w, "workload_description");
    cpulm_json_write_str(&w, desc);
    cpulm_json_key(&w, "stream");
    cpulm_json_write_bool(&w, o->stream);
    if (R->usd_hour > 0) {
        cpulm_json_key(&w, "machine");
        cpulm_json_write_str(&w, R->machine);
    }
    cpulm_json_key(&w, "levels");
    cpulm_json_arr_begin(&w);
    for (int i = 0; i < R->n_rows; i++)
        lt_json_row(&w, &R->rows[i], R->usd_hour);
    cpulm_json_arr_end(&w);
    if (o->slo_spec) {
        lt_slo_describe(&o->slo, desc, sizeof desc);
        cpulm_json_key(&w, "slo");
        cpulm_json_obj_begin(&w);
        cpulm_json_key(&w, "objective");
        cpulm_json_write_str(&w, desc);
        cpulm_json_key(&w, "axis");
        cpulm_json_write_str(&w, o->n_rates ? "rate" : "concurrency");
        cpulm_json_key(&w, "trials");
        cpulm_json_write_int(&w, o->trials);
        if (best) {
            const lt_search *sr = &R->s;
            cpulm_json_key(&w, "best_trials_met");
            cpulm_json_write_int(&w, sr->lo_met);
            cpulm_json_key(&w, "best_trials");
            cpulm_json_write_int(&w, sr->lo_runs);
            cpulm_json_key(&w, "lowest_missed"); /* null: none up to --search-max */
            if (sr->hi > 0)
                cpulm_json_write_double(&w, sr->hi);
            else
                cpulm_json_write_null(&w);
            cpulm_json_key(&w, "lowest_missed_trials_missed");
            cpulm_json_write_int(&w, sr->hi_miss);
            cpulm_json_key(&w, "lowest_missed_trials");
            cpulm_json_write_int(&w, sr->hi_runs);
        }
        cpulm_json_key(&w, "best");
        if (best)
            lt_json_row(&w, best, R->usd_hour);
        else
            cpulm_json_write_null(&w);
        if (best && o->users > 0 && !o->n_rates) {
            cpulm_json_key(&w, "instances_for_users");
            cpulm_json_write_int(&w, lt_instances_needed(o->users, best->load));
        }
        if (best && o->target_rate > 0) {
            cpulm_json_key(&w, "instances_for_rate");
            cpulm_json_write_int(
                &w, lt_instances_needed(o->target_rate, best->out.st.n_ok / best->out.st.wall));
        }
        cpulm_json_obj_end(&w);
    }
    cpulm_json_obj_end(&w);
    printf("%s\n", js.data);
    cpulm_buf_release(&js);
}

static void md_head(const lt_run *R) {
    const lt_opts *o = R->o;
    char desc[512];
    workload_describe(&R->w, desc, sizeof desc);
    printf("%s %s, %s, %d requests per level%s\n\n", o->url, o->chat ? "chat" : "completions", desc,
           o->n_requests, o->stream ? ", streaming" : ", not streaming (no TTFT/ITL)");
    lt_md_header(o->slo_spec != NULL);
}

/* Requests before the first level, not counted: a server's first requests pay for lazy
 * set-up (llama-server's first one is several times slower). */
static void warm_up(lt_run *R) {
    const lt_opts *o = R->o;
    if (!o->warmup) return;
    lt_level_spec sp = {.w = &R->w,
                        .u = &R->u,
                        .api_key = o->api_key,
                        .stream = o->stream,
                        .chat = o->chat,
                        .timeout_s = o->timeout_s,
                        .max_time_s = o->max_time_s,
                        .n_requests = o->warmup,
                        .first_index = (int64_t)1 << 40,
                        .conc = 1,
                        .prog = &R->prog,
                        .label = "warm-up"};
    lt_level_out out;
    if (lt_run_level(&sp, &out) == 0 && out.st.n_fail)
        fprintf(stderr, "cpulm loadtest: warm-up: %d of %d requests failed (%s)\n", out.st.n_fail,
                o->warmup, out.first_error);
    cli_progress_clear(&R->prog);
    lt_stats_release(&out.st);
}

static int run_all(lt_run *R) {
    lt_opts *o = R->o;
    lt_row *best = NULL;
    warm_up(R);
    if (R->md) md_head(R);
    if (o->slo_spec) {
        best = search(R);
    } else {
        for (int i = 0; o->n_rates == 0 && i < o->n_conc; i++)
            run_one(R, 0, o->conc[i]);
        for (int i = 0; i < o->n_rates; i++)
            run_one(R, 1, o->rates[i]);
    }
    int any_fail = 0, empty = 0;
    for (int i = 0; i < R->n_rows; i++) {
        any_fail |= R->rows[i].out.st.n_fail > 0;
        empty |= R->rows[i].out.st.n_ok == 0;
        if (R->rows[i].out.first_error[0])
            fprintf(stderr, "cpulm loadtest: %s %g: %d failed, first error: %s\n",
                    R->rows[i].open ? "rate" : "concurrency", R->rows[i].load,
                    R->rows[i].out.st.n_fail, R->rows[i].out.first_error);
    }
    if (R->md) {
        lt_md_failures(R->rows, R->n_rows);
        if (o->slo_spec) md_search_summary(R, best);
        const lt_row *costed[MAX_ROWS];
        int n = 0;
        for (int i = 0; i < R->n_rows; i++)
            if (!o->slo_spec || &R->rows[i] == best) costed[n++] = &R->rows[i];
        if (R->usd_hour > 0 && n) lt_md_cost(costed, n, R->usd_hour, R->machine);
    } else {
        json_doc(R, best);
    }
    if (o->slo_spec) return best ? 0 : 1;
    if (any_fail && !o->allow_failures)
        fprintf(stderr, "cpulm loadtest: requests failed (see the table); exit 1 "
                        "(--allow-failures to accept them)\n");
    return empty || (any_fail && !o->allow_failures) ? 1 : 0;
}

static int setup_workload(lt_run *R) {
    lt_opts *o = R->o;
    char err[512];
    if (!o->workload) {
        workload_fixed(&R->w, o->prompt_len, o->max_tokens);
    } else if (workload_load(o->workload, &R->w, err, sizeof err)) {
        fprintf(stderr, "cpulm loadtest: %s\n", err);
        return EXIT_USAGE;
    }
    if (R->w.chat) o->chat = 1;
    if (!o->arrivals_given && o->workload) o->poisson = R->w.arrival == WL_ARRIVE_POISSON;
    if (!o->n_rates && !o->conc_given && R->w.rate > 0) { /* the workload's own arrival rate */
        o->rates[0] = R->w.rate;
        o->n_rates = 1;
    }
    return 0;
}

int cmd_loadtest(int argc, char **argv) {
    lt_opts o = {.url = "http://127.0.0.1:8080",
                 .format = "md",
                 .progress = -1,
                 .n_requests = 20,
                 .prompt_len = 32,
                 .max_tokens = 64,
                 .stream = 1,
                 .timeout_s = 300,
                 .max_time_s = 600,
                 .wait_s = 120,
                 .search_steps = 8,
                 .search_precision = 0.05f,
                 .trials = 3,
                 .max_inflight = 256,
                 .warmup = 1};
    o.api_key = getenv("CPULM_API_KEY");
    int rc = parse_lt(argc, argv, &o);
    if (rc) {
        free(o.conc);
        return rc;
    }
    lt_run *R = calloc(1, sizeof *R);
    if (!R) return 1;
    R->o = &o;
    R->md = strcmp(o.format, "md") == 0;
    char why[256];
    if (lt_url_parse(o.url, &R->u, why, sizeof why) != 0) {
        fprintf(stderr, "cpulm loadtest: %s\n", why);
        rc = EXIT_USAGE;
    }
    if (!rc) rc = setup_workload(R);
    if (!rc) rc = load_price(R);
    cli_progress_init(&R->prog, o.progress);
    if (!rc && wait_ready(&o, &R->u, &R->prog) != 0) rc = 1;
    if (!rc) rc = run_all(R);
    cli_progress_end(&R->prog);
    for (int i = 0; i < R->n_rows; i++)
        lt_stats_release(&R->rows[i].out.st);
    free(R);
    free(o.conc);
    return rc;
}
