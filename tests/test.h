/* test.h: the test framework. Tests are `TEST(name) { ... }` functions in tests/test_*.c;
 * the build scans those files and generates the X-macro list (cmake/gen_test_list.cmake),
 * so adding a test never means editing a shared list.
 * Checks are non-fatal (one run shows every broken check); REQUIRE ends the current test. */
#ifndef CPULM_TEST_H
#define CPULM_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct test_ctx {
    const char *name;
    int n_fail;              /* failed checks in this test */
    const char *skip_reason; /* a skip is reported, never counted as a pass */
    int not_applicable;      /* the skip is this platform's, not a missing resource */
} test_ctx;

#define TEST(name)                 \
    void test_##name(test_ctx *t); \
    void test_##name(test_ctx *t)

#define CHECK(t, cond)                                                          \
    do {                                                                        \
        if (!(cond)) {                                                          \
            fprintf(stderr, "  %s:%d: CHECK(%s)\n", __FILE__, __LINE__, #cond); \
            (t)->n_fail++;                                                      \
        }                                                                       \
    } while (0)

#define CHECK_EQ_INT(t, a, b)                                                                    \
    do {                                                                                         \
        long long a_ = (long long)(a), b_ = (long long)(b);                                      \
        if (a_ != b_) {                                                                          \
            fprintf(stderr, "  %s:%d: %s == %s: %lld != %lld\n", __FILE__, __LINE__, #a, #b, a_, \
                    b_);                                                                         \
            (t)->n_fail++;                                                                       \
        }                                                                                        \
    } while (0)

#define CHECK_NEAR(t, a, b, tol)                                                                  \
    do {                                                                                          \
        double a_ = (a), b_ = (b);                                                                \
        if (!(fabs(a_ - b_) <= (tol))) { /* NaN fails */                                          \
            fprintf(stderr, "  %s:%d: |%s - %s| = |%g - %g| = %g > %g\n", __FILE__, __LINE__, #a, \
                    #b, a_, b_, fabs(a_ - b_), (double)(tol));                                    \
            (t)->n_fail++;                                                                        \
        }                                                                                         \
    } while (0)

#define REQUIRE(t, cond)                                                          \
    do {                                                                          \
        if (!(cond)) {                                                            \
            fprintf(stderr, "  %s:%d: REQUIRE(%s)\n", __FILE__, __LINE__, #cond); \
            (t)->n_fail++;                                                        \
            return;                                                               \
        }                                                                         \
    } while (0)

#define SKIP(t, why)              \
    do {                          \
        (t)->skip_reason = (why); \
        return;                   \
    } while (0)

/* A test that cannot apply to this build or CPU (an aarch64-only kernel on x86, a CPU
 * feature it lacks, an opt-in check not asked for): reported like a skip, but it does not
 * make its group skipped when other tests of the group ran (main.c). A missing model or
 * tool is a SKIP. */
#define NOT_APPLICABLE(t, why)    \
    do {                          \
        (t)->skip_reason = (why); \
        (t)->not_applicable = 1;  \
        return;                   \
    } while (0)

/* 1 when the tests run under an emulator (a cross build, qemu-aarch64 in CI): long cases
 * use smaller sizes there, keeping their checks (CMakeLists.txt says why). */
static inline int test_emulated(void) {
#ifdef CPULM_TEST_EMULATED
    return 1;
#else
    return 0;
#endif
}

/* 1 in a sanitizer build (CPULM_SANITIZE: the CI's ASan+UBSan stage, ~5-10x native time):
 * the longest model-level cases use fewer repetitions of the same code paths there; the
 * full sizes run in the native stage. */
static inline int test_sanitized(void) {
#ifdef CPULM_TEST_SANITIZED
    return 1;
#else
    return 0;
#endif
}

/* ---- helpers (tests/util.c) ---- */

/* $CPULM_SHARED, else "../shared" relative to the source tree (set by the build). */
const char *test_shared_dir(void);
/* Joins test_shared_dir() and rel into a static buffer; NULL if the file does not exist. */
const char *test_shared_path(const char *rel);
/* Reads a whole file (malloc'd, NUL-appended); NULL on failure. */
char *test_read_file(const char *path, size_t *size);
/* The first n sentences of 4 to 12 words of the shared TinyStories text (newlines count as
 * spaces; a sentence ends at . ! or ? before a space; the prompts of
 * scripts/spec-identity.sh), NUL-terminated in one malloc'd block that out[0..n) point into
 * (free the returned block); *got is how many were found. NULL without the file. */
char *test_story_sentences(int n, const char **out, int *got);
/* Counting of heap allocations on this thread between begin and end (alloc_hook.c);
 * worker threads are counted too while the calling thread counts: the counter is global. */
void test_alloc_count_begin(void);
long test_alloc_count_end(void);
/* Bytes asked for by the allocations counted since test_alloc_count_begin. */
unsigned long long test_alloc_bytes(void);
/* A fresh temporary directory for this process (created once; removed at exit with what it
 * holds, unless CPULM_TEST_KEEP_TMP=1). */
const char *test_tmp_dir(void);

#endif
