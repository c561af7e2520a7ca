/* compare.c: result files to `cpulm compare` rows (see compare.h). */
#include "compare.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tools_api.h"

static double num(const cpulm_json *o, const char *k) {
    const cpulm_json *v = cpulm_json_get(o, k);
    return v && v->type == CPULM_JSON_NUMBER ? cpulm_json_num(v, NAN) : NAN;
}

static double p99(const cpulm_json *o, const char *k) {
    return num(cpulm_json_get(o, k), "p99");
}

void cmp_entry_init(cmp_entry *e, const char *source) {
    memset(e, 0, sizeof *e);
    snprintf(e->source, sizeof e->source, "%s", source);
    snprintf(e->basis, sizeof e->basis, "measured");
    e->load = e->req_s = e->ttft_p99_ms = e->itl_p99_ms = NAN;
    e->usd_m_in = e->usd_m_out = e->usd_k_req = e->pp = e->tg = NAN;
}

/* The level a loadtest file answers with: the SLO search's best, else the highest load
 * without failures, else the last level. */
static const cpulm_json *pick_level(const cpulm_json *root, cmp_entry *e) {
    const cpulm_json *slo = cpulm_json_get(root, "slo");
    const cpulm_json *best = cpulm_json_get(slo, "best");
    if (best && best->type == CPULM_JSON_OBJECT) {
        e->slo_met = 1;
        snprintf(e->note, sizeof e->note, "SLO %.80s",
                 cpulm_json_str(cpulm_json_get(slo, "objective")));
        return best;
    }
    if (slo) snprintf(e->note, sizeof e->note, "no load met the SLO");
    const cpulm_json *levels = cpulm_json_get(root, "levels"), *pick = NULL;
    size_t n = cpulm_json_len(levels);
    for (size_t i = 0; i < n; i++) {
        const cpulm_json *l = cpulm_json_at(levels, i);
        if (num(l, "errors") == 0 && num(l, "ok") > 0) pick = l;
    }
    if (!pick && n) {
        pick = cpulm_json_at(levels, n - 1);
        if (!slo) snprintf(e->note, sizeof e->note, "every level had failures");
    }
    return pick;
}

static int from_loadtest(const cpulm_json *root, cmp_entry *e) {
    snprintf(e->kind, sizeof e->kind, "loadtest");
    const char *m = cpulm_json_str(cpulm_json_get(root, "machine"));
    const char *w = cpulm_json_str(cpulm_json_get(root, "workload"));
    if (m) snprintf(e->machine, sizeof e->machine, "%.*s", (int)strcspn(m, " ,("), m);
    if (w) snprintf(e->workload, sizeof e->workload, "%s", w);
    const cpulm_json *l = pick_level(root, e);
    if (!l) return -1;
    e->open = cpulm_json_get(l, "rate") != NULL;
    e->load = num(l, e->open ? "rate" : "concurrency");
    e->req_s = num(l, "requests_per_s");
    e->ttft_p99_ms = p99(l, "ttft_ms");
    e->itl_p99_ms = p99(l, "itl_ms");
    const cpulm_json *c = cpulm_json_get(l, "cost");
    e->usd_m_in = num(c, "usd_per_m_input_tokens");
    e->usd_m_out = num(c, "usd_per_m_output_tokens");
    e->usd_k_req = num(c, "usd_per_k_requests");
    return 0;
}

/* llama-bench / cpulm bench rows: the fastest pp and tg at the most threads. */
static int from_bench(const cpulm_json *arr, cmp_entry *e) {
    snprintf(e->kind, sizeof e->kind, "bench");
    double threads_pp = -1, threads_tg = -1;
    for (size_t i = 0; i < cpulm_json_len(arr); i++) {
        const cpulm_json *r = cpulm_json_at(arr, i);
        double np = num(r, "n_prompt"), ng = num(r, "n_gen"), t = num(r, "n_threads");
        double ts = num(r, "avg_ts");
        if (isnan(ts) || isnan(np) || isnan(ng)) continue;
        if (t != t) t = 0;
        if (np > 0 && ng == 0 && t >= threads_pp) threads_pp = t, e->pp = ts;
        if (ng > 0 && np == 0 && t >= threads_tg) threads_tg = t, e->tg = ts;
        const char *cpu = cpulm_json_str(cpulm_json_get(r, "cpu_info"));
        if (cpu && !e->machine[0]) snprintf(e->machine, sizeof e->machine, "%s", cpu);
    }
    if (isnan(e->pp) && isnan(e->tg)) return -1;
    snprintf(e->note, sizeof e->note, "%g threads",
             threads_tg > threads_pp ? threads_tg : threads_pp);
    return 0;
}

/* vLLM benchmark_serving's --save-result file. */
static int from_vllm(const cpulm_json *root, cmp_entry *e) {
    snprintf(e->kind, sizeof e->kind, "vllm");
    e->req_s = num(root, "request_throughput");
    e->ttft_p99_ms = num(root, "p99_ttft_ms");
    e->itl_p99_ms = num(root, "p99_itl_ms");
    e->load = num(root, "max_concurrency");
    if (isnan(e->load)) {
        e->load = num(root, "request_rate");
        e->open = 1;
    }
    const char *b = cpulm_json_str(cpulm_json_get(root, "backend"));
    if (b) snprintf(e->note, sizeof e->note, "backend %s", b);
    return isnan(e->req_s) ? -1 : 0;
}

/* GuideLLM: {"benchmarks": [{"metrics": {METRIC: {"successful": {"mean", "percentiles":
 * {"p99"}}}}}]}; one row per file: its benchmark with the highest request rate. */
static double succ(const cpulm_json *metrics, const char *k, const char *stat) {
    const cpulm_json *s = cpulm_json_get(cpulm_json_get(metrics, k), "successful");
    return strcmp(stat, "p99") ? num(s, stat) : p99(s, "percentiles");
}

static int from_guidellm(const cpulm_json *root, cmp_entry *e) {
    snprintf(e->kind, sizeof e->kind, "guidellm");
    const cpulm_json *all = cpulm_json_get(root, "benchmarks"), *best = NULL;
    size_t n = cpulm_json_len(all), pick = 0;
    for (size_t i = 0; i < n; i++) {
        const cpulm_json *m = cpulm_json_get(cpulm_json_at(all, i), "metrics");
        double r = succ(m, "requests_per_second", "mean");
        if (!isnan(r) && (!best || r > e->req_s)) best = m, e->req_s = r, pick = i;
    }
    if (!best) return -1;
    e->ttft_p99_ms = succ(best, "time_to_first_token_ms", "p99");
    e->itl_p99_ms = succ(best, "inter_token_latency_ms", "p99");
    const cpulm_json *err = cpulm_json_get(cpulm_json_get(best, "request_totals"), "errored");
    double failed =
        err && err->type == CPULM_JSON_OBJECT ? num(err, "count") : cpulm_json_num(err, NAN);
    snprintf(e->note, sizeof e->note, "benchmark %zu of %zu (highest req/s)%s", pick + 1, n,
             failed > 0 ? ", with errored requests" : "");
    return 0;
}

int cmp_entry_parse(const char *text, size_t n, const char *source, cmp_entry *e, char *err,
                    size_t cap) {
    cmp_entry_init(e, source);
    cpulm_json_doc *d = NULL;
    if (cpulm_json_parse(text, n, NULL, &d, NULL, NULL) != CPULM_OK) {
        snprintf(err, cap, "not JSON");
        return -1;
    }
    const cpulm_json *r = cpulm_json_root(d);
    int rc = -1;
    if (r->type == CPULM_JSON_ARRAY)
        rc = from_bench(r, e);
    else if (cpulm_json_get(r, "levels"))
        rc = from_loadtest(r, e);
    else if (cpulm_json_get(r, "request_throughput"))
        rc = from_vllm(r, e);
    else if (cpulm_json_get(r, "benchmarks"))
        rc = from_guidellm(r, e);
    cpulm_json_free(d);
    if (rc)
        snprintf(err, cap,
                 "not a loadtest, bench/llama-bench, vLLM benchmark_serving or GuideLLM result");
    return rc;
}
