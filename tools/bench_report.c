/* bench_report.c: renders a study (see bench_report.h) as markdown and HTML at once: every
 * heading, paragraph, table and chart goes to both documents through the doc_* helpers,
 * so the two always say the same thing. Charts are written as SVG files (linked from the
 * markdown) and inline in the HTML. */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "tools_api.h"
#include "bench_report.h"
#include "svg.h"

/* ---- a document written as markdown and HTML together ---- */

typedef struct doc {
    cpulm_buf md, html;
    const char *dir;
    int failed;
    char ident[352]; /* "model, CPU, date": every chart names what it measured */
} doc;

static void html_text(cpulm_buf *b, const char *s) {
    svg_escape(b, s); /* the same five entities serve HTML text */
}

static void doc_heading(doc *d, int level, const char *s) {
    cpulm_buf_printf(&d->md, "%.*s %s\n\n", level, "####", s);
    cpulm_buf_printf(&d->html, "<h%d>", level);
    html_text(&d->html, s);
    cpulm_buf_printf(&d->html, "</h%d>\n", level);
}

static void doc_para(doc *d, const char *fmt, ...) CPULM_PRINTF(2, 3);
static void doc_para(doc *d, const char *fmt, ...) {
    char s[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s, sizeof s, fmt, ap);
    va_end(ap);
    cpulm_buf_printf(&d->md, "%s\n\n", s);
    cpulm_buf_puts(&d->html, "<p>");
    html_text(&d->html, s);
    cpulm_buf_puts(&d->html, "</p>\n");
}

/* A table row; header = 1 for the first row (also writes the markdown rule). */
static void doc_row(doc *d, int n, const char *const *cells, int header) {
    cpulm_buf_puts(&d->md, "|");
    cpulm_buf_puts(&d->html, header ? "<table>\n<tr>" : "<tr>");
    for (int i = 0; i < n; i++) {
        cpulm_buf_printf(&d->md, " %s |", cells[i]);
        cpulm_buf_puts(&d->html, header ? "<th>" : "<td>");
        html_text(&d->html, cells[i]);
        cpulm_buf_puts(&d->html, header ? "</th>" : "</td>");
    }
    cpulm_buf_puts(&d->md, "\n");
    cpulm_buf_puts(&d->html, "</tr>\n");
    if (!header) return;
    cpulm_buf_puts(&d->md, "|");
    for (int i = 0; i < n; i++)
        cpulm_buf_puts(&d->md, i ? " ---: |" : " --- |");
    cpulm_buf_puts(&d->md, "\n");
}

static void doc_table_end(doc *d) {
    cpulm_buf_puts(&d->md, "\n");
    cpulm_buf_puts(&d->html, "</table>\n");
}

static int write_file(const char *dir, const char *name, const char *data, size_t n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(data, 1, n, f) == n;
    if (f && fclose(f) != 0) ok = 0;
    if (!ok) fprintf(stderr, "cpulm report: cannot write %s: %s\n", path, strerror(errno));
    return ok ? 0 : -1;
}

/* Draws the chart into name.svg, links it from the markdown, inlines it in the HTML. */
static void doc_chart(doc *d, const char *name, const svg_chart *c0, int bars) {
    cpulm_buf svg;
    cpulm_buf_init(&svg, 0);
    char note[640];
    svg_chart c1 = *c0, *c = &c1; /* a chart copied out of the report must say what it shows */
    snprintf(note, sizeof note, "%s%s%s", d->ident, c0->note ? " | " : "",
             c0->note ? c0->note : "");
    c1.note = note;
    if (bars)
        svg_bar_chart(&svg, c);
    else
        svg_line_chart(&svg, c);
    char file[128];
    snprintf(file, sizeof file, "%s.svg", name);
    if (cpulm_buf_status(&svg) != CPULM_OK || write_file(d->dir, file, svg.data, svg.len))
        d->failed = 1;
    cpulm_buf_printf(&d->md, "![%s](%s)\n\n", c->title, file);
    cpulm_buf_printf(&d->html, "<figure>%s</figure>\n", svg.data);
    cpulm_buf_release(&svg);
}

/* ---- formatting ---- */

/* v with dec decimals, and a "%" appended when pct. */
static void num(char *buf, size_t cap, double v, int dec, int pct) {
    snprintf(buf, cap, "%.*f%s", dec, v, pct ? "%" : "");
}

static void pm(char *buf, size_t cap, const bench_stats *st, double scale) {
    snprintf(buf, cap, "%.2f ± %.2f", st->mean * scale, st->stddev * scale);
}

static void human_bytes(char *buf, size_t cap, double v) {
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int i = 0;
    while (v >= 1024 && i < 4)
        v /= 1024, i++;
    snprintf(buf, cap, "%.2f %s", v, u[i]);
}

static const bench_result *sec(const study *s, int section, int i) {
    return &s->res[s->lo[section] + i];
}

static int sec_n(const study *s, int section) {
    return s->hi[section] - s->lo[section];
}

/* A chart's note: what it shows, then what its error bars are (the stddev over the section's
 * repetitions; a single repetition has none, which must not read as "no variation"). */
static void err_note(char *out, size_t cap, const study *s, int section, const char *what) {
    int reps = sec_n(s, section) ? sec(s, section, 0)->n_reps : 0;
    snprintf(out, cap, "%s%s%s", what ? what : "", what ? "; " : "",
             reps >= 2 ? "error bars: ± 1 sample stddev" : "1 repetition: no error bars");
    if (reps >= 2) snprintf(out + strlen(out), cap - strlen(out), " over %d repetitions", reps);
}

/* What a chart says besides its data. */
typedef struct chart_text {
    const char *file, *title, *x_label, *y_label;
    const char *what; /* the note: what the chart shows */
} chart_text;

/* A sweep of a section as a line chart on a powers-of-two x axis; its note says what the
 * error bars are (err_note). */
static void sweep_chart(doc *d, const study *s, int section, const chart_text *t,
                        const svg_series *ser, int n_ser, const double *const *err) {
    char note[256];
    err_note(note, sizeof note, s, section, t->what);
    svg_chart c = {.title = t->title,
                   .x_label = t->x_label,
                   .y_label = t->y_label,
                   .log2_x = 1,
                   .series = ser,
                   .n_series = n_ser,
                   .note = note,
                   .err = err};
    doc_chart(d, t->file, &c, 0);
}

/* Grouped bars over categories; err may be NULL. */
static void bar_chart(doc *d, const chart_text *t, const svg_series *ser, int n_ser,
                      const char *const *cats, int n_cats, const double *const *err) {
    svg_chart c = {.title = t->title,
                   .x_label = t->x_label,
                   .y_label = t->y_label,
                   .series = ser,
                   .n_series = n_ser,
                   .categories = cats,
                   .n_categories = n_cats,
                   .note = t->what,
                   .err = err};
    doc_chart(d, t->file, &c, 1);
}

/* ---- sections ---- */

static void write_header(doc *d, const study *s) {
    char size[32];
    human_bytes(size, sizeof size, (double)s->env.model_size);
    doc_heading(d, 1, "cpulm performance report");
    doc_para(d, "Model: %s (%s), %s of weights, %.3f B parameters, %d layers, embedding %d.",
             s->env.model_type, s->env.model_file, size, (double)s->env.n_params / 1e9,
             s->info.n_layer, s->info.n_embd);
    doc_para(d, "Machine: %s, kernels %s. cpulm %s. Started %s; the %s study took %.0f s.",
             s->env.cpu, s->env.kernels, s->env.version, s->n_res ? s->res[0].test_time : "-",
             s->quick ? "quick" : "full", s->seconds);
    doc_para(d,
             "Method: a fresh context per test (one per depth in the depth section), one "
             "untimed warm-up, the KV cache cleared "
             "between repetitions, CLOCK_MONOTONIC wall time around the decode calls; "
             "prompts are random token ids; figures are mean ± sample stddev over %d "
             "repetitions unless stated.",
             s->n_res ? s->res[0].n_reps : 0);
}

static void write_threads(doc *d, const study *s) {
    int n = sec_n(s, STUDY_THREADS);
    if (!n) return;
    doc_heading(d, 2, "Threads");
    double x[2][BENCH_MAX_LIST], y[2][BENCH_MAX_LIST], e[2][BENCH_MAX_LIST];
    int k[2] = {0, 0};
    char name[2][96] = {"", ""}, th[16], ts[64], tn[64];
    const char *hdr[] = {"threads", "test", "tokens/s"};
    doc_row(d, 3, hdr, 1);
    for (int i = 0; i < n; i++) {
        const bench_result *r = sec(s, STUDY_THREADS, i);
        bench_summary sm;
        bench_summarize(r, &sm);
        int tg = r->t.kind == BENCH_TG;
        bench_test_name(&r->t, tn, sizeof tn);
        snprintf(name[tg], sizeof name[tg], "%s (%s)", tn, tg ? "generation" : "prompt");
        if (k[tg] < BENCH_MAX_LIST) {
            x[tg][k[tg]] = r->n_threads_used;
            e[tg][k[tg]] = sm.ts.stddev;
            y[tg][k[tg]++] = sm.ts.mean;
        }
        snprintf(th, sizeof th, "%d", r->n_threads_used);
        pm(ts, sizeof ts, &sm.ts, 1);
        const char *row[] = {th, tn, ts};
        doc_row(d, 3, row, 0);
    }
    doc_table_end(d);
    svg_series ser[2] = {{name[0], x[0], y[0], k[0]}, {name[1], x[1], y[1], k[1]}};
    const double *err[2] = {e[0], e[1]};
    static const chart_text t = {
        "threads", "Throughput vs threads", "threads", "tokens/s",
        "pp: prompt tokens evaluated per second; tg: tokens generated one at a time"};
    sweep_chart(d, s, STUDY_THREADS, &t, ser, 2, err);
}

static void write_pp_len(doc *d, const study *s) {
    int n = sec_n(s, STUDY_PP_LEN);
    if (!n) return;
    doc_heading(d, 2, "Prompt length");
    double x[BENCH_MAX_LIST], y[BENCH_MAX_LIST], e[BENCH_MAX_LIST];
    char a[16], b[16], c2[64];
    const char *hdr[] = {"prompt tokens", "threads", "prompt tokens/s"};
    doc_row(d, 3, hdr, 1);
    for (int i = 0; i < n && i < BENCH_MAX_LIST; i++) {
        const bench_result *r = sec(s, STUDY_PP_LEN, i);
        bench_summary sm;
        bench_summarize(r, &sm);
        x[i] = r->t.n_prompt;
        y[i] = sm.ts.mean;
        e[i] = sm.ts.stddev;
        snprintf(a, sizeof a, "%d", r->t.n_prompt);
        snprintf(b, sizeof b, "%d", r->n_threads_used);
        pm(c2, sizeof c2, &sm.ts, 1);
        const char *row[] = {a, b, c2};
        doc_row(d, 3, row, 0);
    }
    doc_table_end(d);
    svg_series ser = {"prompt processing", x, y, n < BENCH_MAX_LIST ? n : BENCH_MAX_LIST};
    const double *err[1] = {e};
    static const chart_text t = {
        "pp_length", "Prompt throughput vs prompt length", "prompt length (tokens)",
        "prompt tokens/s",
        "prompt of N random tokens from an empty context, in batches of up to 512"};
    sweep_chart(d, s, STUDY_PP_LEN, &t, &ser, 1, err);
}

static void write_parallel(doc *d, const study *s) {
    int n = sec_n(s, STUDY_PARALLEL);
    if (!n) return;
    doc_heading(d, 2, "Parallel sequences");
    double x[BENCH_MAX_LIST], agg[BENCH_MAX_LIST], one[BENCH_MAX_LIST];
    double agg_e[BENCH_MAX_LIST], one_e[BENCH_MAX_LIST];
    char a[16], b[64], c2[32], e[32], f[32];
    const char *hdr[] = {"sequences", "prompt ms (all)", "prompt tokens/s",
                         "generated tokens/s (aggregate)", "tokens/s per sequence"};
    doc_row(d, 5, hdr, 1);
    for (int i = 0; i < n && i < BENCH_MAX_LIST; i++) {
        const bench_result *r = sec(s, STUDY_PARALLEL, i);
        bench_summary sm;
        bench_summarize(r, &sm);
        x[i] = r->t.n_parallel;
        agg[i] = sm.tg_ts.mean;
        one[i] = sm.tg_seq.mean;
        agg_e[i] = sm.tg_ts.stddev;
        one_e[i] = sm.tg_seq.stddev;
        snprintf(a, sizeof a, "%d", r->t.n_parallel);
        num(c2, sizeof c2, sm.pp_ms.mean, 1, 0);
        num(e, sizeof e, sm.pp_ts.mean, 2, 0);
        pm(b, sizeof b, &sm.tg_ts, 1);
        num(f, sizeof f, sm.tg_seq.mean, 2, 0);
        const char *row[] = {a, c2, e, b, f};
        doc_row(d, 5, row, 0);
    }
    doc_table_end(d);
    const bench_result *r0 = sec(s, STUDY_PARALLEL, 0);
    doc_para(d,
             "Each of N sequences gets a %d-token prompt (packed into shared decode calls), "
             "then %d steps each decode one token of every sequence together, as "
             "llama-batched-bench does; weights are shared, each sequence has its own KV.",
             r0->t.n_prompt, r0->t.n_gen);
    int m = n < BENCH_MAX_LIST ? n : BENCH_MAX_LIST;
    svg_series ser[2] = {{"aggregate (all sequences)", x, agg, m}, {"per sequence", x, one, m}};
    const double *err[2] = {agg_e, one_e};
    static const chart_text t = {"parallel", "Generation throughput vs parallel sequences",
                                 "parallel sequences", "generated tokens/s", NULL};
    sweep_chart(d, s, STUDY_PARALLEL, &t, ser, 2, err);
}

static void write_ttft(doc *d, const study *s) {
    int n = sec_n(s, STUDY_TTFT);
    if (!n) return;
    doc_heading(d, 2, "Time to first token");
    double x[BENCH_MAX_LIST], mean[BENCH_MAX_LIST], p50[BENCH_MAX_LIST], p99[BENCH_MAX_LIST];
    double sd[BENCH_MAX_LIST];
    char a[16], b[64], c2[32], e[32], f[32];
    int m = n < BENCH_MAX_LIST ? n : BENCH_MAX_LIST;
    /* A p99 of fewer than 100 samples is an interpolation between the largest ones, not a
     * tail latency: the column and series appear only with enough repetitions. */
    int reps = sec(s, STUDY_TTFT, 0)->n_reps, tail = reps >= 100;
    const char *hdr[] = {"prompt tokens", "TTFT ms (mean ± sd)", "p50 ms",
                         tail ? "p99 ms" : "max ms", "prompt tokens/s"};
    if (!tail)
        doc_para(d,
                 "%d repetitions per length: too few for a p99, so the slowest repetition "
                 "is shown instead.",
                 reps);
    doc_row(d, 5, hdr, 1);
    for (int i = 0; i < m; i++) {
        const bench_result *r = sec(s, STUDY_TTFT, i);
        bench_summary sm;
        bench_summarize(r, &sm);
        x[i] = r->t.n_prompt;
        mean[i] = sm.ns.mean * 1e-6;
        sd[i] = sm.ns.stddev * 1e-6;
        p50[i] = sm.ns.p50 * 1e-6;
        p99[i] = (tail ? sm.ns.p99 : r->ns[0]) * 1e-6;
        for (int k = 1; !tail && k < r->n_reps; k++)
            if (r->ns[k] * 1e-6 > p99[i]) p99[i] = r->ns[k] * 1e-6;
        snprintf(a, sizeof a, "%d", r->t.n_prompt);
        pm(b, sizeof b, &sm.ns, 1e-6);
        num(c2, sizeof c2, p50[i], 2, 0);
        num(e, sizeof e, p99[i], 2, 0);
        num(f, sizeof f, sm.ts.mean, 2, 0);
        const char *row[] = {a, b, c2, e, f};
        doc_row(d, 5, row, 0);
    }
    doc_table_end(d);
    svg_series ser[3] = {
        {"mean", x, mean, m}, {"p50", x, p50, m}, {tail ? "p99" : "max", x, p99, m}};
    const double *err[3] = {sd, NULL, NULL}; /* on the mean only */
    static const chart_text t = {
        "ttft", "Time to first token vs prompt length", "prompt length (tokens)",
        "time to first token (ms)",
        "empty context, prompt evaluated, first token picked (greedy); bars on the mean"};
    sweep_chart(d, s, STUDY_TTFT, &t, ser, 3, err);
}

/* "0", "512", "1k", "32k": depths as llama-bench users write them. */
static void depth_label(char *buf, size_t cap, int32_t d) {
    if (d >= 1024 && d % 1024 == 0)
        snprintf(buf, cap, "%dk", (int)(d / 1024));
    else
        snprintf(buf, cap, "%d", (int)d);
}

/* How the depth section was measured, and which depths, when fewer than a full study's. */
static void depth_method(doc *d, const study *s, int n) {
    const bench_result *pp = sec(s, STUDY_DEPTH, 0), *tg = sec(s, STUDY_DEPTH, 1);
    const bench_result *last = sec(s, STUDY_DEPTH, 2 * (n - 1));
    char list[BENCH_MAX_LIST * 8] = "", one[16], deepest[16];
    for (int i = 0; i < n; i++) {
        depth_label(one, sizeof one, sec(s, STUDY_DEPTH, 2 * i)->t.n_depth);
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", one);
    }
    depth_label(deepest, sizeof deepest, last->t.n_depth);
    doc_para(d,
             "pp%d and tg%d with N random tokens already in the KV cache (llama-bench -d N; "
             "depths %s). One untimed fill of N tokens per depth serves both tests on one "
             "context: pp's repetitions, then tg's, each truncating the cache back to N "
             "(llama-bench fills once per test; the timed work is the same). Context memory is "
             "what that context allocated: KV cache (%s) and scratch.",
             pp->t.n_prompt, tg->t.n_gen, list, bench_kv_name(pp->t.type_k));
    if (s->depths_given || s->quick)
        doc_para(d,
                 "%s: this run stopped at depth %s; the full study measures 0, 1k, 4k, 16k "
                 "and 32k.",
                 s->depths_given ? "--depths" : "--quick", deepest);
}

/* One table row of a depth; y/e receive pp's and tg's tokens/s mean and stddev. */
static void depth_row(doc *d, const study *s, int i, const double base[2], double y[2],
                      double e[2]) {
    char dep[16], ctx[16], mem[32], v[2][64], pct[2][32];
    for (int k = 0; k < 2; k++) {
        bench_summary sm;
        bench_summarize(sec(s, STUDY_DEPTH, 2 * i + k), &sm);
        y[k] = sm.ts.mean;
        e[k] = sm.ts.stddev;
        pm(v[k], sizeof v[k], &sm.ts, 1);
        num(pct[k], sizeof pct[k], base[k] > 0 ? 100 * y[k] / base[k] : 0, 1, 1);
    }
    const bench_result *r = sec(s, STUDY_DEPTH, 2 * i);
    snprintf(dep, sizeof dep, "%d", (int)r->t.n_depth);
    snprintf(ctx, sizeof ctx, "%d", (int)r->n_ctx);
    human_bytes(mem, sizeof mem, (double)r->ctx_bytes);
    const char *row[] = {dep, ctx, mem, v[0], pct[0], v[1], pct[1]};
    doc_row(d, 7, row, 0);
}

static void write_depth(doc *d, const study *s) {
    int n = sec_n(s, STUDY_DEPTH) / 2;
    if (n > BENCH_MAX_LIST) n = BENCH_MAX_LIST;
    if (!n) return;
    doc_heading(d, 2, "Speed vs depth");
    depth_method(d, s, n);
    double y[2][BENCH_MAX_LIST], e[2][BENCH_MAX_LIST], base[2] = {0, 0};
    char labels[BENCH_MAX_LIST][16], first[16], hp[32], ht[32], name[2][48];
    const char *cats[BENCH_MAX_LIST];
    depth_label(first, sizeof first, sec(s, STUDY_DEPTH, 0)->t.n_depth);
    snprintf(hp, sizeof hp, "pp %% of depth %s", first);
    snprintf(ht, sizeof ht, "tg %% of depth %s", first);
    const char *hdr[] = {"depth (tokens)",
                         "context (tokens)",
                         "context memory",
                         "pp tokens/s",
                         hp,
                         "tg tokens/s",
                         ht};
    doc_row(d, 7, hdr, 1);
    for (int k = 0; k < 2; k++) { /* the % columns: relative to the shallowest depth */
        bench_summary sm;
        bench_summarize(sec(s, STUDY_DEPTH, k), &sm);
        base[k] = sm.ts.mean;
    }
    for (int i = 0; i < n; i++) {
        double yy[2], ee[2];
        depth_row(d, s, i, base, yy, ee);
        y[0][i] = yy[0], y[1][i] = yy[1], e[0][i] = ee[0], e[1][i] = ee[1];
        depth_label(labels[i], sizeof labels[i], sec(s, STUDY_DEPTH, 2 * i)->t.n_depth);
        cats[i] = labels[i];
    }
    doc_table_end(d);
    snprintf(name[0], sizeof name[0], "pp%d (prompt)", sec(s, STUDY_DEPTH, 0)->t.n_prompt);
    snprintf(name[1], sizeof name[1], "tg%d (generation)", sec(s, STUDY_DEPTH, 1)->t.n_gen);
    svg_series ser[2] = {{name[0], NULL, y[0], n}, {name[1], NULL, y[1], n}};
    const double *err[2] = {e[0], e[1]};
    char note[256];
    err_note(note, sizeof note, s, STUDY_DEPTH, NULL); /* the notes are one line: keep it short */
    chart_text t = {"depth", "Throughput vs context depth", "tokens already in the KV cache",
                    "tokens/s", note};
    bar_chart(d, &t, ser, 2, cats, n, err);
}

static void roof_table(doc *d, const study *s) {
    char a[16], b[32], c2[32], e[32], f[32], g[32], h[32];
    const char *hdr[] = {"threads",     "read GB/s",         "int8 peak GOPS", "f32 peak GFLOPS",
                         "tg tokens/s", "tg % of bandwidth", "pp tokens/s",    "pp % of int8 peak"};
    doc_row(d, 8, hdr, 1);
    for (int i = 0; i < s->n_roof; i++) {
        const bench_roof *r = &s->roof[i];
        snprintf(a, sizeof a, "%d", r->n_threads);
        num(b, sizeof b, r->bw / 1e9, 2, 0);
        num(c2, sizeof c2, r->int8_ops / 1e9, 1, 0);
        num(e, sizeof e, r->f32_flops / 1e9, 1, 0);
        num(f, sizeof f, r->tg_ts, 2, 0);
        num(g, sizeof g, 100 * r->tg_frac, 1, 1);
        num(h, sizeof h, r->pp_ts, 2, 0);
        char pf[32];
        num(pf, sizeof pf, 100 * r->pp_frac, 1, 1);
        const char *row[] = {a, b, c2, e, f, g, h, pf};
        doc_row(d, 8, row, 0);
    }
    doc_table_end(d);
}

static void write_roofline(doc *d, const study *s) {
    if (!s->n_roof) return;
    doc_heading(d, 2, "Roofline");
    char bpt[32];
    human_bytes(bpt, sizeof bpt, (double)s->bytes_per_token);
    doc_para(d,
             "Ceilings measured on this machine: read bandwidth streaming a %zu MiB buffer, "
             "the int8 peak of the selected kernels (the fastest of the repacked GEMM "
             "microkernels, one per packed weight type, on cache-resident weights, 8 tokens x "
             "16 rows per call, and the Q8_0 dot) and the f32 peak (the faster of the attention's "
             "tile products and the f32 dot; best round). Achieved: tg "
             "tokens/s x %s of weights read per token / bandwidth; pp tokens/s x 2 x %.3f G "
             "matmul parameters (the output matrix for the last prompt token only) / int8 "
             "peak. KV-cache reads and attention are not counted.",
             s->roof_buf_bytes >> 20, bpt, (double)s->matmul_params / 1e9);
    roof_table(d, s);
    int over = 0;
    for (int i = 0; i < s->n_roof; i++)
        over |= s->roof[i].tg_frac > 1.0;
    if (over)
        doc_para(d,
                 "A tg share above 100%% means the weights (%s per token) were read from the "
                 "CPU caches rather than from memory: the model fits in the caches, so the "
                 "memory-bandwidth ceiling does not bind. Larger models stay below 100%%.",
                 bpt);
    double tg[BENCH_MAX_LIST], pp[BENCH_MAX_LIST];
    char labels[BENCH_MAX_LIST][24];
    const char *cats[BENCH_MAX_LIST];
    for (int i = 0; i < s->n_roof; i++) {
        tg[i] = 100 * s->roof[i].tg_frac;
        pp[i] = 100 * s->roof[i].pp_frac;
        snprintf(labels[i], sizeof labels[i], "%d thread%s", s->roof[i].n_threads,
                 s->roof[i].n_threads > 1 ? "s" : "");
        cats[i] = labels[i];
    }
    svg_series ser[2] = {{"tg: % of read bandwidth", NULL, tg, s->n_roof},
                         {"pp: % of int8 peak", NULL, pp, s->n_roof}};
    static const chart_text t = {"roofline", "Share of the machine's ceilings", "threads",
                                 "% of ceiling", NULL};
    bar_chart(d, &t, ser, 2, cats, s->n_roof, NULL);
}

static void write_memory(doc *d, const study *s) {
    char a[32], b[32], c2[32], e[32], f[32];
    human_bytes(a, sizeof a, (double)s->mem.weights);
    human_bytes(b, sizeof b, (double)s->mem.kv_total);
    human_bytes(c2, sizeof c2, (double)s->mem.compute);
    human_bytes(e, sizeof e, (double)s->mem.overhead);
    human_bytes(f, sizeof f, (double)s->mem.total);
    doc_para(d,
             "Memory to serve %d sequence(s) of %d tokens (f16 KV cache): weights %s + KV "
             "cache %s + compute buffers %s + runtime overhead %s = %s (see `cpulm plan` for "
             "the assumptions behind each figure).",
             s->plan_parallel, s->plan_ctx, a, b, c2, e, f);
}

static void write_cost(doc *d, const study *s) {
    doc_heading(d, 2, "Cost");
    write_memory(d, s);
    doc_para(d, "Cost per instance, per 1M input and output tokens and per 1,000 requests of a "
                "workload, is in the first section (*Which instance*), estimated with the "
                "performance model; `cpulm loadtest --instance NAME` measures it on a running "
                "server.");
}

/* ---- the first section: which instance ---- */

static void answer_row(doc *d, const plan_est_row *r) {
    char c[11][48];
    snprintf(c[0], sizeof c[0], "%d", r->vcpu);
    num(c[1], sizeof c[1], r->usd_hour, 4, 0);
    num(c[2], sizeof c[2], r->tg, 0, 0);
    num(c[3], sizeof c[3], r->pp, 0, 0);
    num(c[4], sizeof c[4], r->ttft_s, 2, 0);
    if (r->why)
        snprintf(c[5], sizeof c[5], "0 (%s)", r->why);
    else
        snprintf(c[5], sizeof c[5], "%d", r->users);
    for (int k = 6; k < 10; k++)
        snprintf(c[k], sizeof c[k], "-");
    if (!r->why) {
        num(c[6], sizeof c[6], r->req_s, 2, 0);
        num(c[7], sizeof c[7], r->usd_m_in, 4, 0);
        num(c[8], sizeof c[8], r->usd_m_out, 4, 0);
        num(c[9], sizeof c[9], r->usd_k_req, 4, 0);
    }
    const char *row[] = {r->instance, c[0], c[1], c[2], c[3], c[4],
                         c[5],        c[6], c[7], c[8], c[9], "estimated"};
    doc_row(d, 12, row, 0);
}

/* A measured result (--measured): what the file says, "-" for what it does not. */
static void measured_row(doc *d, const cmp_entry *e) {
    char c[11][64], basis[48];
    for (int k = 0; k < 10; k++)
        snprintf(c[k], sizeof c[k], "-");
    const char *slash = strrchr(e->source, '/');
    snprintf(c[10], sizeof c[10], "%.63s",
             e->machine[0] ? e->machine
             : slash       ? slash + 1
                           : e->source);
    if (isfinite(e->tg)) num(c[2], sizeof c[2], e->tg, 0, 0);
    if (isfinite(e->pp)) num(c[3], sizeof c[3], e->pp, 0, 0);
    if (isfinite(e->ttft_p99_ms)) snprintf(c[4], sizeof c[4], "%.2f (p99)", e->ttft_p99_ms / 1000);
    if (isfinite(e->load))
        snprintf(c[5], sizeof c[5], e->open ? "- (at %g req/s%s)" : "%g%s", e->load,
                 e->slo_met ? "" : ", no objective met");
    if (isfinite(e->req_s)) num(c[6], sizeof c[6], e->req_s, 2, 0);
    if (isfinite(e->usd_m_in)) num(c[7], sizeof c[7], e->usd_m_in, 4, 0);
    if (isfinite(e->usd_m_out)) num(c[8], sizeof c[8], e->usd_m_out, 4, 0);
    if (isfinite(e->usd_k_req)) num(c[9], sizeof c[9], e->usd_k_req, 4, 0);
    snprintf(basis, sizeof basis, "measured (%s)", e->kind);
    const char *row[] = {c[10], "-", "-", c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9], basis};
    doc_row(d, 12, row, 0);
}

static int by_cost(const void *a, const void *b) {
    const plan_est_row *x = *(const plan_est_row *const *)a, *y = *(const plan_est_row *const *)b;
    return (x->usd_k_req > y->usd_k_req) - (x->usd_k_req < y->usd_k_req);
}

/* Cost per 1k requests against TTFT: the priced measured results, then the cheapest
 * estimated instances meeting the objective (5 points: the legend's room). */
static void answer_chart(doc *d, const study *s) {
    const plan_est_row *met[32];
    int n = 0, k = 0;
    for (int i = 0; i < s->n_est; i++)
        if (!s->est[i].why) met[n++] = &s->est[i];
    qsort(met, (size_t)n, sizeof *met, by_cost);
    svg_series ser[5];
    double xs[5], ys[5];
    char names[5][64];
    for (int i = 0; i < s->n_meas && k < 5; i++) {
        const cmp_entry *e = &s->meas[i];
        if (!isfinite(e->ttft_p99_ms) || !isfinite(e->usd_k_req)) continue;
        xs[k] = e->ttft_p99_ms / 1000, ys[k] = e->usd_k_req;
        snprintf(names[k], sizeof names[k], "%.40s (meas.)", e->machine[0] ? e->machine : "?");
        ser[k] = (svg_series){names[k], &xs[k], &ys[k], 1};
        k++;
    }
    for (int i = 0; i < n && k < 5; i++, k++) {
        xs[k] = met[i]->ttft_s;
        ys[k] = met[i]->usd_k_req;
        snprintf(names[k], sizeof names[k], "%.40s (est.)", met[i]->instance);
        ser[k] = (svg_series){names[k], &xs[k], &ys[k], 1};
    }
    if (!k) return;
    svg_chart c = {.title = "Cost vs latency",
                   .x_label = "TTFT (s: measured p99, estimated without queueing)",
                   .y_label = "USD per 1,000 requests",
                   .series = ser,
                   .n_series = k,
                   .note = "(meas.): measured with cpulm loadtest; (est.): estimated (performance "
                           "model), the cheapest instances meeting the objective"};
    doc_chart(d, "cost", &c, 0);
}

static void write_answer(doc *d, const study *s) {
    char h[160];
    snprintf(h, sizeof h, "Which instance: workload %s",
             s->est_workload[0] ? s->est_workload : "-");
    doc_heading(d, 2, h);
    if (!s->n_est && !s->n_meas) {
        doc_para(d, "%s.", s->est_desc);
        return;
    }
    if (s->n_meas)
        doc_para(d, "MEASURED rows (basis `measured`): the results given with `--measured`, as "
                    "their files report them (a loadtest's TTFT is its p99 at the load found, "
                    "users the concurrency meeting the objective). The other rows are estimated.");
    if (!s->n_est) doc_para(d, "%s.", s->est_desc);
    doc_para(d,
             "ESTIMATED for instances not at hand, from this model's per-token work and the "
             "performance model (docs/BENCHMARKING.md, *Estimates for machines not at hand*): "
             "%s. Measured on this machine: generation %.2f tokens/s (single stream, %d "
             "thread(s)), see the sections below. To measure an instance, run `cpulm serve` "
             "there and `cpulm loadtest --workload %s --slo ... --instance NAME`; `cpulm "
             "compare` puts the results next to these estimates.",
             s->est_desc, s->tg_single, s->tg_single_threads, s->est_workload);
    const char *hdr[] = {"instance",   "vCPU",        "USD/hour",         "tg t/s (1 user)",
                         "pp t/s",     "TTFT s",      "users within SLO", "req/s",
                         "$/1M input", "$/1M output", "$/1k requests",    "basis"};
    doc_row(d, 12, hdr, 1);
    for (int i = 0; i < s->n_meas; i++)
        measured_row(d, &s->meas[i]);
    for (int i = 0; i < s->n_est; i++)
        answer_row(d, &s->est[i]);
    doc_table_end(d);
    answer_chart(d, s);
}

/* ---- raw data ---- */

static int write_roof_json(const study *s, const char *dir) {
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    cpulm_json_writer w;
    cpulm_json_writer_init(&w, &b, 0, 2);
    cpulm_json_arr_begin(&w);
    for (int i = 0; i < s->n_roof; i++) {
        const bench_roof *r = &s->roof[i];
        const char *k[] = {"read_bytes_per_s",      "int8_ops_per_s", "f32_flops_per_s", "tg_ts",
                           "tg_bandwidth_fraction", "pp_ts",          "pp_int8_fraction"};
        double v[] = {r->bw, r->int8_ops, r->f32_flops, r->tg_ts, r->tg_frac, r->pp_ts, r->pp_frac};
        cpulm_json_obj_begin(&w);
        cpulm_json_kv_int(&w, "n_threads", r->n_threads);
        for (int j = 0; j < 7; j++) {
            cpulm_json_kv_double(&w, k[j], v[j]);
        }
        cpulm_json_obj_end(&w);
    }
    cpulm_json_arr_end(&w);
    cpulm_buf_putc(&b, '\n');
    int rc =
        cpulm_json_writer_status(&w) != CPULM_OK || write_file(dir, "roofline.json", b.data, b.len);
    cpulm_buf_release(&b);
    return rc ? -1 : 0;
}

static int write_results(const study *s, const char *dir) {
    const char *names[] = {"results.json", "results.csv"};
    bench_fmt fmts[] = {BENCH_FMT_JSON, BENCH_FMT_CSV};
    for (int i = 0; i < 2; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        FILE *f = fopen(path, "wb");
        int bad = !f || bench_write(f, fmts[i], &s->env, s->res, s->n_res);
        if (f && fclose(f) != 0) bad = 1;
        if (bad) {
            fprintf(stderr, "cpulm report: cannot write %s\n", path);
            return -1;
        }
    }
    return write_roof_json(s, dir);
}

static const char *html_head =
    "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
    "<title>cpulm performance report</title>\n<style>\n"
    "body{font-family:Helvetica,Arial,sans-serif;max-width:960px;margin:2em auto;color:#222}\n"
    "table{border-collapse:collapse;margin:1em 0}th,td{border:1px solid #ccc;padding:4px 8px;"
    "text-align:right}th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}\n"
    "figure{margin:1em 0}\n</style>\n</head>\n<body>\n";

int study_write(const study *s, const char *dir) {
    doc d = {.dir = dir};
    snprintf(d.ident, sizeof d.ident, "%.100s (%.100s) on %.80s, %.31s", s->env.model_type,
             strrchr(s->env.model_file, '/') ? strrchr(s->env.model_file, '/') + 1
                                             : s->env.model_file,
             s->env.cpu, s->n_res ? s->res[0].test_time : "");
    cpulm_buf_init(&d.md, 0);
    cpulm_buf_init(&d.html, 0);
    cpulm_buf_puts(&d.html, html_head);
    write_header(&d, s);
    write_answer(&d, s);
    write_threads(&d, s);
    write_pp_len(&d, s);
    write_parallel(&d, s);
    write_ttft(&d, s);
    write_depth(&d, s);
    write_roofline(&d, s);
    write_cost(&d, s);
    doc_heading(&d, 2, "Raw data");
    doc_para(&d, "results.json (llama-bench field names; read by `cpulm bench --compare`), "
                 "results.csv, roofline.json, and one SVG per chart, next to this report.");
    cpulm_buf_puts(&d.html, "</body>\n</html>\n");
    int rc = d.failed || cpulm_buf_status(&d.md) != CPULM_OK ||
             cpulm_buf_status(&d.html) != CPULM_OK ||
             write_file(dir, "report.md", d.md.data, d.md.len) ||
             write_file(dir, "report.html", d.html.data, d.html.len) || write_results(s, dir);
    cpulm_buf_release(&d.md);
    cpulm_buf_release(&d.html);
    return rc ? -1 : 0;
}
