/* attn_bench.c: one layer's generation attention at depth, alone, for docs/PERFORMANCE.md
 * ("Generation at depth"). Not part of the build:
 *
 *   cc -O2 -Iinclude -Isrc scripts/attn_bench.c build/libcpulm.a -lpthread -lm -o /tmp/ab
 *   /tmp/ab MODEL DEPTH ATTN REPS [NTH [KV [PAR [BATCH]]]]
 *
 * Fills sequence 0 with DEPTH positions of random f16 keys and values through the state API
 * (seconds, where `cpulm bench -d` runs a DEPTH-token prompt first: minutes at 32k), decodes
 * one token (its queries and the attention plan), then calls cpulm_attn_layer on this one
 * thread for every layer in turn, REPS times, and prints the min, 10th percentile and
 * median time of a call. ATTN is cpulm_ctx_params.attn_fast (0: exact path, 1: fast
 * split-K path); NTH (default 2) is the thread count the items are planned for, all of
 * them run here; KV is the cache type (cpulm_kv_type: 0 f16 default, 2 q8_0, 3 q4_0). With PAR = 1
 * the NTH threads run the calls together instead (each layer's items shared as in a decode,
 * a barrier before and after), so the time is the layer's wall clock on NTH cores. Each call
 * reads that layer's K/V from memory (the layers' caches together exceed the L3), so the min over
 * many calls is the undisturbed cost even on a busy machine, which whole-model timings are not.
 * ATTN_BENCH_CPU=1 (without PAR) times the thread's CPU time instead of the wall clock.
 * BATCH (default 1) decodes that many tokens after the depth instead of one: the prompt
 * attention of a batch (BATCH 512 at DEPTH 3584: the last ubatch of a 4096-token prompt).
 * Compare two builds interleaved.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "runtime/context.h"
#include "cpulm.h"
#include "model/attention.h"
#include "format/quant.h"
#include "depth_fill.h"

/* PAR: the helper threads, released layer by layer by the main thread (thread 0). */
typedef struct par_run {
    cpulm_ctx *c;
    int nth, il, stop;
    pthread_barrier_t go, done;
} par_run;

typedef struct par_arg {
    par_run *p;
    int ith;
} par_arg;

static void *par_main(void *arg) {
    par_arg *a = arg;
    for (;;) {
        pthread_barrier_wait(&a->p->go);
        if (a->p->stop) return NULL;
        cpulm_attn_layer(a->p->c, a->p->il, a->ith, a->p->nth);
        pthread_barrier_wait(&a->p->done);
    }
}

/* Seconds of this thread's CPU time (ATTN_BENCH_CPU=1 without PAR: on a loaded machine the
 * wall time of a long call always includes other processes' slices, its CPU time does not). */
static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One timed call of layer il's attention: on thread 0, or (p) on all of p's threads. */
static double timed_layer(cpulm_ctx *c, int il, int nth, par_run *p) {
    const uint64_t base = atomic_load(&c->work_ctr); /* a job of its own, as a pass */
    for (int i = 0; i < (p ? nth : 1); i++)
        c->work_base[i].v = base;
    const char *e = getenv("ATTN_BENCH_CPU");
    if (!p && e && *e == '1') {
        const double t0 = cpu_s();
        cpulm_attn_layer(c, il, 0, nth);
        return cpu_s() - t0;
    }
    double t0 = now_s();
    if (p) {
        p->il = il;
        pthread_barrier_wait(&p->go);
    }
    cpulm_attn_layer(c, il, 0, nth);
    if (p) pthread_barrier_wait(&p->done);
    return now_s() - t0;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s MODEL DEPTH ATTN REPS [NTH [KV [PAR [BATCH]]]]\n", argv[0]);
        return 2;
    }
    int32_t depth = atoi(argv[2]);
    int attn = atoi(argv[3]), reps = atoi(argv[4]), nth = argc > 5 ? atoi(argv[5]) : 2;
    cpulm_model *m = cpulm_model_load(argv[1], NULL, NULL);
    const int par = argc > 7 && atoi(argv[7]) == 1, nb = argc > 8 ? atoi(argv[8]) : 1;
    if (!m || depth < 1 || reps < 1 || nth < 1 || nth > 64 || nb < 1 || nb > 4096) return 1;
    cpulm_ctx_params cp = cpulm_ctx_default_params();
    cp.n_ctx = depth + nb + 8;
    cp.n_batch = nb > cp.n_batch ? nb : cp.n_batch;
    cp.n_threads = par ? nth : 1; /* PAR: a work space per thread */
    cp.attn_fast = attn;
    if (argc > 6) cp.kv_type = (cpulm_kv_type)atoi(argv[6]);
    cpulm_ctx *c = cpulm_ctx_new(m, &cp, NULL);
    cpulm_token tok[4096];
    for (int i = 0; i < nb; i++)
        tok[i] = 17 + i % 1000;
    cpulm_batch b = {.n = nb, .token = tok};
    if (!c || !fill_cache(c, depth) || cpulm_ctx_decode(c, &b) != CPULM_OK) return 1;
    const int n_layer = c->m->hp.n_layer, n = reps * n_layer;
    double *t = malloc(sizeof(double) * (size_t)n);
    if (!t) return 1;
    par_run p = {.c = c, .nth = nth};
    pthread_t th[64];
    par_arg pa[64];
    if (par) {
        pthread_barrier_init(&p.go, NULL, (unsigned)nth);
        pthread_barrier_init(&p.done, NULL, (unsigned)nth);
        for (int i = 1; i < nth; i++) {
            pa[i] = (par_arg){&p, i};
            pthread_create(&th[i], NULL, par_main, &pa[i]);
        }
    }
    for (int r = 0; r < reps; r++)
        for (int il = 0; il < n_layer; il++)
            t[r * n_layer + il] = timed_layer(c, il, nth, par ? &p : NULL);
    if (par) {
        p.stop = 1;
        pthread_barrier_wait(&p.go);
        for (int i = 1; i < nth; i++)
            pthread_join(th[i], NULL);
    }
    qsort(t, (size_t)n, sizeof(double), cmp_double);
    printf("depth %d batch %d attn %d%s: min %.0f us, p10 %.0f us, median %.0f us per layer\n",
           depth, nb, attn, par ? " (threads together)" : "", 1e6 * t[0], 1e6 * t[n / 10],
           1e6 * t[n / 2]);
    free(t);
    cpulm_ctx_free(c);
    cpulm_model_free(m);
    return 0;
}
