/* Reading a small text file (a table, a workload, a price list) into one string. */
#ifndef CPULM_TOOLS_TEXTFILE_H
#define CPULM_TOOLS_TEXTFILE_H

#include <stddef.h>

/* Reads path whole into a NUL-terminated malloc'd string (*out, length in *len if len is
 * not NULL). A file longer than max bytes is refused rather than cut, so a table never loses
 * its last rows silently. 0 on success; -1 with a message in err (path named) otherwise. */
int textfile_read(const char *path, size_t max, char **out, size_t *len, char *err, size_t cap);

#endif
