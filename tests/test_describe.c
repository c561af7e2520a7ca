/* test_describe.c: cpulm_kernel_describe and the provider rule behind it (describe.h):
 * an entry belongs to the lowest level whose merged table holds the final pointer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/describe.h"
#include "test.h"

static const cpulm_dtype weight_types[] = {
    CPULM_DTYPE_F32,  CPULM_DTYPE_F16,  CPULM_DTYPE_BF16, CPULM_DTYPE_Q8_0,
    CPULM_DTYPE_Q4_0, CPULM_DTYPE_Q4_1, CPULM_DTYPE_Q5_0, CPULM_DTYPE_Q5_1,
    CPULM_DTYPE_Q4_K, CPULM_DTYPE_Q5_K, CPULM_DTYPE_Q6_K, CPULM_DTYPE_MXFP4,
};
#define N_WT ((int)(sizeof weight_types / sizeof weight_types[0]))

TEST(describe_generic_level_is_all_generic) {
    /* what CPULM_ISA=generic selects: the generic merged table as the final one */
    const cpulm_kernels *lv[16];
    const int n = cpulm_kernels_levels(lv, 16);
    REQUIRE(t, n >= 1 && strcmp(lv[0]->name, "generic") == 0);
    for (int e = 0; e < CPULM_KENTRY_COUNT; e++)
        for (int i = 0; i < N_WT; i++) {
            const char *p =
                cpulm_kernels_provider(lv, n, lv[0], (cpulm_kernels_entry)e, weight_types[i]);
            CHECK(t, strcmp(p, "generic") == 0 || strcmp(p, "-") == 0);
        }
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    cpulm_kernels_describe_table(&b, lv, n, lv[0]);
    REQUIRE(t, cpulm_buf_status(&b) == CPULM_OK);
    for (int i = 1; i < n; i++) { /* no other level's name anywhere in the table */
        char word[40];
        snprintf(word, sizeof word, " %s", lv[i]->name);
        CHECK(t, strstr(b.data, word) == NULL);
    }
    CHECK(t, strstr(b.data, "yes") == NULL); /* the portable GEMM is never worth repacking */
    CHECK(t, strstr(b.data, "Q4_K   generic") != NULL);
    cpulm_buf_release(&b);
}

static void fake_vec_dot(int64_t n, float *s, const void *x, const void *y) {
    (void)n, (void)x, (void)y;
    *s = 0;
}
static void fake_swiglu(int64_t n, float *y, const float *g, const float *u) {
    (void)n, (void)y, (void)g, (void)u;
}
static void fake_rms_norm(int64_t n, float *y, const float *x, const float *w, float eps) {
    (void)n, (void)y, (void)x, (void)w, (void)eps;
}

TEST(describe_provider_is_lowest_defining_level) {
    /* three merged levels: "mid" writes vec_dot[Q8_0] and rms_norm, "top" inherits them and
     * writes swiglu */
    static cpulm_kernels lo, mid, top, stray;
    lo = cpulm_kernels_generic;
    mid = lo;
    mid.name = "mid";
    mid.vec_dot[CPULM_DTYPE_Q8_0] = fake_vec_dot;
    mid.rms_norm = fake_rms_norm;
    top = mid;
    top.name = "top";
    top.swiglu = fake_swiglu;
    const cpulm_kernels *lv[3] = {&lo, &mid, &top};
    CHECK(t, strcmp(cpulm_kernels_provider(lv, 3, &top, CPULM_KENTRY_VEC_DOT, CPULM_DTYPE_Q8_0),
                    "mid") == 0);
    CHECK(t, strcmp(cpulm_kernels_provider(lv, 3, &top, CPULM_KENTRY_VEC_DOT, CPULM_DTYPE_Q4_0),
                    "generic") == 0);
    CHECK(t, strcmp(cpulm_kernels_provider(lv, 3, &top, CPULM_KENTRY_RMS_NORM, 0), "mid") == 0);
    CHECK(t, strcmp(cpulm_kernels_provider(lv, 3, &top, CPULM_KENTRY_SWIGLU, 0), "top") == 0);
    CHECK(t, strcmp(cpulm_kernels_provider(lv, 3, &top, CPULM_KENTRY_SOFTMAX, 0), "generic") == 0);
    CHECK(t, strcmp(cpulm_kernels_provider(lv, 3, &top, CPULM_KENTRY_GEMM_X16, CPULM_DTYPE_F32),
                    "-") == 0);
    CHECK(t, strcmp(cpulm_kernels_provider(lv, 3, &mid, CPULM_KENTRY_SWIGLU, 0), "generic") == 0);
    stray = top; /* a pointer no level holds */
    stray.axpy = NULL;
    stray.vec_dot[CPULM_DTYPE_Q6_K] = fake_vec_dot;
    CHECK(t, strcmp(cpulm_kernels_provider(lv, 3, &stray, CPULM_KENTRY_VEC_DOT, CPULM_DTYPE_Q6_K),
                    "?") == 0);
    CHECK(t, strcmp(cpulm_kernels_provider(lv, 3, &stray, CPULM_KENTRY_AXPY, 0), "-") == 0);
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    cpulm_kernels_describe_table(&b, lv, 3, &top);
    CHECK(t, strstr(b.data, "Q8_0   mid ") != NULL);
    CHECK(t, strstr(b.data, "rms_norm mid, swiglu top, softmax generic") != NULL);
    cpulm_buf_release(&b);
}

TEST(describe_this_cpu) {
    const cpulm_kernels *lv[16];
    const int n = cpulm_kernels_levels(lv, 16);
    const cpulm_kernels *k = cpulm_kernels_get();
    for (int e = 0; e < CPULM_KENTRY_COUNT; e++)
        for (int i = 0; i < N_WT; i++) {
            const char *p =
                cpulm_kernels_provider(lv, n, k, (cpulm_kernels_entry)e, weight_types[i]);
            int known = strcmp(p, "-") == 0;
            for (int j = 0; j < n; j++)
                known |= strcmp(p, lv[j]->name) == 0;
            CHECK(t, known); /* every entry of the chosen table comes from some level */
        }
    size_t need = 0;
    CHECK(t, cpulm_kernel_describe(NULL, 0, &need) == CPULM_ERR_TOO_SMALL);
    REQUIRE(t, need > 100 && need < 16384);
    char *buf = malloc(need);
    REQUIRE(t, buf);
    size_t need2 = 0;
    CHECK(t, cpulm_kernel_describe(buf, need, &need2) == CPULM_OK);
    CHECK_EQ_INT(t, (long)need2, (long)need);
    CHECK_EQ_INT(t, (long)strlen(buf), (long)need - 1);
    char want[80];
    snprintf(want, sizeof want, "kernel level:  %s (usable:", cpulm_kernel_level());
    CHECK(t, strstr(buf, want) != NULL);
    CHECK(t, strstr(buf, cpulm_cpu_features()) != NULL);
    CHECK(t, strstr(buf, "\nQ6_K ") != NULL && strstr(buf, "\nf32 ops:") != NULL);
    char small[16];
    CHECK(t, cpulm_kernel_describe(small, sizeof small, NULL) == CPULM_ERR_TOO_SMALL);
    CHECK_EQ_INT(t, (long)strlen(small), 15);
    CHECK(t, strncmp(small, buf, 15) == 0);
    free(buf);
}

TEST(describe_names_every_listed_op) {
    /* the names and the entry enum come from kernels.h's op list, in order, once each */
    CHECK(t, strcmp(cpulm_kernels_entry_name(CPULM_KENTRY_VEC_DOT), "vec_dot") == 0);
    CHECK(t, strcmp(cpulm_kernels_entry_name(CPULM_KENTRY_ATTN_F16), "attn_f16") == 0);
    CHECK(t, strcmp(cpulm_kernels_entry_name(CPULM_KENTRY_COUNT), "?") == 0);
    for (int a = 0; a < CPULM_KENTRY_COUNT; a++)
        for (int b = a + 1; b < CPULM_KENTRY_COUNT; b++)
            CHECK(t, strcmp(cpulm_kernels_entry_name((cpulm_kernels_entry)a),
                            cpulm_kernels_entry_name((cpulm_kernels_entry)b)) != 0);
    /* every plain op appears on one of the two describe lines */
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    const cpulm_kernels *lv[1] = {&cpulm_kernels_generic};
    cpulm_kernels_describe_table(&b, lv, 1, lv[0]);
    REQUIRE(t, cpulm_buf_status(&b) == CPULM_OK);
#define OP_LISTED(ID, name, ret, params, group) \
    CHECK(t, strstr(b.data, " " #name " generic") != NULL);
    CPULM_KERNEL_OPS(OP_LISTED)
#undef OP_LISTED
    cpulm_buf_release(&b);
}

TEST(describe_packs_rule) {
    /* the loader's repacking rule: 16-row groups, a packed layout, a non-portable GEMM */
    cpulm_kernels k = cpulm_kernels_generic;
    CHECK(t, !cpulm_kernels_packs(&k, CPULM_DTYPE_Q4_0, 32)); /* portable GEMM: never */
    k.gemm_x16[CPULM_DTYPE_Q4_0] = cpulm_kernels_generic.gemm_x16[CPULM_DTYPE_Q8_0];
    CHECK(t, cpulm_kernels_packs(&k, CPULM_DTYPE_Q4_0, 32));
    CHECK(t, !cpulm_kernels_packs(&k, CPULM_DTYPE_Q4_0, 24)); /* rows not in groups of 16 */
    k.gemm_x16[CPULM_DTYPE_F16] = cpulm_kernels_generic.gemm_x16[CPULM_DTYPE_Q8_0];
    CHECK(t, !cpulm_kernels_packs(&k, CPULM_DTYPE_F16, 32)); /* no packed layout */
}
