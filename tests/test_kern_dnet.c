/* test_kern_dnet.c: the Gated DeltaNet kernel ops (kernels.h: dnet_step, dnet_mm, dnet_conv)
 * at every level this CPU runs (and the avx512 levels under emulation where it lacks them),
 * each bit for bit against the generic version, on shapes with whole and partial vectors,
 * unaligned rows and row strides wider than the rows. Quick: it runs under qemu too. */
#define _POSIX_C_SOURCE 200112L /* posix_memalign */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/generic/generic.h"
#include "kernels/kernels.h"
#include "levels.h"
#include "test.h"

#define MAX_LEVELS 16

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* n floats in [-1, 1), one float past a 64-byte boundary (unaligned for every width) */
static float *rand_floats(int64_t n, uint64_t *s) {
    float *p = NULL;
    if (posix_memalign((void **)&p, 64, sizeof(float) * (size_t)(n + 16))) return NULL;
    p += 1;
    for (int64_t i = 0; i < n; i++)
        p[i] = (float)((double)(rng_next(s) >> 11) / 4503599627370496.0 - 1.0);
    return p;
}

static float *copy_floats(const float *x, int64_t n) {
    float *p = NULL;
    if (posix_memalign((void **)&p, 64, sizeof(float) * (size_t)(n + 16))) return NULL;
    p += 1;
    memcpy(p, x, sizeof(float) * (size_t)n);
    return p;
}

static void free_floats(float *p) {
    if (p) free(p - 1);
}

static int same(const float *a, const float *b, int64_t n) {
    return memcmp(a, b, sizeof(float) * (size_t)n) == 0;
}

/* 3 tokens of the step on head sizes with whole and partial registers of every width */
TEST(kern_dnet_step_levels_match_generic) {
    const cpulm_kernels *lv[MAX_LEVELS];
    const int nl = test_kernel_levels(lv, MAX_LEVELS);
    const int64_t sizes[] = {1, 3, 4, 7, 8, 16, 20, 32, 33, 64, 100, 128, 136, 256};
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
        const int64_t n = sizes[si];
        uint64_t rs = 99 + (uint64_t)n;
        float *T0 = rand_floats(n * n, &rs), *in = rand_floats(9 * n, &rs);
        REQUIRE(t, T0 && in);
        float *Tg = copy_floats(T0, n * n), *og = rand_floats(n, &rs), *dg = rand_floats(n, &rs);
        REQUIRE(t, Tg && og && dg);
        for (int s = 0; s < 3; s++)
            cpulm_kernels_generic.dnet_step(n, Tg, in + 3 * s * n, in + (3 * s + 1) * n,
                                            in + (3 * s + 2) * n, 0.3f + 0.2f * s, 0.97f, 0.125f,
                                            og, dg);
        for (int l = 1; l < nl; l++) {
            float *T = copy_floats(T0, n * n), *o = rand_floats(n, &rs), *d = rand_floats(n, &rs);
            REQUIRE(t, T && o && d);
            for (int s = 0; s < 3; s++)
                lv[l]->dnet_step(n, T, in + 3 * s * n, in + (3 * s + 1) * n, in + (3 * s + 2) * n,
                                 0.3f + 0.2f * s, 0.97f, 0.125f, o, d);
            if (!same(T, Tg, n * n) || !same(o, og, n) || !same(d, dg, n)) {
                fprintf(stderr, "  %s: dnet_step n=%lld differs from generic\n", lv[l]->name,
                        (long long)n);
                t->n_fail++;
            }
            free_floats(T);
            free_floats(o);
            free_floats(d);
        }
        free_floats(T0);
        free_floats(in);
        free_floats(Tg);
        free_floats(og);
        free_floats(dg);
    }
}

/* products of every row count up to 9, column counts around the register widths, depths
 * 0..130, with and without accumulation, strides wider than the rows */
TEST(kern_dnet_mm_levels_match_generic) {
    const cpulm_kernels *lv[MAX_LEVELS];
    const int nl = test_kernel_levels(lv, MAX_LEVELS);
    const int ns[] = {1, 5, 8, 15, 16, 17, 33, 64, 65, 128}, ks[] = {0, 1, 7, 64, 130};
    uint64_t rs = 4242;
    for (int m = 1; m <= 9; m++)
        for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++)
            for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++)
                for (int acc = 0; acc < 2; acc++) {
                    const int n = ns[ni], k = ks[ki];
                    const int64_t lda = k + 3, ldb = n + 5, ldc = n + 2;
                    float *a = rand_floats(m * lda, &rs), *b = rand_floats((k + 1) * ldb, &rs);
                    float *c0 = rand_floats(m * ldc, &rs);
                    float *cg = copy_floats(c0, m * ldc);
                    REQUIRE(t, a && b && c0 && cg);
                    cpulm_kernels_generic.dnet_mm(m, n, k, a, lda, b, ldb, cg, ldc, acc);
                    for (int l = 1; l < nl; l++) {
                        float *c = copy_floats(c0, m * ldc);
                        REQUIRE(t, c);
                        lv[l]->dnet_mm(m, n, k, a, lda, b, ldb, c, ldc, acc);
                        if (!same(c, cg, m * ldc)) {
                            fprintf(stderr, "  %s: dnet_mm m=%d n=%d k=%d acc=%d differs\n",
                                    lv[l]->name, m, n, k, acc);
                            t->n_fail++;
                        }
                        free_floats(c);
                    }
                    free_floats(a);
                    free_floats(b);
                    free_floats(c0);
                    free_floats(cg);
                }
}

/* 5 tokens through the convolution, 1 to 5 taps, channel counts around the widths, the
 * window and weights strided as deltanet.c lays them out */
TEST(kern_dnet_conv_levels_match_generic) {
    const cpulm_kernels *lv[MAX_LEVELS];
    const int nl = test_kernel_levels(lv, MAX_LEVELS);
    const int64_t ns[] = {1, 3, 8, 13, 16, 31, 64};
    uint64_t rs = 31337;
    for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++)
        for (int taps = 1; taps <= 5; taps++) {
            const int64_t n = ns[ni], ldwin = n + 9, ldw = 64;
            float *x0 = rand_floats(5 * n, &rs), *win0 = rand_floats(5 * ldwin, &rs);
            float *w = rand_floats(taps * ldw, &rs);
            float *xg = copy_floats(x0, 5 * n), *wing = copy_floats(win0, 5 * ldwin);
            REQUIRE(t, x0 && win0 && w && xg && wing);
            for (int s = 0; s < 5; s++)
                cpulm_kernels_generic.dnet_conv(n, taps, xg + s * n, wing, ldwin, w, ldw);
            for (int l = 1; l < nl; l++) {
                float *x = copy_floats(x0, 5 * n), *win = copy_floats(win0, 5 * ldwin);
                REQUIRE(t, x && win);
                for (int s = 0; s < 5; s++)
                    lv[l]->dnet_conv(n, taps, x + s * n, win, ldwin, w, ldw);
                if (!same(x, xg, 5 * n) || !same(win, wing, 5 * ldwin)) {
                    fprintf(stderr, "  %s: dnet_conv n=%lld taps=%d differs\n", lv[l]->name,
                            (long long)n, taps);
                    t->n_fail++;
                }
                free_floats(x);
                free_floats(win);
            }
            free_floats(x0);
            free_floats(win0);
            free_floats(w);
            free_floats(xg);
            free_floats(wing);
        }
}

/* The generic conv against its definition written out (a window of taps - 1 inputs). */
TEST(kern_dnet_conv_generic_definition) {
    const float w[3] = {0.5f, -2.0f, 4.0f}; /* taps = 3, one channel */
    float win[2] = {1.0f, 2.0f}, x = 3.0f;
    cpulm_kernels_generic.dnet_conv(1, 3, &x, win, 1, w, 1);
    CHECK(t, x == 0.5f * 1.0f - 2.0f * 2.0f + 4.0f * 3.0f);
    CHECK(t, win[0] == 2.0f && win[1] == 3.0f);
}

/* silu (the convolution's and the gate's activation): canonical as swiglu, so every level
 * equals generic, tails and extremes included */
TEST(kern_dnet_silu_levels_match_generic) {
    const cpulm_kernels *lv[MAX_LEVELS];
    const int nl = test_kernel_levels(lv, MAX_LEVELS);
    const int64_t n = 301;
    uint64_t rs = 5;
    float *x = rand_floats(n, &rs), *yg = rand_floats(n, &rs);
    REQUIRE(t, x && yg);
    for (int64_t i = 0; i < n; i++)
        x[i] *= 30.0f;
    x[0] = 0.0f;
    x[1] = -0.0f;
    x[2] = 100.0f;
    x[3] = -100.0f;
    x[4] = -88.5f;
    x[n - 1] = -90.0f; /* in the libm tail */
    for (int64_t len = 0; len <= n; len += len < 40 ? 1 : 37) {
        cpulm_kernels_generic.silu(len, yg, x);
        for (int l = 1; l < nl; l++) {
            float *y = rand_floats(n, &rs);
            REQUIRE(t, y);
            lv[l]->silu(len, y, x);
            if (!same(y, yg, len)) {
                fprintf(stderr, "  %s: silu n=%lld differs from generic\n", lv[l]->name,
                        (long long)len);
                t->n_fail++;
            }
            free_floats(y);
        }
    }
    free_floats(x);
    free_floats(yg);
}
