/* gemm_bench.c: throughput of the repacked-weight GEMM/GEMV (gemm_x16) against the row-by-row
 * vec_dot, per weight type and kernel level, for docs/PERFORMANCE.md. Not part of the build:
 *
 *   cc -O2 -Iinclude -Isrc scripts/gemm_bench.c build/libcpulm.a -lpthread -lm -o /tmp/gb
 *   /tmp/gb            cache-resident: 256 rows x 2048, 64 tokens and 1 token, every level
 *   /tmp/gb --stream   one token over 49152 x 2048 weights (> L3), the chosen level, GB/s
 *
 * Cache-resident: Gop/s = 2 * n * rows * tokens / time, best of many reps (one thread).
 * Streaming: weight bytes / time, best of 8 passes; each pass reads the matrix from memory.
 * Weights are random rows quantized by the reference quantizers; activations are quantized
 * once with cpulm_matmul_quantize_act (as the forward pass does).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/kernels.h"
#include "kernels/matmul.h"
#include "model/repack.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
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
        for (int64_t i = 0; i < n; i++) f[i] = frand();
        cpulm_quantize_row_ref(t, f, m->w + (size_t)r * m->rb, n);
    }
    /* timing only: one packing, in the layout the best level reads */
    cpulm_repack_x16(t, cpulm_kernels_get()->x16_layout[t], m->w, m->p, n, rows);
    for (int j = 0; j < nt; j++) {
        for (int64_t i = 0; i < n; i++) f[i] = frand();
        cpulm_matmul_quantize_act(&cpulm_kernels_generic, m->vdt, f, m->act + (size_t)j * m->stride, n);
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
        const double t0 = now_s();
        for (int64_t g = 0; g < m->rows / CPULM_PACK_ROWS; g++)
            k->gemm_x16[m->t](m->n, nt, out + g * CPULM_PACK_ROWS, m->rows,
                              m->p + (size_t)g * CPULM_PACK_ROWS * m->rb, m->act, m->stride);
        const double dt = now_s() - t0;
        if (dt < best) best = dt;
    }
    return best;
}

static double time_rows(const cpulm_kernels *k, const mat *m, float *out, int reps) {
    double best = 1e30;
    for (int rep = 0; rep < reps; rep++) {
        const double t0 = now_s();
        for (int64_t r = 0; r < m->rows; r++) k->vec_dot[m->t](m->n, out + r, m->w + (size_t)r * m->rb, m->act);
        const double dt = now_s() - t0;
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
    printf("| level | type | MB | packed gemv GB/s | row vec_dot GB/s |\n|---|---|---:|---:|---:|\n");
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

int main(int argc, char **argv) {
    srand(1);
    if (argc > 1 && strcmp(argv[1], "--stream") == 0) streaming();
    else resident();
    return 0;
}
