/* gemm_bench.c: throughput of the repacked-weight GEMM/GEMV (gemm_x16) against the row-by-row
 * vec_dot, per weight type and kernel level, for docs/PERFORMANCE.md. Not part of the build:
 *
 *   cc -O2 -Iinclude -Isrc scripts/gemm_bench.c build/libcpulm.a -lpthread -lm -o /tmp/gb
 *   /tmp/gb            cache-resident: 256 rows x 2048, 64 tokens and 1 token, every level
 *   /tmp/gb --stream   one token over 49152 x 2048 weights (> L3), the chosen level, GB/s
 *   /tmp/gb --moe [E F X K T]
 *                      one MoE layer's expert GEMMs on one thread, the chosen level: X experts
 *                      of F x E (gate, up) and E x F (down), T tokens routed to K experts each
 *                      at random, each expert's tokens in one cpulm_matmul per matrix, as
 *                      moe.c runs them; weights cold (every expert's matrices are visited
 *                      before any repeats). Default: Qwen3-30B-A3B's 2048 768 128 8 512.
 *   /tmp/gb --rows [ROWS]
 *                      F16 and BF16 weights of ROWS x 2048 through cpulm_matmul on one thread,
 *                      1..16 tokens, the chosen level with and without its gemm_rows kernel
 *                      (without: the row-by-row vec_dot path), interleaved; CPU time per call
 *                      and per token relative to one token. ROWS 256 (default): cache-
 *                      resident; 65536: 256 MB, streamed from memory (the decode regime).
 *
 * Times are this thread's CPU time (cpu_s), so the numbers mean something on a shared
 * machine. Cache-resident: Gop/s = 2 * n * rows * tokens / time, best of many reps.
 * Streaming: weight bytes / time, best of 8 passes; each pass reads the matrix from memory.
 * Weights are random rows quantized by the reference quantizers (--moe: random quants);
 * activations are quantized once with cpulm_matmul_quantize_act (as the forward pass does).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/kernels.h"
#include "kernels/matmul.h"
#include "model/repack.h"

/* This thread's CPU time: on a shared, oversubscribed machine the wall clock of a long run
 * counts other processes' time slices; the CPU time counts only ours. */
static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static float frand(void) {
    return (float)rand() / (float)RAND_MAX - 0.5f;
}

/* A rows x n matrix of type t (row-major w, packed p) and nt activation rows. */
typedef struct mat {
    cpulm_dtype t, vdt;
    int64_t n, rows;
    uint64_t rb, stride;
    uint8_t *w, *p, *act;
} mat;

static void make(mat *m, cpulm_dtype t, int64_t n, int64_t rows, int nt) {
    m->t = t, m->n = n, m->rows = rows;
    m->vdt = cpulm_dtype_traits_get(t)->vec_dot_type;
    m->rb = cpulm_dtype_row_bytes(t, n);
    m->stride = (cpulm_matmul_act_bytes(m->vdt, n) + 63) / 64 * 64;
    m->w = malloc(m->rb * (size_t)rows);
    m->p = aligned_alloc(64, (m->rb * (size_t)rows + 63) / 64 * 64);
    m->act = aligned_alloc(64, m->stride * (size_t)nt);
    float *f = malloc(sizeof(float) * (size_t)n);
    if (!m->w || !m->p || !m->act || !f) exit(1);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t i = 0; i < n; i++)
            f[i] = frand();
        cpulm_quantize_row_ref(t, f, m->w + (size_t)r * m->rb, n);
    }
    /* timing only: one packing, in the layout the best level reads */
    cpulm_repack_x16(t, cpulm_kernels_get()->x16_layout[t], m->w, m->p, n, rows);
    for (int j = 0; j < nt; j++) {
        for (int64_t i = 0; i < n; i++)
            f[i] = frand();
        cpulm_matmul_quantize_act(&cpulm_kernels_generic, m->vdt, f, m->act + (size_t)j * m->stride,
                                  n);
    }
    free(f);
}

static void release(mat *m) {
    free(m->w);
    free(m->p);
    free(m->act);
}

static double time_gemm(const cpulm_kernels *k, const mat *m, int nt, float *out, int reps) {
    double best = 1e30;
    for (int rep = 0; rep < reps; rep++) {
        const double t0 = cpu_s();
        for (int64_t g = 0; g < m->rows / CPULM_PACK_ROWS; g++)
            k->gemm_x16[m->t](m->n, nt, out + g * CPULM_PACK_ROWS, m->rows,
                              m->p + (size_t)g * CPULM_PACK_ROWS * m->rb, m->act, m->stride);
        const double dt = cpu_s() - t0;
        if (dt < best) best = dt;
    }
    return best;
}

static double time_rows(const cpulm_kernels *k, const mat *m, float *out, int reps) {
    double best = 1e30;
    for (int rep = 0; rep < reps; rep++) {
        const double t0 = cpu_s();
        for (int64_t r = 0; r < m->rows; r++)
            k->vec_dot[m->t](m->n, out + r, m->w + (size_t)r * m->rb, m->act);
        const double dt = cpu_s() - t0;
        if (dt < best) best = dt;
    }
    return best;
}

static const cpulm_dtype types[] = {CPULM_DTYPE_Q4_0, CPULM_DTYPE_Q8_0, CPULM_DTYPE_Q4_K,
                                    CPULM_DTYPE_Q5_K, CPULM_DTYPE_Q6_K};

static void resident(void) {
    enum { N = 2048, ROWS = 256, NT = 64 };
    const cpulm_kernels *lv[16];
    const int nl = cpulm_kernels_levels(lv, 16);
    float *out = malloc(sizeof(float) * ROWS * NT);
    printf("| level | type | gemm 64 tokens Gop/s | gemv 1 token Gop/s | row vec_dot Gop/s |\n"
           "|---|---|---:|---:|---:|\n");
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        mat m;
        make(&m, types[ti], N, ROWS, NT);
        for (int l = 1; l < nl; l++) { /* level 0 (generic) is the slow oracle */
            const double ops = 2.0 * N * ROWS;
            printf("| %s | %s | %.0f | %.0f | %.0f |\n", lv[l]->name, cpulm_dtype_name(m.t),
                   ops * NT / time_gemm(lv[l], &m, NT, out, 60) / 1e9,
                   ops / time_gemm(lv[l], &m, 1, out, 400) / 1e9,
                   ops / time_rows(lv[l], &m, out, 400) / 1e9);
        }
        release(&m);
    }
    free(out);
}

static void streaming(void) {
    enum { N = 2048, ROWS = 49152 };
    const cpulm_kernels *k = cpulm_kernels_get();
    float *out = malloc(sizeof(float) * ROWS);
    printf(
        "| level | type | MB | packed gemv GB/s | row vec_dot GB/s |\n|---|---|---:|---:|---:|\n");
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        mat m;
        make(&m, types[ti], N, ROWS, 1);
        const double bytes = (double)m.rb * ROWS;
        printf("| %s | %s | %.0f | %.1f | %.1f |\n", k->name, cpulm_dtype_name(m.t), bytes / 1e6,
               bytes / time_gemm(k, &m, 1, out, 8) / 1e9, bytes / time_rows(k, &m, out, 8) / 1e9);
        release(&m);
    }
    free(out);
}

/* A packed Q4_0 matrix of rows x n (random quants: timing only). */
static uint8_t *moe_matrix(int64_t n, int64_t rows) {
    const size_t bytes = cpulm_dtype_row_bytes(CPULM_DTYPE_Q4_0, n) * (size_t)rows;
    uint8_t *w = aligned_alloc(64, (bytes + 63) / 64 * 64),
            *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!w || !p) exit(1);
    for (size_t i = 0; i < bytes; i++)
        w[i] = (uint8_t)rand();
    for (size_t i = 0; i < bytes; i += 18) { /* Q4_0 blocks: a sane fp16 scale */
        w[i] = 0x00;
        w[i + 1] = 0x20;
    }
    cpulm_repack_x16(CPULM_DTYPE_Q4_0, cpulm_kernels_get()->x16_layout[CPULM_DTYPE_Q4_0], w, p, n,
                     rows);
    free(w);
    return p;
}

static void moe_run(const cpulm_kernels *k, uint8_t **w, int64_t n_in, int64_t n_out,
                    const int *cnt, int X, const uint8_t *act, size_t stride, float *out) {
    for (int e = 0, off = 0; e < X; off += cnt[e++]) {
        if (!cnt[e]) continue;
        cpulm_matmul_args a = {.w = w[e],
                               .w_type = CPULM_DTYPE_Q4_0,
                               .w_row_bytes = cpulm_dtype_row_bytes(CPULM_DTYPE_Q4_0, n_in),
                               .n_in = n_in,
                               .n_out = n_out,
                               .packed = 1 + k->x16_layout[CPULM_DTYPE_Q4_0],
                               .act = act + (size_t)off * stride,
                               .act_stride = stride,
                               .n_rows = cnt[e],
                               .out = out + (size_t)off * n_out,
                               .ld_out = n_out};
        cpulm_matmul(k, &a, 0, 1);
    }
}

static void moe(int argc, char **argv) {
    const int64_t E = argc > 2 ? atoll(argv[2]) : 2048, F = argc > 3 ? atoll(argv[3]) : 768;
    const int X = argc > 4 ? atoi(argv[4]) : 128, K = argc > 5 ? atoi(argv[5]) : 8;
    const int T = argc > 6 ? atoi(argv[6]) : 512;
    const cpulm_kernels *k = cpulm_kernels_get();
    int *cnt = calloc((size_t)X, sizeof(int));
    for (int t = 0; t < T; t++) /* K distinct experts per token */
        for (int j = 0, chosen[64]; j < K; j++) {
            int e, dup;
            do {
                e = rand() % X, dup = 0;
                for (int i = 0; i < j; i++)
                    dup |= chosen[i] == e;
            } while (dup);
            chosen[j] = e;
            cnt[e]++;
        }
    const int64_t S = (int64_t)T * K, W = E > F ? E : F;
    const size_t stride = (cpulm_matmul_act_bytes(CPULM_DTYPE_Q8_0, W) + 63) / 64 * 64;
    uint8_t *act = aligned_alloc(64, stride * (size_t)S);
    float *f = malloc(sizeof(float) * (size_t)W), *out = malloc(sizeof(float) * (size_t)(S * W));
    for (int64_t j = 0; j < S; j++) {
        for (int64_t i = 0; i < W; i++)
            f[i] = frand();
        cpulm_matmul_quantize_act(k, CPULM_DTYPE_Q8_0, f, act + (size_t)j * stride, W);
    }
    uint8_t **gu = malloc(sizeof(uint8_t *) * 2 * (size_t)X),
            **dn = malloc(sizeof(uint8_t *) * (size_t)X);
    for (int e = 0; e < 2 * X; e++)
        gu[e] = moe_matrix(E, F);
    for (int e = 0; e < X; e++)
        dn[e] = moe_matrix(F, E);
    int lo = T, hi = 0;
    for (int e = 0; e < X; e++)
        lo = cnt[e] < lo ? cnt[e] : lo, hi = cnt[e] > hi ? cnt[e] : hi;
    printf("%s: E %lld F %lld, %d experts, %d used, %d tokens: %.1f tokens per expert (%d..%d)\n",
           k->name, (long long)E, (long long)F, X, K, T, (double)S / X, lo, hi);
    double best_gu = 1e30, best_dn = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = cpu_s();
        moe_run(k, gu, E, F, cnt, X, act, stride, out);
        moe_run(k, gu + X, E, F, cnt, X, act, stride, out);
        double t1 = cpu_s();
        moe_run(k, dn, F, E, cnt, X, act, stride, out);
        double t2 = cpu_s();
        best_gu = t1 - t0 < best_gu ? t1 - t0 : best_gu;
        best_dn = t2 - t1 < best_dn ? t2 - t1 : best_dn;
    }
    const double ops = 2.0 * (double)E * (double)F * (double)S;
    printf("gate+up %.1f ms, %.0f Gop/s; down %.1f ms, %.0f Gop/s; layer %.0f Gop/s\n",
           best_gu * 1e3, 2 * ops / best_gu / 1e9, best_dn * 1e3, ops / best_dn / 1e9,
           3 * ops / (best_gu + best_dn) / 1e9);
}

/* One cpulm_matmul of a rows x n float matrix (F16 / BF16) over nt activation rows. */
static double rows_call(const cpulm_kernels *k, cpulm_dtype t, const uint8_t *w, int64_t n,
                        int64_t rows, const uint8_t *act, size_t stride, int nt, float *out) {
    const cpulm_matmul_args a = {.w = w,
                                 .w_type = t,
                                 .w_row_bytes = cpulm_dtype_row_bytes(t, n),
                                 .n_in = n,
                                 .n_out = rows,
                                 .act = act,
                                 .act_stride = stride,
                                 .n_rows = nt,
                                 .out = out,
                                 .ld_out = rows};
    const double t0 = cpu_s();
    cpulm_matmul(k, &a, 0, 1);
    return cpu_s() - t0;
}

static void rows_bench(int argc, char **argv) {
    enum { N = 2048, NT = 16 };
    const int64_t rows = argc > 2 ? atoll(argv[2]) : 256;
    const int reps = rows * N * 2 > (64 << 20) ? 5 : 200;
    static const int toks[] = {1, 2, 3, 4, 5, 8, 16};
    const cpulm_kernels *k = cpulm_kernels_get();
    cpulm_kernels before = *k;
    static const cpulm_dtype ft[] = {CPULM_DTYPE_F16, CPULM_DTYPE_BF16};
    float *f = malloc(sizeof(float) * N), *out = malloc(sizeof(float) * (size_t)rows * NT);
    printf("%s, %lld x %d, best of %d (CPU ms per call; x = per token / one token's)\n", k->name,
           (long long)rows, N, reps);
    printf("| type | tokens | vec_dot ms | x | gemm_rows ms | x | speedup |\n"
           "|---|---:|---:|---:|---:|---:|---:|\n");
    for (size_t ti = 0; ti < 2; ti++) {
        const cpulm_dtype t = ft[ti];
        before.gemm_rows[t] = NULL;
        const size_t rb = cpulm_dtype_row_bytes(t, N), stride = (rb + 63) / 64 * 64;
        uint8_t *w = aligned_alloc(64, rb * (size_t)rows), *act = aligned_alloc(64, stride * NT);
        if (!f || !out || !w || !act) exit(1);
        for (int64_t r = 0; r < rows; r++) {
            for (int i = 0; i < N; i++)
                f[i] = frand() * 0.1f;
            cpulm_quantize_row_ref(t, f, w + (size_t)r * rb, N);
        }
        for (int j = 0; j < NT; j++) {
            for (int i = 0; i < N; i++)
                f[i] = frand();
            cpulm_matmul_quantize_act(k, t, f, act + (size_t)j * stride, N);
        }
        double one[2] = {0, 0};
        for (size_t i = 0; i < sizeof toks / sizeof toks[0]; i++) {
            double best[2] = {1e30, 1e30};
            for (int rep = 0; rep < reps; rep++)
                for (int v = 0; v < 2; v++) { /* interleaved: before, after */
                    const double dt =
                        rows_call(v ? k : &before, t, w, N, rows, act, stride, toks[i], out);
                    best[v] = dt < best[v] ? dt : best[v];
                }
            if (i == 0) one[0] = best[0], one[1] = best[1];
            printf("| %s | %d | %.3f | %.2f | %.3f | %.2f | %.2fx |\n", cpulm_dtype_name(t),
                   toks[i], best[0] * 1e3, best[0] / one[0] / toks[i], best[1] * 1e3,
                   best[1] / one[1] / toks[i], best[0] / best[1]);
        }
        free(w);
        free(act);
    }
    free(f);
    free(out);
}

int main(int argc, char **argv) {
    srand(1);
    if (argc > 1 && strcmp(argv[1], "--stream") == 0)
        streaming();
    else if (argc > 1 && strcmp(argv[1], "--moe") == 0)
        moe(argc, argv);
    else if (argc > 1 && strcmp(argv[1], "--rows") == 0)
        rows_bench(argc, argv);
    else
        resident();
    return 0;
}
