/* util.c: helpers shared by the tests (shared-data paths, file reading, temp dir). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"

#ifndef CPULM_DEFAULT_SHARED
#define CPULM_DEFAULT_SHARED "../shared"
#endif

const char *test_shared_dir(void) {
    const char *s = getenv("CPULM_SHARED");
    return (s && *s) ? s : CPULM_DEFAULT_SHARED;
}

const char *test_shared_path(const char *rel) {
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s/%s", test_shared_dir(), rel);
    return access(buf, R_OK) == 0 ? buf : NULL;
}

char *test_read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    if (fseek(f, 0, SEEK_END) != 0) {
        fclose(f);
        return NULL;
    }
    long n = ftell(f);
    rewind(f);
    char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        fclose(f);
        return NULL;
    }
    fclose(f);
    buf[n] = 0;
    if (size) *size = (size_t)n;
    return buf;
}

const char *test_tmp_dir(void) {
    static char dir[256];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/cpulm-test-XXXXXX");
        if (!mkdtemp(dir)) snprintf(dir, sizeof dir, "/tmp");
    }
    return dir;
}
