/* cmd_roofline.c: `cpulm roofline`: this machine's memory read bandwidth, int8 peak (the
 * fastest repacked GEMM microkernel or the Q8_0 dot) and f32 peak (the attention's tile
 * products or the f32 dot) at each thread count;
 * with -m, the model's pp and tg speeds as fractions of those ceilings (tg is bound by
 * reading the weights once per token, pp by the int8 dot products: 2 ops per weight per
 * token, the output matrix for the last prompt token only), and the share of pp's time in
 * attention with its flop rate. A ceiling is what the machine can do, so the least disturbed
 * value seen: the best round of its measurement, taken before and again after the model's
 * run (the higher counts); pp and tg are what a run gets, the mean of its repetitions. The
 * read ceiling a model's tg is set against is the exception: the median of windows read
 * between its repetitions, so that it describes the memory the run had (bench_roof_read_median). */
#include <stdlib.h>
#include <string.h>

#include "tools_api.h"
#include "bench.h"
#include "bench_plan.h"
#include "commands.h"
#include "common.h"
#include "options.h"

typedef struct roof_opts {
    const char *model;
    bench_list threads;
    int n_prompt, n_gen, reps, json, buf_mib;
    float min_s;
} roof_opts;

static void roof_usage(FILE *f) {
    fprintf(f, "usage: cpulm roofline [-t 1,2] [-m MODEL] [options]\n"
               "  (-m: also run pp and tg and report the fraction of the ceilings)\n");
    cli_help(f, "roofline");
}

static int roof_opt(cli *c, int id, const cli_val *v, void *ctx) {
    roof_opts *o = ctx;
    int ok = 1;
    char err[128];
    switch (id) {
    case OPT_THREADS: /* a list, in the row's range */
        ok = !bench_list_parse(v->s, (int32_t)v->opt->lo, (int32_t)v->opt->hi, &o->threads, err,
                               sizeof err);
        if (!ok) fprintf(stderr, "cpulm roofline: bad value '%s' for -t (%s)\n", v->s, err);
        break;
    case OPT_MODEL: o->model = v->s; break;
    case OPT_N_PROMPT: ok = cli_at_least(c, v, 1) && (o->n_prompt = (int)v->i); break;
    case OPT_N_GEN: ok = cli_at_least(c, v, 1) && (o->n_gen = (int)v->i); break;
    case OPT_REPS: o->reps = (int)v->i; break;
    case OPT_BUFFER_MIB: o->buf_mib = (int)v->i; break;
    case OPT_TIME: o->min_s = (float)v->f; break;
    case OPT_ROOF_OUTPUT: o->json = v->i == 1; break;
    default: return cli_unhandled(c, v);
    }
    return ok ? 0 : EXIT_USAGE;
}

static int parse_roof(int argc, char **argv, roof_opts *o) {
    cli c = {.cmd = "roofline", .argc = argc, .argv = argv};
    *o = (roof_opts){.n_prompt = 128, .n_gen = 32, .reps = 3, .buf_mib = 256, .min_s = 0.3f};
    int rc = cli_parse(&c, roof_usage, roof_opt, o);
    if (rc) return rc;
    if (!o->threads.n) bench_default_threads(&o->threads);
    return -1;
}

typedef struct tg_reads {
    const roof_opts *o;
    bench_roof *r;
    int failed;
} tg_reads;

/* The runner calls this before each repetition, outside its timed part (rep -1: before the
 * warm-up): a read window there puts the read ceiling's measurements between the tg
 * repetitions whose bandwidth it is to describe. */
static void read_between_reps(void *user, const bench_test *t, int rep, int n_reps) {
    (void)t, (void)n_reps;
    tg_reads *x = user;
    if (rep >= 0 && bench_roof_read(x->r, (size_t)x->o->buf_mib << 20, x->o->min_s)) x->failed = 1;
}

/* pp and tg of the model at r->n_threads; mean tokens/s into r; the read windows around the
 * tg repetitions into r->bw_windows. */
static int run_model(const roof_opts *o, const cpulm_model *m, bench_roof *r) {
    bench_runner br = {.m = m, .attn_fast = CPULM_ATTN_AUTO};
    tg_reads reads = {o, r, 0};
    bench_test pp = {.kind = BENCH_PP,
                     .n_prompt = o->n_prompt,
                     .n_parallel = 1,
                     .n_batch = 512,
                     .n_ubatch = 512,
                     .n_threads = r->n_threads};
    bench_test tg = pp;
    tg.kind = BENCH_TG;
    tg.n_prompt = 0;
    tg.n_gen = o->n_gen;
    bench_result res;
    bench_summary s;
    char err[256];
    if (bench_run_test(&br, &pp, o->reps, &res, err, sizeof err)) goto fail;
    bench_summarize(&res, &s);
    r->pp_ts = s.ts.mean;
    double attn = 0, mm = 0, all = 0;
    for (int i = 0; i < res.n_reps; i++)
        attn += res.attn_ns[i], mm += res.mm_ns[i], all += res.ns[i];
    r->attn_frac = all > 0 ? attn / all : 0;
    r->mm_frac = all > 0 ? mm / all : 0;
    br.progress = read_between_reps, br.progress_user = &reads;
    if (bench_run_test(&br, &tg, o->reps, &res, err, sizeof err)) goto fail;
    bench_summarize(&res, &s);
    r->tg_ts = s.ts.mean;
    read_between_reps(&reads, &tg, o->reps, o->reps); /* and one after the last */
    if (!reads.failed) return 0;
    snprintf(err, sizeof err, "a read window between the tg runs failed");
fail:
    fprintf(stderr, "cpulm roofline: %s\n", err);
    return -1;
}

static void print_md(const roof_opts *o, const bench_roof *r, int n, const bench_env *e,
                     uint64_t bpt, int64_t params) {
    printf("roofline: %s | kernels %s | cpulm %s | read buffer %d MiB | GB = 1e9 bytes\n\n", e->cpu,
           e->kernels, e->version, o->buf_mib);
    printf("| threads | read GB/s | int8 peak GOPS | int8 peak kernel | f32 peak GFLOPS | f32 "
           "peak kernel |\n| ---: | ---: | ---: | :--- | ---: | :--- |\n");
    for (int i = 0; i < n; i++)
        printf("| %d | %.2f | %.1f | %s | %.1f | %s |\n", r[i].n_threads, r[i].bw / 1e9,
               r[i].int8_ops / 1e9, r[i].int8_kernel, r[i].f32_flops / 1e9, r[i].f32_kernel);
    if (!o->model) return;
    for (int i = 0; i < n; i++) {
        printf("%s%d threads: read GB/s sustained in the windows between the tg runs (median "
               "above):",
               i ? "" : "\n", r[i].n_threads);
        for (int j = 0; j < r[i].n_bw_windows; j++)
            printf(" %.2f", r[i].bw_windows[j] / 1e9);
        printf("\n");
    }
    printf("\nmodel: %s (%s): %.3f GB of weights read per generated token, %.3f G matmul "
           "parameters\n\n",
           e->model_type, e->model_file, (double)bpt / 1e9, (double)params / 1e9);
    printf("| threads | tg%d t/s | tg GB/s | %% of read bandwidth | pp%d t/s | pp GOPS | %% of "
           "int8 peak |\n| ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
           o->n_gen, o->n_prompt);
    for (int i = 0; i < n; i++)
        printf("| %d | %.2f | %.2f | %.1f%% | %.2f | %.1f | %.1f%% |\n", r[i].n_threads, r[i].tg_ts,
               r[i].tg_ts * (double)bpt / 1e9, 100 * r[i].tg_frac, r[i].pp_ts, r[i].pp_ops / 1e9,
               100 * r[i].pp_frac);
    printf("\n| threads | pp%d: %% of time in attention | attention GFLOP/s | %% of f32 peak | "
           "GEMM %% of int8 peak (time outside attention) | %% of time in matmuls | %% in neither "
           "|\n| ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
           o->n_prompt);
    for (int i = 0; i < n; i++)
        printf("| %d | %.1f%% | %.1f | %.1f%% | %.1f%% | %.1f%% | %.1f%% |\n", r[i].n_threads,
               100 * r[i].attn_frac, r[i].attn_flops / 1e9,
               r[i].f32_flops > 0 ? 100 * r[i].attn_flops / r[i].f32_flops : 0.0,
               100 * r[i].gemm_frac, 100 * r[i].mm_frac, 100 * (1 - r[i].attn_frac - r[i].mm_frac));
    printf(
        "\nassumptions: tg reads every weight once per token (the KV cache, small at these "
        "lengths, is not counted); pp does 2 int8 ops per matmul weight per token, the output "
        "matrix for the last prompt token only (attention not counted in the int8 share; the GEMM "
        "share divides by the time outside attention); attention does 4 flops per (query "
        "head, head element, key the query sees), its time is pool thread 0's in the "
        "attention steps; the int8 peak is the "
        "fastest of the level's repacked GEMM microkernels (one "
        "per packed weight type) and the Q8_0 dot, on cache-resident weights; the f32 peak the "
        "faster of the attention's tile products (attn_scores then attn_pv: 128 rows x 256 "
        "keys x 64 dims) and the f32 dot, on cache-resident data; ceilings are the "
        "best round of each measurement (with -m: measured before and after the model's run, "
        "the higher kept), except the read bandwidth with -m: the median of the windows read "
        "before, between and after the tg repetitions, each the rate of its mean round (what "
        "the memory sustained while tg ran); pp and tg the mean of the repetitions.\n");
}

static void print_json(const bench_roof *r, int n, const bench_env *e, uint64_t bpt, int64_t params,
                       const cpulm_model *m, int n_prompt) {
    const int with_model = m != NULL;
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    cpulm_json_writer w;
    cpulm_json_writer_init(&w, &b, 0, 2);
    cpulm_json_obj_begin(&w);
    cpulm_json_kv_str(&w, "cpu_info", e->cpu);
    cpulm_json_kv_str(&w, "kernel_level", e->kernels);
    cpulm_json_kv_str(&w, "cpulm_version", e->version);
    if (with_model) {
        cpulm_json_kv_str(&w, "model_type", e->model_type);
        cpulm_json_kv_int(&w, "bytes_per_token", (int64_t)bpt);
        cpulm_json_kv_int(&w, "matmul_params", params);
        plan_shape sh; /* for the performance model's serving estimate (its KV reads) */
        plan_shape_of_model(m, &sh);
        cpulm_json_kv_int(&w, "kv_bytes_per_token",
                          (int64_t)plan_kv_bytes_per_token(&sh, CPULM_KV_F16));
        /* the prompt's work besides the int8 ops (the performance model's split of pp) */
        cpulm_json_kv_int(&w, "n_prompt", n_prompt);
        cpulm_json_kv_double(&w, "pp_attn_flops_per_token", n ? r[0].attn_flops_per_token : 0);
        cpulm_json_kv_int(&w, "matmul_io_per_token", bench_matmul_io(m));
    }
    cpulm_json_kv_arr_begin(&w, "rows");
    for (int i = 0; i < n; i++) {
        const char *k[] = {"read_bytes_per_s",       "int8_ops_per_s",
                           "f32_flops_per_s",        "tg_ts",
                           "tg_bandwidth_fraction",  "pp_ts",
                           "pp_int8_fraction",       "pp_attn_time_fraction",
                           "pp_attn_flops_per_s",    "pp_gemm_int8_fraction",
                           "pp_matmul_time_fraction"};
        double v[] = {r[i].bw,         r[i].int8_ops,  r[i].f32_flops, r[i].tg_ts,
                      r[i].tg_frac,    r[i].pp_ts,     r[i].pp_frac,   r[i].attn_frac,
                      r[i].attn_flops, r[i].gemm_frac, r[i].mm_frac};
        cpulm_json_obj_begin(&w);
        cpulm_json_kv_int(&w, "n_threads", r[i].n_threads);
        cpulm_json_kv_str(&w, "int8_peak_kernel", r[i].int8_kernel);
        cpulm_json_kv_str(&w, "f32_peak_kernel", r[i].f32_kernel);
        for (int j = 0; j < (with_model ? 11 : 3); j++) {
            cpulm_json_kv_double(&w, k[j], v[j]);
        }
        if (r[i].n_bw_windows) { /* read_bytes_per_s is their median */
            cpulm_json_kv_arr_begin(&w, "read_bytes_per_s_windows");
            for (int j = 0; j < r[i].n_bw_windows; j++)
                cpulm_json_write_double(&w, r[i].bw_windows[j]);
            cpulm_json_arr_end(&w);
            cpulm_json_kv_arr_begin(&w, "read_bytes_per_s_windows_best");
            for (int j = 0; j < r[i].n_bw_windows; j++)
                cpulm_json_write_double(&w, r[i].bw_windows_best[j]);
            cpulm_json_arr_end(&w);
        }
        cpulm_json_obj_end(&w);
    }
    cpulm_json_arr_end(&w);
    cpulm_json_obj_end(&w);
    cpulm_buf_putc(&b, '\n');
    fwrite(b.data, 1, b.len, stdout);
    cpulm_buf_release(&b);
}

int cmd_roofline(int argc, char **argv) {
    roof_opts o;
    int rc = parse_roof(argc, argv, &o);
    if (rc >= 0) return rc;
    cpulm_model *m = NULL;
    if (o.model && !(m = cli_load_model(o.model, 0, NULL))) return cli_load_failed_rc(o.model);
    bench_roof r[BENCH_MAX_LIST];
    uint64_t bpt = m ? bench_bytes_per_token(m) : 0;
    int64_t params = m ? bench_matmul_params(m) : 0, out = m ? bench_output_params(m) : 0;
    rc = 0;
    for (int i = 0; i < o.threads.n && !rc; i++) {
        r[i] = (bench_roof){.n_threads = o.threads.v[i]};
        if (bench_roof_measure(&r[i], (size_t)o.buf_mib << 20, o.min_s)) {
            fprintf(stderr, "cpulm roofline: measuring at %d threads failed\n", r[i].n_threads);
            rc = 1;
        } else if (m && (run_model(&o, m, &r[i]) ||
                         bench_roof_remeasure(&r[i], (size_t)o.buf_mib << 20, o.min_s))) {
            rc = 1;
        }
        bench_roof_read_median(&r[i]); /* with a model: the read ceiling of its tg run */
        bench_roof_fractions(&r[i], bpt, bench_pp_ops_per_token(params, out, o.n_prompt));
        if (m) bench_roof_attention(&r[i], bench_attn_flops(m, o.n_prompt), o.n_prompt);
    }
    bench_env e;
    bench_env_fill(&e, m, o.model ? o.model : "");
    if (!rc && o.json)
        print_json(r, o.threads.n, &e, bpt, params, m, o.n_prompt);
    else if (!rc)
        print_md(&o, r, o.threads.n, &e, bpt, params);
    cpulm_model_free(m);
    return rc;
}
