/* bench_stats.c: mean, sample standard deviation and percentiles of repeated measurements. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* q-th percentile of sorted[0..n): rank h = q/100 * (n-1), interpolated between the two
 * neighbouring order statistics (numpy's default "linear" method). */
static double percentile_sorted(const double *sorted, int n, double q) {
    if (q <= 0) return sorted[0];
    if (q >= 100) return sorted[n - 1];
    double h = q / 100.0 * (n - 1);
    int lo = (int)floor(h);
    if (lo >= n - 1) return sorted[n - 1];
    return sorted[lo] + (h - lo) * (sorted[lo + 1] - sorted[lo]);
}

double bench_percentile(const double *x, int n, double q) {
    double small[BENCH_MAX_REPS], *v = n <= BENCH_MAX_REPS ? small : malloc(sizeof(double) * n);
    if (!v) return NAN;
    memcpy(v, x, sizeof(double) * (size_t)n);
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    double p = percentile_sorted(v, n, q);
    if (v != small) free(v);
    return p;
}

void bench_stats_compute(const double *x, int n, bench_stats *s) {
    memset(s, 0, sizeof *s);
    s->n = n;
    if (n < 1) return;
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += x[i];
    s->mean = sum / n;
    double ss = 0; /* two-pass: no cancellation for nearly equal samples */
    for (int i = 0; i < n; i++)
        ss += (x[i] - s->mean) * (x[i] - s->mean);
    s->stddev = n > 1 ? sqrt(ss / (n - 1)) : 0;
    s->min = bench_percentile(x, n, 0);
    s->max = bench_percentile(x, n, 100);
    s->p50 = bench_percentile(x, n, 50);
    s->p90 = bench_percentile(x, n, 90);
    s->p99 = bench_percentile(x, n, 99);
}

void bench_summarize(const bench_result *r, bench_summary *s) {
    int n = r->n_reps;
    const bench_test *t = &r->t;
    double pp_ts[BENCH_MAX_REPS], tg_ts[BENCH_MAX_REPS], tg_seq[BENCH_MAX_REPS],
        pp_ms[BENCH_MAX_REPS];
    for (int i = 0; i < n; i++) {
        if (t->kind == BENCH_PAR) {
            double npl = t->n_parallel;
            pp_ts[i] = npl * t->n_prompt / (r->pp_ns[i] * 1e-9);
            tg_ts[i] = npl * t->n_gen / (r->tg_ns[i] * 1e-9);
            tg_seq[i] = t->n_gen / (r->tg_ns[i] * 1e-9);
            pp_ms[i] = r->pp_ns[i] * 1e-6;
        } else {
            pp_ts[i] = tg_ts[i] = tg_seq[i] = r->ts[i];
            pp_ms[i] = r->ns[i] * 1e-6;
        }
    }
    bench_stats_compute(r->ns, n, &s->ns);
    bench_stats_compute(r->ts, n, &s->ts);
    bench_stats_compute(pp_ts, n, &s->pp_ts);
    bench_stats_compute(tg_ts, n, &s->tg_ts);
    bench_stats_compute(tg_seq, n, &s->tg_seq);
    bench_stats_compute(pp_ms, n, &s->pp_ms);
}
