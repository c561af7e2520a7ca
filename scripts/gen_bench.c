/* gen_bench.c: whole-model generation at depth without a prompt fill, for docs/PERFORMANCE.md
 * ("Generation at depth"). Not part of the build:
 *
 *   cc -O2 -Iinclude -Isrc scripts/gen_bench.c build/libcpulm.a -lpthread -lm -o /tmp/gb
 *   /tmp/gb MODEL DEPTH NTH NTOK [KV [REPS]]
 *
 * Fills sequence 0 with DEPTH positions of random keys and values through the state API (as
 * scripts/attn_bench.c does: seconds, where `cpulm bench -d` runs a DEPTH-token prompt first,
 * minutes at 16k), then decodes NTOK tokens one at a time on NTH threads, REPS times (each
 * rep drops the tokens again), and prints the min, 10th percentile and median time per
 * token, wall clock and the process's CPU time (all threads: with NTH > 1 it includes the
 * pool's spinning). KV is the cache type (cpulm_kv_type: 0 f16, 2 q8_0, 3 q4_0). The attention
 * weights differ from a real prompt's (random keys), the bytes read and the arithmetic done
 * per token do not. The min over many tokens is what a busy machine disturbs least.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "runtime/context.h"
#include "cpulm.h"
#include "format/quant.h"
#include "depth_fill.h"

static double cpu_s(void) { /* the process's CPU time: what a busy machine disturbs least */
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s MODEL DEPTH NTH NTOK [KV [REPS]]\n", argv[0]);
        return 2;
    }
    int32_t depth = atoi(argv[2]);
    int nth = atoi(argv[3]), ntok = atoi(argv[4]), reps = argc > 6 ? atoi(argv[6]) : 1;
    cpulm_model *m = cpulm_model_load(argv[1], NULL, NULL);
    if (!m || depth < 0 || nth < 1 || ntok < 1 || reps < 1) return 1;
    cpulm_ctx_params cp = cpulm_ctx_default_params();
    cp.n_ctx = depth + ntok + 8;
    cp.n_threads = nth;
    if (argc > 5) cp.kv_type = (cpulm_kv_type)atoi(argv[5]);
    cpulm_ctx *c = cpulm_ctx_new(m, &cp, NULL);
    if (!c || (depth > 0 && !fill_cache(c, depth))) return 1;
    const int n = reps * ntok;
    double *t = malloc(sizeof(double) * (size_t)n), *u = malloc(sizeof(double) * (size_t)n);
    if (!t || !u) return 1;
    cpulm_token tok = 17;
    for (int r = 0; r < reps; r++) {
        for (int i = 0; i < ntok; i++) {
            int32_t pos = depth + i;
            cpulm_batch b = {.n = 1, .token = &tok, .pos = &pos};
            double t0 = now_s(), u0 = cpu_s();
            if (cpulm_ctx_decode(c, &b) != CPULM_OK) return 1;
            t[r * ntok + i] = now_s() - t0;
            u[r * ntok + i] = cpu_s() - u0;
        }
        if (cpulm_ctx_seq_rm(c, 0, depth) != CPULM_OK) return 1;
    }
    qsort(t, (size_t)n, sizeof(double), cmp_double);
    qsort(u, (size_t)n, sizeof(double), cmp_double);
    printf("depth %d threads %d kv %d: wall min %.2f p10 %.2f median %.2f ms per token;"
           " CPU min %.2f median %.2f ms\n",
           depth, nth, (int)cp.kv_type, 1e3 * t[0], 1e3 * t[n / 10], 1e3 * t[n / 2], 1e3 * u[0],
           1e3 * u[n / 2]);
    free(t);
    free(u);
    cpulm_ctx_free(c);
    cpulm_model_free(m);
    return 0;
}
