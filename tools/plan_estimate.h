/* plan_estimate.h: `cpulm plan --workload W`: for instances not at hand, the estimated
 * generation and prompt speed, time to first token, concurrent users within a latency
 * objective, requests/s, and cost per 1M input / output tokens and per 1k requests, from the
 * performance model (perf_model.h), the instance table (data/instances.tsv), a calibration
 * (data/calibration.json or --calibration) and the price table. Every figure it prints is
 * labelled "estimated". */
#ifndef CPULM_TOOLS_PLAN_ESTIMATE_H
#define CPULM_TOOLS_PLAN_ESTIMATE_H

#include "bench_plan.h"
#include "perf_model.h"

typedef struct plan_est_opts {
    const char *workload, *instance, *calibration, *instances, *slo;
    double bw_fraction, peak_fraction, utilization;
    int vcpu;      /* instance size per family when no --instance (default 16) */
    int max_batch; /* most sequences served at once (default 256) */
    double users, target_rate;
    double prompt_scale, output_scale; /* the workload's lengths scaled (0: as they are) */
    const pm_eff *eff;    /* efficiencies measured by the caller (report); NULL: calibration */
    const char *eff_desc; /* where eff came from */
} plan_est_opts;

/* Prints the estimate. mc: the model's per-token costs; s, wbytes: for memory. Returns 0,
 * EXIT_USAGE (2) for a bad workload/objective/table (message printed), 1 otherwise. */
int plan_estimate(const plan_est_opts *o, const plan_shape *s, uint64_t wbytes,
                  const pm_model_cost *mc, const plan_prices *prices);

/* One estimated instance. */
typedef struct plan_est_row {
    char instance[40];
    int vcpu;
    double usd_hour, bw_gbs, tg, pp, ttft_s, itl_s;
    int users, memory_bound; /* users within the objective (0: missed, why says how) */
    double req_s, usd_m_in, usd_m_out, usd_k_req;
    const char *why; /* NULL when the objective is met; static text */
} plan_est_row;

/* The rows plan_estimate prints, without printing (for `cpulm compare`). Returns how many,
 * or -(exit code) after a message. workload_name: the workload's name. */
int plan_estimate_rows(const plan_est_opts *o, const plan_shape *s, uint64_t wbytes,
                       const pm_model_cost *mc, const plan_prices *prices, plan_est_row *rows,
                       int cap, char *workload_name, size_t name_cap);

/* The same, and a one-paragraph description of the basis (workload, objective,
 * efficiencies, ceilings) in desc. */
int plan_estimate_rows_desc(const plan_est_opts *o, const plan_shape *s, uint64_t wbytes,
                            const pm_model_cost *mc, const plan_prices *prices, plan_est_row *rows,
                            int cap, char *workload_name, size_t name_cap, char *desc,
                            size_t desc_cap);

/* Reads a measurement file (pm_measure_from_json's formats); desc: "PATH (machine, date)"
 * or the error. Returns 0 or -1. */
int plan_read_measure(const char *path, pm_measure *m, char *desc, size_t cap);

/* `cpulm plan --calibration A --check B`: the model calibrated on A predicts B's generation
 * and prompt speed from B's ceilings and model; prints both with the error. With
 * est->workload also the highest Poisson rate meeting est->slo on B (pm_slo_rate; a server
 * of est->max_batch slots), and with measured_slo (a `cpulm loadtest --rate R --slo ... -o
 * json` result on B's machine and thread count) the error against the rate that search
 * found. Returns 0 or 2. */
int plan_check(const char *calibration, const char *measured, const plan_est_opts *est,
               const char *measured_slo);

/* Per-token costs of a shape without a file (weights from plan_weights_of). */
void plan_model_cost_of_shape(const plan_shape *s, const plan_weights *w, pm_model_cost *out);

#endif
