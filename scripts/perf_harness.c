/* perf_harness.c: a small timing harness for docs/PERFORMANCE.md until `cpulm bench` lands.
 * Not part of the build; compile it against the static library:
 *
 *   cc -O2 -mavx2 -Iinclude scripts/perf_harness.c build/libcpulm.a -lpthread -lm -o /tmp/ph
 *   /tmp/ph -m MODEL [-t THREADS] [-p 512] [-n 128] [-r REPS]   pp / tg like llama-bench
 *   /tmp/ph --bw [-t THREADS] [--mib 1024]                      streaming read bandwidth
 *   add --roofline to a model run: before each tg rep, a short bandwidth probe; prints
 *   t/s x bytes per token (the file size: every weight is read once per token) / bandwidth
 *
 * pp: one decode of p random tokens into an empty cache (logits of the last one).
 * tg: n decodes of one token each, starting from an empty cache.
 * Each rep is reported; the summary is the best and the median. The bandwidth mode reads a
 * buffer with 256-bit loads from t threads, several passes, and reports the best pass.
 */
#define _GNU_SOURCE
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpulm.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* ---- bandwidth ---- */

typedef struct bw_job {
    const uint8_t *p;
    size_t n;
    __m256i sink;
} bw_job;

static void *bw_read(void *arg) {
    bw_job *j = arg;
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 128 <= j->n; i += 128) {
        a0 = _mm256_xor_si256(a0, _mm256_load_si256((const __m256i *)(j->p + i)));
        a1 = _mm256_xor_si256(a1, _mm256_load_si256((const __m256i *)(j->p + i + 32)));
        a2 = _mm256_xor_si256(a2, _mm256_load_si256((const __m256i *)(j->p + i + 64)));
        a3 = _mm256_xor_si256(a3, _mm256_load_si256((const __m256i *)(j->p + i + 96)));
    }
    j->sink = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
    return NULL;
}

/* Best of passes GB/s reading mib MiB with nth threads; quiet = no per-pass lines. */
static double measure_bw(int nth, size_t mib, int passes, int quiet) {
    size_t n = mib << 20;
    uint8_t *buf = aligned_alloc(4096, n);
    if (!buf) return 0;
    memset(buf, 1, n);
    double best = 0;
    for (int pass = 0; pass < passes; pass++) {
        pthread_t th[64];
        bw_job jobs[64];
        double t0 = now_s();
        for (int k = 0; k < nth; k++) {
            jobs[k] = (bw_job){.p = buf + n / (size_t)nth * (size_t)k, .n = n / (size_t)nth};
            pthread_create(&th[k], NULL, bw_read, &jobs[k]);
        }
        for (int k = 0; k < nth; k++) pthread_join(th[k], NULL);
        double gbs = (double)n / (now_s() - t0) / 1e9;
        if (!quiet) printf("pass %d: %.2f GB/s\n", pass, gbs);
        if (gbs > best) best = gbs;
    }
    free(buf);
    return best;
}

static int bandwidth(int nth, size_t mib) {
    double best = measure_bw(nth, mib, 8, 0);
    printf("bandwidth: %d threads, %zu MiB, best %.2f GB/s\n", nth, mib, best);
    return best > 0 ? 0 : 1;
}

/* ---- pp / tg ---- */

static double run_pp(cpulm_ctx *ctx, const cpulm_token *toks, int n) {
    cpulm_ctx_seq_rm(ctx, 0, 0);
    cpulm_batch b = {.n = n, .token = toks};
    double t0 = now_s();
    if (cpulm_ctx_decode(ctx, &b) != CPULM_OK) return -1;
    return n / (now_s() - t0);
}

static double run_tg(cpulm_ctx *ctx, const cpulm_token *toks, int n) {
    cpulm_ctx_seq_rm(ctx, 0, 0);
    double t0 = now_s();
    for (int i = 0; i < n; i++) {
        cpulm_batch b = {.n = 1, .token = &toks[i]};
        if (cpulm_ctx_decode(ctx, &b) != CPULM_OK) return -1;
    }
    return n / (now_s() - t0);
}

static void report(const char *what, double *v, int reps) {
    qsort(v, (size_t)reps, sizeof *v, cmp_d);
    printf("%s: best %.2f t/s, median %.2f t/s (", what, v[reps - 1], v[reps / 2]);
    for (int i = 0; i < reps; i++) printf("%s%.2f", i ? " " : "", v[i]);
    printf(")\n");
}

int main(int argc, char **argv) {
    const char *model = NULL;
    int nth = 2, pp = 512, tg = 128, reps = 3, bw = 0, roof = 0;
    size_t mib = 1024;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "0";
        if (!strcmp(a, "--bw")) bw = 1;
        else if (!strcmp(a, "--roofline")) roof = 1;
        else if (!strcmp(a, "-m")) model = argv[++i];
        else if (!strcmp(a, "-t")) nth = atoi(v), i++;
        else if (!strcmp(a, "-p")) pp = atoi(v), i++;
        else if (!strcmp(a, "-n")) tg = atoi(v), i++;
        else if (!strcmp(a, "-r")) reps = atoi(v), i++;
        else if (!strcmp(a, "--mib")) mib = (size_t)atol(v), i++;
        else return fprintf(stderr, "unknown option %s\n", a), 2;
    }
    if (nth < 1 || nth > 64 || reps < 1 || reps > 64) return 2;
    if (bw) return bandwidth(nth, mib);
    if (!model) return fprintf(stderr, "need -m MODEL or --bw\n"), 2;
    cpulm_error err = {0};
    cpulm_model *m = cpulm_model_load(model, NULL, &err);
    if (!m) return fprintf(stderr, "%s\n", err.msg), 1;
    cpulm_ctx_params cp = cpulm_ctx_default_params();
    cp.n_ctx = pp + tg + 16;
    cp.n_batch = pp > 0 ? pp : 1;
    cp.n_threads = nth;
    cpulm_ctx *ctx = cpulm_ctx_new(m, &cp, &err);
    if (!ctx) return fprintf(stderr, "%s\n", err.msg), 1;
    int nt = pp > tg ? pp : tg;
    cpulm_token *toks = malloc(sizeof *toks * (size_t)(nt + 1));
    uint32_t s = 12345;
    for (int i = 0; i <= nt; i++) toks[i] = (cpulm_token)((s = s * 1664525u + 1013904223u) >> 8) % cpulm_vocab_n(m);
    printf("model %s, threads %d, kernels %s\n", model, nth, cpulm_kernel_level());
    double v[64];
    run_tg(ctx, toks, 4); /* warm up: page in the weights */
    if (pp > 0) {
        for (int r = 0; r < reps; r++) v[r] = run_pp(ctx, toks, pp);
        char what[32];
        snprintf(what, sizeof what, "pp%d", pp);
        report(what, v, reps);
    }
    if (tg > 0) {
        double bytes = 0, best_frac = 0;
        FILE *f = fopen(model, "rb");
        if (f && fseek(f, 0, SEEK_END) == 0) bytes = (double)ftell(f);
        if (f) fclose(f);
        for (int r = 0; r < reps; r++) {
            double gbs = roof ? measure_bw(nth, 512, 3, 1) : 0;
            v[r] = run_tg(ctx, toks, tg);
            if (roof && gbs > 0) {
                double frac = v[r] * bytes / 1e9 / gbs;
                printf("tg rep %d: %.2f t/s x %.3f GB / %.2f GB/s = %.0f%% of the read roofline\n", r,
                       v[r], bytes / 1e9, gbs, 100 * frac);
                if (frac > best_frac) best_frac = frac;
            }
        }
        if (roof) printf("roofline: best %.0f%%\n", 100 * best_frac);
        char what[32];
        snprintf(what, sizeof what, "tg%d", tg);
        report(what, v, reps);
    }
    cpulm_ctx_free(ctx);
    cpulm_model_free(m);
    free(toks);
    return 0;
}
