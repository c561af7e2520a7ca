/* status.c: status strings, error recording, aborts on broken invariants, the log sink.
 * The only place in src/ that writes to stderr is cpulm_abort (a bug, not an input error). */
#include "status.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

const char *cpulm_status_str(cpulm_status s) {
    switch (s) {
    case CPULM_OK: return "ok";
    case CPULM_ERR_NOMEM: return "out of memory";
    case CPULM_ERR_IO: return "i/o error";
    case CPULM_ERR_FORMAT: return "malformed input";
    case CPULM_ERR_UNSUPPORTED: return "unsupported";
    case CPULM_ERR_INVALID_ARG: return "invalid argument";
    case CPULM_ERR_KV_FULL: return "kv cache full";
    case CPULM_ERR_CANCELLED: return "cancelled";
    case CPULM_ERR_TOO_SMALL: return "buffer too small";
    case CPULM_ERR_NOT_FOUND: return "not found";
    case CPULM_ERR_LIMIT: return "over a limit";
    }
    return "unknown status";
}

cpulm_status cpulm_errf(cpulm_error *err, cpulm_status code, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        err->code = code;
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return code;
}

void cpulm_abort(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "cpulm: BUG at %s:%d: ", file, line);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}

static cpulm_log_fn log_fn;
static void *log_user;

void cpulm_log_set(cpulm_log_fn fn, void *user) {
    log_fn = fn;
    log_user = user;
}

void cpulm_logf(int level, const char *fmt, ...) {
    if (!log_fn) return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    log_fn(level, msg, log_user);
}
