/* loadtest_stats.c: percentiles, objectives, the load search, arrivals and cost for
 * `cpulm loadtest` (see loadtest_stats.h). */
#include "loadtest_stats.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void lt_samples_push(lt_samples *s, double v) {
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 256;
        double *p = realloc(s->v, sizeof *p * cap);
        if (!p) return;
        s->v = p;
        s->cap = cap;
    }
    s->v[s->n++] = v;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void lt_samples_sort(lt_samples *s) {
    if (s->n) qsort(s->v, s->n, sizeof(double), cmp_double); /* qsort(NULL, 0) is UB */
}

double lt_pct(const lt_samples *s, double p) {
    if (s->n == 0) return -1;
    double rank = ceil(p / 100.0 * (double)s->n - 1e-9);
    size_t k = rank < 1 ? 1 : (size_t)rank;
    if (k > s->n) k = s->n;
    return s->v[k - 1];
}

void lt_pct_ci(const lt_samples *s, double p, double z, double *lo, double *hi) {
    *lo = *hi = -1;
    if (s->n == 0) return;
    const double n = (double)s->n, q = p / 100.0, sd = sqrt(n * q * (1 - q));
    double l = floor(n * q - z * sd), u = ceil(n * q + z * sd) + 1; /* 1-based ranks */
    if (l < 1) l = 1;
    if (u > n) u = n;
    if (l > n) l = n;
    *lo = s->v[(size_t)l - 1];
    *hi = s->v[(size_t)u - 1];
}

void lt_samples_release(lt_samples *s) {
    free(s->v);
    memset(s, 0, sizeof *s);
}

const char *lt_fail_name(lt_fail f) {
    static const char *n[] = {"rejected (429/503)", "other HTTP error", "timed out",
                              "connection/stream broken"};
    return f < LT_FAIL_N ? n[f] : "?";
}

/* ---- objectives ---- */

static const char *const METRIC[] = {"ttft", "itl", "tpot", "e2e"};

/* "2s", "200ms", "1.5" (seconds). */
static int parse_duration(const char *s, size_t n, double *out) {
    char buf[32];
    if (n == 0 || n >= sizeof buf) return -1;
    memcpy(buf, s, n);
    buf[n] = 0;
    char *end;
    double v = strtod(buf, &end);
    if (end == buf || !(v > 0) || v > 1e6) return -1;
    if (!strcmp(end, "ms"))
        v /= 1000;
    else if (*end && strcmp(end, "s"))
        return -1;
    *out = v;
    return 0;
}

/* One "metric_pNN=DURATION" item. */
static int parse_item(const char *p, size_t n, lt_slo *o, char *err, size_t cap) {
    const char *eq = memchr(p, '=', n), *u = memchr(p, '_', n);
    int m = -1;
    for (int i = 0; u && i < LT_M_N; i++)
        if ((size_t)(u - p) == strlen(METRIC[i]) && !strncmp(p, METRIC[i], (size_t)(u - p))) m = i;
    char *end = NULL;
    double pct = u && u[1] == 'p' ? strtod(u + 2, &end) : -1;
    double lim = 0;
    if (!eq || m < 0 || end != eq || !(pct > 0 && pct <= 100) ||
        parse_duration(eq + 1, n - (size_t)(eq + 1 - p), &lim)) {
        snprintf(err, cap,
                 "bad objective '%.*s' (want METRIC_pNN=DURATION, METRIC one of ttft, itl, "
                 "tpot, e2e; e.g. ttft_p99=2s,itl_p99=200ms)",
                 (int)n, p);
        return -1;
    }
    for (int i = 0; i < o->n; i++)
        if (o->metric[i] == (lt_metric)m) {
            snprintf(err, cap, "objective on %s given twice", METRIC[m]);
            return -1;
        }
    o->metric[o->n] = (lt_metric)m;
    o->pct[o->n] = pct;
    o->limit_s[o->n++] = lim;
    return 0;
}

int lt_slo_parse(const char *s, lt_slo *o, char *err, size_t cap) {
    memset(o, 0, sizeof *o);
    while (*s) {
        size_t n = strcspn(s, ",");
        if (o->n == LT_M_N) {
            snprintf(err, cap, "at most one objective per metric (ttft, itl, tpot, e2e)");
            return -1;
        }
        if (parse_item(s, n, o, err, cap)) return -1;
        s += n + (s[n] == ',');
    }
    if (!o->n) snprintf(err, cap, "empty objective");
    return o->n ? 0 : -1;
}

void lt_slo_describe(const lt_slo *o, char *out, size_t cap) {
    size_t k = 0;
    out[0] = 0;
    for (int i = 0; i < o->n && k < cap; i++) {
        double v = o->limit_s[i];
        int r = snprintf(out + k, cap - k, "%s%s p%g <= %g %s", i ? ", " : "", METRIC[o->metric[i]],
                         o->pct[i], v < 1 ? v * 1000 : v, v < 1 ? "ms" : "s");
        if (r < 0) break;
        k += (size_t)r;
    }
}

/* ---- per-run statistics ---- */

static int within(const lt_slo *slo, lt_metric m, double v) {
    for (int i = 0; slo && i < slo->n; i++)
        if (slo->metric[i] == m && v > slo->limit_s[i]) return 0;
    return 1;
}

void lt_stats_add(lt_stats *s, const lt_req *r, const lt_slo *slo) {
    if (!r->ok) {
        s->n_fail++;
        s->fails[r->fail < LT_FAIL_N ? r->fail : LT_FAIL_BROKEN]++;
        return;
    }
    s->n_ok++;
    lt_samples_push(&s->e2e, r->e2e);
    int32_t out = r->output_tokens >= 0 ? r->output_tokens : r->n_events;
    double tpot = -1;
    if (r->ttft >= 0) {
        lt_samples_push(&s->ttft, r->ttft);
        s->sum_ttft += r->ttft;
        if (out > 1) {
            tpot = (r->e2e - r->ttft) / (out - 1);
            lt_samples_push(&s->tpot, tpot);
        }
    }
    s->sum_e2e += r->e2e;
    for (int32_t k = 1; k < r->n_events; k++)
        lt_samples_push(&s->itl, r->events[k] - r->events[k - 1]);
    s->out_tokens += out;
    if (r->prompt_tokens > 0) s->in_tokens += r->prompt_tokens;
    /* per request, the inter-token limit applies to the request's mean gap (its TPOT) */
    if (within(slo, LT_M_TTFT, r->ttft) && within(slo, LT_M_E2E, r->e2e) &&
        within(slo, LT_M_ITL, tpot) && within(slo, LT_M_TPOT, tpot))
        s->n_good++;
}

void lt_stats_finish(lt_stats *s) {
    lt_samples_sort(&s->ttft);
    lt_samples_sort(&s->itl);
    lt_samples_sort(&s->tpot);
    lt_samples_sort(&s->e2e);
}

void lt_stats_release(lt_stats *s) {
    lt_samples_release(&s->ttft);
    lt_samples_release(&s->itl);
    lt_samples_release(&s->tpot);
    lt_samples_release(&s->e2e);
}

const lt_samples *lt_stats_metric(const lt_stats *s, lt_metric m) {
    return m == LT_M_TTFT   ? &s->ttft
           : m == LT_M_ITL  ? &s->itl
           : m == LT_M_TPOT ? &s->tpot
                            : &s->e2e;
}

int lt_stats_mostly_failed(const lt_stats *s) {
    return s->n_fail > s->n_ok;
}

int lt_slo_met(const lt_slo *o, const lt_stats *s, char *why, size_t cap) {
    if (s->n_fail || !s->n_ok) {
        snprintf(why, cap, "%d of %d requests failed", s->n_fail, s->n_fail + s->n_ok);
        return 0;
    }
    for (int i = 0; i < o->n; i++) {
        double v = lt_pct(lt_stats_metric(s, o->metric[i]), o->pct[i]);
        if (v < 0) {
            snprintf(why, cap, "no %s samples (streaming off?)", METRIC[o->metric[i]]);
            return 0;
        }
        if (v > o->limit_s[i]) {
            snprintf(why, cap, "%s p%g %.1f ms > %.1f ms", METRIC[o->metric[i]], o->pct[i],
                     v * 1000, o->limit_s[i] * 1000);
            return 0;
        }
    }
    snprintf(why, cap, "met");
    return 1;
}

/* ---- the search ---- */

void lt_search_init(lt_search *s, double start, double max, int steps, int integer) {
    *s = (lt_search){.next = start, .max = max, .steps = steps, .integer = integer, .trials = 1};
}

void lt_search_set_trials(lt_search *s, int trials, double precision) {
    s->trials = trials < 1 ? 1 : trials;
    s->precision = precision > 0 ? precision : 0;
}

double lt_search_next(lt_search *s) {
    return s->done ? 0 : s->next;
}

/* The next load after a decision: grow, bisect, confirm the answer, or stop. */
static void search_advance(lt_search *s) {
    const int need = s->trials / 2 + 1;
    if (s->hi == 0 && s->lo < s->max) { /* growing */
        s->next = s->lo * 2 > s->max ? s->max : s->lo * 2;
        return;
    }
    /* Rates bisect on a log scale (the geometric mean): capacity is a ratio question, and a
     * bracket from 1 to 64 req/s then takes as many steps to halve near 1 as near 64.
     * Clients (whole numbers, usually few) bisect arithmetically. lo 0: below the first
     * load tried, halve the missed one. */
    double mid = s->integer  ? floor((s->lo + s->hi) / 2)
                 : s->lo > 0 ? sqrt(s->lo * s->hi)
                             : s->hi / 2;
    /* nothing between them (whole numbers, a rate within 2% of the bounds), close enough
     * (hi within precision of lo, relative), or out of steps */
    int end = s->hi == 0 || s->steps <= 0 || mid <= s->lo || mid >= s->hi ||
              (s->integer && mid < 1) || (!s->integer && s->hi < 1.02 * s->lo) ||
              (s->lo > 0 && s->hi <= (1 + s->precision) * s->lo);
    if (!end) {
        s->steps--;
        s->next = mid;
    } else if (s->lo > 0 && s->lo_met < need) { /* the answer has one trial: confirm it */
        s->next = s->lo;
        s->n_met = s->lo_met, s->n_miss = s->lo_runs - s->lo_met;
        return;
    } else {
        s->lo_confirmed = s->lo > 0;
        s->done = 1;
    }
    s->n_met = s->n_miss = 0;
}

void lt_search_report(lt_search *s, double load, int met) {
    const int need = s->trials / 2 + 1;
    met ? s->n_met++ : s->n_miss++;
    const int growing = s->hi == 0, confirming = load == s->lo && s->lo > 0;
    int verdict = -1; /* 1 met, 0 missed, -1 another trial */
    if (s->n_met >= need || (growing && !confirming && met && s->n_miss == 0))
        verdict = 1;
    else if (s->n_miss >= need || s->n_met + s->n_miss >= s->trials)
        verdict = s->n_met >= need;
    if (verdict < 0) return;      /* same load again */
    if (confirming && !verdict) { /* the answer failed: it is the lowest missed now */
        s->hi = load, s->hi_miss = s->n_miss, s->hi_runs = s->n_met + s->n_miss;
        s->lo = s->n_lows ? s->lows[--s->n_lows] : 0;
        s->lo_met = s->lo > 0 ? 1 : 0, s->lo_runs = s->lo_met;
        s->steps++; /* the confirmation is not a bisection */
    } else if (verdict) {
        if (s->lo > 0 && load > s->lo && s->n_lows < 64) s->lows[s->n_lows++] = s->lo;
        if (load >= s->lo) s->lo = load, s->lo_met = s->n_met, s->lo_runs = s->n_met + s->n_miss;
    } else if (s->hi == 0 || load < s->hi) {
        s->hi = load, s->hi_miss = s->n_miss, s->hi_runs = s->n_met + s->n_miss;
    }
    s->n_met = s->n_miss = 0;
    search_advance(s);
}

/* ---- arrivals and cost ---- */

void lt_arrivals(double *t, int n, double rate, int poisson, uint64_t seed) {
    double at = 0;
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    for (int i = 0; i < n; i++) {
        t[i] = at;
        if (poisson) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17; /* xorshift64 */
            double u = ((double)(x >> 11) + 0.5) / 9007199254740992.0;
            at += -log(u) / rate;
        } else {
            at += 1.0 / rate;
        }
    }
}

void lt_cost_of(double usd_hour, double in_tok_s, double out_tok_s, double req_s,
                double prefill_share, lt_cost *out) {
    double usd_s = usd_hour / 3600.0;
    if (prefill_share < 0) prefill_share = 0;
    if (prefill_share > 1) prefill_share = 1;
    out->usd_per_m_input = in_tok_s > 0 ? usd_s * prefill_share / in_tok_s * 1e6 : 0;
    out->usd_per_m_output = out_tok_s > 0 ? usd_s * (1 - prefill_share) / out_tok_s * 1e6 : 0;
    out->usd_per_m_blended = in_tok_s + out_tok_s > 0 ? usd_s / (in_tok_s + out_tok_s) * 1e6 : 0;
    out->usd_per_k_requests = req_s > 0 ? usd_s / req_s * 1000 : 0;
}

int lt_instances_needed(double demand, double capacity) {
    if (capacity <= 0) return 0;
    return (int)ceil(demand / capacity - 1e-9);
}
