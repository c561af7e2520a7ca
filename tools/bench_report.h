/* bench_report.h: the data of a `cpulm report` study and the writer that turns it into
 * report.md, report.html (same content, charts inline), one SVG per chart and the raw data
 * (results.json, results.csv, roofline.json). cmd_report.c runs the study. */
#ifndef CPULM_TOOLS_BENCH_REPORT_H
#define CPULM_TOOLS_BENCH_REPORT_H

#include "bench.h"
#include "bench_plan.h"
#include "compare.h"
#include "plan_estimate.h"

/* STUDY_DEPTH holds pairs: pp then tg at each depth, in order of depth. */
enum { STUDY_THREADS, STUDY_PP_LEN, STUDY_PARALLEL, STUDY_TTFT, STUDY_DEPTH, STUDY_N_SECTIONS };

typedef struct study {
    int quick;
    int depths_given; /* the depth list came from --depths */
    double seconds;   /* wall time of the whole study */
    bench_env env;
    cpulm_model_info info;
    bench_result *res; /* owned; every bench result of every section, in order */
    int n_res;
    int lo[STUDY_N_SECTIONS], hi[STUDY_N_SECTIONS]; /* res[lo..hi) of each section */
    bench_roof roof[BENCH_MAX_LIST];                /* per thread count of the sweep */
    int n_roof;
    size_t roof_buf_bytes;
    uint64_t bytes_per_token;
    int64_t matmul_params;
    /* sizing and cost */
    plan_shape shape;
    int32_t plan_ctx, plan_parallel;
    plan_memory mem;
    plan_prices prices; /* owned; n = 0 when no table was found */
    char prices_path[512];
    double tg_single, tg_batched; /* tokens/s used for the cost: best of the sweeps */
    int tg_single_threads, tg_batched_npl;
    /* the first section: estimated serving of a workload per instance family */
    plan_est_row est[32];
    int n_est; /* 0: no estimate (est_desc says why) */
    char est_workload[64];
    char est_desc[2048];
    /* measured results put next to the estimates (--measured: loadtest, bench, vLLM JSON) */
    cmp_entry meas[16];
    int n_meas;
} study;

/* Writes every output file into dir (which must exist). Returns 0, or -1 with a message
 * printed on stderr. */
int study_write(const study *s, const char *dir);

#endif
