/* buf.h: growable byte buffer with git strbuf's invariants, for building text (JSON, HTTP
 * responses, rendered prompts).
 *
 * Invariants, after cpulm_buf_init and every call:
 *   - data is never NULL (an empty buffer points at a shared static "");
 *   - data[len] == '\0', so data is always a C string (it may also hold NULs);
 *   - cap == 0 (static "") or cap > len (bytes owned by the buffer).
 * Errors are sticky: once an append fails (out of memory, or the optional max_len limit),
 * the buffer keeps its contents up to that point, later appends do nothing, and
 * cpulm_buf_status() reports the first error. So a writer can append freely and check once.
 * Not thread-safe; the buffer owns data until cpulm_buf_detach or cpulm_buf_release.
 */
#ifndef CPULM_BASE_BUF_H
#define CPULM_BASE_BUF_H

#include <stdarg.h>
#include <stddef.h>

#include "base/status.h"

typedef struct cpulm_buf {
    char *data;
    size_t len;
    size_t cap;
    size_t max_len;      /* 0: unlimited; else appends past max_len bytes fail */
    cpulm_status status; /* first failure: CPULM_ERR_NOMEM or CPULM_ERR_TOO_SMALL (max_len) */
} cpulm_buf;

/* Empty buffer (no allocation). max_len 0 means unlimited. */
void cpulm_buf_init(cpulm_buf *b, size_t max_len);
/* Frees the bytes; the buffer is empty and usable again (status cleared). */
void cpulm_buf_release(cpulm_buf *b);
/* len = 0, keeping the allocation; clears the sticky status. */
void cpulm_buf_reset(cpulm_buf *b);
/* Shortens to n bytes (n <= len). */
void cpulm_buf_truncate(cpulm_buf *b, size_t n);

/* Ensures room for `extra` more bytes plus the NUL. */
cpulm_status cpulm_buf_grow(cpulm_buf *b, size_t extra);
cpulm_status cpulm_buf_append(cpulm_buf *b, const void *p, size_t n);
cpulm_status cpulm_buf_puts(cpulm_buf *b, const char *s);
cpulm_status cpulm_buf_putc(cpulm_buf *b, char c);
cpulm_status cpulm_buf_printf(cpulm_buf *b, const char *fmt, ...) CPULM_PRINTF(2, 3);
cpulm_status cpulm_buf_vprintf(cpulm_buf *b, const char *fmt, va_list ap) CPULM_PRINTF(2, 0);

static inline cpulm_status cpulm_buf_status(const cpulm_buf *b) {
    return b->status;
}

/* Hands the bytes to the caller. Returns: owned, NUL-terminated, free with free();
 * NULL only if an empty buffer's 1-byte allocation fails. *len (if non-NULL) gets the length.
 * The buffer is left empty and re-usable. */
char *cpulm_buf_detach(cpulm_buf *b, size_t *len);

#endif
