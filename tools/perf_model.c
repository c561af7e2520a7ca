/* perf_model.c: roofline-share estimates for other machines (see perf_model.h). */
#define _GNU_SOURCE
#include "perf_model.h"
#include "textfile.h"

#include "tools_api.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The split of pp's time: per token, t = 1 / pp; the products took mm_frac of it at the
 * int8 peak P, so their efficiency is ops / (mm_frac t P); attention and the rest cost
 * their time x P per flop and per element. */
static void pp_split(const pm_measure *m, pm_eff *out) {
    const double peak = m->at.int8_gops * 1e9, t = m->pp > 0 ? 1 / m->pp : 0;
    const double rest = 1 - m->mm_frac - m->attn_frac;
    if (!(peak > 0 && t > 0 && m->mm_frac > 0 && m->attn_frac >= 0 && rest >= 0 &&
          m->io_per_token > 0 && (m->attn_flops_per_token > 0 || m->attn_frac == 0)))
        return;
    out->split = 1;
    out->pp_gemm = m->ops_per_token / (m->mm_frac * t * peak);
    out->attn_cost =
        m->attn_flops_per_token > 0 ? m->attn_frac * t * peak / m->attn_flops_per_token : 0;
    out->other_cost = rest * t * peak / m->io_per_token;
}

void pm_efficiency(const pm_measure *m, pm_eff *out) {
    memset(out, 0, sizeof *out);
    out->tg = m->at.bw_gbs > 0 ? m->tg * m->bytes_per_token / (m->at.bw_gbs * 1e9) : 0;
    out->pp = m->at.int8_gops > 0 ? m->pp * m->ops_per_token / (m->at.int8_gops * 1e9) : 0;
    pp_split(m, out);
}

double pm_pp_work_speed(const pm_eff *e, const pm_ceiling *c, const pm_pp_work *w) {
    if (!e->split || !(w->io > 0) || !(c->int8_gops > 0)) return pm_pp(e, c, w->ops);
    const double peak_s =
        w->ops / e->pp_gemm + e->attn_cost * w->attn_flops + e->other_cost * w->io;
    return peak_s > 0 ? c->int8_gops * 1e9 / peak_s : 0;
}

double pm_prompt_speed(const pm_eff *e, const pm_ceiling *c, const pm_model_cost *mc, double prompt,
                       double cached) {
    if (!(mc->ops_per_prompt_token > 0)) return 0;
    if (e->split && mc->io_per_token > 0) {
        double fresh = prompt > cached ? prompt - cached : 0;
        const pm_pp_work w = {mc->ops_per_prompt_token,
                              mc->attn_flops_per_key * (cached + (fresh + 1) / 2),
                              mc->io_per_token};
        return pm_pp_work_speed(e, c, &w);
    }
    double pp = pm_pp(e, c, mc->ops_per_token);
    return pp > 0 ? pp * mc->ops_per_token / mc->ops_per_prompt_token : 0;
}

double pm_tg(const pm_eff *e, const pm_ceiling *c, double bytes_per_token) {
    return bytes_per_token > 0 ? e->tg * c->bw_gbs * 1e9 / bytes_per_token : 0;
}

double pm_pp(const pm_eff *e, const pm_ceiling *c, double ops_per_token) {
    return ops_per_token > 0 ? e->pp * c->int8_gops * 1e9 / ops_per_token : 0;
}

/* ---- the instance table ---- */

static int parse_family(char *line, pm_family *f) {
    char *save = NULL, *v[10];
    int n = 0;
    for (char *t = strtok_r(line, "\t\r", &save); t && n < 10; t = strtok_r(NULL, "\t\r", &save))
        v[n++] = t;
    if (n != 9 || strlen(v[0]) >= sizeof f->family || strlen(v[1]) >= sizeof f->cpu ||
        strlen(v[7]) >= sizeof f->date || strlen(v[8]) >= sizeof f->source)
        return -1;
    char *e[5];
    errno = 0;
    double cpv = strtod(v[2], &e[0]), bw = strtod(v[4], &e[2]), ops = strtod(v[5], &e[3]);
    long cores = strtol(v[3], &e[1], 10);
    double ghz = strtod(v[6], &e[4]);
    for (int i = 0; i < 5; i++)
        if (*e[i]) return -1;
    if (errno || !(cpv > 0 && cpv <= 1) || cores < 1 || cores > 4096 || !(bw > 0) || !(ops > 0) ||
        !(ghz > 0 && ghz < 10))
        return -1;
    memset(f, 0, sizeof *f);
    snprintf(f->family, sizeof f->family, "%s", v[0]);
    snprintf(f->cpu, sizeof f->cpu, "%s", v[1]);
    snprintf(f->date, sizeof f->date, "%s", v[7]);
    snprintf(f->source, sizeof f->source, "%s", v[8]);
    f->cores_per_vcpu = cpv;
    f->socket_cores = (int)cores;
    f->socket_bw_gbs = bw;
    f->int8_ops_per_cycle = ops;
    f->ghz = ghz;
    return 0;
}

int pm_table_parse(const char *text, pm_table *out, char *err, size_t cap) {
    memset(out, 0, sizeof *out);
    int line_no = 0;
    for (const char *p = text; *p;) {
        size_t n = strcspn(p, "\n");
        char line[512];
        snprintf(line, sizeof line, "%.*s", (int)(n < sizeof line ? n : sizeof line - 1), p);
        p += n + (p[n] == '\n');
        line_no++;
        if (line[0] == '#' || strspn(line, " \t\r") == strlen(line) || !strncmp(line, "family", 6))
            continue;
        pm_family *nv = realloc(out->v, sizeof *nv * (size_t)(out->n + 1));
        if (!nv) {
            snprintf(err, cap, "out of memory");
            pm_table_release(out);
            return -1;
        }
        out->v = nv;
        if (parse_family(line, &out->v[out->n])) {
            snprintf(err, cap,
                     "line %d: want 'family cpu cores_per_vcpu socket_cores socket_bw_gbs "
                     "int8_ops_per_cycle ghz date source' (tab-separated)",
                     line_no);
            pm_table_release(out);
            return -1;
        }
        out->n++;
    }
    return 0;
}

int pm_table_load(const char *path, pm_table *out, char *err, size_t cap) {
    memset(out, 0, sizeof *out);
    char *text;
    if (textfile_read(path, 1 << 20, &text, NULL, err, cap)) return -1;
    char msg[384];
    int rc = pm_table_parse(text, out, msg, sizeof msg);
    if (rc) snprintf(err, cap, "%s: %s", path, msg);
    free(text);
    return rc;
}

void pm_table_release(pm_table *t) {
    free(t->v);
    memset(t, 0, sizeof *t);
}

const pm_family *pm_table_find(const pm_table *t, const char *instance) {
    size_t n = strcspn(instance, ".");
    for (int i = 0; i < t->n; i++)
        if (strlen(t->v[i].family) == n && !strncmp(t->v[i].family, instance, n)) return &t->v[i];
    return NULL;
}

void pm_family_ceiling(const pm_family *f, int vcpu, double bw_fraction, double peak_fraction,
                       pm_ceiling *out) {
    double cores = vcpu * f->cores_per_vcpu;
    double share = cores / f->socket_cores; /* > 1: a two-socket instance */
    out->bw_gbs = f->socket_bw_gbs * share * bw_fraction;
    out->int8_gops = cores * f->int8_ops_per_cycle * f->ghz * peak_fraction;
}

/* ---- serving ---- */

int pm_step_cost_make(const pm_eff *e, const pm_ceiling *c, const pm_model_cost *mc, double ctx,
                      double pp_tok, pm_step_cost *out) {
    memset(out, 0, sizeof *out);
    double bw = e->tg * c->bw_gbs * 1e9, peak = e->pp * c->int8_gops * 1e9;
    if (!(bw > 0) || !(peak > 0)) return -1;
    *out = (pm_step_cost){.fixed = mc->weight_bytes / bw,
                          .gen = mc->ops_per_token / peak,
                          .kv = ctx * mc->kv_bytes_per_ctx_token / bw,
                          .pre = pp_tok > 0 ? 1 / pp_tok : 0};
    return 0;
}

double pm_step_time(const pm_step_cost *k, double rows, double prompt) {
    double work = rows * k->gen + prompt * k->pre;
    return (work > k->fixed ? work : k->fixed) + rows * k->kv;
}

void pm_serve(const pm_eff *e, const pm_ceiling *c, const pm_model_cost *mc, double prompt_tokens,
              double cached_tokens, double output_tokens, int batch, pm_serving *out) {
    memset(out, 0, sizeof *out);
    if (batch < 1) batch = 1;
    double ctx = prompt_tokens + output_tokens / 2; /* mean context while decoding */
    pm_step_cost k;
    if (pm_step_cost_make(e, c, mc, ctx, 0, &k)) return;
    out->step_s = pm_step_time(&k, batch, 0);
    double pp_tok = pm_prompt_speed(e, c, mc, prompt_tokens, cached_tokens);
    double fresh = prompt_tokens > cached_tokens ? prompt_tokens - cached_tokens : 0;
    double prefill = pp_tok > 0 ? fresh / pp_tok : 0;
    double per_request = prefill + output_tokens * out->step_s / batch;
    if (per_request <= 0 || output_tokens <= 0) return;
    out->ttft_s = prefill + out->step_s;
    out->itl_s = out->step_s + batch * prefill / output_tokens;
    out->requests_per_s = 1.0 / per_request;
    out->in_tok_s = out->requests_per_s * prompt_tokens;
    out->out_tok_s = out->requests_per_s * output_tokens;
    out->prefill_share = prefill / per_request;
}

int pm_max_batch(const pm_eff *e, const pm_ceiling *c, const pm_model_cost *mc,
                 double prompt_tokens, double cached_tokens, double output_tokens, double itl_s,
                 int max_batch) {
    int best = 0;
    for (int b = 1; b <= max_batch; b++) { /* the users' gap grows with the batch */
        pm_serving s;
        pm_serve(e, c, mc, prompt_tokens, cached_tokens, output_tokens, b, &s);
        if (s.itl_s <= 0 || s.itl_s > itl_s) break;
        best = b;
    }
    return best;
}

/* ---- open loop ---- */

double pm_slo_rate(const pm_eff *e, const pm_ceiling *c, const pm_model_cost *mc,
                   const pm_workload *w, int max_batch, double ttft_s, double ttft_pct,
                   double itl_s, double itl_pct) {
    double lo = 0, hi = 1;
    for (int i = 0; i < 60; i++, hi *= 2) { /* an upper bound: a rate that misses */
        pm_open a, b;
        pm_open_loop(e, c, mc, w, max_batch, hi, ttft_pct, &a);
        pm_open_loop(e, c, mc, w, max_batch, hi, itl_pct, &b);
        if (!a.stable || (ttft_s > 0 && a.ttft_s > ttft_s) || (itl_s > 0 && b.itl_s > itl_s)) break;
        lo = hi;
    }
    /* met lo, missed hi; below 1e-6 req/s (a request a week or so) nothing is met */
    for (int i = 0; i < 200 && hi - lo > 1e-3 * hi && (lo > 0 || hi > 1e-6); i++) {
        double mid = (lo + hi) / 2;
        pm_open a, b;
        pm_open_loop(e, c, mc, w, max_batch, mid, ttft_pct, &a);
        pm_open_loop(e, c, mc, w, max_batch, mid, itl_pct, &b);
        int met =
            a.stable && (ttft_s <= 0 || a.ttft_s <= ttft_s) && (itl_s <= 0 || b.itl_s <= itl_s);
        *(met ? &lo : &hi) = mid;
    }
    return lo;
}

/* `cpulm roofline -m MODEL -o json`: its last row (the most threads given). */
static int from_roofline(const struct cpulm_json *o, pm_measure *m, char *err, size_t cap) {
    const cpulm_json *rows = cpulm_json_get(o, "rows");
    size_t n = cpulm_json_len(rows);
    const cpulm_json *r = n ? cpulm_json_at(rows, n - 1) : NULL;
    double bw = cpulm_json_num(cpulm_json_get(r, "read_bytes_per_s"), -1);
    double peak = cpulm_json_num(cpulm_json_get(r, "int8_ops_per_s"), -1);
    double frac = cpulm_json_num(cpulm_json_get(r, "pp_int8_fraction"), -1);
    m->tg = cpulm_json_num(cpulm_json_get(r, "tg_ts"), -1);
    m->pp = cpulm_json_num(cpulm_json_get(r, "pp_ts"), -1);
    m->bytes_per_token = cpulm_json_num(cpulm_json_get(o, "bytes_per_token"), -1);
    if (!(bw > 0 && peak > 0 && frac > 0 && m->tg > 0 && m->pp > 0 && m->bytes_per_token > 0)) {
        snprintf(err, cap, "a roofline result needs -m MODEL (rows with tg_ts and pp_ts)");
        return -1;
    }
    m->at.bw_gbs = bw / 1e9;
    m->at.int8_gops = peak / 1e9;
    m->ops_per_token = frac * peak / m->pp; /* what the roofline counted per prompt token */
    double params = cpulm_json_num(cpulm_json_get(o, "matmul_params"), 0);
    m->gen_ops_per_token = params > 0 ? 2 * params : 0;
    m->kv_bytes_per_token = cpulm_json_num(cpulm_json_get(o, "kv_bytes_per_token"), 0);
    m->attn_flops_per_token = cpulm_json_num(cpulm_json_get(o, "pp_attn_flops_per_token"), 0);
    m->io_per_token = cpulm_json_num(cpulm_json_get(o, "matmul_io_per_token"), 0);
    m->mm_frac = cpulm_json_num(cpulm_json_get(r, "pp_matmul_time_fraction"), 0);
    m->attn_frac = cpulm_json_num(cpulm_json_get(r, "pp_attn_time_fraction"), 0);
    return 0;
}

int pm_measure_from_json(const struct cpulm_json *o, pm_measure *m, char *err, size_t cap) {
    memset(m, 0, sizeof *m);
    if (cpulm_json_get(o, "rows")) return from_roofline(o, m, err, cap);
    static const char *keys[] = {"read_gbs", "int8_gops",       "tg_tps",
                                 "pp_tps",   "bytes_per_token", "ops_per_token"};
    double *dst[] = {&m->at.bw_gbs, &m->at.int8_gops,    &m->tg,
                     &m->pp,        &m->bytes_per_token, &m->ops_per_token};
    for (int i = 0; i < 6; i++) {
        *dst[i] = cpulm_json_num(cpulm_json_get(o, keys[i]), -1);
        if (!(*dst[i] > 0)) {
            snprintf(err, cap, "\"%s\" missing or not a positive number", keys[i]);
            return -1;
        }
    }
    m->gen_ops_per_token = cpulm_json_num(cpulm_json_get(o, "gen_ops_per_token"), 0);
    m->kv_bytes_per_token = cpulm_json_num(cpulm_json_get(o, "kv_bytes_per_token"), 0);
    return 0;
}
