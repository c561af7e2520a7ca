/* cmd_report.c: `cpulm report`: runs the standard study on one model (thread sweep,
 * prompt-length sweep, parallel sequences, TTFT curve, speed vs depth, roofline, sizing and
 * cost) and
 * writes DIR/report.md, DIR/report.html, the SVG charts and the raw data (bench_report.c).
 * --quick bounds the work: small sweeps and depths up to 4096 (the 4096-token fill is most
 * of a quick run's time on a 1B model). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench_report.h"
#include "commands.h"
#include "common.h"
#include "options.h"

typedef struct report_opts {
    const char *model, *dir, *prices, *workload, *slo;
    const char *measured[16]; /* --measured FILE, repeated */
    int vcpu, n_measured;
    int quick, reps, n_ctx;
    bench_list threads, depths; /* depths: --depths, else the plan's list */
} report_opts;

/* The sizes of each part of the study. */
typedef struct study_plan {
    int pp, tg, reps, ttft_reps;
    bench_list pp_len, npl, ttft, depth;
    int npp, ntg;
    size_t buf_bytes;
    double roof_s;
} study_plan;

static void report_usage(FILE *f) {
    fprintf(f, "usage: cpulm report -m MODEL -o DIR [--quick] [options]\n");
    cli_help(f, "report");
}

/* The current flag's value (a list) into l, in its row's range (options.def). */
static int list_opt(const cli_val *v, bench_list *l) {
    char err[128];
    if (!bench_list_parse(v->s, (int32_t)v->opt->lo, (int32_t)v->opt->hi, l, err, sizeof err))
        return 1;
    fprintf(stderr, "cpulm report: bad value '%s' for %s (%s)\n", v->s, v->flag, err);
    return 0;
}

/* One row of the table; 1 = ok. */
static int report_opt(cli *c, int id, const cli_val *v, report_opts *o) {
    switch (id) {
    case OPT_MODEL: o->model = v->s; break;
    case OPT_OUT_FILE: o->dir = v->s; break;
    case OPT_QUICK: o->quick = 1; break;
    case OPT_REPS: o->reps = (int)v->i; break;
    case OPT_CTX: return cli_at_least(c, v, 1) && (o->n_ctx = (int)v->i) > 0;
    case OPT_DEPTHS: return list_opt(v, &o->depths);
    case OPT_PRICES: o->prices = v->s; break;
    case OPT_WORKLOAD: o->workload = v->s; break;
    case OPT_SLO: o->slo = v->s; break;
    case OPT_VCPU: o->vcpu = (int)v->i; break;
    case OPT_MEASURED:
        if (o->n_measured == 16) {
            fprintf(stderr, "cpulm report: at most 16 --measured files\n");
            return 0;
        }
        o->measured[o->n_measured++] = v->s;
        break;
    case OPT_THREADS: return list_opt(v, &o->threads);
    default: cli_unhandled(c, v); return 0;
    }
    return 1;
}

static int report_arg(cli *c, int id, const cli_val *v, void *ctx) {
    return report_opt(c, id, v, ctx) ? 0 : EXIT_USAGE;
}

static int parse_report(int argc, char **argv, report_opts *o) {
    cli c = {.cmd = "report", .argc = argc, .argv = argv};
    *o = (report_opts){.n_ctx = 4096, .workload = "rag", .vcpu = 16};
    if (cli_parse(&c, report_usage, report_arg, o)) return EXIT_USAGE;
    if (!o->dir) {
        fprintf(stderr, "cpulm report: -o DIR is required\n");
        return EXIT_USAGE;
    }
    if (!o->threads.n) bench_default_threads(&o->threads);
    return -1;
}

static void set_list(bench_list *l, const int32_t *v, int n) {
    l->n = n;
    memcpy(l->v, v, sizeof(int32_t) * (size_t)n);
}

static void make_plan(const report_opts *o, study_plan *p) {
    if (o->quick) {
        static const int32_t pp[] = {16, 32, 64}, npl[] = {1, 2, 4}, tt[] = {16, 32, 64},
                             dp[] = {0, 1024, 4096};
        *p = (study_plan){.pp = 32,
                          .tg = 16,
                          .reps = 2,
                          .ttft_reps = 3,
                          .npp = 16,
                          .ntg = 8,
                          .buf_bytes = 128u << 20,
                          .roof_s = 0.15};
        set_list(&p->pp_len, pp, 3);
        set_list(&p->npl, npl, 3);
        set_list(&p->ttft, tt, 3);
        set_list(&p->depth, dp, 3);
    } else {
        static const int32_t pp[] = {32, 64, 128, 256, 512}, npl[] = {1, 2, 4, 8, 16},
                             tt[] = {32, 64, 128, 256, 512}, dp[] = {0, 1024, 4096, 16384, 32768};
        *p = (study_plan){.pp = 256,
                          .tg = 64,
                          .reps = 3,
                          .ttft_reps = 5,
                          .npp = 128,
                          .ntg = 32,
                          .buf_bytes = 512u << 20,
                          .roof_s = 0.5};
        set_list(&p->pp_len, pp, 5);
        set_list(&p->npl, npl, 5);
        set_list(&p->ttft, tt, 5);
        set_list(&p->depth, dp, 5);
    }
    if (o->reps) p->reps = p->ttft_reps = o->reps;
    if (o->depths.n) p->depth = o->depths;
}

typedef struct runner_state {
    study *s;
    bench_runner br;
    const char *section;
    int show;
} runner_state;

static void progress(void *user, const bench_test *t, int rep, int n_reps) {
    const runner_state *rs = user;
    char name[64];
    bench_test_name(t, name, sizeof name);
    fprintf(stderr, "\rcpulm report: %s: %s, %d threads: %s %d/%d\033[K", rs->section, name,
            t->n_threads, rep < 0 ? "warm-up" : "repetition", rep < 0 ? 1 : rep + 1,
            rep < 0 ? 1 : n_reps);
    fflush(stderr);
}

/* Runs one test and appends its result. */
static int run_one(runner_state *rs, const bench_test *t, int reps) {
    study *s = rs->s;
    bench_result *nr = realloc(s->res, sizeof *nr * (size_t)(s->n_res + 1));
    char err[256];
    if (!nr) return -1;
    s->res = nr;
    if (bench_run_test(&rs->br, t, reps, &s->res[s->n_res], err, sizeof err)) {
        fprintf(stderr, "%scpulm report: %s: %s\n", rs->show ? "\r\033[K" : "", rs->section, err);
        return -1;
    }
    s->n_res++;
    return 0;
}

/* pp and tg at one depth: one fill serves both (bench_run_depth); appends two results. */
static int run_depth(runner_state *rs, const bench_test *base, const study_plan *p, int32_t d) {
    study *s = rs->s;
    bench_result *nr = realloc(s->res, sizeof *nr * (size_t)(s->n_res + 2));
    char err[256];
    if (!nr) return -1;
    s->res = nr;
    bench_test pp = *base, tg = *base;
    pp.kind = BENCH_PP, pp.n_prompt = p->pp, pp.n_depth = d;
    tg.kind = BENCH_TG, tg.n_gen = p->tg, tg.n_depth = d;
    if (bench_run_depth(&rs->br, &pp, &tg, p->reps, &s->res[s->n_res], &s->res[s->n_res + 1], err,
                        sizeof err)) {
        fprintf(stderr, "%scpulm report: %s: %s\n", rs->show ? "\r\033[K" : "", rs->section, err);
        return -1;
    }
    s->n_res += 2;
    return 0;
}

static int run_sections(runner_state *rs, const report_opts *o, const study_plan *p) {
    study *s = rs->s;
    int max_t = o->threads.v[o->threads.n - 1];
    bench_test base = {.n_parallel = 1, .n_batch = 512, .n_ubatch = 512, .n_threads = max_t};
    const char *names[] = {"threads", "prompt length", "parallel sequences", "time to first token",
                           "speed vs depth"};
    for (int sec = 0; sec < STUDY_N_SECTIONS; sec++) {
        rs->section = names[sec];
        if (!rs->show) fprintf(stderr, "cpulm report: %s...\n", names[sec]);
        s->lo[sec] = s->n_res;
        int rc = 0;
        for (int i = 0; sec == STUDY_THREADS && i < o->threads.n && !rc; i++) {
            bench_test pp = base, tg = base;
            pp.kind = BENCH_PP, pp.n_prompt = p->pp, pp.n_threads = o->threads.v[i];
            tg.kind = BENCH_TG, tg.n_gen = p->tg, tg.n_threads = o->threads.v[i];
            rc = run_one(rs, &pp, p->reps) || run_one(rs, &tg, p->reps);
        }
        for (int i = 0; sec == STUDY_PP_LEN && i < p->pp_len.n && !rc; i++) {
            bench_test t = base;
            t.kind = BENCH_PP, t.n_prompt = p->pp_len.v[i];
            rc = run_one(rs, &t, p->reps);
        }
        for (int i = 0; sec == STUDY_PARALLEL && i < p->npl.n && !rc; i++) {
            bench_test t = base;
            t.kind = BENCH_PAR, t.n_prompt = p->npp, t.n_gen = p->ntg, t.n_parallel = p->npl.v[i];
            rc = run_one(rs, &t, p->reps);
        }
        for (int i = 0; sec == STUDY_TTFT && i < p->ttft.n && !rc; i++) {
            bench_test t = base;
            t.kind = BENCH_TTFT, t.n_prompt = p->ttft.v[i];
            rc = run_one(rs, &t, p->ttft_reps);
        }
        for (int i = 0; sec == STUDY_DEPTH && i < p->depth.n && !rc; i++)
            rc = run_depth(rs, &base, p, p->depth.v[i]);
        s->hi[sec] = s->n_res;
        if (rc) return -1;
    }
    if (rs->show) fprintf(stderr, "\r\033[K");
    return 0;
}

/* Ceilings per thread count; achieved speeds from the thread sweep (pp and tg rows). */
static int run_roofline(study *s, const study_plan *p, const cpulm_model *m) {
    fprintf(stderr, "cpulm report: roofline...\n");
    s->bytes_per_token = bench_bytes_per_token(m);
    s->matmul_params = bench_matmul_params(m);
    s->roof_buf_bytes = p->buf_bytes;
    for (int i = s->lo[STUDY_THREADS]; i + 1 < s->hi[STUDY_THREADS]; i += 2) {
        bench_roof *r = &s->roof[s->n_roof];
        *r = (bench_roof){.n_threads = s->res[i].n_threads_used};
        if (bench_roof_measure(r, p->buf_bytes, p->roof_s)) return -1;
        bench_summary pp, tg;
        bench_summarize(&s->res[i], &pp);
        bench_summarize(&s->res[i + 1], &tg);
        r->pp_ts = pp.ts.mean;
        r->tg_ts = tg.ts.mean;
        bench_roof_fractions(
            r, s->bytes_per_token,
            bench_pp_ops_per_token(s->matmul_params, bench_output_params(m), s->res[i].t.n_prompt));
        s->n_roof++;
    }
    return 0;
}

/* Best single-stream and batched generation speeds, memory of that deployment, prices. */
static void size_and_price(study *s, const report_opts *o, const cpulm_model *m) {
    for (int i = s->lo[STUDY_THREADS]; i < s->hi[STUDY_THREADS]; i++) {
        bench_summary sm;
        bench_summarize(&s->res[i], &sm);
        if (s->res[i].t.kind == BENCH_TG && sm.ts.mean > s->tg_single) {
            s->tg_single = sm.ts.mean;
            s->tg_single_threads = s->res[i].n_threads_used;
        }
    }
    /* one parallel sequence is a single stream too; on a busy machine either run may be the
     * faster one, and batched is never reported below single */
    for (int i = s->lo[STUDY_PARALLEL]; i < s->hi[STUDY_PARALLEL]; i++) {
        bench_summary sm;
        bench_summarize(&s->res[i], &sm);
        if (s->res[i].t.n_parallel == 1 && sm.tg_ts.mean > s->tg_single) {
            s->tg_single = sm.tg_ts.mean;
            s->tg_single_threads = s->res[i].n_threads_used;
        }
    }
    s->tg_batched = s->tg_single;
    s->tg_batched_npl = 1;
    for (int i = s->lo[STUDY_PARALLEL]; i < s->hi[STUDY_PARALLEL]; i++) {
        bench_summary sm;
        bench_summarize(&s->res[i], &sm);
        if (sm.tg_ts.mean > s->tg_batched) {
            s->tg_batched = sm.tg_ts.mean;
            s->tg_batched_npl = s->res[i].t.n_parallel;
        }
    }
    plan_shape_of_model(m, &s->shape);
    s->plan_ctx = o->n_ctx;
    s->plan_parallel = s->tg_batched_npl;
    plan_memory_of(&s->shape, s->info.weight_bytes, s->plan_ctx, s->plan_parallel, CPULM_KV_F16,
                   512, o->threads.v[o->threads.n - 1], &s->mem);
    char err[512];
    if (plan_prices_locate(o->prices, s->prices_path, sizeof s->prices_path) ||
        plan_prices_load(s->prices_path, &s->prices, err, sizeof err)) {
        fprintf(stderr, "cpulm report: no price table (%s); the cost section is left out\n",
                o->prices ? err : "data/prices.tsv not found");
        s->prices.n = 0;
    }
}

/* The first section: the workload's serving estimated per instance family, with the
 * efficiencies this study measured (the roofline row with the most threads), unless the
 * model ran from the caches (a share above 100% says nothing about memory), then with the
 * shipped calibration. */
static void estimate(study *s, const report_opts *o, const cpulm_model *m) {
    const bench_roof *r = s->n_roof ? &s->roof[s->n_roof - 1] : NULL;
    pm_eff eff = {0};
    char basis[512];
    plan_est_opts eo = {.workload = o->workload,
                        .slo = o->slo,
                        .bw_fraction = PM_DEFAULT_BW_FRACTION,
                        .peak_fraction = PM_DEFAULT_PEAK_FRACTION,
                        .utilization = 0.8,
                        .vcpu = o->vcpu,
                        .max_batch = 256,
                        .instances = NULL};
    if (r && r->tg_frac > 0 && r->tg_frac <= 1 && r->pp_frac > 0 && r->pp_frac <= 1) {
        eff = (pm_eff){.tg = r->tg_frac, .pp = r->pp_frac};
        snprintf(basis, sizeof basis, "measured in this study (%s, %d threads, roofline section)",
                 s->env.cpu, r->n_threads);
        eo.eff = &eff;
        eo.eff_desc = basis;
    }
    int64_t out = bench_output_params(m);
    pm_model_cost mc = {.weight_bytes = (double)s->bytes_per_token,
                        .ops_per_token = 2.0 * (double)s->matmul_params,
                        .ops_per_prompt_token = 2.0 * (double)(s->matmul_params - out),
                        .kv_bytes_per_ctx_token =
                            (double)plan_kv_bytes_per_token(&s->shape, CPULM_KV_F16)};
    int n = s->prices.n
                ? plan_estimate_rows_desc(&eo, &s->shape, s->info.weight_bytes, &mc, &s->prices,
                                          s->est, 32, s->est_workload, sizeof s->est_workload,
                                          s->est_desc, sizeof s->est_desc)
                : -1;
    s->n_est = n > 0 ? n : 0;
    if (n <= 0)
        snprintf(s->est_desc, sizeof s->est_desc, "no estimate: %s (see the messages of the run)",
                 s->prices.n ? "the workload, objective or instance table could not be read"
                             : "no price table");
}

/* The --measured files, read before the study runs (a bad file fails at once). */
static int read_measured(study *s, const report_opts *o) {
    for (int i = 0; i < o->n_measured; i++) {
        size_t len = 0;
        char *text = cli_read_file(o->measured[i], &len), err[160] = "cannot read it";
        int bad = !text || cmp_entry_parse(text, len, o->measured[i], &s->meas[s->n_meas], err,
                                           sizeof err) != 0;
        free(text);
        if (bad) {
            fprintf(stderr, "cpulm report: --measured %s: %s\n", o->measured[i], err);
            return EXIT_USAGE;
        }
        s->n_meas++;
    }
    return 0;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int cmd_report(int argc, char **argv) {
    report_opts o;
    int rc = parse_report(argc, argv, &o);
    if (rc >= 0) return rc;
    if (mkdir(o.dir, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "cpulm report: cannot create %s: %s\n", o.dir, strerror(errno));
        return 1;
    }
    const char *path = cli_model_path(o.model);
    if (!path) return EXIT_USAGE;
    cpulm_model *m = cli_load_model(path, 0, NULL);
    if (!m) return cli_load_failed_rc(path);
    study_plan p;
    make_plan(&o, &p);
    study s = {.quick = o.quick, .depths_given = o.depths.n > 0};
    if (read_measured(&s, &o)) {
        cpulm_model_free(m);
        return EXIT_USAGE;
    }
    bench_env_fill(&s.env, m, path);
    cpulm_model_get_info(m, &s.info);
    runner_state rs = {.s = &s, .br = {.m = m, .progress = progress}, .show = isatty(2)};
    rs.br.progress_user = &rs;
    if (!rs.show) rs.br.progress = NULL;
    double t0 = now_s();
    rc = run_sections(&rs, &o, &p) || run_roofline(&s, &p, m) ? 1 : 0;
    if (!rc) {
        size_and_price(&s, &o, m);
        estimate(&s, &o, m);
        s.seconds = now_s() - t0;
        rc = study_write(&s, o.dir) ? 1 : 0;
        if (!rc)
            printf("cpulm report: wrote %s/report.md and %s/report.html (%.0f s)\n", o.dir, o.dir,
                   s.seconds);
    }
    plan_prices_release(&s.prices);
    free(s.res);
    cpulm_model_free(m);
    return rc;
}
