/* fuzz_main.c: replays files through LLVMFuzzerTestOneInput when not built with libFuzzer.
 * Usage: fuzz_<target> FILE|DIR...  (directories are read one level deep). Each input is
 * copied into a buffer of exactly its size, so sanitizers catch any over-read. Exits
 * non-zero if a path cannot be read or no input was found; a bug aborts the process. */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "%s: cannot open\n", path);
        return -1;
    }
    uint8_t *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? cap * 2 : 4096;
            uint8_t *p = realloc(buf, cap);
            if (!p) abort();
            buf = p;
        }
        size_t k = fread(buf + n, 1, cap - n, f);
        if (k == 0) break;
        n += k;
    }
    fclose(f);
    uint8_t *exact = malloc(n ? n : 1); /* exact size: an over-read hits the redzone */
    if (!exact) abort();
    if (n) memcpy(exact, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
    return 1;
}

static int run_path(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "%s: not found\n", path);
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) return run_file(path);
    DIR *d = opendir(path);
    if (!d) return -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char child[4096];
        snprintf(child, sizeof child, "%s/%s", path, de->d_name);
        if (stat(child, &st) != 0 || !S_ISREG(st.st_mode)) continue;
        int r = run_file(child);
        if (r < 0) {
            closedir(d);
            return -1;
        }
        n += r;
    }
    closedir(d);
    return n;
}

int main(int argc, char **argv) {
    int total = 0;
    for (int i = 1; i < argc; i++) {
        int r = run_path(argv[i]);
        if (r < 0) return 1;
        total += r;
    }
    printf("%d inputs ran cleanly\n", total);
    return total > 0 ? 0 : 1;
}
