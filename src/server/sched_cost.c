/* sched_cost.c: the scheduler's step-cost model (sched.h's cpulm_sched_model): the step
 * time it targets, the prompt tokens that fit in it, the long-step credit, and the model's
 * refinement from measured steps. Pure arithmetic. */
#include "server/sched.h"

/* ---- latency-aware prefill budget ---- */

double cpulm_sched_target_step(const cpulm_sched_model *m, double max_step_ms, int32_t n_parallel) {
    if (max_step_ms > 0) return max_step_ms * 1e-3;
    if (max_step_ms < 0) return 0;
    return m->fixed + m->gen * n_parallel; /* an undisturbed decode step of all slots */
}

int32_t cpulm_sched_prefill_budget(const cpulm_sched_model *m, double target_s, int32_t n_gen,
                                   int32_t n_chunk, int32_t floor) {
    if (n_gen == 0 || target_s <= 0) return n_chunk;
    double room = (target_s - m->fixed - m->gen * n_gen) / m->pre;
    if (floor > n_chunk) floor = n_chunk;
    if (!(room < n_chunk)) return n_chunk;
    return room > floor ? (int32_t)room : floor;
}

int cpulm_sched_long_step(double *credit, int32_t n_gen, int want, int32_t every, int32_t cap) {
    if (n_gen <= 0) return 0;
    *credit += (double)n_gen / every;
    if (*credit > cap) *credit = cap; /* a long idle spell does not buy a burst of long steps */
    if (!want || *credit < n_gen - 1e-9) return 0;
    *credit -= n_gen;
    if (*credit < 0) *credit = 0;
    return 1;
}

/* Decode-only steps refine the fixed part (the per-sequence cost stays the calibrated
 * one: in serving nearly all such steps have the same width, which cannot separate the
 * two) unless a step took less than the per-sequence part alone: then that part was
 * overestimated (one calibration step slowed by other processes made every target 40x too
 * long on a loaded machine) and moves toward this step's time per sequence. Steps with
 * prompt tokens refine the per-prompt-token part given the other two, so the model
 * predicts the steps the budget is chosen for. Exponentially weighted, positive. Only
 * steps whose prompt work is at least half of them teach the per-token cost (long steps,
 * prompt-only steps, short steps beside few streams): the error of the decode part, divided
 * by the few prompt tokens of a short step beside many streams, drove the per-token cost 3x
 * too low on a loaded machine, and long steps then ran 5x the median gap. */
void cpulm_sched_model_observe(cpulm_sched_model *m, int32_t n_gen, int32_t n_pre, double dt) {
    const double w = 0.2;
    if (n_pre == 0) {
        double a = dt - m->gen * n_gen;
        if (a < 0 && n_gen > 0) {
            double g = dt / n_gen;
            m->gen = (1 - w) * m->gen + w * (g > 1e-7 ? g : 1e-7);
        }
        m->fixed = (1 - w) * m->fixed + w * (a > 0 ? a : 0);
    } else {
        double dec = m->fixed + m->gen * n_gen, c = (dt - dec) / n_pre;
        if (dt >= 2 * dec) /* the prompt work took at least half of the step */
            m->pre = (1 - w) * m->pre + w * (c > 1e-7 ? c : 1e-7);
    }
}

/* ---- speculation (sched.h) ---- */

double cpulm_sched_draft_cost(const cpulm_sched_model *m, int32_t n_gen) {
    double T = m->fixed + m->gen * n_gen;
    return n_gen > 0 && T > 0 ? m->gen * n_gen / T : 1.0;
}

int cpulm_sched_spec_open(double c) {
    return c < CPULM_SCHED_SPEC_COST_MAX;
}
