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
#include "compare.h"
#include "svg.h"

#define MAX_ENTRIES 256

static void cmp_usage(FILE *f) {
    fprintf(f, "usage: cpulm compare [--svg FILE] FILE|DIR...\n"
               "  FILE   `cpulm loadtest -o json`, `cpulm bench -o json` or llama-bench JSON,\n"
               "         vLLM benchmark_serving --save-result JSON\n"
               "  DIR    every *.json in it (a `cpulm report` directory, a folder of results)\n"
               "  --svg FILE  cost per 1k requests vs TTFT p99, one point per result with both\n");
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

static int write_svg(const char *path, const cmp_entry *v, int n) {
    svg_series ser[MAX_ENTRIES];
    double xs[MAX_ENTRIES], ys[MAX_ENTRIES];
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (isnan(v[i].ttft_p99_ms) || isnan(v[i].usd_k_req)) continue;
        xs[k] = v[i].ttft_p99_ms / 1000;
        ys[k] = v[i].usd_k_req;
        const char *label = v[i].machine[0] ? v[i].machine : v[i].source;
        ser[k] = (svg_series){label, &xs[k], &ys[k], 1};
        k++;
    }
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    svg_chart c = {.title = "Cost vs latency (measured, each result at its reported load)",
                   .x_label = "TTFT p99 (s)",
                   .y_label = "USD per 1,000 requests",
                   .series = ser,
                   .n_series = k,
                   .note = "one point per result with a price (loadtest --instance/--price-hour)"};
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

int cmd_compare(int argc, char **argv) {
    const char *svg = NULL;
    cmp_entry *v = calloc(MAX_ENTRIES, sizeof *v);
    if (!v) return 1;
    int n = 0, inputs = 0, rc = 0;
    for (int i = 1; i < argc && !rc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            cmp_usage(stdout);
            free(v);
            return 0;
        } else if (!strcmp(argv[i], "--svg")) {
            if (!(svg = i + 1 < argc ? argv[++i] : NULL)) rc = EXIT_USAGE;
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "cpulm compare: unknown option '%s'\n", argv[i]);
            rc = EXIT_USAGE;
        } else {
            inputs++;
            DIR *d = opendir(argv[i]);
            if (d) {
                closedir(d);
                add_dir(argv[i], v, &n);
            } else {
                add_file(argv[i], v, &n, 0);
            }
        }
    }
    if (!rc && !inputs) {
        cmp_usage(stderr);
        rc = EXIT_USAGE;
    }
    if (!rc && !n) {
        fprintf(stderr, "cpulm compare: no result could be read\n");
        rc = 1;
    }
    if (!rc) print_table(v, n);
    if (!rc && svg) rc = write_svg(svg, v, n);
    free(v);
    return rc;
}
