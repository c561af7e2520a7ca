/* Reading a small text file into one string, with the error as text for the caller. */
#include "textfile.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int textfile_read(const char *path, size_t max, char **out, size_t *len, char *err, size_t cap) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, cap, "%s: %s", path, strerror(errno));
        return -1;
    }
    char *text = malloc(max + 2);
    size_t n = text ? fread(text, 1, max + 1, f) : 0;
    int failed = text && ferror(f);
    fclose(f);
    if (!text || failed || n > max) {
        snprintf(err, cap, "%s: %s", path,
                 !text    ? "out of memory"
                 : failed ? "read error"
                          : "file too large");
        free(text);
        return -1;
    }
    text[n] = 0;
    *out = text;
    if (len) *len = n;
    return 0;
}
