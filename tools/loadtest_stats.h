/* loadtest_stats.h: the arithmetic of `cpulm loadtest`, kept apart from the sockets so the
 * unit tests can drive it: latency samples and nearest-rank percentiles, failure classes,
 * service-level objectives (parse, check per run and per request for goodput), the search
 * for the highest load meeting an objective (grow geometrically, then bisect), arrival
 * schedules of open-loop runs, and cost per token / per request from an hourly price. */
#ifndef CPULM_TOOLS_LOADTEST_STATS_H
#define CPULM_TOOLS_LOADTEST_STATS_H

#include <stddef.h>
#include <stdint.h>

typedef struct lt_samples {
    double *v; /* seconds */
    size_t n, cap;
} lt_samples;

void lt_samples_push(lt_samples *s, double v);
void lt_samples_sort(lt_samples *s);
/* Nearest-rank percentile (p in (0, 100]) of sorted samples, seconds; -1 when empty. */
double lt_pct(const lt_samples *s, double p);
/* A distribution-free confidence interval of the p-th percentile of sorted samples: the
 * order statistics whose ranks bound n x p/100 by z standard deviations of the binomial
 * count (z 1.96: 95%), clamped to the samples. lo/hi in seconds; both -1 when empty. With few
 * samples the upper end is the largest sample: a p99 over 50 requests is not known above
 * its maximum. */
void lt_pct_ci(const lt_samples *s, double p, double z, double *lo, double *hi);
void lt_samples_release(lt_samples *s);

/* Why a request failed. */
typedef enum {
    LT_FAIL_REJECTED, /* HTTP 429 or 503: the server refused the load */
    LT_FAIL_HTTP,     /* any other non-2xx answer */
    LT_FAIL_TIMEOUT,  /* no complete answer within --timeout */
    LT_FAIL_BROKEN,   /* connection failed or closed mid-answer, bad framing, error event */
    LT_FAIL_N
} lt_fail;
const char *lt_fail_name(lt_fail f);

/* One request's outcome, as the load generator measured it (seconds from its scheduled
 * start: an open-loop request delayed by the client counts its wait). */
typedef struct lt_req {
    int ok;
    lt_fail fail; /* when !ok */
    double ttft;  /* -1 when nothing was streamed */
    double e2e;
    double *events; /* arrival times of streamed texts (borrowed) */
    int32_t n_events;
    int32_t prompt_tokens, output_tokens; /* the server's usage counts (-1 unknown) */
} lt_req;

typedef struct lt_stats {
    lt_samples ttft, itl, tpot, e2e;
    int n_ok, n_fail, fails[LT_FAIL_N];
    int n_good;                    /* ok and within every per-request limit */
    int64_t in_tokens, out_tokens; /* over the successful requests */
    double sum_ttft, sum_e2e;      /* for the prefill share of the cost */
    double wall;                   /* seconds from the first send to the last answer */
} lt_stats;

/* A service-level objective: up to 4 limits, each on a percentile of one metric. */
typedef enum { LT_M_TTFT, LT_M_ITL, LT_M_TPOT, LT_M_E2E, LT_M_N } lt_metric;
typedef struct lt_slo {
    int n;
    lt_metric metric[LT_M_N];
    double pct[LT_M_N], limit_s[LT_M_N];
} lt_slo;

/* "ttft_p99=2s,itl_p99=200ms,e2e_p90=30s" (units ms, s; tpot_pNN too). Returns 0, or -1
 * with a message. */
int lt_slo_parse(const char *s, lt_slo *o, char *err, size_t cap);
void lt_slo_describe(const lt_slo *o, char *out, size_t cap);

/* Adds one request to the stats (ITL from its events; TPOT = (e2e - ttft) / (tokens - 1);
 * goodput: ok and its TTFT, TPOT and E2E within the objective's limits). */
void lt_stats_add(lt_stats *s, const lt_req *r, const lt_slo *slo);
void lt_stats_finish(lt_stats *s); /* sorts */
void lt_stats_release(lt_stats *s);
const lt_samples *lt_stats_metric(const lt_stats *s, lt_metric m);
/* More than half of the requests failed: no percentile table is printed for such a run. */
int lt_stats_mostly_failed(const lt_stats *s);

/* Does a run meet the objective? Any failed request is a miss; so is a metric without
 * samples (e.g. TTFT of a run that did not stream). why: the first limit missed. */
int lt_slo_met(const lt_slo *o, const lt_stats *s, char *why, size_t cap);

/* The search for the highest load meeting an objective, made to give the same answer when
 * repeated on a noisy machine. Bracket: loads start, start*2, ... until one misses (or max
 * is reached); a load that meets it here is taken after one trial (the boundary is above),
 * a miss only once a majority of `trials` trials missed (one slow request elsewhere on the
 * machine must not end the bracket low). Bisect: between the highest met and the lowest
 * missed, each load decided by a majority of `trials` trials (stopping as soon as the
 * majority is reached), rates at the geometric mean of the two (a log scale), clients at
 * the arithmetic one, until the missed load is within `precision` of the met one (hi <=
 * (1 + precision) x lo), adjacent whole numbers, or `steps` bisections were made. Confirm: the
 * answer itself must have a majority of met trials; if it fails, it becomes the lowest missed and
 * the search bisects below it. integer: loads are whole numbers (concurrency). trials 1 and
 * precision 0: one trial per load, `steps` bisections. */
typedef struct lt_search {
    double lo, hi; /* highest met (0: none yet), lowest missed (0: none yet) */
    double next, max, precision;
    int steps, integer, done, trials;
    int n_met, n_miss;        /* trials of the load under way (next) */
    int lo_met, lo_runs;      /* trials of lo: met, run */
    int hi_miss, hi_runs;     /* trials of hi: missed, run */
    double lows[64];          /* earlier highest-met loads, for a failed confirmation */
    int n_lows, lo_confirmed; /* lo has a majority of met trials */
} lt_search;
void lt_search_init(lt_search *s, double start, double max, int steps, int integer);
/* trials per decided load (1..), relative precision that ends the bisection (0: none). */
void lt_search_set_trials(lt_search *s, int trials, double precision);
/* The next load to run (the same load again for another trial); 0 when the search is over. */
double lt_search_next(lt_search *s);
void lt_search_report(lt_search *s, double load, int met);

/* Open-loop arrival offsets in seconds for n requests at rate requests/s: constant spacing
 * 1/rate, or Poisson (exponential gaps, seeded). */
void lt_arrivals(double *t, int n, double rate, int poisson, uint64_t seed);

/* Cost of serving at a measured load, billed usd_hour. The machine's time is split
 * between input and output tokens by prefill_share (the part of the requests' time spent
 * before their first token); blended counts all tokens alike. */
typedef struct lt_cost {
    double usd_per_m_input, usd_per_m_output, usd_per_m_blended, usd_per_k_requests;
} lt_cost;
void lt_cost_of(double usd_hour, double in_tok_s, double out_tok_s, double req_s,
                double prefill_share, lt_cost *out);
/* Machines needed to carry demand when one carries capacity (ceil; 0 if capacity <= 0). */
int lt_instances_needed(double demand, double capacity);

#endif
