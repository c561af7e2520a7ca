/* util.c: helpers shared by the tests (shared-data paths, file reading, temp dir). */
#define _GNU_SOURCE
#include <ctype.h>
#include <ftw.h>
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

/* Words (runs of non-space) in s[0..len). */
static int count_words(const char *s, size_t len) {
    int n = 0;
    for (size_t i = 0; i < len; i++)
        n += !isspace((unsigned char)s[i]) && (i == 0 || isspace((unsigned char)s[i - 1]));
    return n;
}

char *test_story_sentences(int n, const char **out, int *got) {
    const char *p = test_shared_path("testdata/text/tinystories_valid_head.txt");
    size_t size = 0;
    char *text = p ? test_read_file(p, &size) : NULL;
    char *block = text ? malloc(size + 1) : NULL;
    *got = 0;
    if (!block) {
        free(text);
        return NULL;
    }
    for (size_t i = 0; i < size; i++) /* one line, as the script's tr '\n' ' ' */
        if (text[i] == '\n') text[i] = ' ';
    size_t w = 0, start = 0;
    for (size_t i = 0; i < size && *got < n; i++) {
        int end = (text[i] == '.' || text[i] == '!' || text[i] == '?') &&
                  (i + 1 == size || text[i + 1] == ' ');
        if (!end) continue;
        while (start < i && text[start] == ' ')
            start++;
        size_t len = i + 1 - start;
        int words = count_words(text + start, len);
        if (words >= 4 && words <= 12) {
            memcpy(block + w, text + start, len);
            block[w + len] = 0;
            out[(*got)++] = block + w;
            w += len + 1;
        }
        start = i + 1;
    }
    free(text);
    return block;
}

static char tmp_dir[256];

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

/* The process's temp dir and whatever the tests left in it go at exit (they were left
 * behind: 2,273 of them, 49 GB, filled the CI machine's disk on 2026-12-05);
 * CPULM_TEST_KEEP_TMP=1 keeps it for a look. Forked children exit by _exit, so only the
 * process that made it removes it. */
static void remove_tmp_dir(void) {
    const char *keep = getenv("CPULM_TEST_KEEP_TMP");
    if (keep && *keep && strcmp(keep, "0") != 0) {
        fprintf(stderr, "kept %s\n", tmp_dir);
        return;
    }
    nftw(tmp_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

const char *test_tmp_dir(void) {
    if (!tmp_dir[0]) {
        snprintf(tmp_dir, sizeof tmp_dir, "/tmp/cpulm-test-XXXXXX");
        if (mkdtemp(tmp_dir))
            atexit(remove_tmp_dir);
        else
            snprintf(tmp_dir, sizeof tmp_dir, "/tmp");
    }
    return tmp_dir;
}
