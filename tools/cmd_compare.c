/* cmd_compare.c: `cpulm compare FILE|DIR...`: results from several machines or engines side
 * by side, one row per result file (compare.c reads loadtest, bench/llama-bench and vLLM
 * benchmark_serving JSON; a directory contributes its *.json files), and with --svg a chart
 * of cost per 1,000 requests against TTFT p99. */
#define _GNU_SOURCE
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "common.h"
#include "options.h"
#include "compare.h"
#include "plan_estimate.h"
#include "svg.h"

#define MAX_ENTRIES 256

static void cmp_usage(FILE *f) {
    fprintf(f, "usage: cpulm compare [--svg FILE] [estimate options] FILE|DIR...\n"
               "  FILE   `cpulm loadtest -o json`, `cpulm bench -o json` or llama-bench JSON,\n"
               "         vLLM benchmark_serving --save-result JSON, GuideLLM's JSON report\n"
               "  DIR    every *.json in it (a `cpulm report` directory, a folder of results)\n"
               "estimated rows next to the measured ones (as `cpulm plan --workload`): --workload\n"
               "W --shape S [--type T]\n");
    cli_help(f, "compare");
}

static int name_cmp(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void add_file(const char *path, cmp_entry *v, int *n, int quiet) {
    size_t len = 0;
    char *text = cli_read_file(path, &len), err[160];
    if (!text) {
        fprintf(stderr, "cpulm compare: cannot read %s\n", path);
        return;
    }
    if (*n < MAX_ENTRIES && cmp_entry_parse(text, len, path, &v[*n], err, sizeof err) == 0)
        (*n)++;
    else if (!quiet)
        fprintf(stderr, "cpulm compare: %s: %s\n", path, err);
    free(text);
}

/* A directory's *.json, sorted; files of other formats (roofline.json) are skipped. */
static void add_dir(const char *dir, cmp_entry *v, int *n) {
    DIR *d = opendir(dir);
    char *names[MAX_ENTRIES];
    int k = 0;
    for (struct dirent *de; d && (de = readdir(d)) && k < MAX_ENTRIES;) {
        size_t l = strlen(de->d_name);
        if (l > 5 && !strcmp(de->d_name + l - 5, ".json") &&
            asprintf(&names[k], "%s/%s", dir, de->d_name) > 0)
            k++;
    }
    if (d) closedir(d);
    qsort(names, (size_t)k, sizeof *names, name_cmp);
    for (int i = 0; i < k; i++) {
        add_file(names[i], v, n, 1);
        free(names[i]);
    }
}

static void cell(double v, int prec) {
    if (isnan(v))
        printf(" - |");
    else
        printf(" %.*f |", prec, v);
}

static void print_table(const cmp_entry *v, int n) {
    printf("| result | machine | workload | load | req/s | TTFT p99 ms | ITL p99 ms | $/1M input "
           "| $/1M output | $/1k requests | pp t/s | tg t/s | basis | note |\n"
           "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- "
           "| --- |\n");
    for (int i = 0; i < n; i++) {
        const cmp_entry *e = &v[i];
        printf("| %s | %s | %s |", e->source, e->machine[0] ? e->machine : "-",
               e->workload[0] ? e->workload : "-");
        if (isnan(e->load))
            printf(" - |");
        else
            printf(e->open ? " %g req/s |" : " %g users |", e->load);
        cell(e->req_s, 2);
        cell(e->ttft_p99_ms, 1);
        cell(e->itl_p99_ms, 1);
        cell(e->usd_m_in, 4);
        cell(e->usd_m_out, 4);
        cell(e->usd_k_req, 4);
        cell(e->pp, 1);
        cell(e->tg, 1);
        printf(" %s (%s) | %s |\n", e->basis, e->kind, e->note[0] ? e->note : "-");
    }
}

static int by_cost(const void *a, const void *b) {
    double x = (*(const cmp_entry *const *)a)->usd_k_req,
           y = (*(const cmp_entry *const *)b)->usd_k_req;
    return (x > y) - (x < y);
}

/* The points: every measured result with a price and a TTFT, then the cheapest estimated
 * ones, CHART_POINTS at most (the legend has room for that many). */
#define CHART_POINTS 5
static int chart_points(const cmp_entry *v, int n, const cmp_entry **out) {
    const cmp_entry *est[MAX_ENTRIES];
    int k = 0, ne = 0;
    for (int i = 0; i < n; i++) {
        if (isnan(v[i].ttft_p99_ms) || isnan(v[i].usd_k_req)) continue;
        if (!strcmp(v[i].basis, "estimated"))
            est[ne++] = &v[i];
        else if (k < CHART_POINTS)
            out[k++] = &v[i];
    }
    qsort(est, (size_t)ne, sizeof *est, by_cost);
    for (int i = 0; i < ne && k < CHART_POINTS; i++)
        out[k++] = est[i];
    return k;
}

static int write_svg(const char *path, const cmp_entry *v, int n) {
    svg_series ser[CHART_POINTS];
    double xs[CHART_POINTS], ys[CHART_POINTS];
    char labels[CHART_POINTS][160];
    const cmp_entry *pts[CHART_POINTS];
    int k = chart_points(v, n, pts);
    for (int i = 0; i < k; i++) {
        xs[i] = pts[i]->ttft_p99_ms / 1000;
        ys[i] = pts[i]->usd_k_req;
        snprintf(labels[i], sizeof labels[i], "%.120s%s",
                 pts[i]->machine[0] ? pts[i]->machine : pts[i]->source,
                 strcmp(pts[i]->basis, "estimated") ? "" : " (est.)");
        ser[i] = (svg_series){labels[i], &xs[i], &ys[i], 1};
    }
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    svg_chart c = {
        .title = "Cost vs latency (each result at its reported load)",
        .x_label = "TTFT p99 (s)",
        .y_label = "USD per 1,000 requests",
        .series = ser,
        .n_series = k,
        .note = "measured: loadtest, priced; est.: model, TTFT without queue (cheapest shown)"};
    svg_line_chart(&b, &c);
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(b.data, 1, b.len, f) == b.len;
    if (f) ok &= fclose(f) == 0;
    cpulm_buf_release(&b);
    if (!ok) fprintf(stderr, "cpulm compare: cannot write %s\n", path);
    if (ok && !k)
        fprintf(stderr,
                "cpulm compare: no result has both a price and a TTFT: the chart is empty\n");
    return ok ? 0 : 1;
}

typedef struct cmp_est {
    plan_est_opts o;
    const char *shape, *type, *prices;
} cmp_est;

/* Appends the estimated rows; returns 0 or an exit code. */
static int add_estimates(const cmp_est *ce, cmp_entry *v, int *n) {
    const plan_shape *s = ce->shape ? plan_shape_find(ce->shape) : NULL;
    plan_weights w;
    if (!s || plan_weights_of(s, ce->type, &w)) {
        fprintf(stderr, "cpulm compare: --workload needs --shape (%s) and a known --type\n",
                plan_shape_names());
        return EXIT_USAGE;
    }
    pm_model_cost mc;
    plan_model_cost_of_shape(s, &w, &mc);
    char path[4096], err[512], wl[64];
    plan_prices p = {0};
    if (plan_prices_locate(ce->prices, path, sizeof path) ||
        plan_prices_load(path, &p, err, sizeof err)) {
        fprintf(stderr, "cpulm compare: %s\n", ce->prices ? err : "no price table found");
        return EXIT_USAGE;
    }
    plan_est_row rows[64];
    int k = plan_estimate_rows(&ce->o, s, w.bytes, &mc, &p, rows, 64, wl, sizeof wl);
    for (int i = 0; i < k && *n < MAX_ENTRIES; i++) {
        cmp_entry *e = &v[(*n)++];
        cmp_entry_init(e, "");
        snprintf(e->source, sizeof e->source, "plan --workload %.60s --shape %.60s", wl, ce->shape);
        snprintf(e->machine, sizeof e->machine, "%.39s", rows[i].instance);
        snprintf(e->workload, sizeof e->workload, "%s", wl);
        snprintf(e->kind, sizeof e->kind, "model");
        snprintf(e->basis, sizeof e->basis, "estimated");
        snprintf(e->note, sizeof e->note, "%s",
                 rows[i].why ? rows[i].why : "TTFT, ITL: model means, no queue");
        e->tg = rows[i].tg;
        e->pp = rows[i].pp;
        e->ttft_p99_ms = rows[i].ttft_s * 1000;
        e->itl_p99_ms = rows[i].itl_s * 1000;
        if (rows[i].why) continue;
        e->load = rows[i].users;
        e->req_s = rows[i].req_s;
        e->usd_m_in = rows[i].usd_m_in;
        e->usd_m_out = rows[i].usd_m_out;
        e->usd_k_req = rows[i].usd_k_req;
    }
    plan_prices_release(&p);
    return k < 0 ? -k : 0;
}

/* The estimate's rows of the table: 1 when id was one of them. */
static int est_opt(int id, const cli_val *v, cmp_est *ce) {
    switch (id) {
    case OPT_WORKLOAD: ce->o.workload = v->s; break;
    case OPT_SHAPE: ce->shape = v->s; break;
    case OPT_WTYPE: ce->type = v->s; break;
    case OPT_SLO: ce->o.slo = v->s; break;
    case OPT_INSTANCE: ce->o.instance = v->s; break;
    case OPT_PRICES: ce->prices = v->s; break;
    case OPT_VCPU: ce->o.vcpu = (int)v->i; break;
    default: return 0;
    }
    return 1;
}

/* A positional argument: a result file or a directory of them. */
static void add_input(const char *path, cmp_entry *v, int *n) {
    DIR *d = opendir(path);
    if (d) {
        closedir(d);
        add_dir(path, v, n);
    } else {
        add_file(path, v, n, 0);
    }
}

typedef struct cmp_args {
    cmp_entry *v; /* [MAX_ENTRIES] */
    int n, inputs;
    const char *svg;
    cmp_est ce;
} cmp_args;

/* One row of the table or a result file / directory; 0 = ok, else the exit code. */
static int cmp_opt(cli *c, int id, const cli_val *v, void *ctx) {
    cmp_args *A = ctx;
    if (id == OPT_SVG) {
        A->svg = v->s;
    } else if (id == CLI_POS) {
        A->inputs++;
        add_input(c->argv[c->i], A->v, &A->n);
    } else if (!est_opt(id, v, &A->ce)) {
        return cli_unhandled(c, v);
    }
    return 0;
}

int cmd_compare(int argc, char **argv) {
    cmp_args A = {.ce = {.o = {.bw_fraction = PM_DEFAULT_BW_FRACTION,
                               .peak_fraction = PM_DEFAULT_PEAK_FRACTION,
                               .utilization = 0.8,
                               .vcpu = 16,
                               .max_batch = 256},
                         .type = "q4_0"}};
    cmp_entry *v = A.v = calloc(MAX_ENTRIES, sizeof *v);
    if (!v) return 1;
    cli c = {.cmd = "compare", .argc = argc, .argv = argv};
    int rc = cli_parse(&c, cmp_usage, cmp_opt, &A);
    if (!rc && A.ce.o.workload) rc = add_estimates(&A.ce, v, &A.n);
    if (!rc && !A.inputs && !A.ce.o.workload) {
        cmp_usage(stderr);
        rc = EXIT_USAGE;
    }
    if (!rc && !A.n) {
        fprintf(stderr, "cpulm compare: no result could be read\n");
        rc = 1;
    }
    if (!rc) print_table(v, A.n);
    if (!rc && A.svg) rc = write_svg(A.svg, v, A.n);
    free(v);
    return rc;
}
