/* main.c: runs the tests named on the command line; none = all.
 * An argument selects either one group exactly (`cpulm-tests kern` runs tests/test_kern.c,
 * not test_kern_pack.c: each ctest entry is one group, so ctest runs every test once) or,
 * when it names no group, the tests whose names start with it (`cpulm-tests kern_dot_`), or
 * one shard of a group (`cpulm-tests attn:1/2`, see in_shard).
 * An argument that selects nothing is an error, so a typo cannot pass as "0 failed".
 * `--list` prints "group name" lines instead of running.
 * Prints `N passed, M failed, K skipped`; exits 1 on any failure, else 77 if a test skipped
 * for want of something (a model, a locale: SKIP) or if nothing ran (ctest's
 * SKIP_RETURN_CODE: the group is listed as skipped, never as passed), else 0. A test that
 * does not apply to this build or CPU (NOT_APPLICABLE, "(n/a)") counts in K but does not
 * make a group that ran skipped. Each test's line ends with its wall time, so a slow case is
 * found from a CI log (tests/test.h: test_sanitized(), test_emulated()). */
#define _POSIX_C_SOURCE 199309L /* clock_gettime */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "test.h"
#include "test_list.h" /* generated: #define TEST_LIST(X) X(group, name) ... */

#define DECLARE(group, name) void test_##name(test_ctx *t);
TEST_LIST(DECLARE)

static const struct {
    const char *group, *name;
    void (*fn)(test_ctx *);
} tests[] = {
#define ENTRY(group, name) {#group, #name, test_##name},
    TEST_LIST(ENTRY)};
#define N_TESTS (sizeof tests / sizeof tests[0])

static int is_group(const char *arg) {
    for (size_t i = 0; i < N_TESTS; i++)
        if (!strcmp(tests[i].group, arg)) return 1;
    return 0;
}

/* "GROUP:K/N": the group's tests at positions p (from 0, in file order) with p % N == K - 1,
 * so N ctest entries of a long group run side by side and together run each test once. */
static int in_shard(size_t i, const char *arg) {
    const char *colon = strchr(arg, ':');
    int k = 0, n = 0, used = 0;
    if (!colon || sscanf(colon + 1, "%d/%d%n", &k, &n, &used) != 2 || colon[1 + used] || k < 1 ||
        k > n)
        return 0;
    const size_t len = (size_t)(colon - arg);
    if (strlen(tests[i].group) != len || strncmp(tests[i].group, arg, len) != 0) return 0;
    size_t pos = 0;
    for (size_t j = 0; j < i; j++)
        pos += !strcmp(tests[j].group, tests[i].group);
    return pos % (size_t)n == (size_t)(k - 1);
}

static int matches(size_t i, const char *arg) {
    if (is_group(arg)) return !strcmp(tests[i].group, arg);
    if (strchr(arg, ':')) return in_shard(i, arg);
    return !strncmp(tests[i].name, arg, strlen(arg));
}

static int selected(size_t i, int argc, char **argv) {
    if (argc < 2) return 1;
    for (int a = 1; a < argc; a++)
        if (matches(i, argv[a])) return 1;
    return 0;
}

/* Index of the first argument that selects no test, or 0. */
static int unmatched_arg(int argc, char **argv) {
    for (int a = 1; a < argc; a++) {
        size_t i = 0;
        while (i < N_TESTS && !matches(i, argv[a]))
            i++;
        if (i == N_TESTS) return a;
    }
    return 0;
}

static int run(int argc, char **argv) {
    int passed = 0, failed = 0, skipped = 0, missing = 0;
    for (size_t i = 0; i < N_TESTS; i++) {
        if (!selected(i, argc, argv)) continue;
        test_ctx t = {.name = tests[i].name, .n_fail = 0, .skip_reason = NULL};
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        tests[i].fn(&t);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        const double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        if (t.n_fail) {
            failed++;
            printf("FAIL %s (%.2f s)\n", t.name, s);
        } else if (t.skip_reason) {
            skipped++;
            missing += !t.not_applicable;
            printf("skip %s: %s%s\n", t.name, t.skip_reason, t.not_applicable ? " (n/a)" : "");
        } else {
            passed++;
            printf("ok   %s (%.2f s)\n", t.name, s);
        }
    }
    printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    return failed ? 1 : (missing || (skipped && !passed)) ? 77 : 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    const int list = argc > 1 && !strcmp(argv[1], "--list");
    if (list) {
        argv[1] = argv[0];
        argv++;
        argc--;
    }
    const int bad = unmatched_arg(argc, argv);
    if (bad) {
        fprintf(stderr, "cpulm-tests: '%s' names no group and prefixes no test\n", argv[bad]);
        return 2;
    }
    if (!list) return run(argc, argv);
    for (size_t i = 0; i < N_TESTS; i++)
        if (selected(i, argc, argv)) printf("%s %s\n", tests[i].group, tests[i].name);
    return 0;
}
