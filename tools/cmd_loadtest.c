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
#include "loadtest_calib.h"
#include "loadtest_print.h"

#define MAX_ROWS   64  /* levels given on the command line */
#define MAX_TRIALS 320 /* rows of a run: every trial of up to 5 searches */
#define MAX_REPEAT 5

typedef struct lt_opts {
    const char *url, *api_key, *format, *workload, *slo_spec, *instance, *prices;
    int32_t *conc;
    double rates[MAX_ROWS];
    int n_conc, n_rates, n_requests, prompt_len, max_tokens, stream, chat, progress;
    int poisson, arrivals_given, allow_failures, search_steps, max_inflight, fixed_given;
    int conc_given, warmup, trials, repeat;
    int server_pid, disturb_retries;
    double disturb_steal, disturb_cpu_drop, disturb_wait;
    int calibrate; /* lt_cal_mode */
    float timeout_s, max_time_s, wait_s, search_max, search_precision, price_hour, users,
        target_rate;
    float trial_time, trial_warmup, repeat_tol, prompt_scale, output_scale;
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
    case OPT_REPEAT: o->repeat = (int)v->i; break;
    case OPT_REPEAT_TOLERANCE: o->repeat_tol = (float)v->f; break;
    case OPT_TRIAL_TIME: o->trial_time = (float)v->f; break;
    case OPT_TRIAL_WARMUP: o->trial_warmup = (float)v->f; break;
    case OPT_PROMPT_SCALE: o->prompt_scale = (float)v->f; break;
    case OPT_OUTPUT_SCALE: o->output_scale = (float)v->f; break;
    case OPT_PRICE_HOUR: o->price_hour = (float)v->f; break;
    case OPT_USERS: o->users = (float)v->f; break;
    case OPT_TARGET_RATE: o->target_rate = (float)v->f; break;
    case OPT_TIMEOUT: o->timeout_s = (float)v->f; break;
    case OPT_MAX_TIME: o->max_time_s = (float)v->f; break;
    case OPT_WAIT: o->wait_s = (float)v->f; break;
    case OPT_CALIBRATE: o->calibrate = (int)v->i; break;
    case OPT_SERVER_PID: o->server_pid = (int)v->i; break;
    case OPT_DISTURB_STEAL: o->disturb_steal = v->f; break;
    case OPT_DISTURB_CPU_DROP: o->disturb_cpu_drop = v->f; break;
    case OPT_DISTURB_RETRIES: o->disturb_retries = (int)v->i; break;
    case OPT_DISTURB_WAIT: o->disturb_wait = v->f; break;
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
    if (o->repeat > 1 && !o->slo_spec) {
        fprintf(stderr, "cpulm loadtest: --repeat repeats an --slo search (give --slo)\n");
        return EXIT_USAGE;
    }
    if (o->repeat > 1 && o->search_precision > o->repeat_tol)
        fprintf(stderr,
                "cpulm loadtest: note: --search-precision %g is coarser than "
                "--repeat-tolerance %g: two answers one bisection step apart already "
                "differ by more than the tolerance\n",
                (double)o->search_precision, (double)o->repeat_tol);
    if (o->trial_time > 0 && o->trial_warmup >= o->trial_time) {
        fprintf(stderr, "cpulm loadtest: --trial-warmup must be shorter than --trial-time\n");
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

/* One --slo search's outcome (--repeat runs several). */
typedef struct lt_answer {
    const lt_row *best; /* the answer's median met trial; NULL: no load met the objective */
    lt_search s;        /* its bracket and trial counts */
} lt_answer;

typedef struct lt_run {
    lt_opts *o;
    workload w;
    lt_url u;
    cli_progress prog;
    lt_row rows[MAX_TRIALS];
    int n_rows, md, searching, search_no;
    lt_search s; /* the --slo search under way: the answer's trials and bracket */
    lt_answer ans[MAX_REPEAT];
    int n_ans;
    int64_t next_index; /* each level's requests are new ones: no cache carries over */
    double usd_hour;
    char machine[1024]; /* what the price is of, and where it came from */
    lt_calibration cal; /* the server's token costs of the prompt words (R->w.vocab) */
    int host_ok;        /* /proc/stat is readable: each trial's steal and CPU use recorded */
    double hz;          /* /proc's ticks per second */
    int retries;        /* disturbed runs of the trial under way, so far */
    int n_disturbed, n_discarded;
} lt_run;

/* The most CPU the server used in a counted, undisturbed trial of row's search that met
 * the objective at a load no higher than row's (0: none yet): what a server kept from its
 * CPUs falls short of. */
static double ref_server_cpus(const lt_run *R, const lt_row *row) {
    double ref = 0;
    for (const lt_row *q = R->rows; q < row; q++)
        if (q->search == row->search && q->open == row->open && q->load <= row->load &&
            q->slo_met && !q->disturbed && q->host.has_server && q->host.server_cpus > ref)
            ref = q->host.server_cpus;
    return ref;
}

/* Flags a disturbed trial; in a search it is not counted and runs again, at most
 * --disturb-retries times per trial (then its verdict counts, marked). */
static void check_disturbed(lt_run *R, lt_row *row) {
    const lt_opts *o = R->o;
    const lt_disturb_rule rule = {o->disturb_steal, o->disturb_cpu_drop};
    row->disturbed = lt_host_disturbed(&rule, &row->host, !row->slo_checked || row->slo_met,
                                       R->searching ? ref_server_cpus(R, row) : 0, row->disturb_why,
                                       sizeof row->disturb_why);
    R->n_disturbed += row->disturbed;
    if (row->disturbed && R->searching && R->retries < o->disturb_retries) {
        row->discarded = 1;
        R->retries++;
        R->n_discarded++;
        if (o->disturb_wait > 0 && row->host.steal_share > o->disturb_steal &&
            o->disturb_steal > 0) {
            cli_progress_update(&R->prog, 1, "cpulm loadtest: waiting for the steal to pass");
            lt_host_wait_calm(o->disturb_steal, LT_CALM_WINDOW_S, o->disturb_wait, &lt_calm_proc,
                              &row->calm);
            cli_progress_clear(&R->prog);
            row->waited = 1;
        }
    } else {
        R->retries = 0;
    }
}

static lt_row *run_one(lt_run *R, int open, double load) {
    const lt_opts *o = R->o;
    if (R->n_rows == MAX_TRIALS) return NULL;
    lt_row *row = &R->rows[R->n_rows++];
    memset(row, 0, sizeof *row);
    *row = (lt_row){.open = open, .load = load, .poisson = o->poisson, .search = R->search_no};
    int n = o->n_requests;
    double max_time = o->max_time_s;
    if (!open && R->searching && n < 2 * (int)load) n = 2 * (int)load; /* every client twice */
    if (o->trial_time > 0 && open) { /* arrivals spanning the trial's time */
        double k = ceil(load * o->trial_time);
        if (k > n) n = k > 1e6 ? 1000000 : (int)k;
        if (max_time < 2 * o->trial_time) max_time = 2 * o->trial_time; /* Poisson overshoot */
    } else if (o->trial_time > 0) { /* the clients send until the trial's time is up */
        n = 1000000;
        max_time = o->trial_time;
    }
    char label[64];
    snprintf(label, sizeof label, open ? "rate %g req/s" : "concurrency %.0f", load);
    lt_level_spec sp = {.w = &R->w,
                        .u = &R->u,
                        .api_key = o->api_key,
                        .slo = o->slo_spec ? &o->slo : NULL,
                        .stream = o->stream,
                        .chat = o->chat,
                        .timeout_s = o->timeout_s,
                        .max_time_s = max_time,
                        .n_requests = n,
                        .first_index = R->next_index,
                        .skip_s = o->trial_warmup >= 0 ? o->trial_warmup : o->trial_time / 5,
                        .open = open,
                        .rate = load,
                        .poisson = o->poisson,
                        .conc = open ? o->max_inflight : (int)load,
                        .prog = &R->prog,
                        .label = label};
    cli_progress_update(&R->prog, 1, "cpulm loadtest: %s: 0/%d requests", label, n);
    lt_host_sample before, after;
    lt_host_sample_take(o->server_pid, &before);
    if (lt_run_level(&sp, &row->out) != 0)
        fprintf(stderr, "cpulm loadtest: could not start all client threads\n");
    lt_host_sample_take(o->server_pid, &after);
    lt_host_use_of(&before, &after, R->hz, &row->host);
    cli_progress_clear(&R->prog); /* before the row goes to stdout on the same terminal */
    const lt_stats *st = &row->out.st;
    R->next_index += o->trial_time > 0 ? st->n_ok + st->n_fail + row->out.skipped : n;
    if (o->slo_spec) {
        row->slo_checked = 1;
        row->slo_met = lt_slo_met(&o->slo, &row->out.st, row->slo_why, sizeof row->slo_why);
    }
    check_disturbed(R, row);
    if (R->md) lt_md_row(row, o->slo_spec != NULL, R->host_ok);
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
        if (!r->discarded) lt_search_report(s, x, r->slo_met); /* else the same load again */
    }
    if (!s->done || !s->lo_confirmed) return NULL; /* out of rows, or nothing met */
    lt_row *met[MAX_TRIALS]; /* the answer's met trials, by TTFT p99: the median one is shown */
    int n = 0;
    for (int i = 0; i < R->n_rows; i++) {
        if (R->rows[i].search != R->search_no || R->rows[i].load != s->lo || !R->rows[i].slo_met ||
            R->rows[i].discarded)
            continue;
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

/* The spread of the answer's met trials (one search): the objective's metrics and the
 * requests/s each trial reached, lowest to highest, and the realised arrival rates. */
typedef struct lt_spread {
    int n;
    double metric_lo[LT_M_N], metric_hi[LT_M_N], req_lo, req_hi, arr_lo, arr_hi;
} lt_spread;

static void lo_hi(double v, int first, double *lo, double *hi) {
    if (first || v < *lo) *lo = v;
    if (first || v > *hi) *hi = v;
}

static void answer_spread(const lt_run *R, int search_no, const lt_search *sr, lt_spread *sp) {
    const lt_slo *slo = &R->o->slo;
    memset(sp, 0, sizeof *sp);
    for (int i = 0; i < R->n_rows; i++) {
        const lt_row *r = &R->rows[i];
        if (r->search != search_no || r->load != sr->lo || !r->slo_met || r->discarded) continue;
        const lt_stats *st = &r->out.st;
        for (int k = 0; k < slo->n; k++)
            lo_hi(lt_pct(lt_stats_metric(st, slo->metric[k]), slo->pct[k]), !sp->n,
                  &sp->metric_lo[k], &sp->metric_hi[k]);
        lo_hi(st->n_ok / st->wall, !sp->n, &sp->req_lo, &sp->req_hi);
        lo_hi(r->out.offered_rate, !sp->n, &sp->arr_lo, &sp->arr_hi);
        sp->n++;
    }
}

static const char *metric_name(lt_metric m) {
    static const char *n[] = {"TTFT", "ITL", "TPOT", "E2E"};
    return m < LT_M_N ? n[m] : "?";
}

/* How sure the answer is: every met trial's objective metrics (lowest-highest), the shown
 * trial's percentiles with a 95% confidence interval, and the realised arrival rates. */
static void md_answer_uncertainty(const lt_run *R, int search_no, const lt_search *sr,
                                  const lt_row *best) {
    const lt_slo *slo = &R->o->slo;
    lt_spread sp;
    answer_spread(R, search_no, sr, &sp);
    printf("uncertainty: %d met trials at the answer;", sp.n);
    for (int k = 0; k < slo->n; k++) {
        const lt_samples *x = lt_stats_metric(&best->out.st, slo->metric[k]);
        double lo, hi;
        lt_pct_ci(x, slo->pct[k], 1.96, &lo, &hi);
        printf(" %s p%g %.1f-%.1f ms across them (shown trial %.1f ms, 95%% CI %.1f-%.1f over "
               "%zu samples; limit %.1f ms);",
               metric_name(slo->metric[k]), slo->pct[k], sp.metric_lo[k] * 1000,
               sp.metric_hi[k] * 1000, lt_pct(x, slo->pct[k]) * 1000, lo * 1000, hi * 1000, x->n,
               slo->limit_s[k] * 1000);
    }
    printf(" req/s %.2f-%.2f", sp.req_lo, sp.req_hi);
    if (best->open && sp.arr_hi > 0)
        printf(", arrivals realised %.2f-%.2f req/s (nominal %g)", sp.arr_lo, sp.arr_hi,
               best->load);
    if (best->out.skipped)
        printf("; the shown trial's first %d requests (warm-up) not counted", best->out.skipped);
    printf("\n");
}

static void md_search_summary(const lt_run *R, const lt_answer *a, int search_no) {
    const lt_opts *o = R->o;
    const lt_row *best = a->best;
    const lt_search *sr = &a->s;
    char slo[256], load[32];
    lt_slo_describe(&o->slo, slo, sizeof slo);
    int open = o->n_rates > 0;
    if (o->repeat > 1) printf("\nsearch %d of %d:", search_no + 1, o->repeat);
    printf("\nobjective %s over the successful requests, no request failed; each trial ran ", slo);
    if (o->trial_time > 0)
        printf("%g s (the first %g s not counted)", (double)o->trial_time,
               o->trial_warmup >= 0 ? (double)o->trial_warmup : o->trial_time / 5.0);
    else
        printf("%d+ requests", o->n_requests);
    printf(", loads near the boundary decided by a majority of %d trials, bisected %s to "
           "%g%%:\n",
           o->trials, open ? "on a log scale" : "over whole clients", o->search_precision * 100.0);
    if (!best) {
        const lt_row *first = NULL;
        for (int i = 0; i < R->n_rows && !first; i++)
            if (R->rows[i].search == search_no) first = &R->rows[i];
        printf("NO load tried met it (lowest tried: %g: %s)\n", first ? first->load : 0,
               first ? first->slo_why : "no trial ran");
        return;
    }
    if (sr->hi > 0)
        printf("bracket: %.4g met in %d of %d trials, %.4g missed in %d of %d (the limit lies "
               "between them: %.0f%% apart)\n",
               sr->lo, sr->lo_met, sr->lo_runs, sr->hi, sr->hi_miss, sr->hi_runs,
               (sr->hi / sr->lo - 1) * 100);
    else
        printf("bracket: %.4g (the search's maximum) met in %d of %d trials\n", sr->lo, sr->lo_met,
               sr->lo_runs);
    md_answer_uncertainty(R, search_no, sr, best);
    lt_label(best, load, sizeof load);
    const lt_stats *s = &best->out.st;
    printf("highest %s meeting it: **%.4g%s** (%.2f req/s, goodput %.2f req/s, %.1f input t/s, "
           "%.1f output t/s, TTFT p99 %.1f ms)\n",
           open ? "rate" : "concurrency", best->load, open ? " req/s" : " users", s->n_ok / s->wall,
           s->n_good / s->wall, (double)s->in_tokens / s->wall, (double)s->out_tokens / s->wall,
           lt_pct(&s->ttft, 99) * 1000);
}

/* The answer the run stands by: the lowest of the repeats (capacity planning takes the
 * conservative one); NULL when any search found no load meeting the objective. */
static const lt_answer *chosen_answer(const lt_run *R) {
    const lt_answer *c = NULL;
    for (int k = 0; k < R->n_ans; k++) {
        if (!R->ans[k].best) return NULL;
        if (!c || R->ans[k].best->load < c->best->load) c = &R->ans[k];
    }
    return c;
}

/* Highest answer / lowest answer - 1 over the repeats; -1 when one found nothing. */
static double repeat_spread(const lt_run *R) {
    double lo = 0, hi = 0;
    for (int k = 0; k < R->n_ans; k++) {
        if (!R->ans[k].best) return -1;
        lo_hi(R->ans[k].best->load, !k, &lo, &hi);
    }
    return lo > 0 ? hi / lo - 1 : -1;
}

static void md_repeats(const lt_run *R) {
    const lt_opts *o = R->o;
    double spread = repeat_spread(R);
    printf("\nrepeats: ");
    for (int k = 0; k < R->n_ans; k++) {
        const lt_answer *a = &R->ans[k];
        if (a->best)
            printf("%ssearch %d %.4g (bracket %.4g-%.4g)", k ? ", " : "", k + 1, a->best->load,
                   a->s.lo, a->s.hi > 0 ? a->s.hi : a->s.lo);
        else
            printf("%ssearch %d none", k ? ", " : "", k + 1);
    }
    if (spread < 0)
        printf(": a search found no load meeting the objective\n");
    else
        printf(": %.1f%% apart (highest / lowest - 1; tolerance %.0f%%): %s\n", spread * 100,
               o->repeat_tol * 100.0,
               spread <= o->repeat_tol ? "they agree"
                                       : "they DISAGREE (the machine's capacity moved between "
                                         "them, or the trials are too short: --trial-time)");
}

static void md_answer_footer(const lt_run *R, const lt_row *best) {
    const lt_opts *o = R->o;
    int open = o->n_rates > 0;
    if (o->repeat > 1)
        printf("answer (the lowest of the %d searches): **%.4g%s**\n", o->repeat, best->load,
               open ? " req/s" : " users");
    double req_s = best->out.st.n_ok / best->out.st.wall;
    if (o->users > 0 && !open)
        printf("instances needed for %g concurrent users: %d (%g users each)\n", (double)o->users,
               lt_instances_needed(o->users, best->load), best->load);
    if (o->target_rate > 0)
        printf("instances needed for %g req/s: %d (%.2f req/s each)\n", (double)o->target_rate,
               lt_instances_needed(o->target_rate, req_s), req_s);
}

/* An answer's bracket, trial counts and uncertainty (the keys of `slo`, and of each of
 * `slo.repeats`). */
static void json_bracket(cpulm_json_writer *w, const lt_run *R, const lt_answer *a, int k) {
    const lt_search *sr = &a->s;
    const lt_slo *slo = &R->o->slo;
    cpulm_json_kv_int(w, "best_trials_met", sr->lo_met);
    cpulm_json_kv_int(w, "best_trials", sr->lo_runs);
    cpulm_json_key(w, "lowest_missed"); /* null: none up to --search-max */
    if (sr->hi > 0)
        cpulm_json_write_double(w, sr->hi);
    else
        cpulm_json_write_null(w);
    cpulm_json_kv_int(w, "lowest_missed_trials_missed", sr->hi_miss);
    cpulm_json_kv_int(w, "lowest_missed_trials", sr->hi_runs);
    lt_spread sp;
    answer_spread(R, k, sr, &sp);
    /* per objective metric: across the met trials, and a 95% CI */
    cpulm_json_kv_arr_begin(w, "met_trials");
    for (int m = 0; m < slo->n; m++) {
        const lt_samples *x = lt_stats_metric(&a->best->out.st, slo->metric[m]);
        double lo, hi;
        lt_pct_ci(x, slo->pct[m], 1.96, &lo, &hi);
        cpulm_json_obj_begin(w);
        cpulm_json_kv_str(w, "metric", metric_name(slo->metric[m]));
        const char *keys[] = {"pct", "min_ms", "max_ms", "shown_ms", "ci95_lo_ms", "ci95_hi_ms"};
        const double v[] = {slo->pct[m],
                            sp.metric_lo[m] * 1000,
                            sp.metric_hi[m] * 1000,
                            lt_pct(x, slo->pct[m]) * 1000,
                            lo * 1000,
                            hi * 1000};
        for (int i = 0; i < 6; i++) {
            cpulm_json_kv_double(w, keys[i], v[i]);
        }
        cpulm_json_obj_end(w);
    }
    cpulm_json_arr_end(w);
    const char *keys[] = {"met_trials_requests_per_s_min", "met_trials_requests_per_s_max",
                          "met_trials_arrivals_per_s_min", "met_trials_arrivals_per_s_max"};
    const double v[] = {sp.req_lo, sp.req_hi, sp.arr_lo, sp.arr_hi};
    for (int i = 0; i < 4; i++) {
        cpulm_json_kv_double(w, keys[i], v[i]);
    }
}

static void json_repeats(cpulm_json_writer *w, const lt_run *R) {
    cpulm_json_kv_arr_begin(w, "repeats");
    for (int k = 0; k < R->n_ans; k++) {
        const lt_answer *a = &R->ans[k];
        cpulm_json_obj_begin(w);
        cpulm_json_key(w, "best_load");
        if (a->best)
            cpulm_json_write_double(w, a->best->load);
        else
            cpulm_json_write_null(w);
        if (a->best) {
            cpulm_json_kv_double(w, "requests_per_s", a->best->out.st.n_ok / a->best->out.st.wall);
            json_bracket(w, R, a, k);
        }
        cpulm_json_obj_end(w);
    }
    cpulm_json_arr_end(w);
    double spread = repeat_spread(R);
    cpulm_json_key(w, "repeat_spread"); /* highest / lowest answer - 1; null: one found none */
    if (spread >= 0)
        cpulm_json_write_double(w, spread);
    else
        cpulm_json_write_null(w);
    cpulm_json_kv_bool(w, "repeats_agree", spread >= 0 && spread <= R->o->repeat_tol);
}

static void json_slo(cpulm_json_writer *w, const lt_run *R, const lt_answer *a) {
    const lt_opts *o = R->o;
    const lt_row *best = a ? a->best : NULL;
    char desc[512];
    lt_slo_describe(&o->slo, desc, sizeof desc);
    cpulm_json_kv_obj_begin(w, "slo");
    cpulm_json_kv_str(w, "objective", desc);
    cpulm_json_kv_str(w, "axis", o->n_rates ? "rate" : "concurrency");
    cpulm_json_kv_int(w, "trials", o->trials);
    cpulm_json_kv_double(w, "trial_time_s", o->trial_time);
    cpulm_json_kv_double(w, "search_precision", o->search_precision);
    if (best) json_bracket(w, R, a, (int)(a - R->ans));
    cpulm_json_key(w, "best");
    if (best)
        lt_json_row(w, best, R->usd_hour);
    else
        cpulm_json_write_null(w);
    if (best && o->users > 0 && !o->n_rates) {
        cpulm_json_kv_int(w, "instances_for_users", lt_instances_needed(o->users, best->load));
    }
    if (best && o->target_rate > 0) {
        cpulm_json_key(w, "instances_for_rate");
        cpulm_json_write_int(
            w, lt_instances_needed(o->target_rate, best->out.st.n_ok / best->out.st.wall));
    }
    if (o->repeat > 1) json_repeats(w, R);
    cpulm_json_obj_end(w);
}

/* How the prompts were sized: "calibration": {method, tokens_per_word, added_tokens, why}. */
static void json_calibration(cpulm_json_writer *w, const lt_calibration *c, int used) {
    cpulm_json_kv_obj_begin(w, "calibration");
    cpulm_json_kv_str(w, "method", c->method);
    cpulm_json_kv_double(w, "tokens_per_word", used ? c->tokens_per_word : 1);
    cpulm_json_kv_double(w, "added_tokens", used ? c->vocab.added : 0);
    cpulm_json_key(w, "why");
    if (c->why[0])
        cpulm_json_write_str(w, c->why);
    else
        cpulm_json_write_null(w);
    cpulm_json_obj_end(w);
}

/* "disturbance": whether /proc was read, the rule, and how many trials it flagged and
 * discarded (each level's "host", "disturbed" and "counted" say which). */
static void json_disturbance(cpulm_json_writer *w, const lt_run *R) {
    const lt_opts *o = R->o;
    cpulm_json_kv_obj_begin(w, "disturbance");
    cpulm_json_kv_bool(w, "sampled", R->host_ok);
    cpulm_json_key(w, "server_pid");
    if (o->server_pid > 0)
        cpulm_json_write_int(w, o->server_pid);
    else
        cpulm_json_write_null(w);
    const char *keys[] = {"steal_max", "cpu_drop"};
    const double v[] = {o->disturb_steal, o->disturb_cpu_drop};
    for (int i = 0; i < 2; i++) {
        cpulm_json_kv_double(w, keys[i], v[i]);
    }
    cpulm_json_kv_int(w, "retries", o->disturb_retries);
    cpulm_json_kv_double(w, "wait_max_s", o->disturb_wait);
    cpulm_json_kv_int(w, "disturbed_trials", R->n_disturbed);
    cpulm_json_kv_int(w, "rerun_trials", R->n_discarded);
    cpulm_json_obj_end(w);
}

static void json_doc(lt_run *R, const lt_answer *a) {
    const lt_opts *o = R->o;
    cpulm_buf js;
    cpulm_buf_init(&js, 0);
    cpulm_json_writer w;
    cpulm_json_writer_init(&w, &js, 0, 2);
    cpulm_json_obj_begin(&w);
    cpulm_json_kv_str(&w, "url", o->url);
    char desc[512];
    workload_describe(&R->w, desc, sizeof desc);
    cpulm_json_kv_str(&w, "workload", R->w.name);
    cpulm_json_kv_str(&w, "workload_description", desc);
    cpulm_json_kv_bool(&w, "stream", o->stream);
    json_calibration(&w, &R->cal, R->w.vocab != NULL);
    json_disturbance(&w, R);
    if (R->usd_hour > 0) {
        cpulm_json_kv_str(&w, "machine", R->machine);
    }
    cpulm_json_kv_arr_begin(&w, "levels");
    for (int i = 0; i < R->n_rows; i++)
        lt_json_row(&w, &R->rows[i], R->usd_hour);
    cpulm_json_arr_end(&w);
    if (o->slo_spec) json_slo(&w, R, a);
    cpulm_json_obj_end(&w);
    printf("%s\n", js.data);
    cpulm_buf_release(&js);
}

static void md_head(const lt_run *R) {
    const lt_opts *o = R->o;
    char desc[512];
    workload_describe(&R->w, desc, sizeof desc);
    char per[96];
    if (o->trial_time > 0)
        snprintf(per, sizeof per, "%g s per level (the first %g s not counted)",
                 (double)o->trial_time,
                 o->trial_warmup >= 0 ? (double)o->trial_warmup : o->trial_time / 5.0);
    else
        snprintf(per, sizeof per, "%d requests per level", o->n_requests);
    printf("%s %s, %s, %s%s\n\n", o->url, o->chat ? "chat" : "completions", desc, per,
           o->stream ? ", streaming" : ", not streaming (no TTFT/ITL)");
    const lt_calibration *c = &R->cal;
    if (R->w.vocab)
        printf("prompts sized in the server's tokens (%s: %.2f tokens per word, %.3g added to "
               "each prompt); the tokens column: mean realised in/out (asked)\n\n",
               strcmp(c->method, "tokenize") ? "two probe requests' usage counts"
                                             : "POST /tokenize of every word",
               c->tokens_per_word, c->vocab.added);
    else
        printf("prompts NOT sized in the server's tokens (%s): one word counted as one token; "
               "the tokens column: mean realised in/out (asked)\n\n",
               c->why[0] ? c->why : "--calibrate off");
    lt_md_header(o->slo_spec != NULL, R->host_ok);
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

/* The --slo searches (--repeat of them), one after the other; each search's rows are new
 * requests. */
static void run_searches(lt_run *R) {
    const lt_opts *o = R->o;
    for (int k = 0; k < o->repeat && k < MAX_REPEAT; k++) {
        R->search_no = k;
        if (k && R->md) {
            printf("\nsearch %d of %d\n\n", k + 1, o->repeat);
            lt_md_header(1, R->host_ok);
        }
        const lt_row *best = search(R);
        R->ans[R->n_ans++] = (lt_answer){.best = best, .s = R->s};
    }
}

static void md_slo_end(const lt_run *R, const lt_answer *a) {
    if (R->host_ok)
        printf("\ndisturbance (steal over %g%% of the CPUs' time, or a missed trial's server CPU "
               "under %g x a met lower load's): %d trials flagged, %d of them run again and not "
               "counted\n",
               R->o->disturb_steal * 100.0, (double)R->o->disturb_cpu_drop, R->n_disturbed,
               R->n_discarded);
    for (int k = 0; k < R->n_ans; k++)
        md_search_summary(R, &R->ans[k], k);
    if (R->o->repeat > 1) md_repeats(R);
    if (a) md_answer_footer(R, a->best);
}

static int run_all(lt_run *R) {
    lt_opts *o = R->o;
    const lt_answer *a = NULL;
    warm_up(R);
    if (R->md) md_head(R);
    if (o->slo_spec) {
        run_searches(R);
        a = chosen_answer(R);
    } else {
        for (int i = 0; o->n_rates == 0 && i < o->n_conc; i++)
            run_one(R, 0, o->conc[i]);
        for (int i = 0; i < o->n_rates; i++)
            run_one(R, 1, o->rates[i]);
    }
    const lt_row *best = a ? a->best : NULL;
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
        lt_md_disturbed(R->rows, R->n_rows);
        if (o->slo_spec) md_slo_end(R, a);
        const lt_row *costed[MAX_TRIALS];
        int n = 0;
        for (int i = 0; i < R->n_rows; i++)
            if (!o->slo_spec || &R->rows[i] == best) costed[n++] = &R->rows[i];
        if (R->usd_hour > 0 && n) lt_md_cost(costed, n, R->usd_hour, R->machine);
    } else {
        json_doc(R, a);
    }
    if (o->slo_spec && o->repeat > 1 && best && repeat_spread(R) > o->repeat_tol)
        fprintf(stderr,
                "cpulm loadtest: the %d searches' answers are %.1f%% apart (more than "
                "--repeat-tolerance %g%%); exit 1\n",
                o->repeat, repeat_spread(R) * 100, o->repeat_tol * 100.0);
    if (o->slo_spec) return best && (o->repeat < 2 || repeat_spread(R) <= o->repeat_tol) ? 0 : 1;
    if (any_fail && !o->allow_failures)
        fprintf(stderr, "cpulm loadtest: requests failed (see the table); exit 1 "
                        "(--allow-failures to accept them)\n");
    return empty || (any_fail && !o->allow_failures) ? 1 : 0;
}

/* Sizes the prompts in the server's tokens (--calibrate); when that fails the run goes on
 * with one word counted as one token, and says so. */
static void calibrate(lt_run *R) {
    const lt_opts *o = R->o;
    if (lt_calibrate(&R->u, o->api_key, o->chat, (lt_cal_mode)o->calibrate, o->timeout_s,
                     &R->cal) == 0)
        R->w.vocab = &R->cal.vocab;
    else if (o->calibrate != LT_CAL_OFF)
        fprintf(stderr,
                "cpulm loadtest: note: prompts are not sized in the server's tokens (%s); "
                "one word is counted as one token\n",
                R->cal.why);
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
    workload_scale(&R->w, o->prompt_scale, o->output_scale);
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
                 .repeat = 1,
                 .repeat_tol = 0.15f,
                 .trial_warmup = -1,
                 .prompt_scale = 1,
                 .output_scale = 1,
                 .max_inflight = 256,
                 .disturb_steal = 0.05,
                 .disturb_cpu_drop = 0.5,
                 .disturb_retries = 2,
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
    R->hz = (double)sysconf(_SC_CLK_TCK);
    lt_host_sample probe;
    lt_host_sample_take(o.server_pid, &probe);
    R->host_ok = probe.ok;
    if (o.server_pid > 0 && probe.ok && probe.server < 0)
        fprintf(stderr,
                "cpulm loadtest: note: --server-pid %d: no /proc/%d/stat; its CPU time "
                "is not recorded\n",
                o.server_pid, o.server_pid);
    char why[256];
    if (lt_url_parse(o.url, &R->u, why, sizeof why) != 0) {
        fprintf(stderr, "cpulm loadtest: %s\n", why);
        rc = EXIT_USAGE;
    }
    if (!rc) rc = setup_workload(R);
    if (!rc) rc = load_price(R);
    cli_progress_init(&R->prog, o.progress);
    if (!rc && wait_ready(&o, &R->u, &R->prog) != 0) rc = 1;
    if (!rc) calibrate(R);
    if (!rc) rc = run_all(R);
    cli_progress_end(&R->prog);
    for (int i = 0; i < R->n_rows; i++)
        lt_stats_release(&R->rows[i].out.st);
    free(R);
    free(o.conc);
    return rc;
}
