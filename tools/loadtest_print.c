/* loadtest_print.c: `cpulm loadtest` tables and JSON (see loadtest_print.h). */
#include "loadtest_print.h"

#include <string.h>

void lt_label(const lt_row *r, char *out, size_t cap) {
    if (r->open)
        snprintf(out, cap, "r=%.3g/s", r->load);
    else
        snprintf(out, cap, "%4d", (int)r->load);
}

static void pcts(char *out, size_t cap, const lt_samples *s) {
    if (!s->n)
        snprintf(out, cap, "-");
    else
        snprintf(out, cap, "%.1f / %.1f / %.1f", lt_pct(s, 50) * 1000, lt_pct(s, 90) * 1000,
                 lt_pct(s, 99) * 1000);
}

void lt_md_header(int has_slo, int has_host) {
    printf(
        "| load | ok | failed | TTFT p50/p90/p99 ms | ITL p50/p90/p99 ms | TPOT p50/p90/p99 ms "
        "| E2E p50/p90/p99 ms | input t/s | output t/s | req/s | goodput req/s |%s tokens in/out "
        "(asked) |%s\n",
        has_host ? " steal % / CPUs server, loadtest, other |" : "", has_slo ? " SLO |" : "");
    printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|%s%s\n",
           has_host ? "---:|" : "", has_slo ? "---|" : "");
}

/* "1.2% / 1.85, 0.21, 0.03" ("-" for a server not watched) */
static void md_host(const lt_host_use *u) {
    if (!u->ok) {
        printf(" - |");
        return;
    }
    printf(" %.1f%% / ", u->steal_share * 100);
    if (u->has_server)
        printf("%.2f", u->server_cpus);
    else
        printf("-");
    printf(", %.2f, %.2f |", u->self_cpus, u->other_cpus);
}

void lt_md_row(const lt_row *r, int has_slo, int has_host) {
    const lt_stats *s = &r->out.st;
    char load[32];
    lt_label(r, load, sizeof load);
    printf("| %s | %5d | %5d |", load, s->n_ok, s->n_fail);
    if (lt_stats_mostly_failed(s)) {
        printf(" FAILED: %d of %d requests failed, no percentiles | - | - | - |", s->n_fail,
               s->n_fail + s->n_ok);
    } else {
        char a[64], b[64], c[64], d[64];
        pcts(a, sizeof a, &s->ttft);
        pcts(b, sizeof b, &s->itl);
        pcts(c, sizeof c, &s->tpot);
        pcts(d, sizeof d, &s->e2e);
        printf(" %s%s | %s | %s | %s |", s->n_fail ? "(ok only) " : "", a, b, c, d);
    }
    printf(" %.1f | %.1f | %.2f | %.2f |", (double)s->in_tokens / s->wall,
           (double)s->out_tokens / s->wall, s->n_ok / s->wall, s->n_good / s->wall);
    if (has_host) md_host(&r->host);
    if (s->n_ok) /* what the server counted, per successful request, against the workload */
        printf(" %.0f/%.0f (%.0f/%.0f) |", (double)s->in_tokens / s->n_ok,
               (double)s->out_tokens / s->n_ok, r->out.target_prompt, r->out.target_output);
    else
        printf(" - |");
    if (has_slo)
        printf(" %s%s |",
               r->discarded   ? "DISTURBED, not counted: "
               : r->disturbed ? "disturbed: "
                              : "",
               r->slo_checked ? (r->slo_met ? "met" : r->slo_why) : "-");
    printf("\n");
}

void lt_md_disturbed(const lt_row *rows, int n) {
    int any = 0;
    for (int i = 0; i < n; i++) {
        if (!rows[i].disturbed) continue;
        char load[32];
        lt_label(&rows[i], load, sizeof load);
        if (!any++) printf("\n");
        printf("\n%s: the machine was DISTURBED (%s): %s", load, rows[i].disturb_why,
               rows[i].discarded ? "not counted, the trial was run again"
                                 : "counted all the same (--disturb-retries used up)");
        const lt_calm *c = &rows[i].calm;
        if (rows[i].waited && c->calm)
            printf(", after %.0f s of waiting (steal %.1f%% over the last window)", c->waited_s,
                   c->last_steal * 100);
        else if (rows[i].waited)
            printf(", after %.0f s of waiting, the steal not passed (--disturb-wait; last window "
                   "%s)",
                   c->waited_s, c->last_steal >= 0 ? "over the limit" : "not measured");
    }
    if (any) printf("\n");
}

void lt_md_failures(const lt_row *rows, int n) {
    int any = 0;
    for (int i = 0; i < n; i++) {
        const lt_stats *s = &rows[i].out.st;
        char load[32];
        lt_label(&rows[i], load, sizeof load);
        if (rows[i].out.late && !any++) printf("\n");
        if (rows[i].out.late)
            printf("\n%s: %d requests left the client more than 50 ms late (all connections "
                   "busy); their wait is in their latencies",
                   load, rows[i].out.late);
        if (!s->n_fail) continue;
        if (!any++) printf("\n");
        printf("\n%s: %d of %d requests FAILED (", load, s->n_fail, s->n_fail + s->n_ok);
        for (int k = 0, m = 0; k < LT_FAIL_N; k++)
            if (s->fails[k])
                printf("%s%s x%d", m++ ? ", " : "", lt_fail_name((lt_fail)k), s->fails[k]);
        printf("; first: %s): %s", rows[i].out.first_error,
               lt_stats_mostly_failed(s) ? "most requests failed, no percentiles computed"
                                         : "its percentiles cover the successful requests only");
    }
    if (any) printf("\n");
}

static void cost_of(const lt_row *r, double usd_hour, lt_cost *c);

static void json_pcts(cpulm_json_writer *w, const char *key, const lt_samples *s, int show) {
    cpulm_json_key(w, key);
    if (!s->n || !show) {
        cpulm_json_write_null(w);
        return;
    }
    cpulm_json_obj_begin(w);
    const double ps[3] = {50, 90, 99};
    const char *names[3] = {"p50", "p90", "p99"};
    for (int i = 0; i < 3; i++) {
        cpulm_json_kv_double(w, names[i], lt_pct(s, ps[i]) * 1000);
    }
    cpulm_json_obj_end(w);
}

static void json_failures(cpulm_json_writer *w, const lt_stats *s) {
    static const char *keys[] = {"rejected", "http_error", "timeout", "broken"};
    cpulm_json_kv_obj_begin(w, "failures");
    for (int k = 0; k < LT_FAIL_N; k++) {
        cpulm_json_kv_int(w, keys[k], s->fails[k]);
    }
    cpulm_json_obj_end(w);
}

/* "host": the trial's steal share and CPU use (null where /proc was not read), "disturbed",
 * "disturbed_why" and "counted" (false: run again, its verdict did not count). */
static void json_host(cpulm_json_writer *w, const lt_row *r) {
    const lt_host_use *u = &r->host;
    cpulm_json_key(w, "host");
    if (!u->ok) {
        cpulm_json_write_null(w);
    } else {
        cpulm_json_obj_begin(w);
        cpulm_json_kv_double(w, "wall_s", u->wall_s);
        cpulm_json_kv_double(w, "steal_share", u->steal_share);
        cpulm_json_kv_double(w, "busy_cpus", u->busy_cpus);
        cpulm_json_key(w, "server_cpus");
        if (u->has_server)
            cpulm_json_write_double(w, u->server_cpus);
        else
            cpulm_json_write_null(w);
        cpulm_json_kv_double(w, "loadtest_cpus", u->self_cpus);
        cpulm_json_kv_double(w, "other_cpus", u->other_cpus);
        cpulm_json_obj_end(w);
    }
    cpulm_json_kv_bool(w, "disturbed", r->disturbed);
    cpulm_json_key(w, "disturbed_why");
    if (r->disturbed)
        cpulm_json_write_str(w, r->disturb_why);
    else
        cpulm_json_write_null(w);
    cpulm_json_kv_bool(w, "counted", !r->discarded);
    cpulm_json_key(w, "disturb_wait"); /* before the rerun (--disturb-wait) */
    if (!r->waited) {
        cpulm_json_write_null(w);
        return;
    }
    cpulm_json_obj_begin(w);
    cpulm_json_kv_double(w, "waited_s", r->calm.waited_s);
    cpulm_json_kv_bool(w, "calm", r->calm.calm);
    cpulm_json_kv_double(w, "last_steal_share", r->calm.last_steal);
    cpulm_json_obj_end(w);
}

void lt_json_row(cpulm_json_writer *w, const lt_row *r, double usd_hour) {
    const lt_stats *s = &r->out.st;
    int show = !lt_stats_mostly_failed(s);
    cpulm_json_obj_begin(w);
    cpulm_json_key(w, r->open ? "rate" : "concurrency");
    if (r->open)
        cpulm_json_write_double(w, r->load);
    else
        cpulm_json_write_int(w, (int64_t)r->load);
    if (r->open) {
        cpulm_json_kv_str(w, "arrivals", r->poisson ? "poisson" : "constant");
    }
    cpulm_json_kv_int(w, "ok", s->n_ok);
    cpulm_json_kv_int(w, "errors", s->n_fail);
    json_failures(w, s);
    cpulm_json_kv_bool(w, "mostly_failed", !show);
    json_pcts(w, "ttft_ms", &s->ttft, show);
    json_pcts(w, "itl_ms", &s->itl, show);
    json_pcts(w, "tpot_ms", &s->tpot, show);
    json_pcts(w, "latency_ms", &s->e2e, show);
    cpulm_json_kv_double(w, "input_tokens_per_s", (double)s->in_tokens / s->wall);
    cpulm_json_kv_double(w, "output_tokens_per_s", (double)s->out_tokens / s->wall);
    cpulm_json_kv_double(w, "requests_per_s", s->n_ok / s->wall);
    cpulm_json_kv_double(w, "goodput_requests_per_s", s->n_good / s->wall);
    cpulm_json_kv_double(w, "mean_prompt_tokens", s->n_ok ? (double)s->in_tokens / s->n_ok : 0);
    cpulm_json_kv_double(w, "target_prompt_tokens", r->out.target_prompt);
    cpulm_json_kv_double(w, "mean_output_tokens", s->n_ok ? (double)s->out_tokens / s->n_ok : 0);
    cpulm_json_kv_double(w, "target_output_tokens", r->out.target_output);
    cpulm_json_kv_double(w, "prefill_share", lt_prefill_share(s));
    cpulm_json_kv_double(w, "wall_s", s->wall);
    cpulm_json_kv_int(w, "late_sends", r->out.late);
    /* successes in the level's first seconds */
    cpulm_json_kv_int(w, "warmup_not_counted", r->out.skipped);
    if (r->open) cpulm_json_kv_double(w, "arrivals_realised_per_s", r->out.offered_rate);
    cpulm_json_kv_int(w, "search", r->search + 1); /* which --repeat search ran it, from 1 */
    cpulm_json_key(w, "first_error");
    if (r->out.first_error[0])
        cpulm_json_write_str(w, r->out.first_error);
    else
        cpulm_json_write_null(w);
    json_host(w, r);
    if (r->slo_checked) {
        cpulm_json_kv_bool(w, "slo_met", r->slo_met);
        cpulm_json_kv_str(w, "slo_verdict", r->slo_met ? "met" : r->slo_why);
    }
    if (usd_hour > 0 && show && s->n_ok) {
        cpulm_json_key(w, "cost");
        lt_json_cost(w, r, usd_hour);
    }
    cpulm_json_obj_end(w);
}

double lt_prefill_share(const lt_stats *s) {
    return s->sum_e2e > 0 ? s->sum_ttft / s->sum_e2e : 0;
}

static void cost_of(const lt_row *r, double usd_hour, lt_cost *c) {
    const lt_stats *s = &r->out.st;
    lt_cost_of(usd_hour, (double)s->in_tokens / s->wall, (double)s->out_tokens / s->wall,
               s->n_ok / s->wall, lt_prefill_share(s), c);
}

void lt_md_cost(const lt_row *const *rows, int n, double usd_hour, const char *machine) {
    printf("\ncost on %s at %.4f USD/hour, measured load (the hour's price split between input "
           "and output tokens by the share of request time before the first token):\n\n",
           machine, usd_hour);
    printf("| load | req/s | input t/s | output t/s | prefill share | $/1M input | $/1M output "
           "| $/1M tokens (blended) | $/1k requests |\n|---:|---:|---:|---:|---:|---:|---:|---:|"
           "---:|\n");
    for (int i = 0; i < n; i++) {
        const lt_stats *s = &rows[i]->out.st;
        if (lt_stats_mostly_failed(s) || !s->n_ok) continue;
        lt_cost c;
        cost_of(rows[i], usd_hour, &c);
        char load[32];
        lt_label(rows[i], load, sizeof load);
        printf("| %s | %.2f | %.1f | %.1f | %.0f%% | %.4f | %.4f | %.4f | %.4f |\n", load,
               s->n_ok / s->wall, (double)s->in_tokens / s->wall, (double)s->out_tokens / s->wall,
               lt_prefill_share(s) * 100, c.usd_per_m_input, c.usd_per_m_output,
               c.usd_per_m_blended, c.usd_per_k_requests);
    }
}

void lt_json_cost(cpulm_json_writer *w, const lt_row *r, double usd_hour) {
    lt_cost c;
    cost_of(r, usd_hour, &c);
    cpulm_json_obj_begin(w);
    cpulm_json_kv_double(w, "usd_per_hour", usd_hour);
    cpulm_json_kv_double(w, "usd_per_m_input_tokens", c.usd_per_m_input);
    cpulm_json_kv_double(w, "usd_per_m_output_tokens", c.usd_per_m_output);
    cpulm_json_kv_double(w, "usd_per_m_tokens_blended", c.usd_per_m_blended);
    cpulm_json_kv_double(w, "usd_per_k_requests", c.usd_per_k_requests);
    cpulm_json_obj_end(w);
}
