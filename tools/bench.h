/* bench.h: the measurement side of `cpulm bench`, `cpulm roofline` and `cpulm report`:
 * sweep lists and their combinations, statistics, the timed runs themselves (llama-bench
 * and llama-batched-bench semantics), machine ceilings (bandwidth, int8/fp32 peaks) and the
 * writers (markdown, CSV, JSON with llama-bench's field names) plus --compare.
 *
 * Sweep parsing, combination and statistics are pure (tested in tests/test_bench.c); the
 * runners use only include/cpulm.h, except the roofline peaks, which call the kernel table
 * (src/kernels/kernels.h) directly because that is the thing being measured, and the
 * default thread list, which asks src/threads/topo.h for the engine's core count.
 */
#ifndef CPULM_TOOLS_BENCH_H
#define CPULM_TOOLS_BENCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cpulm.h"

/* ---- value lists (bench_sweep.c) ---- */

#define BENCH_MAX_LIST 64

typedef struct bench_list {
    int32_t v[BENCH_MAX_LIST];
    int n;
} bench_list;

/* Parses a comma-separated list whose items are N, A-B (step 1), A-B+S (add S) or A-B*M
 * (multiply by M), e.g. "1,2,4", "1-8", "8-64+8", "1-16*2". Values must lie in [lo, hi]; the
 * list is appended to *out. Returns 0, or -1 with a reason in err. */
int bench_list_parse(const char *s, int32_t lo, int32_t hi, bench_list *out, char *err, size_t cap);
/* Parses "f16,q8_0,f32" into cpulm_kv_type values. Returns 0 or -1 (reason in err). */
int bench_kv_list_parse(const char *s, bench_list *out, char *err, size_t cap);
const char *bench_kv_name(cpulm_kv_type t); /* "f16", "q8_0", "f32" */

/* ---- tests and their combinations ---- */

typedef enum bench_kind {
    BENCH_PP,   /* prompt of n_prompt random tokens, evaluated in batches */
    BENCH_TG,   /* n_gen tokens decoded one at a time after an empty context */
    BENCH_PG,   /* n_prompt prompt tokens, then n_gen generated tokens (llama-bench pg) */
    BENCH_PAR,  /* n_parallel sequences: their prompts, then n_gen steps decoding them all */
    BENCH_TTFT, /* time from an empty context to the first sampled token of an n_prompt prompt */
    BENCH_SPEC, /* sg: n_gen tokens generated greedily after a text prompt (--spec-prompt) of
                 * n_prompt tokens, with speculation spec_kind (none: the plain baseline) */
} bench_kind;

typedef struct bench_test {
    bench_kind kind;
    int32_t n_prompt, n_gen; /* per sequence for BENCH_PAR */
    int32_t n_parallel;      /* sequences; 1 unless BENCH_PAR */
    int32_t n_batch;         /* tokens per logical batch (-b) */
    int32_t n_ubatch;        /* tokens per decode call (-ub); cpulm computes a call at once */
    int32_t n_threads;       /* 0: library default (physical cores) */
    int32_t n_threads_batch; /* prompt threads; 0: same as n_threads */
    cpulm_kv_type type_k;    /* KV cache type (K and V alike) */
    int32_t n_depth;         /* tokens already in every sequence's cache when the test
                              * starts (llama-bench -d): filled untimed, kept across reps */
    int32_t spec_kind;       /* BENCH_SPEC: a cpulm_spec_kind */
} bench_test;

/* The sweep axes. Every combination of the config axes (type_k x n_batch x n_ubatch x
 * threads x threads_batch) runs every test (pp, tg, pg, parallel, ttft lists). */
typedef struct bench_params {
    bench_list n_prompt, n_gen;   /* pp and tg tests */
    bench_list pg_prompt, pg_gen; /* pg tests, paired: pg_prompt.v[i] with pg_gen.v[i] */
    bench_list npl, npp, ntg;     /* parallel tests: every npl x npp x ntg */
    bench_list ttft;              /* prompt lengths of the TTFT curve */
    bench_list threads, threads_batch, n_batch, n_ubatch, type_k;
    bench_list n_depth;      /* -d: cache depth before each test (default {0}) */
    int32_t spec_kind;       /* --spec / -md: the n_gen lengths run as sg tests, each once plain
                              * (none) and once with this kind, instead of tg tests */
    int32_t spec_prompt_len; /* tokens of the sg tests' prompt */
} bench_params;

/* Fills empty config axes with defaults (threads {0}, n_batch {2048}, n_ubatch {512},
 * type_k {f16}, n_depth {0}, npp {128}, ntg {32}); threads_batch stays empty (= n_threads).
 * When no test list is given at all, runs llama-bench's default pp512 and tg128. Tests of
 * zero tokens (-p 0, -n 0, -pg 0,0) are dropped, as llama-bench does. */
void bench_params_defaults(bench_params *p);
/* Writes at most cap combinations to out (out may be NULL) and returns how many exist. */
int bench_expand(const bench_params *p, bench_test *out, int cap);
/* "pp512", "tg128", "pp512+tg128", "npl4 pp128+tg32", "ttft256"; " @ d4096" appended at
 * depth (llama-bench's names); a pg test without prompt or generation is named tg / pp. */
void bench_test_name(const bench_test *t, char *buf, size_t cap);
/* Tokens the test evaluates per repetition (all sequences). */
int64_t bench_test_tokens(const bench_test *t);

/* ---- statistics (bench_stats.c) ---- */

typedef struct bench_stats {
    int n;
    double mean, stddev; /* stddev: sample standard deviation (n - 1), 0 when n < 2 */
    double min, max, p50, p90, p99;
} bench_stats;

/* Percentile q in [0, 100] by linear interpolation between order statistics (the
 * "linear" / type-7 definition numpy uses by default). x need not be sorted. n >= 1. */
double bench_percentile(const double *x, int n, double q);
void bench_stats_compute(const double *x, int n, bench_stats *out);

/* ---- results (bench_run.c) ---- */

#define BENCH_MAX_REPS 64

typedef struct bench_result {
    bench_test t;
    int32_t n_threads_used, n_threads_batch_used; /* after defaults were resolved */
    int n_reps;
    /* one entry per repetition; ns is the whole test's wall time, ts its tokens/s.
     * BENCH_PAR: pp_ns / tg_ns split it into the prompt and generation phases.
     * BENCH_TTFT: ns is the time to first token, ts the prompt tokens/s over it. */
    double ns[BENCH_MAX_REPS], ts[BENCH_MAX_REPS], pp_ns[BENCH_MAX_REPS], tg_ns[BENCH_MAX_REPS];
    double attn_ns[BENCH_MAX_REPS]; /* of ns, the time in attention (cpulm_ctx_attn_ns) */
    double mm_ns[BENCH_MAX_REPS];   /* of ns, in the matrix products (cpulm_ctx_matmul_ns) */
    char test_time[32];             /* ISO 8601 UTC, when the test started */
    int32_t n_ctx;                  /* tokens the test's context holds */
    uint64_t ctx_bytes;             /* what that context allocated (KV cache and scratch) */
    /* BENCH_SPEC, from the last repetition (greedy: every repetition is the same) */
    int64_t spec_passes, spec_drafted, spec_accepted, spec_emitted;
} bench_result;

/* Progress reporting: called before each repetition (rep = -1 for the warm-up). */
typedef void (*bench_progress_fn)(void *user, const bench_test *t, int rep, int n_reps);

typedef struct bench_runner {
    const cpulm_model *m;
    uint64_t seed;              /* random prompt tokens */
    bench_progress_fn progress; /* may be NULL */
    void *progress_user;
    int attn_fast; /* --attn: cpulm_ctx_params.attn_fast (cli_attn_value) */
    /* BENCH_SPEC: the prompt, and the speculation (lengths, draft model; kind and threads
     * come from the test) */
    const cpulm_token *spec_prompt;
    int32_t n_spec_prompt;
    const struct cpulm_spec_params *spec;
} bench_runner;

/* Runs t: one warm-up, then reps (1..BENCH_MAX_REPS) timed repetitions on a fresh context
 * (model load is not counted; the KV is cleared between repetitions). Returns 0, or -1
 * with a message in err. */
int bench_run_test(const bench_runner *br, const bench_test *t, int reps, bench_result *r,
                   char *err, size_t cap);

/* A pp and a tg test at the same depth (n_depth) on one context: one untimed fill serves
 * both (llama-bench fills once per test; the timed work is the same), then pp's repetitions,
 * then tg's, each truncating the cache back to the depth. Single sequence only. The context
 * holds n_depth + max(pp n_prompt, tg n_gen) + 1 tokens. Returns 0, or -1 with err. */
int bench_run_depth(const bench_runner *br, const bench_test *pp, const bench_test *tg, int reps,
                    bench_result *rpp, bench_result *rtg, char *err, size_t cap);

/* Derived figures of a result. */
typedef struct bench_summary {
    bench_stats ns, ts; /* over repetitions */
    bench_stats pp_ts;  /* PAR: prompt tokens/s (all sequences); PG/TTFT: as ts */
    bench_stats tg_ts;  /* PAR: aggregate generated tokens/s; else as ts */
    bench_stats tg_seq; /* PAR: generated tokens/s of one sequence */
    bench_stats pp_ms;  /* PAR: prompt phase in ms */
} bench_summary;

void bench_summarize(const bench_result *r, bench_summary *s);

/* ---- environment, written with every row (bench_out.c) ---- */

typedef struct bench_env {
    char version[64]; /* cpulm_version() */
    char commit[32];  /* the commit part of it */
    char kernels[32]; /* cpulm_kernel_level() */
    const char *attn; /* the --attn choice the tests ran with (NULL: "auto") */
    char cpu[128];    /* /proc/cpuinfo model name (or ARM implementer/part) */
    char model_file[512];
    char model_type[128]; /* "llama 1B Q4_0", like llama-bench */
    uint64_t model_size;  /* bytes of tensor data */
    int64_t n_params;
} bench_env;

void bench_env_fill(bench_env *e, const cpulm_model *m, const char *path);
/* CPU name of this machine into buf (never fails; "unknown" at worst). */
void bench_cpu_name(char *buf, size_t cap);
/* Current time as ISO 8601 UTC ("2025-01-31T12:00:00Z"). */
void bench_now_iso(char *buf, size_t cap);

typedef enum bench_fmt {
    BENCH_FMT_MD,
    BENCH_FMT_CSV,
    BENCH_FMT_JSON,
    BENCH_FMT_JSONL,
    BENCH_FMT_SQL
} bench_fmt;

/* Returns 0 and sets *fmt for "md", "csv", "json", "jsonl"; -1 otherwise. */
int bench_fmt_parse(const char *s, bench_fmt *fmt);
/* Writes results in the format. Returns 0, -1 on an I/O or memory error. */
int bench_write(FILE *f, bench_fmt fmt, const bench_env *e, const bench_result *r, int n);
/* `--compare A B`: reads two JSON (array) or JSONL outputs and prints a side-by-side markdown
 * table with B/A ratios of avg_ts, matching rows by test and configuration. Returns 0, or
 * -1 with a message printed on stderr. */
int bench_compare(FILE *out, const char *path_a, const char *path_b);

/* ---- machine ceilings (bench_roof.c) ---- */

/* Read bandwidth in bytes/s: n_threads threads stream their share of a buffer of `bytes`
 * (much larger than the caches) for at least min_s seconds; best of the passes; *mean_bw
 * (may be NULL): the bytes over the mean round's time. */
double bench_mem_bw(int n_threads, size_t bytes, double min_s, double *mean_bw);
/* Peak of the selected int8 kernels on cache-resident data, in int8 ops/s (2 ops per
 * multiply-add), summed over n_threads threads: the fastest of the level's repacked GEMM
 * microkernels (one per packed weight type: their instruction mixes differ) and the Q8_0
 * dot. *kernel (may be NULL) names the fastest ("Q4_0 GEMM", "Q8_0 dot"; static). */
double bench_peak_int8(int n_threads, double min_s, const char **kernel);
/* Peak of the fastest f32 kernel on cache-resident data (the prompt attention's tile
 * products or the dot), in flop/s; *kernel (may be NULL): its name (static). */
double bench_peak_f32(int n_threads, double min_s, const char **kernel);
/* Bytes of weights one generated token reads: every tensor except the token embedding
 * table (only one row of it is read) unless it doubles as the output matrix. */
uint64_t bench_bytes_per_token(const cpulm_model *m);
/* Parameters of the 2-D weights a token's matrix products use (all but an untied token
 * embedding, whose rows are looked up). */
int64_t bench_matmul_params(const cpulm_model *m);
/* Activation elements into and out of the layers' matrix products per token (n_in + n_out
 * of each, experts by the number a token uses): the per-token work around the products
 * (norms, quantizing their inputs, rope, the FFN's activation, residual adds) touches each
 * about a fixed number of times, so its time grows with this, not with the parameters. */
int64_t bench_matmul_io(const cpulm_model *m);
/* Parameters of the output matrix (output.weight, else the tied token embedding). */
int64_t bench_output_params(const cpulm_model *m);
/* int8 ops per prompt token of a pp test of n_prompt tokens: 2 per matmul weight, except
 * that the output matrix runs for the last token only (the only logits pp asks for). */
double bench_pp_ops_per_token(int64_t matmul_params, int64_t output_params, int n_prompt);

/* Attention flops of a pp test of n_prompt tokens from an empty cache: 4 per (query head,
 * head element, key a query sees): Q.K and P.V, 2 each; causal, within each layer's sliding
 * window; the recurrent layers of hybrid models have none. Tiles' masked keys not counted. */
double bench_attn_flops(const cpulm_model *m, int n_prompt);

/* 1, 2, 4, ... below the physical core count, then the count itself (the engine's default
 * thread count: physical cores, capped by the cgroup quota). */
void bench_default_threads(bench_list *l);

enum { BENCH_ROOF_WINDOWS = 16 };

/* One row of the roofline: the ceilings at n_threads and, with a model, what it achieved. */
typedef struct bench_roof {
    int n_threads;
    double bw;                   /* read bytes/s */
    double int8_ops;             /* bench_peak_int8, ops/s */
    const char *int8_kernel;     /* the kernel that set int8_ops (static) */
    double f32_flops;            /* f32 peak, flop/s */
    const char *f32_kernel;      /* the kernel that set f32_flops (static) */
    double tg_ts, pp_ts;         /* measured mean tokens/s; 0 without a model */
    double pp_ops;               /* pp_ts * bench_pp_ops_per_token: int8 ops/s pp achieved */
    double tg_frac, pp_frac;     /* tg: tg_ts * bytes/token / bw; pp: pp_ops / int8_ops */
    double attn_frac;            /* of pp's time, in attention (cpulm_ctx_attn_ns), measured */
    double mm_frac;              /* of pp's time, in the matrix products (cpulm_ctx_matmul_ns) */
    double attn_flops_per_token; /* of a prompt token (bench_attn_flops / n_prompt) */
    double attn_flops;           /* attention flop/s in that time (bench_attn_flops) */
    double gemm_frac;            /* pp_ops over pp's time outside attention / int8_ops */
    /* with a model: read windows taken between the tg repetitions (bench_roof_read), each
     * its mean round (the rate sustained over the window) and its best round */
    double bw_windows[BENCH_ROOF_WINDOWS], bw_windows_best[BENCH_ROOF_WINDOWS];
    int n_bw_windows;
} bench_roof;

/* Measures the three ceilings at r->n_threads (min_s seconds each, roughly). Returns 0, or
 * -1 when a measurement could not run (out of memory, threads). */
int bench_roof_measure(bench_roof *r, size_t buf_bytes, double min_s);
/* Measures the ceilings again (after a model's run) and keeps the higher of each: like the
 * fastest round within one measurement, the faster of two windows is the less disturbed. */
int bench_roof_remeasure(bench_roof *r, size_t buf_bytes, double min_s);
/* Adds one read window (bench_mem_bw: its mean round's rate, and its best round's) to
 * r->bw_windows (no-op when full). Returns 0, or -1 when it could not run. */
int bench_roof_read(bench_roof *r, size_t buf_bytes, double min_s);
/* Sets r->bw to the median of r->bw_windows (when there are any): the read ceiling of a tg
 * run is then the rate the memory sustained while its repetitions ran. On the shared 2-vCPU
 * VM the 2-thread read flips between ~30 and ~57 GB/s within a window and between windows
 * seconds apart, while a tg run streams at 26-32 GB/s through it (docs/perf-log/
 * 2026-12-03-h26c.md): the best 6-ms round of one window picks a moment the run did not have,
 * the mean over each window and the median over the windows do not. */
void bench_roof_read_median(bench_roof *r);
/* Fills tg_frac / pp_frac from tg_ts / pp_ts and the model's per-token work. */
void bench_roof_fractions(bench_roof *r, uint64_t bytes_per_token, double pp_ops_per_token);
/* Fills attn_flops and gemm_frac from pp_ts, attn_frac, pp_frac and the test's attention
 * flops (bench_attn_flops of its n_prompt tokens); 0 where a time is 0. */
void bench_roof_attention(bench_roof *r, double attn_flops_total, int n_prompt);

#endif
