/* main.c: runs the tests named on the command line (substring filters; none = all).
 * Prints `N passed, M failed, K skipped` and exits non-zero on any failure. */
#include <string.h>

#include "test.h"
#include "test_list.h" /* generated: #define TEST_LIST(X) X(name) ... */

#define DECLARE(name) void test_##name(test_ctx *t);
TEST_LIST(DECLARE)

static const struct {
    const char *name;
    void (*fn)(test_ctx *);
} tests[] = {
#define ENTRY(name) {#name, test_##name},
    TEST_LIST(ENTRY)
};

static int selected(const char *name, int argc, char **argv) {
    if (argc < 2) return 1;
    for (int i = 1; i < argc; i++)
        if (strstr(name, argv[i])) return 1;
    return 0;
}

int main(int argc, char **argv) {
    int passed = 0, failed = 0, skipped = 0;
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
        if (!selected(tests[i].name, argc, argv)) continue;
        test_ctx t = {.name = tests[i].name, .n_fail = 0, .skip_reason = NULL};
        tests[i].fn(&t);
        if (t.n_fail) {
            failed++;
            printf("FAIL %s\n", t.name);
        } else if (t.skip_reason) {
            skipped++;
            printf("skip %s: %s\n", t.name, t.skip_reason);
        } else {
            passed++;
            printf("ok   %s\n", t.name);
        }
    }
    printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    return failed ? 1 : 0;
}
