/* attnx_bench.c: the exact path's three prompt-attention ops alone (kernels.h attn_xscores,
 * attn_xweights, attn_xpv), for docs/perf-log/ (e.g.
 * 2026-12-01-zen3-exact-prompt-ops.md). Not part of the build:
 *
 *   cc -O2 -Iinclude -Isrc scripts/attnx_bench.c build/libcpulm.a -lpthread -lm -o /tmp/xb
 *   /tmp/xb [REPS]
 *
 * One prompt block as exact_tile runs it on the synth 1B shape (64 rows: 16 tokens x the 4
 * query heads of a KV head, head size 64) over 4096 keys in 64-key tiles: attn_xscores of
 * all rows, attn_xweights row by row, attn_xpv token by token (4 rows), on one thread, at
 * the level cpulm_kernels_get() picks (CPULM_ISA=... to choose). Prints each op's minimum
 * over REPS (default 40) sweeps, in ms per sweep, and a hash of the outputs (the same for
 * every build and level: the ops are exact). Data: f16 values in [-2, 2) (queries, keys)
 * and [-1, 1) (values) from a fixed generator. Link two builds' libcpulm.a into two programs
 * and run them interleaved to compare.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/fp16.h"
#include "kernels/kernels.h"

enum { D = 64, M = 64, N = 4096, T = 64, TOK_ROWS = 4 };

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static float h16(float x) {
    return cpulm_fp16_to_f32(cpulm_f32_to_fp16(x));
}

static float rnd(uint64_t *s, float scale) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return h16((float)((double)(*s >> 11) / 9007199254740992.0 - 0.5) * 2 * scale);
}

int main(int argc, char **argv) {
    const int reps = argc > 1 ? atoi(argv[1]) : 40;
    const cpulm_kernels *k = cpulm_kernels_get();
    double *qt = malloc(sizeof(double) * D * M);
    float *kc = malloc(sizeof(float) * N * D), *vc = malloc(sizeof(float) * N * D);
    float *s = malloc(sizeof(float) * M * T), *ms = malloc(sizeof(float) * M * T);
    float *acc = malloc(sizeof(float) * M * D), mx[M], l[M];
    if (!qt || !kc || !vc || !s || !ms || !acc) return 1;
    uint64_t r = 88172645463325252ull;
    for (int i = 0; i < D * M; i++)
        qt[i] = rnd(&r, 2.0f);
    for (int i = 0; i < N * D; i++)
        kc[i] = rnd(&r, 2.0f), vc[i] = rnd(&r, 1.0f);
    double best[3] = {1e9, 1e9, 1e9};
    for (int rep = 0; rep < reps; rep++) {
        double t[3] = {0, 0, 0};
        for (int i = 0; i < M; i++)
            mx[i] = -INFINITY, l[i] = 0.0f;
        memset(acc, 0, sizeof(float) * M * D);
        for (int j = 0; j < N; j += T) {
            double t0 = now_s();
            k->attn_xscores(D, M, T, qt, M, kc + j * D, D, 0.125f, s, T);
            double t1 = now_s();
            for (int i = 0; i < M; i++)
                k->attn_xweights(T, s + i * T, ms + i * T, &mx[i]);
            double t2 = now_s();
            for (int i = 0; i < M; i += TOK_ROWS)
                k->attn_xpv(D, TOK_ROWS, T, ms + i * T, s + i * T, T, vc + j * D, D, acc + i * D, D,
                            l + i);
            double t3 = now_s();
            t[0] += t1 - t0, t[1] += t2 - t1, t[2] += t3 - t2;
        }
        for (int q = 0; q < 3; q++)
            best[q] = t[q] < best[q] ? t[q] : best[q];
    }
    uint64_t hash = 0;
    for (int i = 0; i < M * D; i++) {
        uint32_t u;
        memcpy(&u, &acc[i], 4);
        hash = hash * 31 + u;
    }
    for (int i = 0; i < M; i++) {
        uint32_t u;
        memcpy(&u, &l[i], 4);
        hash = hash * 31 + u;
    }
    printf("%s: ms per %d keys x %d rows (min of %d): xscores %.3f xweights %.3f xpv %.3f "
           "sum %.3f  hash %016llx\n",
           k->name, N, M, reps, best[0] * 1e3, best[1] * 1e3, best[2] * 1e3,
           (best[0] + best[1] + best[2]) * 1e3, (unsigned long long)hash);
    free(qt), free(kc), free(vc), free(s), free(ms), free(acc);
    return 0;
}
