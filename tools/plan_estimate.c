/* plan_estimate.c: `cpulm plan --workload` (see plan_estimate.h). */
#define _GNU_SOURCE
#include "plan_estimate.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "loadtest_stats.h"
#include "workload.h"

typedef struct est_ctx {
    const plan_est_opts *o;
    const plan_shape *s;
    uint64_t wbytes;
    const pm_model_cost *mc;
    workload w;
    double prompt, output, prefix;
    int32_t slot_ctx; /* tokens each served sequence holds: the longest request */
    pm_eff eff;
    char calib[1024], inst_path[4096];
    pm_table tb;
    double ttft_limit, itl_limit;
    char slo[256];
} est_ctx;

static void scale_workload(const plan_est_opts *o, workload *w) {
    workload_scale(w, o->prompt_scale > 0 ? o->prompt_scale : 1,
                   o->output_scale > 0 ? o->output_scale : 1);
}

void plan_model_cost_of_shape(const plan_shape *s, const plan_weights *w, pm_model_cost *out) {
    double embd = (double)s->hp.n_vocab * s->hp.n_embd, params = (double)w->n_params;
    double per_param = params > 0 ? (double)w->bytes / params : 0;
    /* untied: the token embedding is looked up (one row), not streamed or multiplied */
    double matmul = s->tied ? params : params - embd;
    out->weight_bytes = s->tied ? (double)w->bytes : (double)w->bytes - embd * per_param;
    out->ops_per_token = 2 * matmul;
    out->ops_per_prompt_token = 2 * (matmul - embd); /* the output matrix: last token only */
    out->kv_bytes_per_ctx_token = (double)plan_kv_bytes_per_token(s, CPULM_KV_F16);
    plan_shape_prompt_counts(s, &out->io_per_token, &out->attn_flops_per_key);
}

int plan_read_measure(const char *path, pm_measure *m, char *desc, size_t cap) {
    size_t n = 0;
    char *text = cli_read_file(path, &n), err[256];
    cpulm_json_doc *d = NULL;
    int rc = -1;
    if (!text || cpulm_json_parse(text, n, NULL, &d, NULL, NULL) != CPULM_OK)
        snprintf(desc, cap, "%.3000s: not readable JSON", path);
    else if (pm_measure_from_json(cpulm_json_root(d), m, err, sizeof err))
        snprintf(desc, cap, "%.3000s: %s", path, err);
    else {
        const cpulm_json *r = cpulm_json_root(d);
        const char *mach = cpulm_json_str(cpulm_json_get(r, "machine"));
        const char *date = cpulm_json_str(cpulm_json_get(r, "date"));
        if (!mach) mach = cpulm_json_str(cpulm_json_get(r, "cpu_info")); /* roofline output */
        snprintf(desc, cap, "%.3000s (%.200s, %.40s)", path, mach ? mach : "machine not named",
                 date ? date : "undated");
        rc = 0;
    }
    cpulm_json_free(d);
    free(text);
    return rc;
}

static int read_calibration(est_ctx *x) {
    char path[4096], desc[4096];
    if (plan_data_locate("calibration.json", x->o->calibration, NULL, path, sizeof path)) {
        fprintf(stderr, "cpulm: no calibration file (--calibration FILE)\n");
        return 2;
    }
    pm_measure m;
    if (plan_read_measure(path, &m, desc, sizeof desc)) {
        fprintf(stderr, "cpulm: %s\n", desc);
        return 2;
    }
    pm_efficiency(&m, &x->eff);
    snprintf(x->calib, sizeof x->calib,
             "%.700s: generation at %.1f%% of its read bandwidth, prompts at %.1f%% of its int8 "
             "peak%s",
             desc, x->eff.tg * 100, x->eff.pp * 100,
             x->eff.split && x->mc->io_per_token > 0
                 ? " (a prompt token's time in three parts, products, attention at the "
                   "workload's prompt length and the rest, each carried from its measured "
                   "share)"
                 : "");
    return x->eff.tg > 0 && x->eff.pp > 0 ? 0 : 2;
}

/* The workload's means and the spread of its fresh (not shared) prompt tokens. */
static void workload_pm(const workload *w, pm_workload *out) {
    double sum = 0, sq = 0, p, o, pre;
    enum { N = 4000 };
    for (int i = 0; i < N; i++) {
        wl_request r;
        workload_request(w, i, &r);
        double f = r.prompt_tokens - r.prefix_tokens;
        sum += f, sq += f * f;
    }
    workload_means(w, N, &p, &o, &pre);
    double mean = sum / N, var = sq / N - mean * mean;
    *out = (pm_workload){.prompt = p,
                         .cached = pre,
                         .output = o,
                         .prompt_cv = mean > 0 && var > 0 ? sqrt(var) / mean : 0};
}

/* The rate a `cpulm loadtest --rate ... --slo ... -o json` search found: slo.best.rate and
 * slo.lowest_missed (0: none), and tok, the prompt tokens the server counted per prompt token
 * the workload asked for (its tokenizer's words; 1 when not known). Returns 0, or -1 with the
 * reason in err. */
static int measured_rate(const char *path, double *best, double *missed, double *tok, char *err,
                         size_t cap) {
    size_t n = 0;
    char *text = cli_read_file(path, &n);
    cpulm_json_doc *d = NULL;
    int rc = -1;
    if (!text || cpulm_json_parse(text, n, NULL, &d, NULL, NULL) != CPULM_OK) {
        snprintf(err, cap, "%.400s: not readable JSON", path);
    } else {
        const cpulm_json *slo = cpulm_json_get(cpulm_json_root(d), "slo");
        const char *axis = cpulm_json_str(cpulm_json_get(slo, "axis"));
        *best = cpulm_json_num(cpulm_json_get(cpulm_json_get(slo, "best"), "rate"), -1);
        *missed = cpulm_json_num(cpulm_json_get(slo, "lowest_missed"), 0);
        const cpulm_json *b = cpulm_json_get(slo, "best");
        double got = cpulm_json_num(cpulm_json_get(b, "mean_prompt_tokens"), 0);
        double asked = cpulm_json_num(cpulm_json_get(b, "target_prompt_tokens"), 0);
        *tok = got > 0 && asked > 0 ? got / asked : 1;
        if (!axis || strcmp(axis, "rate") || !(*best > 0))
            snprintf(err, cap,
                     "%.400s: not an SLO search over rates with an answer (`cpulm loadtest "
                     "--rate R --slo ... -o json`)",
                     path);
        else
            rc = 0;
    }
    cpulm_json_free(d);
    free(text);
    return rc;
}

/* The SLO-rate part of --check: the model's rate on B for the workload and objective. */
static int check_slo_rate(const pm_eff *e, const pm_measure *b, const plan_est_opts *est,
                          const char *measured_slo) {
    workload w;
    lt_slo slo;
    char err[512];
    const char *spec = est->slo ? est->slo : "ttft_p99=2s,itl_p99=200ms";
    if (workload_load(est->workload, &w, err, sizeof err) ||
        lt_slo_parse(spec, &slo, err, sizeof err)) {
        fprintf(stderr, "cpulm plan: %s\n", err);
        return 2;
    }
    double lim[2] = {0, 0}, pct[2] = {99, 99}; /* ttft, token gap */
    for (int i = 0; i < slo.n; i++) {
        int k = slo.metric[i] == LT_M_TTFT ? 0 : slo.metric[i] == LT_M_E2E ? -1 : 1;
        if (k >= 0) lim[k] = slo.limit_s[i], pct[k] = slo.pct[i];
    }
    scale_workload(est, &w);
    double best = 0, missed = 0, tok = 1;
    if (measured_slo && measured_rate(measured_slo, &best, &missed, &tok, err, sizeof err)) {
        fprintf(stderr, "cpulm plan: %s\n", err);
        return 2;
    }
    pm_workload pw;
    workload_pm(&w, &pw);
    pw.prompt *= tok, pw.cached *= tok; /* the prompt tokens the measured server counted */
    pm_model_cost mc = {.weight_bytes = b->bytes_per_token,
                        .kv_bytes_per_ctx_token = b->kv_bytes_per_token,
                        .ops_per_token =
                            b->gen_ops_per_token > 0 ? b->gen_ops_per_token : b->ops_per_token,
                        .ops_per_prompt_token = b->ops_per_token};
    double rate = pm_slo_rate(e, &b->at, &mc, &pw, est->max_batch, lim[0], pct[0], lim[1], pct[1]);
    pm_open at;
    pm_open_loop(e, &b->at, &mc, &pw, est->max_batch, rate, pct[0], &at);
    char desc[256];
    lt_slo_describe(&slo, desc, sizeof desc);
    printf("\nSLO rate: workload %s (means %.0f prompt tokens, %.0f of them a shared prefix, "
           "%.0f output; fresh prompt cv %.2f), objective %s, at most %d sequences at once "
           "(--max-batch: the server's slots)\n\n",
           w.name, pw.prompt, pw.cached, pw.output, pw.prompt_cv, desc, est->max_batch);
    if (tok != 1)
        printf("(prompt lengths x %.3f: the tokens the measured server counted per word the "
               "workload sent)\n",
               tok);
    printf("predicted: %.3f req/s (Poisson arrivals; there %.1f requests decoding, machine %.0f%% "
           "busy, TTFT p%g %.2f s, mean token gap %.1f ms)\n",
           rate, at.batch, at.util * 100, pct[0], at.ttft_s, at.gap_s * 1000);
    if (!measured_slo) return 0;
    printf("\n| | measured req/s | predicted req/s | error |\n| --- | ---: | ---: | ---: |\n");
    printf("| SLO rate | %.3f | %.3f | %+.1f%% |\n", best, rate, (rate / best - 1) * 100);
    if (missed > 0)
        printf("\nthe measured search bracketed it between %.3f (met) and %.3f (missed): the "
               "prediction is %s\n",
               best, missed,
               rate < best     ? "below the bracket"
               : rate > missed ? "above the bracket"
                               : "inside it");
    return 0;
}

int plan_check(const char *calibration, const char *measured, const plan_est_opts *est,
               const char *measured_slo) {
    pm_measure a, b;
    char da[4096], db[4096];
    int bad_a = plan_read_measure(calibration, &a, da, sizeof da);
    if (bad_a || plan_read_measure(measured, &b, db, sizeof db)) {
        fprintf(stderr, "cpulm plan: %s\n", bad_a ? da : db);
        return 2;
    }
    pm_eff e;
    pm_efficiency(&a, &e);
    const pm_pp_work wb = {b.ops_per_token, b.attn_flops_per_token, b.io_per_token};
    double tg = pm_tg(&e, &b.at, b.bytes_per_token), pp = pm_pp_work_speed(&e, &b.at, &wb);
    printf("model check: efficiencies of %s (generation %.1f%% of %.2f GB/s, prompts %.1f%% of "
           "%.1f Gop/s) applied to the ceilings and model of %s (%.2f GB/s, %.1f Gop/s; %.3g "
           "bytes and %.3g int8 ops per token)\n\n",
           da, e.tg * 100, a.at.bw_gbs, e.pp * 100, a.at.int8_gops, db, b.at.bw_gbs, b.at.int8_gops,
           b.bytes_per_token, b.ops_per_token);
    if (e.split && wb.io > 0)
        printf("prompt time split (calibration): matrix products %.1f%% (at %.1f%% of the int8 "
               "peak in their time), attention %.1f%%, the rest %.1f%%; per token the checked "
               "model has %.2fx the int8 ops, %.2fx the attention flops and %.2fx the "
               "activation elements of the products' inputs and outputs\n\n",
               a.mm_frac * 100, e.pp_gemm * 100, a.attn_frac * 100,
               (1 - a.mm_frac - a.attn_frac) * 100, b.ops_per_token / a.ops_per_token,
               a.attn_flops_per_token > 0 ? b.attn_flops_per_token / a.attn_flops_per_token : 0,
               b.io_per_token / a.io_per_token);
    printf("| | measured t/s | predicted t/s | error |\n| --- | ---: | ---: | ---: |\n");
    printf("| generation | %.2f | %.2f | %+.1f%% |\n", b.tg, tg, (tg / b.tg - 1) * 100);
    printf("| prompt | %.2f | %.2f | %+.1f%% |\n", b.pp, pp, (pp / b.pp - 1) * 100);
    if (measured_slo && !(est && est->workload)) {
        fprintf(stderr, "cpulm plan: --measured needs --workload (the requests it measured)\n");
        return 2;
    }
    return est && est->workload ? check_slo_rate(&e, &b, est, measured_slo) : 0;
}

/* The objective: ttft and itl (or tpot) limits; percentiles are not modelled (no queue). */
static int read_slo(est_ctx *x) {
    lt_slo slo;
    char err[256];
    const char *spec = x->o->slo ? x->o->slo : "ttft_p99=2s,itl_p99=200ms";
    if (lt_slo_parse(spec, &slo, err, sizeof err)) {
        fprintf(stderr, "cpulm plan: --slo: %s\n", err);
        return 2;
    }
    x->ttft_limit = x->itl_limit = 1e9;
    for (int i = 0; i < slo.n; i++) {
        if (slo.metric[i] == LT_M_TTFT) x->ttft_limit = slo.limit_s[i];
        if (slo.metric[i] == LT_M_ITL || slo.metric[i] == LT_M_TPOT)
            x->itl_limit = slo.limit_s[i] < x->itl_limit ? slo.limit_s[i] : x->itl_limit;
    }
    lt_slo_describe(&slo, x->slo, sizeof x->slo);
    return 0;
}

static int load_inputs(est_ctx *x) {
    char err[512];
    if (workload_load(x->o->workload, &x->w, err, sizeof err)) {
        fprintf(stderr, "cpulm plan: %s\n", err);
        return 2;
    }
    scale_workload(x->o, &x->w);
    workload_means(&x->w, 4000, &x->prompt, &x->output, &x->prefix);
    int64_t slot =
        (int64_t)x->w.prompt.max + (int64_t)(x->w.turns - 1) * x->w.turn_growth + x->w.output.max;
    x->slot_ctx = (int32_t)(slot > (1 << 24) ? 1 << 24 : slot);
    if (plan_data_locate("instances.tsv", x->o->instances, NULL, x->inst_path,
                         sizeof x->inst_path) ||
        pm_table_load(x->inst_path, &x->tb, err, sizeof err)) {
        fprintf(stderr, "cpulm plan: %s\n",
                x->o->instances ? err : "no instance table (data/instances.tsv, --instances)");
        return 2;
    }
    int rc = 0;
    if (x->o->eff) {
        x->eff = *x->o->eff;
        snprintf(x->calib, sizeof x->calib,
                 "%.700s: generation at %.1f%% of the read bandwidth, "
                 "prompts at %.1f%% of the int8 peak",
                 x->o->eff_desc ? x->o->eff_desc : "given", x->eff.tg * 100, x->eff.pp * 100);
    } else {
        rc = read_calibration(x);
    }
    return rc ? rc : read_slo(x);
}

/* Most sequences of slot_ctx tokens the instance's memory holds (0: not even one). */
static int memory_batch(const est_ctx *x, const plan_instance *in) {
    uint64_t usable = plan_usable_bytes(in);
    int lo = 0, hi = x->o->max_batch;
    while (lo < hi) { /* memory grows with the batch: bisect */
        int mid = (lo + hi + 1) / 2;
        plan_memory m;
        plan_memory_of(x->s, x->wbytes, x->slot_ctx, mid, CPULM_KV_F16, 512, in->vcpu, &m);
        if (m.total <= usable)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

static void compute_row(const est_ctx *x, const plan_instance *in, const pm_family *f,
                        plan_est_row *r) {
    const plan_est_opts *o = x->o;
    memset(r, 0, sizeof *r);
    snprintf(r->instance, sizeof r->instance, "%s", in->name);
    r->vcpu = in->vcpu;
    r->usd_hour = in->usd_hour;
    pm_ceiling c;
    pm_family_ceiling(f, in->vcpu, o->bw_fraction, o->peak_fraction, &c);
    r->bw_gbs = c.bw_gbs;
    r->tg = pm_tg(&x->eff, &c, x->mc->weight_bytes);
    r->pp = pm_prompt_speed(&x->eff, &c, x->mc, x->prompt, x->prefix);
    int b_itl = pm_max_batch(&x->eff, &c, x->mc, x->prompt, x->prefix, x->output, x->itl_limit,
                             o->max_batch);
    int b_mem = memory_batch(x, in), b = b_itl < b_mem ? b_itl : b_mem;
    pm_serving sv;
    pm_serve(&x->eff, &c, x->mc, x->prompt, x->prefix, x->output, 1, &sv);
    r->why = !b_mem                      ? "model does not fit"
             : sv.ttft_s > x->ttft_limit ? "TTFT limit missed"
             : !b_itl                    ? "inter-token limit missed"
                                         : NULL;
    for (; !r->why && b > 1; b--) { /* a bigger batch lengthens the step a new prompt waits for */
        pm_serve(&x->eff, &c, x->mc, x->prompt, x->prefix, x->output, b, &sv);
        if (sv.ttft_s <= x->ttft_limit) break;
    }
    r->ttft_s = sv.ttft_s;
    r->itl_s = sv.itl_s;
    if (r->why) return;
    /* headroom: the steady state at b users is the edge; run at o->utilization of it */
    int u = (int)(b * o->utilization);
    r->users = u > 0 ? u : 1;
    r->memory_bound = b == b_mem;
    r->req_s = sv.requests_per_s * o->utilization;
    lt_cost cost;
    lt_cost_of(in->usd_hour, r->req_s * x->prompt, r->req_s * x->output, r->req_s, sv.prefill_share,
               &cost);
    r->usd_m_in = cost.usd_per_m_input;
    r->usd_m_out = cost.usd_per_m_output;
    r->usd_k_req = cost.usd_per_k_requests;
}

static void print_row(const plan_est_row *r) {
    printf("| %s | %d | %.4f | %.1f | %.0f | %.0f | %.2f s |", r->instance, r->vcpu, r->usd_hour,
           r->bw_gbs, r->tg, r->pp, r->ttft_s);
    if (r->why)
        printf(" 0 (%s) | - | - | - | - | estimated |\n", r->why);
    else
        printf(" %d%s | %.2f | %.4f | %.4f | %.4f | estimated |\n", r->users,
               r->memory_bound ? " (memory)" : "", r->req_s, r->usd_m_in, r->usd_m_out,
               r->usd_k_req);
}

static void print_needed(const plan_est_opts *o, const char *name, int users, double req_s) {
    if (o->users > 0 && users > 0)
        printf("%s: %d instance(s) for %g concurrent users (estimated)\n", name,
               lt_instances_needed(o->users, users), o->users);
    if (o->target_rate > 0 && req_s > 0)
        printf("%s: %d instance(s) for %g req/s (estimated)\n", name,
               lt_instances_needed(o->target_rate, req_s), o->target_rate);
}

/* The instance per family: the smallest CPU row with at least o->vcpu vCPUs (or the largest
 * there is). */
static const plan_instance *family_pick(const est_ctx *x, const plan_prices *p, const char *fam) {
    const plan_instance *best = NULL, *largest = NULL;
    size_t n = strlen(fam);
    for (int i = 0; i < p->n; i++) {
        const plan_instance *in = &p->v[i];
        if (in->gpu[0] || strncmp(in->name, fam, n) || in->name[n] != '.') continue;
        if (!largest || in->vcpu > largest->vcpu) largest = in;
        if (in->vcpu >= x->o->vcpu && (!best || in->vcpu < best->vcpu)) best = in;
    }
    return best ? best : largest;
}

static void print_head(const est_ctx *x) {
    char desc[512];
    workload_describe(&x->w, desc, sizeof desc);
    printf("ESTIMATED serving (performance model, not a measurement): %s; means %.0f prompt / "
           "%.0f output tokens, %.0f of the prompt a prefix the server's prompt cache holds; each "
           "served sequence holds %d tokens\n\n",
           desc, x->prompt, x->output, x->prefix, x->slot_ctx);
    printf("- objective: %s (TTFT without queueing; users = sequences decoded together whose "
           "step stays within the inter-token limit, and that memory holds)\n",
           x->slo);
    printf("- efficiencies from %s\n", x->calib);
    printf("- ceilings from %s: theoretical bandwidth (fair share of the socket) x %.2f, int8 "
           "peak x %.2f; users and req/s at %.0f%% of the most the objective allows (headroom for "
           "bursts); cost splits the hour by prefill share\n\n",
           x->inst_path, x->o->bw_fraction, x->o->peak_fraction, x->o->utilization * 100);
    printf("| instance | vCPU | USD/hour | read GB/s | tg t/s (1 user) | pp t/s | TTFT | users "
           "within SLO | req/s | $/1M input | $/1M output | $/1k requests | basis |\n"
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | "
           "--- |\n");
}

/* The instances to estimate: --instance, else one per family. Returns n, or -2 (message
 * printed). */
static int collect(est_ctx *x, const plan_prices *prices, plan_est_row *rows, int cap) {
    const plan_est_opts *o = x->o;
    if (o->instance) {
        const plan_instance *in = plan_prices_find(prices, o->instance);
        const pm_family *f = pm_table_find(&x->tb, o->instance);
        if (!in || !f) {
            fprintf(stderr, "cpulm: no %s for '%s' (%s)\n", in ? "instance family" : "price",
                    o->instance, in ? x->inst_path : "the price table");
            return -2;
        }
        compute_row(x, in, f, &rows[0]);
        return 1;
    }
    int n = 0;
    for (int i = 0; i < x->tb.n && n < cap; i++) {
        const plan_instance *in = family_pick(x, prices, x->tb.v[i].family);
        if (in) compute_row(x, in, &x->tb.v[i], &rows[n++]);
    }
    return n;
}

int plan_estimate_rows(const plan_est_opts *o, const plan_shape *s, uint64_t wbytes,
                       const pm_model_cost *mc, const plan_prices *prices, plan_est_row *rows,
                       int cap, char *workload_name, size_t name_cap) {
    return plan_estimate_rows_desc(o, s, wbytes, mc, prices, rows, cap, workload_name, name_cap,
                                   NULL, 0);
}

int plan_estimate_rows_desc(const plan_est_opts *o, const plan_shape *s, uint64_t wbytes,
                            const pm_model_cost *mc, const plan_prices *prices, plan_est_row *rows,
                            int cap, char *workload_name, size_t name_cap, char *desc,
                            size_t desc_cap) {
    est_ctx *x = calloc(1, sizeof *x);
    if (!x) return -1;
    *x = (est_ctx){.o = o, .s = s, .wbytes = wbytes, .mc = mc};
    int rc = load_inputs(x), n = rc ? -rc : collect(x, prices, rows, cap);
    snprintf(workload_name, name_cap, "%s", x->w.name);
    if (desc && !rc) {
        char wl[512];
        workload_describe(&x->w, wl, sizeof wl);
        snprintf(desc, desc_cap,
                 "%s. Objective %s (TTFT without queueing). Efficiencies: %s. Ceilings: %s "
                 "(theoretical bandwidth, fair share of the socket, x %.2f; int8 peak x %.2f); "
                 "users and req/s at %.0f%% of what the objective allows",
                 wl, x->slo, x->calib, x->inst_path, o->bw_fraction, o->peak_fraction,
                 o->utilization * 100);
    }
    pm_table_release(&x->tb);
    free(x);
    return n;
}

int plan_estimate(const plan_est_opts *o, const plan_shape *s, uint64_t wbytes,
                  const pm_model_cost *mc, const plan_prices *prices) {
    est_ctx *x = calloc(1, sizeof *x);
    plan_est_row *rows = calloc(64, sizeof *rows);
    if (!x || !rows) {
        free(x);
        free(rows);
        return 1;
    }
    *x = (est_ctx){.o = o, .s = s, .wbytes = wbytes, .mc = mc};
    int rc = load_inputs(x), n = rc ? 0 : collect(x, prices, rows, 64);
    if (n < 0) rc = -n;
    if (!rc) print_head(x);
    for (int i = 0; !rc && i < n; i++)
        print_row(&rows[i]);
    if (!rc && (o->users > 0 || o->target_rate > 0)) printf("\n");
    for (int i = 0; !rc && i < n; i++)
        print_needed(o, rows[i].instance, rows[i].users, rows[i].req_s);
    if (!rc)
        printf("\nEstimates carry the model's error (checked against recorded measurements: "
               "within 25%% across thread counts and model sizes on one machine; across CPU "
               "families it is unverified until measured there: run `cpulm loadtest` on the "
               "instance)\n");
    pm_table_release(&x->tb);
    free(x);
    free(rows);
    return rc;
}
