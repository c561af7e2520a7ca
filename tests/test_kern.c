/* test_kern.c: every kernel-table entry at every ISA level this CPU offers, against the
 * generic (portable C) table: odd sizes (1, 37, 100 blocks), unaligned buffers, extreme
 * quant values, NaN-prefilled outputs; plus dispatch (levels, CPULM_ISA override). */
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "cpulm.h"
#include "base/fp16.h"
#include "kernels/kernels.h"
#include "levels.h"
#include "test.h"

#if defined(__aarch64__)
#include <sys/prctl.h>
#ifndef PR_SVE_GET_VL
#define PR_SVE_GET_VL 51
#endif
#endif

#define MAX_LEVELS 16

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void fill(float *x, int64_t n, uint64_t seed, float scale) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int64_t i = 0; i < n; i++) {
        float v = 0;
        for (int k = 0; k < 3; k++)
            v += (float)((double)(rng_next(&s) >> 11) / 9007199254740992.0 - 0.5);
        x[i] = v * scale;
    }
}

/* malloc'd buffer whose returned pointer is 4 bytes past a 64-byte boundary: unaligned for
 * every vector width, but still naturally aligned for every element type (f32, fp16 and
 * the block structs), as the kernel contract requires. Free with free_unaligned. */
#define MISALIGN 4
static void *alloc_unaligned(size_t n) {
    uint8_t *p = NULL;
    if (posix_memalign((void **)&p, 64, n + 64)) return NULL;
    return p + MISALIGN;
}

static void free_unaligned(void *p) {
    if (p) free((uint8_t *)p - MISALIGN);
}

/* the levels this CPU dispatches to (the dispatch tests) */
static int get_levels(const cpulm_kernels **lv) {
    return cpulm_kernels_levels(lv, MAX_LEVELS);
}

/* the levels the numeric tests compare with generic: those, plus the avx512 levels under
 * emulation on x86 CPUs without AVX-512 (tests/levels.h) */
static int kernel_levels(const cpulm_kernels **lv) {
    return test_kernel_levels(lv, MAX_LEVELS);
}

static const cpulm_dtype computable[] = {
    CPULM_DTYPE_F32,  CPULM_DTYPE_F16,  CPULM_DTYPE_BF16, CPULM_DTYPE_Q8_0,
    CPULM_DTYPE_Q4_0, CPULM_DTYPE_Q4_1, CPULM_DTYPE_Q5_0, CPULM_DTYPE_Q5_1,
    CPULM_DTYPE_Q4_K, CPULM_DTYPE_Q5_K, CPULM_DTYPE_Q6_K, CPULM_DTYPE_MXFP4,
};
#define N_COMPUTABLE (sizeof computable / sizeof computable[0])

/* ---- table shape and dispatch ---- */

static int table_complete(test_ctx *t, const cpulm_kernels *k) {
    int missing = 0;
    for (size_t i = 0; i < N_COMPUTABLE; i++) {
        const cpulm_dtype w = computable[i];
        const cpulm_dtype a = cpulm_dtype_traits_get(w)->vec_dot_type;
        missing += !k->vec_dot[w] + !k->from_float[w] + !k->to_float[w] + !k->from_float[a] +
                   !k->to_float[a];
    }
    missing += !k->name;
    /* every plain op of kernels.h's list: the list, not this test, names them */
#define OP_PRESENT(ID, name, ret, params, group) missing += !k->name;
    CPULM_KERNEL_OPS(OP_PRESENT)
#undef OP_PRESENT
    if (missing) fprintf(stderr, "  %s: %d missing entries\n", k->name, missing);
    CHECK_EQ_INT(t, missing, 0);
    return missing == 0;
}

TEST(kern_generic_table_complete) {
    table_complete(t, &cpulm_kernels_generic);
    /* every computable type is registered as such in the traits */
    for (uint32_t id = 0; id < CPULM_DTYPE_COUNT; id++) {
        const cpulm_dtype_traits *tr = cpulm_dtype_traits_get(id);
        if (tr && tr->computable) CHECK(t, cpulm_kernels_generic.vec_dot[id] != NULL);
    }
}

TEST(kern_levels_merged_and_complete) {
    const cpulm_kernels *lv[MAX_LEVELS];
    const int n = get_levels(lv);
    REQUIRE(t, n >= 1);
    CHECK(t, strcmp(lv[0]->name, "generic") == 0);
    const cpulm_kernels *best = cpulm_kernels_get();
    int found = 0;
    for (int i = 0; i < n; i++) {
        table_complete(t, lv[i]);
        found += lv[i] == best;
    }
    if (!getenv("CPULM_ISA"))
        CHECK(t, best == lv[n - 1]); /* no override: the best level */
    else
        CHECK_EQ_INT(t, found, 1);
    CHECK(t, strcmp(cpulm_kernel_level(), best->name) == 0);
    CHECK(t, cpulm_cpu_features() != NULL && cpulm_cpu_features()[0] != 0);
    printf("  cpu: %s\n  levels:", cpulm_cpu_features());
    for (int i = 0; i < n; i++)
        printf(" %s", lv[i]->name);
    printf("  (chosen: %s)\n", best->name);
}

/* The per-CPU ctest entries (cmake/arm_tests.cmake, under qemu) say which level detection
 * must pick, so a broken HWCAP check cannot pass by quietly testing fewer levels; on
 * aarch64 they also say the SVE vector length (bytes) qemu must have given us. */
TEST(kern_expected_level) {
    const char *want = getenv("CPULM_EXPECT_LEVEL");
    if (!want || !*want) NOT_APPLICABLE(t, "CPULM_EXPECT_LEVEL not set");
    if (strcmp(cpulm_kernel_level(), want) != 0)
        fprintf(stderr, "  chose %s, expected %s (cpu: %s)\n", cpulm_kernel_level(), want,
                cpulm_cpu_features());
    CHECK(t, strcmp(cpulm_kernel_level(), want) == 0);
#if defined(__aarch64__)
    const char *vl = getenv("CPULM_EXPECT_SVE_VL");
    if (vl && *vl) {
        const int got = prctl(PR_SVE_GET_VL) & 0xffff; /* low bits: VL in bytes */
        printf("  sve vector length: %d bytes\n", got);
        CHECK_EQ_INT(t, got, atoi(vl));
    }
#endif
}

/* Helper run in a child process by kern_isa_override: reports what dispatch chose. */
TEST(kern_report_level) {
    const char *w = cpulm_kernels_isa_warning();
    CHECK(t, cpulm_kernel_level() != NULL);
    printf("  level=%s warning=%s\n", cpulm_kernel_level(), w ? "yes" : "no");
}

/* Runs this binary again with CPULM_ISA=isa, test kern_report_level; 1 = ran and exited 0,
 * 0 = failed, -1 = could not be executed at all. */
static int run_child(const char *isa, char *out, size_t cap) {
    char exe[1024], cmd[1400];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0) return 0;
    exe[len] = 0;
#ifdef CPULM_TEST_EMULATOR /* a cross build: /proc/self/exe is the foreign binary */
    const char *emu = CPULM_TEST_EMULATOR " ";
#else
    const char *emu = "";
#endif
    snprintf(cmd, sizeof cmd, "CPULM_ISA='%s' %s'%s' kern_report_level", isa, emu, exe);
    FILE *p = popen(cmd, "r");
    if (!p) return 0;
    size_t got = fread(out, 1, cap - 1, p);
    out[got] = 0;
    const int status = pclose(p);
    /* no "level=" at all: the binary could not be re-executed (e.g. under qemu-user without
     * binfmt_misc, where /proc/self/exe is the foreign binary) */
    if (!strstr(out, "level=")) return -1;
    return status == 0;
}

TEST(kern_isa_override) {
    const cpulm_kernels *lv[MAX_LEVELS];
    const int n = get_levels(lv);
    char out[4096], want[128];
    for (int i = 0; i < n; i++) { /* every usable level can be forced */
        const int ok = run_child(lv[i]->name, out, sizeof out);
        if (ok < 0) SKIP(t, "cannot re-execute the test binary (qemu-user without binfmt?)");
        REQUIRE(t, ok == 1);
        snprintf(want, sizeof want, "level=%s warning=no", lv[i]->name);
        CHECK(t, strstr(out, want) != NULL);
    }
    /* unknown names fall back to the best level, with a warning */
    REQUIRE(t, run_child("no-such-isa", out, sizeof out) == 1);
    snprintf(want, sizeof want, "level=%s warning=yes", lv[n - 1]->name);
    if (!getenv("CPULM_ISA"))
        CHECK(t, strstr(out, want) != NULL);
    else
        CHECK(t, strstr(out, "warning=yes") != NULL);
}

/* ---- vec_dot ---- */

/* Per-type tolerance, relative to sum |x_i * y_i| of the dequantized rows: the integer
 * block sums are exact at every level, so only float accumulation order differs. */
static double dot_rtol(cpulm_dtype w) {
    return (w == CPULM_DTYPE_F32 || w == CPULM_DTYPE_F16 || w == CPULM_DTYPE_BF16) ? 2e-6 : 1e-5;
}

typedef struct {
    int64_t n;
    void *wq, *aq; /* unaligned weight / activation rows */
    double abs_sum;
} dot_case;

static int make_dot_case(dot_case *c, cpulm_dtype w, int64_t n, uint64_t seed) {
    const cpulm_dtype a = cpulm_dtype_traits_get(w)->vec_dot_type;
    float *xf = malloc((size_t)n * sizeof *xf), *yf = malloc((size_t)n * sizeof *yf);
    c->n = n;
    c->wq = alloc_unaligned(cpulm_dtype_row_bytes(w, n));
    c->aq = alloc_unaligned(cpulm_dtype_row_bytes(a, n));
    fill(xf, n, seed, 0.1f);
    fill(yf, n, seed + 1000, 2.0f);
    cpulm_kernels_generic.from_float[w](xf, c->wq, n);
    cpulm_kernels_generic.from_float[a](yf, c->aq, n);
    cpulm_kernels_generic.to_float[w](c->wq, xf, n);
    cpulm_kernels_generic.to_float[a](c->aq, yf, n);
    c->abs_sum = 0;
    for (int64_t i = 0; i < n; i++)
        c->abs_sum += fabs((double)xf[i] * yf[i]);
    free(xf);
    free(yf);
    return c->wq && c->aq;
}

static void check_dot_all_levels(test_ctx *t, cpulm_dtype w, const dot_case *c) {
    const cpulm_kernels *lv[MAX_LEVELS];
    const int nl = kernel_levels(lv);
    float ref = NAN;
    cpulm_kernels_generic.vec_dot[w](c->n, &ref, c->wq, c->aq);
    for (int l = 0; l < nl; l++) {
        float got = NAN; /* NaN-prefilled: a kernel that forgets to store fails */
        lv[l]->vec_dot[w](c->n, &got, c->wq, c->aq);
        const double tol = dot_rtol(w) * c->abs_sum + 1e-30;
        if (!(fabs((double)got - ref) <= tol))
            fprintf(stderr, "  %s %s n=%lld: %.9g vs generic %.9g (tol %.3g)\n", lv[l]->name,
                    cpulm_dtype_name(w), (long long)c->n, got, ref, tol);
        CHECK(t, fabs((double)got - ref) <= tol);
    }
}

TEST(kern_vec_dot_all_levels_odd_sizes) {
    static const int64_t nblocks[] = {1, 37, 100};
    for (size_t i = 0; i < N_COMPUTABLE; i++) {
        const cpulm_dtype w = computable[i];
        const int blk = cpulm_dtype_traits_get(w)->block;
        for (size_t k = 0; k < 3; k++) {
            /* float types: 1, 37 and 3201 elements so every vector tail path runs */
            const int64_t n = blk == 1 ? (k == 2 ? 3201 : nblocks[k]) : nblocks[k] * blk;
            dot_case c;
            REQUIRE(t, make_dot_case(&c, w, n, 11 + k + 100 * i));
            check_dot_all_levels(t, w, &c);
            free_unaligned(c.wq);
            free_unaligned(c.aq);
        }
    }
}

/* gemm_rows (F32, F16: several weight rows against several activation rows per pass) at
 * every level equals the generic vec_dot of each pair bit for bit: row tails (nr % 4),
 * token tails (nt % 4), element tails (n % 16), padded strides, NaN-prefilled output. */
static void check_gemm_rows(test_ctx *t, const cpulm_kernels *k, cpulm_dtype ty, int64_t n, int nr,
                            int nt, const uint8_t *w, uint64_t ws, const uint8_t *a, uint64_t as) {
    float got[16 * 17];
    for (int i = 0; i < 16 * 17; i++)
        got[i] = NAN;
    k->gemm_rows[ty](n, nr, nt, got, 17, w, ws, a, as);
    int bad = 0;
    for (int j = 0; j < nt; j++)
        for (int r = 0; r < nr; r++) {
            float ref = NAN; /* BF16's vec_dot is each level's own (kernels.h) */
            const cpulm_kernels *rk = ty == CPULM_DTYPE_BF16 ? k : &cpulm_kernels_generic;
            rk->vec_dot[ty](n, &ref, w + r * ws, a + j * as);
            bad += memcmp(&ref, &got[j * 17 + r], 4) != 0;
        }
    if (bad)
        fprintf(stderr, "  %s gemm_rows %s n=%lld nr=%d nt=%d: %d differ from vec_dot\n", k->name,
                cpulm_dtype_name(ty), (long long)n, nr, nt, bad);
    CHECK_EQ_INT(t, bad, 0);
}

/* F32 (canon_dot_f32's 16 lanes, 4 x 16 over 64-element steps and an fmaf tail when n % 16
 * != 0) and F16 (exact products in double); n covers both F32 orders' edges: under 64 with a
 * tail only, 64 and 128 whole, 172 (stories260K's ffn) with steps and a tail. */
static void gemm_rows_type(test_ctx *t, cpulm_dtype ty, const cpulm_kernels *const *lv, int nl) {
    static const int64_t ns[] = {1, 15, 16, 33, 64, 172, 300};
    static const int nrs[] = {1, 4, 5, 16}, nts[] = {1, 2, 3, 4, 5, 16};
    /* under qemu / ASan every other n and token count: n 1, 16, 64, 300; 1, 3, 5 tokens */
    const size_t step = test_emulated() || test_sanitized() ? 2 : 1;
    const int64_t nmax = 300;
    /* padded rows; F16 / BF16 2-byte aligned only, F32 4-byte (its rows always are; MISALIGN
     * is 4) */
    const uint64_t stride = ty == CPULM_DTYPE_F32 ? 4 * nmax + 12 : 2 * nmax + 6;
    float *x = malloc(16 * nmax * sizeof *x);
    uint8_t *w = alloc_unaligned(16 * stride), *a = alloc_unaligned(16 * stride);
    REQUIRE(t, x && w && a);
    const int own = ty == CPULM_DTYPE_BF16; /* only some levels have one, matching their vec_dot */
    REQUIRE(t, own || cpulm_kernels_generic.gemm_rows[ty] != NULL);
    fill(x, 16 * nmax, 31, 0.1f);
    for (int r = 0; r < 16; r++)
        cpulm_kernels_generic.from_float[ty](x + r * nmax, w + r * stride, nmax);
    fill(x, 16 * nmax, 41, 2.0f);
    for (int j = 0; j < 16; j++)
        cpulm_kernels_generic.from_float[ty](x + j * nmax, a + j * stride, nmax);
    int checked = 0;
    for (int l = 0; l < nl; l++) {
        if (own && !lv[l]->gemm_rows[ty]) continue;
        checked++;
        CHECK(t, lv[l]->gemm_rows[ty] != NULL);
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni += step)
            for (size_t ri = 0; ri < sizeof nrs / sizeof nrs[0]; ri++)
                for (size_t ji = 0; ji < sizeof nts / sizeof nts[0]; ji += step)
                    check_gemm_rows(t, lv[l], ty, ns[ni], nrs[ri], nts[ji], w, stride, a, stride);
    }
    if (!own) CHECK_EQ_INT(t, checked, nl);
    free(x);
    free_unaligned(w);
    free_unaligned(a);
}

TEST(kern_gemm_rows_all_levels) {
    const cpulm_kernels *lv[MAX_LEVELS];
    const int nl = kernel_levels(lv);
    gemm_rows_type(t, CPULM_DTYPE_F32, lv, nl);
    gemm_rows_type(t, CPULM_DTYPE_F16, lv, nl);
    /* BF16: the levels that have one (avx512) give their own vec_dot's bits, every shape */
    gemm_rows_type(t, CPULM_DTYPE_BF16, lv, nl);
}

TEST(kern_vec_dot_extreme_quants) {
    /* weights at the ends of their ranges (Q8_0 -128 and 127, Q4_0 nibbles 0 and 15)
     * against activations at +-127, all with the largest normal fp16 scales kept small
     * enough that the sums stay finite */
    enum { NB = 37 };
    cpulm_block_q8_0 *x8 = alloc_unaligned(NB * sizeof *x8), *y8 = alloc_unaligned(NB * sizeof *y8);
    cpulm_block_q4_0 *x4 = alloc_unaligned(NB * sizeof *x4);
    uint64_t s = 5;
    for (int b = 0; b < NB; b++) {
        x8[b].d = 0x3c00; /* 1.0 */
        y8[b].d = (uint16_t)(0x3800 + b);
        x4[b].d = 0x3c00;
        for (int j = 0; j < 32; j++) {
            x8[b].qs[j] = (int8_t)((rng_next(&s) & 1) ? 127 : -128);
            y8[b].qs[j] = (int8_t)((rng_next(&s) & 1) ? 127 : -127);
        }
        for (int j = 0; j < 16; j++)
            x4[b].qs[j] = (uint8_t)((rng_next(&s) & 1) ? 0x0F : 0xF0);
    }
    const cpulm_kernels *lv[MAX_LEVELS];
    const int nl = kernel_levels(lv);
    float r8, r4;
    cpulm_kernels_generic.vec_dot[CPULM_DTYPE_Q8_0](NB * 32, &r8, x8, y8);
    cpulm_kernels_generic.vec_dot[CPULM_DTYPE_Q4_0](NB * 32, &r4, x4, y8);
    for (int l = 0; l < nl; l++) {
        float g8 = NAN, g4 = NAN;
        lv[l]->vec_dot[CPULM_DTYPE_Q8_0](NB * 32, &g8, x8, y8);
        lv[l]->vec_dot[CPULM_DTYPE_Q4_0](NB * 32, &g4, x4, y8);
        CHECK_NEAR(t, g8, r8, 1e-5 * NB * 32 * 128 * 127);
        CHECK_NEAR(t, g4, r4, 1e-5 * NB * 32 * 8 * 127);
    }
    free_unaligned(x8);
    free_unaligned(y8);
    free_unaligned(x4);
}

/* ---- from_float / to_float ---- */

TEST(kern_from_float_bit_exact_all_levels) {
    /* activation quantizers must be bit-identical to the reference at every level, so the
     * level never changes which integers the dots see */
    static const int64_t sizes[] = {256, 37 * 256, 100 * 256};
    const cpulm_kernels *lv[MAX_LEVELS];
    const int nl = kernel_levels(lv);
    for (cpulm_dtype ty = 0; ty < CPULM_DTYPE_COUNT; ty++) {
        if (!cpulm_kernels_generic.from_float[ty]) continue;
        for (size_t k = 0; k < 3; k++) {
            const int64_t n = sizes[k];
            const size_t bytes = cpulm_dtype_row_bytes(ty, n);
            float *x = alloc_unaligned((size_t)n * sizeof *x);
            uint8_t *ref = malloc(bytes), *got = alloc_unaligned(bytes);
            fill(x, n, 3 + k, 4.0f);
            x[5] = 0.0f;
            cpulm_kernels_generic.from_float[ty](x, ref, n);
            for (int l = 0; l < nl; l++) {
                memset(got, 0xA5, bytes);
                lv[l]->from_float[ty](x, got, n);
                if (memcmp(got, ref, bytes))
                    fprintf(stderr, "  %s from_float %s n=%lld differs\n", lv[l]->name,
                            cpulm_dtype_name(ty), (long long)n);
                CHECK(t, memcmp(got, ref, bytes) == 0);
            }
            free_unaligned(x);
            free(ref);
            free_unaligned(got);
        }
    }
}

TEST(kern_from_float_signed_ties_all_levels) {
    /* +a and -a both the largest magnitude in a block: quantizers that keep the signed
     * extreme (Q8_K, Q4_0, ...) must pick the first one, as the reference's strict > scan
     * does; block 0 has -a first, block 1 has +a first */
    enum { N = 2 * 256 };
    const cpulm_kernels *lv[MAX_LEVELS];
    const int nl = kernel_levels(lv);
    float *x = alloc_unaligned(N * sizeof *x);
    fill(x, N, 77, 1.0f);
    x[3] = -5.0f, x[200] = 5.0f, x[256 + 10] = 5.0f, x[256 + 20] = -5.0f;
    for (cpulm_dtype ty = 0; ty < CPULM_DTYPE_COUNT; ty++) {
        if (!cpulm_kernels_generic.from_float[ty]) continue;
        const size_t bytes = cpulm_dtype_row_bytes(ty, N);
        uint8_t *ref = malloc(bytes), *got = malloc(bytes);
        cpulm_kernels_generic.from_float[ty](x, ref, N);
        for (int l = 0; l < nl; l++) {
            memset(got, 0xA5, bytes);
            lv[l]->from_float[ty](x, got, N);
            if (memcmp(got, ref, bytes))
                fprintf(stderr, "  %s from_float %s differs\n", lv[l]->name, cpulm_dtype_name(ty));
            CHECK(t, memcmp(got, ref, bytes) == 0);
        }
        free(ref);
        free(got);
    }
    free_unaligned(x);
}

TEST(kern_to_float_all_levels) {
    const cpulm_kernels *lv[MAX_LEVELS];
    const int nl = kernel_levels(lv);
    const int64_t n = 37 * 256;
    for (cpulm_dtype ty = 0; ty < CPULM_DTYPE_COUNT; ty++) {
        if (!cpulm_kernels_generic.to_float[ty] || !cpulm_kernels_generic.from_float[ty]) continue;
        float *x = malloc((size_t)n * sizeof *x), *ref = malloc((size_t)n * sizeof *ref);
        float *got = alloc_unaligned((size_t)n * sizeof *got);
        void *q = alloc_unaligned(cpulm_dtype_row_bytes(ty, n));
        fill(x, n, 9, 1.0f);
        cpulm_kernels_generic.from_float[ty](x, q, n);
        cpulm_kernels_generic.to_float[ty](q, ref, n);
        float amax = 0;
        for (int64_t i = 0; i < n; i++)
            amax = fmaxf(amax, fabsf(ref[i]));
        for (int l = 0; l < nl; l++) {
            for (int64_t i = 0; i < n; i++)
                got[i] = NAN;
            lv[l]->to_float[ty](q, got, n);
            int bad = 0; /* an FMA-based level may differ from d*q - m by one rounding */
            for (int64_t i = 0; i < n; i++)
                bad += !(fabsf(got[i] - ref[i]) <= 1e-6f * amax);
            if (bad)
                fprintf(stderr, "  %s to_float %s: %d bad\n", lv[l]->name, cpulm_dtype_name(ty),
                        bad);
            CHECK_EQ_INT(t, bad, 0);
        }
        free(x);
        free(ref);
        free_unaligned(got);
        free_unaligned(q);
    }
}

/* F16 rows of every length up to 40 (every vector tail; a head of 8 is all tail): each level
 * converts them as the generic op, bit for bit, and writes nothing past them. */
TEST(kern_to_float_f16_tails_all_levels) {
    const cpulm_kernels *lv[MAX_LEVELS];
    const int nl = kernel_levels(lv);
    uint16_t h[40];
    float ref[48], got[48];
    uint64_t s = 5;
    for (int i = 0; i < 40; i++) { /* every exponent, both signs, subnormals, inf, NaN */
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        h[i] = (uint16_t)(s >> 48);
        /* signalling NaNs quieted: the hardware converts them quiet, a cache never holds one
         * (its values come from float conversions, which quiet them too) */
        if ((h[i] & 0x7c00) == 0x7c00 && (h[i] & 0x3ff)) h[i] |= 0x200;
    }
    h[3] = 0x7c00, h[9] = 0x8001, h[17] = 0x7e00; /* inf, the smallest subnormal, NaN */
    for (int64_t n = 1; n <= 40; n++) {
        cpulm_kernels_generic.to_float[CPULM_DTYPE_F16](h, ref, n);
        for (int l = 0; l < nl; l++) {
            for (int i = 0; i < 48; i++)
                got[i] = -7.0f;
            lv[l]->to_float[CPULM_DTYPE_F16](h, got, n);
            CHECK(t, memcmp(ref, got, sizeof(float) * (size_t)n) == 0);
            for (int i = (int)n; i < 48; i++)
                CHECK(t, got[i] == -7.0f);
        }
    }
}

/* ---- f32 ops ---- */

static double max_rel_err(const float *a, const float *b, int64_t n) {
    double m = 0, scale = 0;
    for (int64_t i = 0; i < n; i++)
        scale = fmax(scale, fabs((double)b[i]));
    for (int64_t i = 0; i < n; i++) {
        const double e = fabs((double)a[i] - b[i]) / (scale > 0 ? scale : 1);
        m = (e > m || isnan(e)) ? e : m;
    }
    return m;
}

typedef enum { OP_RMS, OP_SWIGLU, OP_SOFTMAX, OP_AXPY } f32_op;

static void run_op(const cpulm_kernels *k, f32_op op, int64_t n, float *out, const float *a,
                   const float *b) {
    switch (op) {
    case OP_RMS: k->rms_norm(n, out, a, b, 1e-5f); break;
    case OP_SWIGLU: k->swiglu(n, out, a, b); break;
    case OP_SOFTMAX:
        memcpy(out, a, (size_t)n * sizeof *out);
        k->softmax(n, out);
        break;
    case OP_AXPY:
        memcpy(out, b, (size_t)n * sizeof *out);
        k->axpy(n, out, 0.37f, a);
        break;
    }
}

TEST(kern_f32_ops_all_levels) {
    static const char *names[] = {"rms_norm", "swiglu", "softmax", "axpy"};
    static const int64_t sizes[] = {1, 37, 1003};
    const cpulm_kernels *lv[MAX_LEVELS];
    const int nl = kernel_levels(lv);
    for (size_t k = 0; k < 3; k++) {
        const int64_t n = sizes[k];
        float *a = alloc_unaligned((size_t)n * 4), *b = alloc_unaligned((size_t)n * 4);
        float *ref = malloc((size_t)n * 4), *got = alloc_unaligned((size_t)n * 4);
        fill(a, n, 21 + k, 20.0f); /* wide enough to exercise exp's range */
        fill(b, n, 22 + k, 2.0f);
        for (int op = OP_RMS; op <= OP_AXPY; op++) {
            /* softmax gets a masked logit (-inf) that must come out exactly 0 */
            if (n > 3) a[2] = op == OP_SOFTMAX ? -INFINITY : 3.5f;
            run_op(&cpulm_kernels_generic, (f32_op)op, n, ref, a, b);
            for (int l = 0; l < nl; l++) {
                for (int64_t i = 0; i < n; i++)
                    got[i] = NAN;
                run_op(lv[l], (f32_op)op, n, got, a, b);
                const double e = max_rel_err(got, ref, n);
                if (!(e <= 2e-6))
                    fprintf(stderr, "  %s %s n=%lld: max rel err %g\n", lv[l]->name, names[op],
                            (long long)n, e);
                CHECK(t, e <= 2e-6);
                if (op == OP_SOFTMAX && n > 3) CHECK(t, got[2] == 0.0f);
            }
        }
        /* dot_f32 from an odd offset (unaligned by a further 3 floats) */
        const int64_t off = n > 3 ? 3 : 0, m = n - off;
        const float r = cpulm_kernels_generic.dot_f32(m, a + off, b);
        double abs_sum = 0;
        for (int64_t i = 0; i < m; i++)
            abs_sum += fabs((double)a[i + off] * b[i]);
        for (int l = 0; l < nl; l++)
            CHECK_NEAR(t, lv[l]->dot_f32(m, a + off, b), r, 2e-6 * abs_sum + 1e-30);
        free_unaligned(a);
        free_unaligned(b);
        free(ref);
        free_unaligned(got);
    }
}

/* ---- aarch64 only: the i8mm 2x2 tiles (not in the table yet, reached by name) ---- */
#if defined(__aarch64__)
#include "kernels/arm/i8mm.h"

static int have_level(const char *name) {
    const cpulm_kernels *lv[MAX_LEVELS];
    const int n = get_levels(lv);
    for (int i = 0; i < n; i++)
        if (strcmp(lv[i]->name, name) == 0) return 1;
    return 0;
}

/* Two weight rows x two activation rows at strides longer than a row (so bx / by are
 * really used), every element of the tile against generic vec_dot. */
static void check_tile(test_ctx *t, cpulm_dtype w, cpulm_vec_dot_2x2_fn fn, int64_t n) {
    const cpulm_dtype a = CPULM_DTYPE_Q8_0;
    const size_t bx = cpulm_dtype_row_bytes(w, n) + 6, by = cpulm_dtype_row_bytes(a, n) + 2;
    uint8_t *x = alloc_unaligned(2 * bx), *y = alloc_unaligned(2 * by);
    float *f = malloc((size_t)n * sizeof *f), *xf = malloc(2 * (size_t)n * sizeof *xf);
    float *yf = malloc(2 * (size_t)n * sizeof *yf);
    for (int r = 0; r < 2; r++) {
        fill(f, n, 40 + r, 0.1f);
        cpulm_kernels_generic.from_float[w](f, x + r * bx, n);
        cpulm_kernels_generic.to_float[w](x + r * bx, xf + r * n, n);
        fill(f, n, 50 + r, 2.0f);
        cpulm_kernels_generic.from_float[a](f, y + r * by, n);
        cpulm_kernels_generic.to_float[a](y + r * by, yf + r * n, n);
    }
    const size_t bs = 5;
    float s[2 * 5];
    for (size_t i = 0; i < 2 * bs; i++)
        s[i] = NAN;
    fn(n, s, bs, x, bx, y, by);
    for (int r = 0; r < 2; r++) {
        for (int c = 0; c < 2; c++) {
            float ref = NAN;
            cpulm_kernels_generic.vec_dot[w](n, &ref, x + r * bx, y + c * by);
            double abs_sum = 0;
            for (int64_t i = 0; i < n; i++)
                abs_sum += fabs((double)xf[r * n + i] * yf[c * n + i]);
            CHECK_NEAR(t, s[r * bs + c], ref, dot_rtol(w) * abs_sum + 1e-30);
        }
    }
    free_unaligned(x);
    free_unaligned(y);
    free(f);
    free(xf);
    free(yf);
}

#endif

/* (the test list is generated from every TEST line, so the test exists on every arch) */
TEST(kern_arm_i8mm_tiles_2x2) {
#if defined(__aarch64__)
    if (!have_level("i8mm")) NOT_APPLICABLE(t, "this CPU has no i8mm");
    for (int64_t nb = 1; nb <= 37; nb += 36) {
        check_tile(t, CPULM_DTYPE_Q8_0, cpulm_i8mm_vec_dot_2x2_q8_0_q8_0, nb * 32);
        check_tile(t, CPULM_DTYPE_Q4_0, cpulm_i8mm_vec_dot_2x2_q4_0_q8_0, nb * 32);
    }
#else
    NOT_APPLICABLE(t, "aarch64 only");
#endif
}

/* The canonical float ops (F32/F16 dots, rms_norm, swiglu, swiglu_oai) must be
 * bit-identical to generic at every level: float models then give the same logits at every
 * level (and the reference engine's, see docs/ARCHITECTURE.md). */
TEST(kern_canonical_float_ops_bit_identical) {
    const cpulm_kernels *lv[16];
    int n_lv = kernel_levels(lv);
    const cpulm_kernels *g = &cpulm_kernels_generic;
    static const int sizes[] = {1, 7, 8, 16, 63, 64, 100, 172, 256, 768, 1000};
    float *x = malloc(sizeof(float) * 1024), *y = malloc(sizeof(float) * 1024);
    float *w = malloc(sizeof(float) * 1024), *o1 = malloc(sizeof(float) * 1024);
    float *o2 = malloc(sizeof(float) * 1024);
    uint16_t *hx = malloc(2 * 1024);
    REQUIRE(t, x && y && w && o1 && o2 && hx);
    uint32_t r = 12345;
    for (int i = 0; i < 1024; i++) {
        r = r * 1664525u + 1013904223u;
        x[i] = ((float)(r >> 8) / 16777216.0f - 0.5f) * 8.0f;
        r = r * 1664525u + 1013904223u;
        y[i] = ((float)(r >> 8) / 16777216.0f - 0.5f) * 4.0f;
        w[i] = 1.0f + y[i] * 0.1f;
        hx[i] = cpulm_f32_to_fp16(y[i]);
    }
    for (int l = 0; l < n_lv; l++) {
        const cpulm_kernels *k = lv[l];
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
            int n = sizes[si];
            float a, b;
            g->vec_dot[CPULM_DTYPE_F32](n, &a, x, y);
            k->vec_dot[CPULM_DTYPE_F32](n, &b, x, y);
            CHECK(t, memcmp(&a, &b, 4) == 0);
            uint16_t xa[1024];
            for (int i = 0; i < n; i++)
                xa[i] = cpulm_f32_to_fp16(x[i]);
            g->vec_dot[CPULM_DTYPE_F16](n, &a, xa, hx);
            k->vec_dot[CPULM_DTYPE_F16](n, &b, xa, hx);
            CHECK(t, memcmp(&a, &b, 4) == 0);
            g->rms_norm(n, o1, x, w, 1e-5f);
            k->rms_norm(n, o2, x, w, 1e-5f);
            CHECK(t, memcmp(o1, o2, sizeof(float) * (size_t)n) == 0);
            g->swiglu(n, o1, x, y);
            k->swiglu(n, o2, x, y);
            CHECK(t, memcmp(o1, o2, sizeof(float) * (size_t)n) == 0);
            /* limit 3: the clamps bind on both sides for these inputs (|x| < 4, |y| < 2) */
            g->swiglu_oai(n, o1, x, y, 1.702f, 3.0f);
            k->swiglu_oai(n, o2, x, y, 1.702f, 3.0f);
            CHECK(t, memcmp(o1, o2, sizeof(float) * (size_t)n) == 0);
            g->swiglu_oai(n, o1, x, y, 1.702f, 1.5f);
            k->swiglu_oai(n, o2, x, y, 1.702f, 1.5f);
            CHECK(t, memcmp(o1, o2, sizeof(float) * (size_t)n) == 0);
            /* rope: 3 heads of n dims, the even part rotated, both pair styles (angles: w, y) */
            for (int neox = 0; neox < 2 && n >= 2 && 3 * n <= 1024; neox++) {
                memcpy(o1, x, sizeof(float) * 3 * (size_t)n);
                memcpy(o2, x, sizeof(float) * 3 * (size_t)n);
                g->rope(o1, 3, n, n & ~1, neox, w, y);
                k->rope(o2, 3, n, n & ~1, neox, w, y);
                CHECK(t, memcmp(o1, o2, sizeof(float) * 3 * (size_t)n) == 0);
            }
        }
        if (t->n_fail) {
            fprintf(stderr, "  level %s differs from generic\n", k->name);
            break;
        }
    }
    free(x), free(y), free(w), free(o1), free(o2), free(hx);
}

/* gemm_mins (the min term of widened Q4_1 / Q5_1 weights): every level gives the generic
 * bits (one fma chain per output in block order) for block counts with and without vector
 * tails, 1-8 groups and 1-11 tokens (the levels block up to 4 groups or 8 tokens), strided
 * tokens and outputs. */
TEST(kern_gemm_mins_levels_match_generic) {
    const cpulm_kernels *lv[16];
    const int n_lv = kernel_levels(lv);
    enum { NB = 300, NT = 11, SS = (NB + 5) * 4, LD = 16 * 8 + 3 };
    float *m = malloc(sizeof(float) * 8 * NB * 16), *want = malloc(sizeof(float) * NT * LD),
          *got = malloc(sizeof(float) * NT * LD);
    uint8_t *s = malloc((size_t)SS * NT);
    REQUIRE(t, m && want && got && s);
    uint32_t r = 99;
    for (int i = 0; i < 8 * NB * 16; i++) {
        r = r * 1664525u + 1013904223u;
        m[i] = ((float)(r >> 8) / 16777216.0f - 0.5f) * 0.02f;
    }
    for (int i = 0; i < SS * NT / 4; i++) {
        r = r * 1664525u + 1013904223u;
        ((float *)s)[i] = ((float)(r >> 8) / 16777216.0f - 0.5f) * 300.0f;
    }
    static const int nbs[] = {1, 7, 36, NB};
    int bad = 0;
    for (int l = 0; l < n_lv; l++)
        for (size_t bi = 0; bi < sizeof nbs / sizeof nbs[0]; bi++)
            for (int ng = 1; ng <= 8; ng++)
                for (int nt = 1; nt <= NT; nt += nt < 3 ? 2 : nt < 8 ? 5 : 3) { /* 1 3 8 11 */
                    for (int i = 0; i < NT * LD; i++)
                        want[i] = got[i] = (float)i * 0.25f;
                    cpulm_kernels_generic.gemm_mins(nbs[bi], nt, ng, m, s, SS, want, LD);
                    lv[l]->gemm_mins(nbs[bi], nt, ng, m, s, SS, got, LD);
                    if (memcmp(want, got, sizeof(float) * NT * LD) != 0) {
                        if (!bad++)
                            fprintf(stderr, "  %s: nb %d ng %d nt %d differs\n", lv[l]->name,
                                    nbs[bi], ng, nt);
                    }
                }
    CHECK_EQ_INT(t, bad, 0);
    free(m), free(want), free(got), free(s);
}
