/* status.h: error recording and invariant checks shared by every module.
 * cpulm_errf fills an optional cpulm_error and returns the code, so call sites stay one
 * line. CPULM_ASSERT is for broken invariants only, never for untrusted input. */
#ifndef CPULM_BASE_STATUS_H
#define CPULM_BASE_STATUS_H

#include "cpulm.h"

#if defined(__GNUC__)
#define CPULM_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define CPULM_NORETURN     __attribute__((noreturn))
#else
#define CPULM_PRINTF(a, b)
#define CPULM_NORETURN
#endif

/* Records "fmt ..." in *err (if err != NULL) and returns code. */
cpulm_status cpulm_errf(cpulm_error *err, cpulm_status code, const char *fmt, ...)
    CPULM_PRINTF(3, 4);

/* Prints file:line and the message to stderr, then abort(). */
CPULM_NORETURN void cpulm_abort(const char *file, int line, const char *fmt, ...)
    CPULM_PRINTF(3, 4);

#define CPULM_ASSERT(cond)                                                           \
    do {                                                                             \
        if (!(cond)) cpulm_abort(__FILE__, __LINE__, "assertion failed: %s", #cond); \
    } while (0)

#if defined(NDEBUG)
#define CPULM_DEBUG_ASSERT(cond) ((void)0)
#else
#define CPULM_DEBUG_ASSERT(cond) CPULM_ASSERT(cond)
#endif

/* Library-internal logging through the sink set by cpulm_log_set. */
void cpulm_logf(int level, const char *fmt, ...) CPULM_PRINTF(2, 3);

#endif
