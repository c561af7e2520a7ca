/* attn_bench.c: one layer's generation attention at depth, alone, for docs/PERFORMANCE.md
 * ("Long contexts"). Not part of the build:
 *
 *   cc -O2 -Iinclude -Isrc scripts/attn_bench.c build/libcpulm.a -lpthread -lm -o /tmp/ab
 *   /tmp/ab MODEL DEPTH ATTN REPS [NTH [KV]]
 *
 * Fills sequence 0 with DEPTH positions of random f16 keys and values through the state API
 * (seconds, where `cpulm bench -d` runs a DEPTH-token prompt first: minutes at 32k), decodes
 * one token (its queries and the attention plan), then calls cpulm_attn_layer on this one
 * thread for every layer in turn, REPS times, and prints the min, 10th percentile and
 * median time of a call. ATTN is cpulm_ctx_params.attn_fast (0: exact path, 1: fast
 * split-K path); NTH (default 2) is the thread count the items are planned for, all of
 * them run here; KV is the cache type (cpulm_kv_type: 0 f16 default, 2 q8_0, 3 q4_0). Each call
 * reads that layer's K/V from memory (the layers' caches together exceed the L3), so the min over
 * many calls is the undisturbed cost even on a busy machine, which whole-model timings are not.
 * Compare two builds interleaved.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "context.h"
#include "cpulm.h"
#include "model/attention.h"
#include "quant.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Positions [0, depth) of seq 0: elements of magnitude [0.125, 1), random signs (halves
 * for an F16 cache, rows quantized by the reference quantizer for Q8_0 / Q4_0). */
static int fill_cache(cpulm_ctx *c, int32_t depth) {
    uint64_t bytes = cpulm_ctx_seq_state_bytes(c, depth), s = 88172645463325252ull;
    uint16_t *blob = malloc(bytes);
    if (!blob) return 0;
    for (uint64_t i = 0; i < bytes / 2; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        blob[i] = (uint16_t)((0x3000 + s % 0x0c00) | ((s >> 20 & 1) << 15));
    }
    const cpulm_dtype t = c->kv.dtype;
    if (t == CPULM_DTYPE_Q8_0 || t == CPULM_DTYPE_Q4_0) {
        const int64_t d = c->kv.kv_dim;
        float *row = malloc(sizeof(float) * (size_t)d);
        if (!row) return 0;
        for (uint64_t r = 0; r < bytes / c->kv.row_bytes; r++) {
            for (int64_t e = 0; e < d; e++) {
                s ^= s << 13, s ^= s >> 7, s ^= s << 17;
                row[e] = (float)(0.125 + 0.875 * (double)(s % 1000000) / 1e6) *
                         ((s >> 40 & 1) ? -1.0f : 1.0f);
            }
            uint8_t *dst = (uint8_t *)blob + r * c->kv.row_bytes;
            if (t == CPULM_DTYPE_Q8_0)
                cpulm_quantize_row_q8_0_ref(row, dst, d);
            else
                cpulm_quantize_row_q4_0_ref(row, dst, d);
        }
        free(row);
    }
    int ok = cpulm_ctx_seq_state_set(c, 0, 0, depth, blob) == CPULM_OK;
    free(blob);
    return ok;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s MODEL DEPTH ATTN REPS [NTH [KV]]\n", argv[0]);
        return 2;
    }
    int32_t depth = atoi(argv[2]);
    int attn = atoi(argv[3]), reps = atoi(argv[4]), nth = argc > 5 ? atoi(argv[5]) : 2;
    cpulm_model *m = cpulm_model_load(argv[1], NULL, NULL);
    if (!m || depth < 1 || reps < 1 || nth < 1) return 1;
    cpulm_ctx_params cp = cpulm_ctx_default_params();
    cp.n_ctx = depth + 8;
    cp.n_threads = 1;
    cp.attn_fast = attn;
    if (argc > 6) cp.kv_type = (cpulm_kv_type)atoi(argv[6]);
    cpulm_ctx *c = cpulm_ctx_new(m, &cp, NULL);
    cpulm_token tok = 17;
    cpulm_batch b = {.n = 1, .token = &tok};
    if (!c || !fill_cache(c, depth) || cpulm_ctx_decode(c, &b) != CPULM_OK) return 1;
    const int n_layer = c->m->hp.n_layer, n = reps * n_layer;
    double *t = malloc(sizeof(double) * (size_t)n);
    if (!t) return 1;
    for (int r = 0; r < reps; r++)
        for (int il = 0; il < n_layer; il++) {
            c->work_base[0].v = atomic_load(&c->work_ctr); /* a job of its own, as a pass */
            double t0 = now_s();
            cpulm_attn_layer(c, il, 0, nth);
            t[r * n_layer + il] = now_s() - t0;
        }
    qsort(t, (size_t)n, sizeof(double), cmp_double);
    printf("depth %d attn %d: min %.0f us, p10 %.0f us, median %.0f us per layer\n", depth, attn,
           1e6 * t[0], 1e6 * t[n / 10], 1e6 * t[n / 2]);
    free(t);
    cpulm_ctx_free(c);
    cpulm_model_free(m);
    return 0;
}
