/* buf.c: growable byte buffer (see buf.h for the invariants). Growth is geometric (x1.5,
 * at least 64 bytes) so n appends cost O(n) amortised; sizes are checked for overflow. */
#include "base/buf.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The shared empty string of every unallocated buffer: never written (cap == 0 means we
 * do not own data), which keeps data non-NULL without an allocation per buffer. */
static char empty_data[1];

void cpulm_buf_init(cpulm_buf *b, size_t max_len) {
    b->data = empty_data;
    b->len = 0;
    b->cap = 0;
    b->max_len = max_len;
    b->status = CPULM_OK;
}

void cpulm_buf_release(cpulm_buf *b) {
    if (b->cap) free(b->data);
    cpulm_buf_init(b, b->max_len);
}

void cpulm_buf_reset(cpulm_buf *b) {
    b->len = 0;
    if (b->cap) b->data[0] = '\0'; /* empty_data is never written: buffers may share it */
    b->status = CPULM_OK;
}

void cpulm_buf_truncate(cpulm_buf *b, size_t n) {
    CPULM_ASSERT(n <= b->len);
    b->len = n;
    if (b->cap) b->data[n] = '\0';
}

cpulm_status cpulm_buf_grow(cpulm_buf *b, size_t extra) {
    if (b->status) return b->status;
    if (extra > SIZE_MAX - 1 - b->len) return b->status = CPULM_ERR_NOMEM;
    size_t need = b->len + extra + 1;
    if (b->max_len && b->len + extra > b->max_len) return b->status = CPULM_ERR_TOO_SMALL;
    if (need <= b->cap) return CPULM_OK;
    size_t cap = b->cap < 64 ? 64 : b->cap;
    while (cap < need)
        cap = cap > SIZE_MAX / 3 * 2 ? need : cap + cap / 2;
    char *p = realloc(b->cap ? b->data : NULL, cap);
    if (!p) return b->status = CPULM_ERR_NOMEM;
    if (!b->cap) p[0] = '\0';
    b->data = p;
    b->cap = cap;
    return CPULM_OK;
}

cpulm_status cpulm_buf_append(cpulm_buf *b, const void *p, size_t n) {
    if (cpulm_buf_grow(b, n)) return b->status;
    if (n) memcpy(b->data + b->len, p, n);
    b->len += n;
    if (b->cap) b->data[b->len] = '\0';
    return CPULM_OK;
}

cpulm_status cpulm_buf_puts(cpulm_buf *b, const char *s) {
    return cpulm_buf_append(b, s, strlen(s));
}

cpulm_status cpulm_buf_putc(cpulm_buf *b, char c) {
    return cpulm_buf_append(b, &c, 1);
}

cpulm_status cpulm_buf_vprintf(cpulm_buf *b, const char *fmt, va_list ap) {
    if (b->status) return b->status;
    char small[256];
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(small, sizeof small, fmt, ap2);
    va_end(ap2);
    if (n < 0) return b->status = CPULM_ERR_INVALID_ARG; /* bad format: a caller bug */
    if ((size_t)n < sizeof small) return cpulm_buf_append(b, small, (size_t)n);
    if (cpulm_buf_grow(b, (size_t)n)) return b->status;
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
    return CPULM_OK;
}

cpulm_status cpulm_buf_printf(cpulm_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    cpulm_status st = cpulm_buf_vprintf(b, fmt, ap);
    va_end(ap);
    return st;
}

char *cpulm_buf_detach(cpulm_buf *b, size_t *len) {
    char *p = b->cap ? b->data : calloc(1, 1);
    if (len) *len = p ? b->len : 0;
    if (p && !b->cap) p[0] = '\0';
    b->data = empty_data;
    b->len = b->cap = 0;
    b->status = CPULM_OK;
    return p;
}
