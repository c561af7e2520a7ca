/* test_emu512.c: the avx512 kernel levels under SIMDe emulation (cmake/emu512.cmake,
 * tests/levels.c): on an x86 CPU without AVX-512 they are either checked (emulated tables
 * present and complete, the emulation's shims right) or reported as NOT checked, never
 * silently passed. The kernel tests themselves (test_kern, test_kern_pack, test_attn) run
 * the emulated levels through test_kernel_levels(). */
#include <string.h>

#include "kernels/kernels.h"
#include "levels.h"
#include "test.h"

#if defined(CPULM_TEST_EMU512)
int cpulm_emu512_shim_check(char *msg, size_t cap);
#endif

#if defined(__x86_64__)
static int has_level(const char *name) {
    const cpulm_kernels *lv[16];
    const int n = test_kernel_levels(lv, 16);
    for (int i = 0; i < n; i++)
        if (strcmp(lv[i]->name, name) == 0) return 1;
    return 0;
}
#endif

TEST(emu512_levels_checked) {
#if defined(__x86_64__)
    char why[96];
    if (test_emu512_unchecked(why, sizeof why)) {
        fprintf(stderr, "  NOT CHECKED on this CPU: %s (needs AVX2 and a build with SIMDe)\n", why);
        SKIP(t, "avx512 levels not checked: no AVX-512 here and no emulation built");
    }
    /* every avx512-family level runs natively or emulated, merged over its base */
    CHECK(t, has_level("avx512") || has_level("avx512(emu)"));
    CHECK(t, has_level("avx512vnni") || has_level("avx512vnni(emu)"));
    CHECK(t, has_level("avx512bf16") || has_level("avx512bf16(emu)"));
    const cpulm_kernels *lv[16];
    const int n = test_kernel_levels(lv, 16);
    printf("  levels checked:");
    for (int i = 0; i < n; i++)
        printf(" %s", lv[i]->name);
    printf("\n");
#else
    NOT_APPLICABLE(t, "x86 only");
#endif
}

/* An emulated level is its base's merged table with the avx512 file's entries over it:
 * the avx512 entries differ from avx2's (they are the emulated code), the rest are avx2's. */
TEST(emu512_levels_merged_over_base) {
#if defined(CPULM_TEST_EMU512)
    const cpulm_kernels *lv[16];
    const int n = test_kernel_levels(lv, 16);
    const cpulm_kernels *avx2 = NULL, *e512 = NULL, *evnni = NULL;
    for (int i = 0; i < n; i++) {
        if (strcmp(lv[i]->name, "avx2") == 0) avx2 = lv[i];
        if (strcmp(lv[i]->name, "avx512(emu)") == 0) e512 = lv[i];
        if (strcmp(lv[i]->name, "avx512vnni(emu)") == 0) evnni = lv[i];
    }
    if (!e512 || !evnni)
        NOT_APPLICABLE(t, "no emulated levels on this CPU (native AVX-512 or no AVX2)");
    REQUIRE(t, avx2 != NULL);
    CHECK(t, e512->vec_dot[CPULM_DTYPE_F32] != avx2->vec_dot[CPULM_DTYPE_F32]);
    CHECK(t, e512->from_float[CPULM_DTYPE_Q8_0] == avx2->from_float[CPULM_DTYPE_Q8_0]);
    CHECK(t, evnni->attn_scores == e512->attn_scores);
    CHECK(t, evnni->gemm_x16[CPULM_DTYPE_Q4_K] != e512->gemm_x16[CPULM_DTYPE_Q4_K]);
    for (int i = 0; i < n; i++) /* avx512bf16(emu): its attention ops over an avx512vnni */
        if (strcmp(lv[i]->name, "avx512bf16(emu)") == 0) {
            CHECK(t, lv[i]->attn_bpv != cpulm_kernels_generic.attn_bpv);
            CHECK(t, lv[i]->gemm_x16[CPULM_DTYPE_Q4_K] != e512->gemm_x16[CPULM_DTYPE_Q4_K]);
        }
#else
    NOT_APPLICABLE(t, "built without the emulated avx512 levels");
#endif
}

TEST(emu512_shims_match_scalar) {
#if defined(CPULM_TEST_EMU512)
    if (!has_level("avx2")) NOT_APPLICABLE(t, "the emulation needs AVX2");
    char msg[128];
    const int fails = cpulm_emu512_shim_check(msg, sizeof msg);
    if (fails) fprintf(stderr, "  %d shim checks failed, first: %s\n", fails, msg);
    CHECK_EQ_INT(t, fails, 0);
#else
    NOT_APPLICABLE(t, "built without the emulated avx512 levels");
#endif
}
