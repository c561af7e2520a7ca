/* perf_model_sim.c: open-loop serving as cpulm serve schedules it (perf_model.h, #26).
 *
 * Why a simulation and not a formula: cpulm serve's steps carry one token of every decoding
 * request plus prompt tokens within a time budget (server/sched.h), so decode rows ride in
 * prompt steps and prompts crawl beside decoding streams (a short step fills the target, a
 * long step 1 in prefill_every). A closed formula that priced decode steps as if they ran
 * alone predicted a rag SLO rate 29-35% under the measured one on Zen 4
 * (docs/perf-log/2026-12-03-h26c.md). Here the scheduler's own budget functions
 * (cpulm_sched_target_step, cpulm_sched_prefill_budget, cpulm_sched_long_step) pick each
 * step's prompt tokens, and the step costs the calibrated model's time; nothing is fitted. */
#include "perf_model.h"

#include "tools_api.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define SIM_REQUESTS 4000 /* requests simulated, the first tenth not counted (warm-up) */
#define SIM_SEED     1    /* fixed: the model is deterministic */

typedef struct sim_req {
    double arrive, last; /* last: the time of its latest token (-1: none yet) */
    int32_t prompt, out; /* prompt tokens not yet evaluated, tokens still to generate */
    int counted;
} sim_req;

typedef struct sim_run {
    sim_req *r;
    int n;
    double *ttft, *gap;
    int n_ttft, n_gap, cap_gap;
    double busy, rows_time, span, gap_sum;
    int backlog; /* requests not admitted when the last one arrived */
} sim_run;

static double uniform01(uint64_t *s) { /* xorshift64*: (0, 1) */
    *s ^= *s >> 12, *s ^= *s << 25, *s ^= *s >> 27;
    return ((double)((*s * 2685821657736338717ull) >> 11) + 0.5) / 9007199254740992.0;
}

/* n Poisson arrivals at rate, fresh prompt lengths with the workload's cv (normal, at least
 * one token); the first tenth not counted. */
static void make_arrivals(sim_req *r, int n, const pm_workload *w, double rate, uint64_t seed) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    double t = 0, fresh = w->prompt > w->cached ? w->prompt - w->cached : 0;
    for (int i = 0; i < n; i++) {
        t += -log(uniform01(&s)) / rate;
        double z = sqrt(-2 * log(uniform01(&s))) * cos(6.283185307179586 * uniform01(&s));
        double p = floor(fresh * (1 + w->prompt_cv * z) + 0.5);
        r[i] = (sim_req){.arrive = t,
                         .last = -1,
                         .prompt = p < 1 ? 1 : (int32_t)p,
                         .out = w->output < 1 ? 1 : (int32_t)(w->output + 0.5),
                         .counted = i >= n / 10};
    }
}

static int push_gap(sim_run *x, double g) {
    if (x->n_gap == x->cap_gap) {
        int cap = x->cap_gap ? 2 * x->cap_gap : 4096;
        double *p = realloc(x->gap, sizeof *p * (size_t)cap);
        if (!p) return -1;
        x->gap = p, x->cap_gap = cap;
    }
    x->gap[x->n_gap++] = g;
    return 0;
}

/* Tokens of one step at time now for the admitted requests slot[0..n) (arrival order):
 * a decoding one gets a token, one whose prompt this step finished its first token. */
static int emit(sim_run *x, int *slot, int n, const int32_t *took, double now) {
    for (int i = 0; i < n; i++) {
        sim_req *q = &x->r[slot[i]];
        if (q->prompt > 0) continue;
        if (q->last >= 0) {
            if (q->counted && push_gap(x, now - q->last)) return -1;
            if (q->counted) x->gap_sum += now - q->last;
        } else if (took[i] > 0) {
            if (q->counted) x->ttft[x->n_ttft++] = now - q->arrive;
        } else {
            continue;
        }
        q->last = now, q->out--;
    }
    return 0;
}

/* Runs the scheduler over the arrivals x->r[0..n); max_batch slots. */
static int simulate(sim_run *x, const pm_step_cost *k, int max_batch) {
    const cpulm_sched_params sp = cpulm_sched_default_params();
    const double t1 = pm_step_time(k, 1, 0), tn = pm_step_time(k, max_batch, 0);
    /* the server's step model as its start-up calibration finds it: decode steps of 1 and
     * of all slots, and the prompt token's cost */
    cpulm_sched_model m = {.gen = max_batch > 1 ? (tn - t1) / (max_batch - 1) : 0, .pre = k->pre};
    m.fixed = t1 - m.gen;
    const double T = cpulm_sched_target_step(&m, 0, max_batch);
    int *slot = malloc(sizeof *slot * (size_t)max_batch);
    int32_t *took = malloc(sizeof *took * (size_t)max_batch);
    double now = 0, credit = 0;
    int next = 0, n_slot = 0, seen_last = 0, rc = slot && took ? 0 : -1;
    while (!rc && (next < x->n || n_slot > 0)) {
        while (next < x->n && n_slot < max_batch && x->r[next].arrive <= now)
            slot[n_slot++] = next++;
        if (!seen_last && x->r[x->n - 1].arrive <= now) /* the queue when arrivals end */
            seen_last = 1, x->backlog = x->n - next;
        if (n_slot == 0) { /* idle until the next arrival */
            now = x->r[next].arrive;
            continue;
        }
        int n_gen = 0, want = 0;
        for (int i = 0; i < n_slot; i++) {
            if (x->r[slot[i]].prompt > 0)
                want++;
            else
                n_gen++;
        }
        int32_t budget = sp.n_chunk;
        if (n_gen > 0) {
            int lng = cpulm_sched_long_step(&credit, n_gen, want > 0, sp.prefill_every, max_batch);
            int32_t floor = sp.n_chunk / 16 > 0 ? sp.n_chunk / 16 : 1;
            budget = cpulm_sched_prefill_budget(&m, lng ? CPULM_SCHED_LONG_STEP * T : T, n_gen,
                                                sp.n_chunk, lng ? floor : 0);
        }
        int n_pre = 0;
        for (int i = 0; i < n_slot; i++) {
            sim_req *q = &x->r[slot[i]];
            took[i] = q->prompt < budget - n_pre ? q->prompt : budget - n_pre;
            if (took[i] < 0) took[i] = 0;
            q->prompt -= took[i], n_pre += took[i];
        }
        double dt = pm_step_time(k, n_gen, n_pre);
        now += dt, x->busy += dt, x->rows_time += n_gen * dt;
        rc = emit(x, slot, n_slot, took, now);
        int kept = 0;
        for (int i = 0; i < n_slot; i++)
            if (x->r[slot[i]].out > 0) slot[kept++] = slot[i];
        n_slot = kept;
    }
    x->span = now;
    free(slot);
    free(took);
    return rc;
}

static int cmp_double(const void *a, const void *b) {
    double u = *(const double *)a, v = *(const double *)b;
    return (u > v) - (u < v);
}

static double percentile(double *v, int n, double pct) { /* nearest rank, as loadtest */
    if (n < 1) return 0;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    int i = (int)ceil(pct / 100 * n) - 1;
    return v[i < 0 ? 0 : i >= n ? n - 1 : i];
}

/* The steady state at rate: its percentiles into o. Returns 0 or -1 (out of memory). */
static int run_once(const pm_step_cost *k, const pm_workload *w, int max_batch, double rate,
                    double pct, pm_open *o) {
    sim_run x = {.r = malloc(sizeof(sim_req) * SIM_REQUESTS), .n = SIM_REQUESTS};
    x.ttft = malloc(sizeof(double) * SIM_REQUESTS);
    int rc = -1;
    if (x.r && x.ttft) {
        make_arrivals(x.r, x.n, w, rate, SIM_SEED);
        rc = simulate(&x, k, max_batch);
    }
    if (!rc)
        *o = (pm_open){
            .stable = x.backlog<SIM_REQUESTS / 50, .batch = x.span> 0 ? x.rows_time / x.span : 0,
            .util = x.span > 0 ? x.busy / x.span : 0,
            .gap_s = x.n_gap ? x.gap_sum / x.n_gap : 0,
            .ttft_s = percentile(x.ttft, x.n_ttft, pct),
            .itl_s = percentile(x.gap, x.n_gap, pct)};
    free(x.r), free(x.ttft), free(x.gap);
    return rc;
}

void pm_open_loop(const pm_eff *e, const pm_ceiling *c, const pm_model_cost *mc,
                  const pm_workload *w, int max_batch, double rate, double pct, pm_open *out) {
    memset(out, 0, sizeof *out);
    const double pp_tok = pm_prompt_speed(e, c, mc, w->prompt, w->cached);
    pm_step_cost k;
    if (!(rate > 0) || !(pp_tok > 0) || w->output <= 0 || max_batch < 1) return;
    if (pm_step_cost_make(e, c, mc, w->prompt + w->output / 2, pp_tok, &k)) return;
    run_once(&k, w, max_batch, rate, pct, out);
}
