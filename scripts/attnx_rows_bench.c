/* attnx_rows_bench.c: the exact path's three ops (kernels.h attn_xscores, attn_xweights,
 * attn_xpv) on a generation or verification shape: D (head size), M rows sharing the keys
 * (a token's query heads x the tokens verified), N keys in 64-key tiles, as exact_tile
 * runs them (xscores of all rows, xweights row by row, xpv of all rows). Not part of the
 * build (docs/perf-log/2026-12-04-spec5.md):
 *
 *   cc -O2 -Iinclude -Isrc scripts/attnx_rows_bench.c build/libcpulm.a -lpthread -lm -o /tmp/xr
 *   /tmp/xr D M N REPS [LD]    (e.g. 8 20 222 300 32: stories260K verifying 10 tokens)
 *
 * LD: the K/V rows' stride in floats (default D; 32 = four KV heads' slices side by side).
 * Prints each op's minimum over REPS sweeps in ns per (row, key) pair, at the level
 * cpulm_kernels_get() picks (CPULM_ISA=... to choose), and a hash of the outputs (the same
 * for every build and level: the ops are exact). Data: f16 values in [-2, 2) (queries,
 * keys) and [-1, 1) (values) from a fixed generator. Link two builds' libcpulm.a into two
 * programs and run them interleaved to compare.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/fp16.h"
#include "kernels/kernels.h"

enum { T = 64 };

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

static uint64_t hash_floats(uint64_t h, const float *x, int n) {
    for (int i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        h = h * 31 + u;
    }
    return h;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s D M N REPS [LD]\n", argv[0]);
        return 2;
    }
    const int D = atoi(argv[1]), M = atoi(argv[2]), N = atoi(argv[3]), reps = atoi(argv[4]);
    const int LD = argc > 5 ? atoi(argv[5]) : D;
    const cpulm_kernels *k = cpulm_kernels_get();
    double *qt = malloc(sizeof(double) * (size_t)(D * M));
    float *kc = malloc(sizeof(float) * (size_t)N * (size_t)LD);
    float *vc = malloc(sizeof(float) * (size_t)N * (size_t)LD);
    float *s = malloc(sizeof(float) * (size_t)(M * T)),
          *ms = malloc(sizeof(float) * (size_t)(M * T));
    float *acc = malloc(sizeof(float) * (size_t)(M * D));
    float *mx = malloc(sizeof(float) * (size_t)M), *l = malloc(sizeof(float) * (size_t)M);
    if (!qt || !kc || !vc || !s || !ms || !acc || !mx || !l) return 1;
    uint64_t r = 88172645463325252ull;
    for (int i = 0; i < D * M; i++)
        qt[i] = rnd(&r, 2.0f);
    for (int64_t i = 0; i < (int64_t)N * LD; i++)
        kc[i] = rnd(&r, 2.0f), vc[i] = rnd(&r, 1.0f);
    double best[3] = {1e9, 1e9, 1e9};
    for (int rep = 0; rep < reps; rep++) {
        double t[3] = {0, 0, 0};
        for (int i = 0; i < M; i++)
            mx[i] = -INFINITY, l[i] = 0.0f;
        memset(acc, 0, sizeof(float) * (size_t)(M * D));
        for (int j = 0; j < N; j += T) {
            const int n = N - j < T ? N - j : T;
            const double t0 = now_s();
            k->attn_xscores(D, M, n, qt, M, kc + (int64_t)j * LD, LD, 0.35355339f, s, T);
            const double t1 = now_s();
            for (int i = 0; i < M; i++)
                k->attn_xweights(n, s + i * T, ms + i * T, &mx[i]);
            const double t2 = now_s();
            k->attn_xpv(D, M, n, ms, s, T, vc + (int64_t)j * LD, LD, acc, D, l);
            const double t3 = now_s();
            t[0] += t1 - t0, t[1] += t2 - t1, t[2] += t3 - t2;
        }
        for (int q = 0; q < 3; q++)
            best[q] = t[q] < best[q] ? t[q] : best[q];
    }
    const uint64_t hash = hash_floats(hash_floats(0, acc, M * D), l, M);
    const double pairs = (double)M * N;
    printf("%-10s D %d M %2d N %d: ns/pair xscores %.2f xweights %.2f xpv %.2f sum %.2f hash "
           "%016llx\n",
           k->name, D, M, N, best[0] * 1e9 / pairs, best[1] * 1e9 / pairs, best[2] * 1e9 / pairs,
           (best[0] + best[1] + best[2]) * 1e9 / pairs, (unsigned long long)hash);
    free(qt), free(kc), free(vc), free(s), free(ms), free(acc), free(mx), free(l);
    return 0;
}
